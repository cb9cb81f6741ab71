"""The backfill computes the same `_source_pos` as the procedure, byte for byte, for the
SQL Server, Oracle, Db2, MariaDB and PostgreSQL orders: the connector pages' example events,
generated histories (snapshot reads, transactions, LSN parts that carry over, SCNs that
gain a digit), both formats, and garbage where the position should be (NULL on both)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from backfill.normalise import debezium_events
from sync.debezium.events import ChangeStream, Db2Source, MySqlSource, OracleSource, PostgresSource, SqlServerSource
from sync.local.stream import ingest_file
from sync.operations.runner import sync
from tests.helpers import make_pipeline

pytestmark = pytest.mark.spark
DOCS = Path(__file__).parent.parent / "data" / "debezium_docs"

TABLE = """
[[tables]]
name = "{name}"
topic = "t.{name}"
format = "{format}"
primary_key = ["k"]
order_by = "{order}"
columns = [{{ name = "k", type = "integer" }}, {{ name = "v", type = "varchar(32)" }}]
"""
CASES = {
    "sqlserver": ("sqlserver-lsn", SqlServerSource),
    "oracle": ("oracle-scn", OracleSource),
    "db2": ("db2-lsn", Db2Source),
    "mariadb": ("mysql-binlog", lambda: MySqlSource(connector="mariadb")),
    "postgresql": ("postgres-lsn", PostgresSource),
}
GARBAGE = [
    {"commit_lsn": "00000027:00000758", "change_lsn": "zz", "event_serial_no": "x"},
    {"commit_lsn": "00000027:00000758:0005:00", "scn": "12a", "commit_scn": "-3", "txSeq": True},
    {"commit_lsn": {"a": 1}, "change_lsn": [1], "scn": 1.5, "file": 7, "pos": "p"},
    {"commit_lsn": "00000027:00000758:0005", "change_lsn": None, "scn": "1" * 21, "file": "bin", "pos": 4, "row": None},
    # PostgreSQL: "either value may be null" (Debezium PostgreSQL connector, `sequence`).
    {"sequence": '[null,"34000100"]', "lsn": 34000100},
    {"sequence": '["","34000200"]', "lsn": None},
    # A final line break: POSIX `$` (the SQL's) does not match before it, Java's would.
    {"sequence": '["1","2"]\n', "scn": "123\n", "commit_lsn": "00000027:00000758:0005\n", "event_serial_no": "1\n"},
]


def _sources(connector: str) -> list[dict[str, Any]]:
    """Source blocks: the page's examples, a generated history, garbage."""
    out = []
    for op in ("create", "update", "delete"):
        page = DOCS / f"{connector}-{op}.json"
        if page.exists():  # the PostgreSQL page's examples are not among them
            event = json.loads(page.read_text())
            out.append(event.get("payload", event)["source"])
    cs = ChangeStream(["k"], CASES[connector][1]())
    out += [cs.snapshot({"k": 0, "v": "r"})["value"]["source"] for _ in range(2)]
    begin = getattr(cs.source, "begin", None)
    for n in range(12):
        if begin and n % 4 == 0:
            begin()
        out.append(cs.update(None, {"k": 0, "v": "u"})["value"]["source"])
        if begin and n % 4 == 3:
            cs.source.commit()
    return out + [{**out[0], **g} for g in GARBAGE]


@pytest.mark.parametrize("fmt", ["debezium", "debezium-unwrap"])
@pytest.mark.parametrize("connector", list(CASES))
def test_backfill_positions_equal_the_procedures(wh, spark, tmp_path, connector, fmt):
    order, _ = CASES[connector]
    name = f"{connector}_{fmt.replace('-', '_')}"
    pipeline = make_pipeline(TABLE.format(name=name, format=fmt, order=order))
    from sync.operations.runner import deploy

    deploy(wh, pipeline, "test")
    records = []
    for k, source in enumerate(_sources(connector)):
        row = {"k": k, "v": f"v{k}"}
        if fmt == "debezium":
            value: dict[str, Any] = {"before": None, "after": row, "op": "u", "source": source}
        else:
            value = {**row, "__deleted": "false", **{"__" + f: v for f, v in source.items()}}
        records.append({"partition": 0, "offset": k, "key": {"k": k}, "value": value})
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps(r) + "\n" for r in records))
    ingest_file(wh, pipeline, name, events)
    (run,) = sync(wh, pipeline, [name])
    assert run.status == "ok" and run.upserted == len(records), run
    stream = dict(wh.query(f'SELECT k, _source_pos FROM cdc."{name}"'))
    assert sum(p is not None for p in stream.values()) >= len(records) - len(GARBAGE), stream

    frame = spark.createDataFrame(
        [(json.dumps(r["value"]), json.dumps(r["key"]), 0, r["offset"], "") for r in records],
        "value string, key string, _kafka_partition long, _kafka_offset long, _record string",
    )
    table = pipeline.table(name)
    backfill = {int(r["f__k"]): r["_source_pos"] for r in debezium_events(frame, table).collect()}
    assert backfill == stream

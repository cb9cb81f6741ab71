"""Unwrapped records without their position fields are named by `status`.

Debezium's ExtractNewRecordState adds source fields only when asked: "add.fields: Set this
option to a comma-separated list, with no spaces, of metadata fields to add to the
simplified Kafka record's value" (https://debezium.io/documentation/reference/stable/transformations/event-flattening.html),
so a table ordered by `postgres-lsn` whose connector was configured without `lsn` there
receives rows with no `__lsn`. Those rows apply, ranked in Kafka order: nothing fails, so
only a check of what the last sync read can say so.
"""

from __future__ import annotations

import json

from sync.debezium.events import write_jsonl
from sync.operations.positions import missing_positions
from tests.cli_runs import run_cli
from tests.helpers import EXAMPLES
from tests.test_debezium_envelopes import shapes, tombstone, unwrap

SHAPES = str(EXAMPLES / "debezium_shapes" / "pipeline.toml")


def _ingest_and_sync(dsn: str, tmp_path, table: str, records: list[dict]) -> None:
    path = tmp_path / f"{table}-{len(list(tmp_path.iterdir()))}.jsonl"
    write_jsonl(records, path)
    common = ["--config", SHAPES, "--dsn", dsn]
    for args in (("ingest", "--table", table, "--file", str(path)), ("sync", "--table", table)):
        out = run_cli(*args, *common)
        assert out.returncode == 0, out.stderr


def test_status_names_a_table_whose_records_lack_their_position_fields(wh, database_dsn, tmp_path):
    pipeline = shapes(wh)
    d = wh.dialect.bind_schema(pipeline.schema)
    # With `__lsn` (add.fields=op,lsn,source.ts_ms), and a tombstone, which has no position by nature.
    _ingest_and_sync(database_dsn, tmp_path, "rw", [unwrap(1, "a", op="c", lsn=10), unwrap(2, "b", op="c", lsn=11), tombstone(1)])
    assert missing_positions(wh.query, d, pipeline, ["rw"]) == []
    # The connector reconfigured without them: two of the next sync's three rows have none.
    _ingest_and_sync(database_dsn, tmp_path, "rw", [unwrap(2, "c"), unwrap(3, "d", op="c", lsn=12), unwrap(4, "e", op="c")])
    (found,) = missing_positions(wh.query, d, pipeline, ["rw"])
    assert (found.table, found.records, found.without, found.fields) == ("rw", 3, 2, ["__sequence", "__lsn"])

    status = run_cli("status", "--json", "--config", SHAPES, "--dsn", database_dsn)
    assert status.returncode == 0, status.stderr
    (rw,) = [t for t in json.loads(status.stdout) if t["table"] == "rw"]
    assert rw["records_without_position"]["without"] == 2
    assert any("carry no source position (fields __sequence, __lsn)" in w for w in rw["warnings"])
    assert "rw: 2 of the 3 record(s) its last sync read carry no source position" in run_cli(
        "status", "--config", SHAPES, "--dsn", database_dsn
    ).stdout.replace("\n", " ")


def test_tables_that_always_have_positions_or_need_none_are_not_read(wh):
    """The full envelope's source block always holds the position; Kafka order needs none."""
    pipeline = shapes(wh)
    d = wh.dialect.bind_schema(pipeline.schema)
    read: list[str] = []

    def query(sql: str) -> list[tuple]:
        read.append(sql)
        return wh.query(sql)

    full_envelope, kafka_order = "pg", "ts"
    assert pipeline.table(full_envelope).format == "debezium" and pipeline.table(kafka_order).order_by == "kafka"
    assert missing_positions(query, d, pipeline, [full_envelope, kafka_order]) == [] and read == []

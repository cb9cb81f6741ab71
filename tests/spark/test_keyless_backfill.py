"""The backfill of a table without a primary key, through the CLI on real Spark and real
PostgreSQL (docs/correctness.md, "Backfill and reconcile of a table without a primary key").

The snapshot is the connector's own: "the connector ... emits a read event (op: r) for
each row" of the table, every event of one snapshot carrying the same source position, and
`source.snapshot` marks its first and last reads (Debezium MySQL connector, "Snapshots",
and the `source` block's `snapshot` field: "true", "first", "last", since 2.0 also
"first_in_data_collection" ...). A table without a primary key has a null Kafka key, so the
records are spread over partitions (tests/test_keyless.py quotes the connector docs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from backfill import job
from sync.cli.app import app
from tests.helpers import pipeline_toml
from tests.test_delivery_semantics import mysql_source, setup
from tests.test_keyless import event, feed, keyless_toml, row, target

pytestmark = pytest.mark.spark
P = 1000  # the snapshot's binlog position


def read(values: dict, pos: int = P, snapshot: str = "true", partition: int = 0) -> dict:
    """A snapshot's read event of `values`, as the connector emits it."""
    source = {**mysql_source(pos), "snapshot": snapshot}
    value = {"before": None, "after": values, "source": source, "op": "r", "ts_ms": source["ts_ms"] + 5}
    return {"partition": partition, "key": None, "value": value}


def snapshot_reads(rows: list[dict], pos: int = P) -> list[dict]:
    marks = ["first"] + ["true"] * (len(rows) - 2) + ["last"] if len(rows) > 1 else ["last"]
    return [read(r, pos, mark, partition=i % 2) for i, (r, mark) in enumerate(zip(rows, marks, strict=True))]


def write_records(path: Path, records: list[dict]) -> str:
    """Kafka records as JSON lines ({"partition","offset","timestamp","key","value"}), each
    partition's offsets counted from 0."""
    offsets: dict[int, int] = {}
    lines = []
    for i, r in enumerate(records):
        offset = offsets.get(r["partition"], 0)
        offsets[r["partition"]] = offset + 1
        lines.append(json.dumps({**r, "offset": offset, "timestamp": 1_700_000_100_000 + i}))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture
def keyless(wh, tmp_path):
    toml = keyless_toml("items")
    (tmp_path / "pipeline.toml").write_text(pipeline_toml(toml))
    return wh, setup(wh, toml), str(tmp_path / "pipeline.toml")


def backfill(wh, config: str, *args: str) -> tuple[int, dict | None, str]:
    out = CliRunner().invoke(app, ["backfill", "--table", "items", "--config", config, "--dsn", wh.dsn, "--json", *args])
    assert out.exception is None or isinstance(out.exception, SystemExit), out.output
    result = json.loads(out.stdout) if out.stdout.lstrip().startswith("{") else None
    return out.exit_code, result, out.output


SNAPSHOT = [row("a", 1), row("a", 1), row("a", 1), row("b", 2)]


def test_duplicate_rows_of_a_snapshot_load_as_many_times_as_it_holds_them(keyless, tmp_path):
    wh, _, config = keyless
    snap = write_records(tmp_path / "snap.jsonl", snapshot_reads(SNAPSHOT))
    code, result, output = backfill(wh, config, "--snapshot", snap, "--format", "debezium")
    assert code == 0, output
    assert (result["staged"], result["loaded"], result["replaced"]) == (4, 4, 0)
    assert target(wh, "items") == [("a", 1), ("a", 1), ("a", 1), ("b", 2)]
    # Each row has an identity of its own, as the stream's rows do: a delete removes one.
    identities = wh.query('SELECT DISTINCT _source_pos, _kafka_partition, _kafka_offset FROM cdc."items"')
    assert len(identities) == 4
    # The same backfill again replaces the rows with the same rows.
    code, again, output = backfill(wh, config, "--snapshot", snap, "--format", "debezium")
    assert code == 0, output
    assert (again["loaded"], again["replaced"]) == (4, 4)
    assert target(wh, "items") == [("a", 1), ("a", 1), ("a", 1), ("b", 2)]


def test_snapshot_then_the_stream_equals_the_source_multiset(keyless, tmp_path):
    """The source's history, its snapshot at P, then the whole topic through the stream:
    the changes before P (in the snapshot: stale), the same snapshot's reads (stale), the
    changes after P, one of them re-sent by a restart in another partition."""
    wh, pipeline, config = keyless
    before = [
        event("c", None, row("a", 1), 100),
        event("c", None, row("a", 1), 200, partition=1),
        event("c", None, row("b", 2), 300),
        event("c", None, row("c", 3), 400, partition=1),
        event("d", row("c", 3), None, 500),
    ]
    reads = snapshot_reads([row("a", 1), row("a", 1), row("b", 2)])
    after = [
        event("u", row("a", 1), row("a", 5), 1100, partition=1),
        event("c", None, row("d", 4), 1200),
        event("d", row("b", 2), None, 1300, partition=1),
        event("c", None, row("a", 1), 1400),
    ]
    snap = write_records(tmp_path / "snap.jsonl", reads)
    code, _, output = backfill(wh, config, "--snapshot", snap, "--format", "debezium")
    assert code == 0, output
    first = feed(wh, pipeline, "items", before + reads)
    assert (first.stale, first.upserted, first.deleted) == (len(before) + len(reads), 0, 0)
    assert target(wh, "items") == [("a", 1), ("a", 1), ("b", 2)]
    resent = dict(after[0], partition=0)
    feed(wh, pipeline, "items", after + [resent])
    assert target(wh, "items") == [("a", 1), ("a", 1), ("a", 5), ("d", 4)]  # the source's rows after 1400


def test_a_backfill_after_the_stream_applied_a_later_change_is_refused(keyless, tmp_path):
    """The stream applied a change at or after the snapshot's position: without a key,
    nothing tells which stored rows the snapshot already holds, so nothing is changed."""
    wh, pipeline, config = keyless
    feed(wh, pipeline, "items", [event("c", None, row("z", 9), P + 100)])
    snap = write_records(tmp_path / "snap.jsonl", snapshot_reads(SNAPSHOT))
    code, result, output = backfill(wh, config, "--snapshot", snap, "--format", "debezium")
    assert code == 1 and result is None
    assert "the table holds what the stream applied at or after the snapshot's position" in output
    assert "1 stored rows, 1 applied changes" in output
    assert target(wh, "items") == [("z", 9)]


def test_a_snapshot_without_one_position_is_refused(keyless, tmp_path):
    wh, _, config = keyless
    flat = tmp_path / "export.jsonl"
    flat.write_text('{"sku": "a", "qty": 1}\n{"sku": "a", "qty": 1}\n')
    code, _, output = backfill(wh, config, "--snapshot", str(flat), "--format", "json", "--snapshot-time", "2023-11-14T22:00:00Z")
    assert code == 1
    assert "2 of the snapshot's 2 rows carry no source position" in output
    two = write_records(tmp_path / "two.jsonl", snapshot_reads(SNAPSHOT[:2]) + snapshot_reads(SNAPSHOT[2:], pos=P + 50))
    code, _, output = backfill(wh, config, "--snapshot", two, "--format", "debezium")
    assert code == 1
    assert "the snapshot's rows carry 2 source positions" in output
    assert target(wh, "items") == []


def test_change_events_in_a_snapshot_are_rejected_with_their_reason(keyless, tmp_path, monkeypatch):
    wh, _, config = keyless
    monkeypatch.chdir(tmp_path)
    records = snapshot_reads(SNAPSHOT) + [event("d", row("b", 2), None, P + 10)]
    snap = write_records(tmp_path / "snap.jsonl", records)
    code, result, output = backfill(wh, config, "--snapshot", snap, "--format", "debezium")
    assert code == 1, output
    assert (result["loaded"], result["rejected"]) == (4, 1)
    assert result["rejects_sample"][0]["reason"].startswith("a change event: a backfill of a table without a primary key")
    assert target(wh, "items") == [("a", 1), ("a", 1), ("a", 1), ("b", 2)]


def test_a_cluster_run_folder_loads_the_same_multiset(keyless, spark, tmp_path):
    """The job writes the run folder on a cluster; `backfill --staged` loads it here."""
    wh, pipeline, config = keyless
    snap = write_records(tmp_path / "snap.jsonl", snapshot_reads(SNAPSHOT))
    out = tmp_path / "run"
    summary = job.stage_snapshot(spark, pipeline, pipeline.table("items"), snap, "debezium", None, "debezium", str(out))
    assert summary["staged"] == 4
    code, result, output = backfill(wh, config, "--staged", str(out))
    assert code == 0, output
    assert result["loaded"] == 4
    assert target(wh, "items") == [("a", 1), ("a", 1), ("a", 1), ("b", 2)]


def reconcile(wh, config: str, snap: str, *extra: str) -> tuple[int, dict, str]:
    out = CliRunner().invoke(
        app,
        ["reconcile", "--table", "items", "--snapshot", snap, "--format", "debezium", "--buckets", "4"]
        + ["--config", config, "--dsn", wh.dsn, *extra],
    )
    assert out.exception is None or isinstance(out.exception, SystemExit), out.output
    report = json.loads(out.stdout) if "--json" in extra else {}
    return out.exit_code, report, out.output


def differences(report: dict) -> list[tuple]:
    return sorted((d["row"]["sku"], d["row"]["qty"], d["kind"], d["copies"], d["explained"]) for d in report["differences"])


def test_reconcile_finds_one_missing_duplicate_and_one_extra_row(keyless, tmp_path):
    """The snapshot holds (a, 1) three times; the warehouse lost one copy and gained (q, 7)
    (not the stream's: written by hand, at no position)."""
    wh, _, config = keyless
    snap = write_records(tmp_path / "snap.jsonl", snapshot_reads(SNAPSHOT))
    assert backfill(wh, config, "--snapshot", snap, "--format", "debezium")[0] == 0
    code, report, output = reconcile(wh, config, snap, "--json")
    assert code == 0, output
    assert (report["snapshot_rows"], report["warehouse_rows"], report["differences"], report["clean"]) == (4, 4, [], True)

    wh.execute("""DELETE FROM cdc."items" WHERE _kafka_offset = (SELECT MIN(_kafka_offset) FROM cdc."items" WHERE sku = 'a')""")
    wh.execute("""INSERT INTO cdc."items" (sku, qty, _synced_at) VALUES ('q', 7, now())""")
    code, report, output = reconcile(wh, config, snap, "--json")
    assert code == 1, output
    assert differences(report) == [("a", 1, "missing", 1, False), ("q", 7, "extra", 1, False)]
    assert (report["missing"], report["extra"], report["unexplained"]) == (1, 1, 2)
    code, _, output = reconcile(wh, config, snap)  # the readable report
    assert code == 1
    assert "sku=a, qty=1" in output and "unexplained differences" in output


def test_reconcile_explains_what_the_stream_changed_after_the_snapshot(keyless, tmp_path):
    """After the stream's changes, the rows it wrote and removed after the snapshot's
    position are explained; a row lost besides them is not."""
    wh, pipeline, config = keyless
    snap = write_records(tmp_path / "snap.jsonl", snapshot_reads(SNAPSHOT))
    assert backfill(wh, config, "--snapshot", snap, "--format", "debezium")[0] == 0
    feed(wh, pipeline, "items", [event("u", row("a", 1), row("a", 5), 1100), event("d", row("b", 2), None, 1200)])
    code, report, output = reconcile(wh, config, snap, "--json")
    assert code == 0, output
    assert differences(report) == [("a", 1, "missing", 1, True), ("a", 5, "extra", 1, True), ("b", 2, "missing", 1, True)]
    # One more copy lost, by hand: more rows are missing than the stream's 2 changes removed.
    wh.execute(
        """DELETE FROM cdc."items" WHERE _kafka_offset = (SELECT MIN(_kafka_offset) FROM cdc."items" WHERE sku = 'a' AND qty = 1)"""
    )
    code, report, output = reconcile(wh, config, snap, "--json")
    assert code == 1, output
    assert differences(report) == [("a", 1, "missing", 2, False), ("a", 5, "extra", 1, True), ("b", 2, "missing", 1, False)]

"""Backfill scenarios on real Spark and real PostgreSQL: the handover to the stream."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from sync.backfill import run_backfill
from sync.debezium import ChangeStream, MySqlSource, write_jsonl
from sync.runner import sync
from sync.stream import ingest_file

pytestmark = pytest.mark.spark

# The stream's events (MySqlSource) start at 2023-11-14 22:13:21 UTC; the snapshot is older.
SNAPSHOT_TIME = datetime(2023, 11, 14, 22, 0, 0)
SNAPSHOT = {
    "A1": ("Alpha", "BUILDING"),
    "B2": ("Beta", "MACHINERY"),
    "C3": ("Gamma", "HOUSEHOLD"),
    "D4": ("Delta", "AUTOMOBILE"),
}


def write_snapshot(path, rows: dict) -> str:
    path.write_text("".join(json.dumps({"CUST_ID": k, "NAME": n, "MKTSEGMENT": m}) + "\n" for k, (n, m) in rows.items()))
    return str(path)


def customers(wh) -> list[tuple]:
    return wh.query('SELECT customer_id, name, mktsegment FROM cdc."customer" ORDER BY 1')


def row(key, name, seg):
    return {"CUST_ID": key, "NAME": name, "MKTSEGMENT": seg}


def stream_changes(wh, pipeline, tmp_path, model: dict) -> None:
    """Inserts, updates and deletes after the snapshot time, applied to `model` too."""
    cs = ChangeStream(["CUST_ID"], MySqlSource(pos=5000))
    records = [
        cs.update(None, row("A1", "Alpha v2", "BUILDING")),
        cs.delete(row("B2", "Beta", "MACHINERY")),
        cs.tombstone(row("B2", "", "")),
        cs.insert(row("E5", "Epsilon", "FURNITURE")),
        cs.update(None, row("E5", "Epsilon v2", "FURNITURE")),
    ]
    model["A1"] = ("Alpha v2", "BUILDING")
    model.pop("B2")
    model["E5"] = ("Epsilon v2", "FURNITURE")
    write_jsonl(records, tmp_path / "stream.jsonl")
    ingest_file(wh, pipeline, "customer", tmp_path / "stream.jsonl")
    (run,) = sync(wh, pipeline, ["customer"])
    assert run.status == "ok", run.error


def as_rows(model: dict) -> list[tuple]:
    return [(k, n, m) for k, (n, m) in sorted(model.items())]


def test_backfill_then_stream_equals_the_source(deployed, spark, tmp_path):
    wh, pipeline = deployed
    snap = write_snapshot(tmp_path / "snap.jsonl", SNAPSHOT)
    result = run_backfill(wh, pipeline, "customer", snap, "json", SNAPSHOT_TIME, spark=spark)
    assert (result.staged, result.loaded, result.rejected) == (4, 4, 0)
    assert customers(wh) == as_rows(SNAPSHOT)
    model = dict(SNAPSHOT)
    stream_changes(wh, pipeline, tmp_path, model)
    assert customers(wh) == as_rows(model)
    meta = wh.query('SELECT customer_id, _source_ts, _source_pos, _kafka_offset FROM cdc."customer" WHERE customer_id = %s', ("C3",))
    assert meta == [("C3", SNAPSHOT_TIME, None, None)]


def test_stream_first_then_older_snapshot_keeps_newer_rows_and_deletes(deployed, spark, tmp_path):
    wh, pipeline = deployed
    model = dict(SNAPSHOT)
    # The stream starts before the backfill: the table only has what it wrote.
    stream_changes(wh, pipeline, tmp_path, model)
    snap = write_snapshot(tmp_path / "snap.jsonl", SNAPSHOT)
    result = run_backfill(wh, pipeline, "customer", snap, "json", SNAPSHOT_TIME, spark=spark)
    assert customers(wh) == as_rows(model)  # A1 newer kept, B2 stays deleted, C3/D4 loaded, E5 kept
    assert (result.kept_newer, result.kept_deleted, result.loaded) == (1, 1, 2)


def test_same_backfill_twice_is_identical(deployed, spark, tmp_path):
    wh, pipeline = deployed
    snap = write_snapshot(tmp_path / "snap.jsonl", SNAPSHOT)
    run_backfill(wh, pipeline, "customer", snap, "json", SNAPSHOT_TIME, spark=spark)
    first = wh.query('SELECT * FROM cdc."customer" ORDER BY 1')
    again = run_backfill(wh, pipeline, "customer", snap, "json", SNAPSHOT_TIME, spark=spark)
    assert wh.query('SELECT * FROM cdc."customer" ORDER BY 1') == first
    assert (again.loaded, again.kept_newer) == (0, 4)
    assert wh.scalar('SELECT COUNT(*) - COUNT(DISTINCT customer_id) FROM cdc."customer"') == 0

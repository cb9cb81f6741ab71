"""Backfill scenarios on real Spark and real PostgreSQL: the handover to the stream."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from sync.debezium.events import ChangeStream, MySqlSource, write_jsonl
from sync.local.stream import ingest_file
from sync.operations.backfill import run_backfill
from sync.operations.runner import sync

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
    meta = wh.query(
        'SELECT customer_id, _source_ts, _source_pos, _kafka_offset FROM cdc."customer" WHERE customer_id = %s', ("C3",)
    )
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


def test_soft_mode_keeps_stream_deletes_marked(deployed, spark, tmp_path):
    """orders (soft deletes): a key the stream marked deleted after the snapshot stays
    marked; an older snapshot row for a newer stream row is not applied."""
    wh, pipeline = deployed
    cs = ChangeStream(["ORDER_ID"], MySqlSource(table="ORDERS", pos=9000))

    def order(i, status, total="10.00"):
        return {"ORDER_ID": i, "CUST_ID": "A1", "STATUS": status, "TOTAL": total, "PLACED_AT": "2023-11-01 10:00:00"}

    write_jsonl([cs.update(None, order(1, "shipped")), cs.delete(order(2, "new"))], tmp_path / "orders.jsonl")
    ingest_file(wh, pipeline, "orders", tmp_path / "orders.jsonl")
    assert sync(wh, pipeline, ["orders"])[0].status == "ok"
    snap = tmp_path / "orders-snap.csv"
    snap.write_text(
        "order_id,customer_id,status,total,placed_at\n"
        "1,A1,new,10.00,2023-11-01 10:00:00\n2,A1,new,10.00,2023-11-01 10:00:00\n3,B2,new,7.5,2023-11-02 08:00:00\n"
    )
    result = run_backfill(wh, pipeline, "orders", str(snap), "csv", SNAPSHOT_TIME, spark=spark)
    assert wh.query('SELECT order_id, status, total::text, _deleted FROM cdc."orders" ORDER BY 1') == [
        (1, "shipped", "10.00", False),
        (2, "new", "10.00", True),
        (3, "new", "7.50", False),
    ]
    assert (result.kept_newer, result.loaded) == (2, 1)


def test_cli_backfill_parquet_and_spark_submit_job(deployed, spark, tmp_path):
    """The CLI on a Parquet snapshot with per-row source times; the spark-submit entry
    point writes the same staged rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from backfill import job
    from sync.cli.app import app
    from tests.helpers import EXAMPLES

    wh, _ = deployed
    pq.write_table(
        pa.table(
            {
                "customer_id": ["P1", "P2"],
                "name": ["Pi", "Rho"],
                "mktsegment": ["X", "Y"],
                "_source_ts": pa.array([datetime(2023, 1, 1), datetime(2023, 1, 2)], pa.timestamp("us")),
            }
        ),
        tmp_path / "snap.parquet",
    )
    config = str(EXAMPLES / "salesdb" / "pipeline.toml")
    out = CliRunner().invoke(
        app,
        ["backfill", "--table", "customer", "--snapshot", str(tmp_path / "snap.parquet"), "--config", config, "--dsn", wh.dsn],
    )
    assert out.exit_code == 0, out.output
    assert wh.query('SELECT customer_id, _source_ts FROM cdc."customer" ORDER BY 1') == [
        ("P1", datetime(2023, 1, 1)),
        ("P2", datetime(2023, 1, 2)),
    ]
    assert (
        job.main(
            [
                "--config",
                config,
                "--table",
                "customer",
                "--snapshot",
                str(tmp_path / "snap.parquet"),
                "--output",
                str(tmp_path / "run"),
            ]
        )
        == 0
    )
    staged = spark.read.parquet(str(tmp_path / "run" / "data"))
    assert staged.columns == [
        "customer_id",
        "name",
        "mktsegment",
        "_source_ts",
        "_source_pos",
        "_kafka_partition",
        "_kafka_offset",
        "_delete",
    ]
    assert sorted(r["customer_id"] for r in staged.collect()) == ["P1", "P2"]


def test_a_repeated_backfill_does_not_call_its_own_rows_newer_in_the_stream(deployed, spark, tmp_path):
    from rich.console import Console

    from sync.cli.report import print_backfill

    wh, pipeline = deployed
    snap = write_snapshot(tmp_path / "snap.jsonl", SNAPSHOT)
    run_backfill(wh, pipeline, "customer", snap, "json", SNAPSHOT_TIME, spark=spark)
    said: list[str] = []
    again = run_backfill(wh, pipeline, "customer", snap, "json", SNAPSHOT_TIME, spark=spark, progress=said.append)
    out = Console(record=True, width=200, markup=False)
    print_backfill(again, "customer", out)
    text = "\n".join(said) + out.export_text()
    assert again.kept_newer == 4 and "stream" not in text.replace("deleted by stream", "")
    assert "4 kept (the target's row is as new or newer)" in text and "kept: target as new or newer" in text

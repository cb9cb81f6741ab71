"""Reconcile through the CLI: clean runs exit 0, each injected difference is named by key."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sync.cli.app import app
from sync.operations.backfill import run_backfill
from tests.helpers import EXAMPLES
from tests.spark.test_backfill_merge import SNAPSHOT, SNAPSHOT_TIME, stream_changes, write_snapshot

pytestmark = pytest.mark.spark
CONFIG = str(EXAMPLES / "salesdb" / "pipeline.toml")


def reconcile(wh, snap, tmp_path, *extra: str) -> tuple[int, dict]:
    out = tmp_path / "report.json"
    result = CliRunner().invoke(
        app,
        [
            "reconcile",
            "--table",
            "customer",
            "--snapshot",
            snap,
            "--format",
            "json",
            "--snapshot-time",
            SNAPSHOT_TIME.isoformat(),
            "--buckets",
            "8",
            "--report",
            str(out),
            "--config",
            CONFIG,
            "--dsn",
            wh.dsn,
            *extra,
        ],
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, json.loads(out.read_text())


@pytest.fixture
def loaded(deployed, spark, tmp_path):
    wh, pipeline = deployed
    snap = write_snapshot(tmp_path / "snap.jsonl", SNAPSHOT)
    run_backfill(wh, pipeline, "customer", snap, "json", SNAPSHOT_TIME, spark=spark)
    return wh, pipeline, snap


def diffs(report: dict) -> list[tuple]:
    return [(d["key"], d["kind"], d["explained"]) for d in report["differences"]]


def test_clean_reconcile_exits_0(loaded, tmp_path):
    wh, _, snap = loaded
    code, report = reconcile(wh, snap, tmp_path, "--checksum", "name,mktsegment")
    assert code == 0
    assert (report["snapshot_rows"], report["warehouse_rows"], report["mismatched_buckets"]) == (4, 4, [])


def test_missing_extra_and_changed_rows_are_named(loaded, tmp_path):
    wh, _, snap = loaded
    wh.execute("DELETE FROM cdc.customer WHERE customer_id = 'B2'")
    wh.execute(
        "INSERT INTO cdc.customer (customer_id, name, mktsegment, _source_ts) VALUES ('Z9', 'Zeta', 'X', %s)",
        (SNAPSHOT_TIME,),
    )
    wh.execute("UPDATE cdc.customer SET mktsegment = 'CHANGED' WHERE customer_id = 'C3'")
    code, report = reconcile(wh, snap, tmp_path, "--checksum", "mktsegment")
    assert code == 1
    assert sorted(diffs(report)) == [("B2", "missing", False), ("C3", "changed", False), ("Z9", "extra", False)]


def test_changed_value_needs_a_checksum_to_be_seen(loaded, tmp_path):
    wh, _, snap = loaded
    wh.execute("UPDATE cdc.customer SET name = 'Renamed' WHERE customer_id = 'D4'")
    assert reconcile(wh, snap, tmp_path)[0] == 0
    code, report = reconcile(wh, snap, tmp_path, "--checksum", "NAME")
    assert code == 1 and diffs(report) == [("D4", "changed", False)]


def test_stream_changes_after_the_snapshot_are_explained(loaded, tmp_path):
    wh, pipeline, snap = loaded
    stream_changes(wh, pipeline, tmp_path, dict(SNAPSHOT))
    code, report = reconcile(wh, snap, tmp_path, "--checksum", "name")
    assert code == 0
    assert sorted(diffs(report)) == [("A1", "changed", True), ("B2", "missing", True), ("E5", "extra", True)]


def test_snapshot_rows_that_cannot_load_are_counted_as_rejected(loaded, tmp_path):
    wh, _, _ = loaded
    snap = tmp_path / "with-bad-rows.jsonl"
    write_snapshot(snap, SNAPSHOT)
    with snap.open("a") as f:  # no key; a name longer than varchar(256)
        f.write(json.dumps({"NAME": "no key", "MKTSEGMENT": "X"}) + "\n")
        f.write(json.dumps({"CUST_ID": "F6", "NAME": "x" * 300, "MKTSEGMENT": "X"}) + "\n")
    code, report = reconcile(wh, str(snap), tmp_path)
    assert code == 1
    assert (report["snapshot_rows"], report["warehouse_rows"], report["rejected"]) == (4, 4, 2)


def test_a_changed_row_names_the_columns_whose_values_differ(loaded, tmp_path):
    wh, _, snap = loaded
    wh.execute("UPDATE cdc.customer SET mktsegment = 'CHANGED' WHERE customer_id = 'C3'")
    wh.execute("UPDATE cdc.customer SET name = 'Renamed', mktsegment = 'CHANGED' WHERE customer_id = 'A1'")
    code, report = reconcile(wh, snap, tmp_path, "--checksum", "name,mktsegment")
    assert code == 1
    named = {d["key"]: (d["why"], d["columns"]) for d in report["differences"]}
    assert named == {
        "A1": ("values differ in name, mktsegment", ["name", "mktsegment"]),
        "C3": ("values differ in mktsegment", ["mktsegment"]),
    }


def test_reconcile_json_prints_the_report_it_writes(loaded, tmp_path):
    wh, _, snap = loaded
    wh.execute("UPDATE cdc.customer SET mktsegment = 'CHANGED' WHERE customer_id = 'C3'")
    out = tmp_path / "report.json"
    args = ["reconcile", "--table", "customer", "--snapshot", snap, "--format", "json", "--snapshot-time"]
    args += [SNAPSHOT_TIME.isoformat(), "--checksum", "mktsegment", "--report", str(out), "--config", CONFIG, "--dsn", wh.dsn]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 1
    assert json.loads(result.stdout) == json.loads(out.read_text())
    assert json.loads(result.stdout)["unexplained"] == 1

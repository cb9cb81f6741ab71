"""Reconcile after a handover whose stream deletes with tombstones only.

With `delete.tombstone.handling.mode=tombstone` (ExtractNewRecordState's default since
Debezium 2.5) a delete is "a record with null value": the key and nothing else, no
`__source_ts_ms`, no position (Debezium documentation, "New Record State Extraction";
`shared/reference/debezium.md`). Its only time is the Kafka record's timestamp, set when
the record is produced, after the commit. The backfill's merge dates such a delete by it;
reconcile must explain the difference by the same rule, or a correct handover pages
someone (`reconcile` exits 1 on an unexplained difference).
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sync.cli.app import app
from sync.operations.backfill import run_backfill
from tests.helpers import pipeline_toml
from tests.spark.test_backfill_tombstones import (  # noqa: F401 (fixture)
    AFTER,
    BEFORE,
    SNAPSHOT_TIME,
    both_modes,
    deployed_item,
    everything,
    live,
    ms,
    snapshot,
    stream,
    tables_for,
)

pytestmark = pytest.mark.spark
KEYS = range(1, 41)


def reconcile_cli(wh, mode: str, snap: str, tmp_path) -> tuple[int, dict]:
    config = tmp_path / "item.toml"
    config.write_text(pipeline_toml(tables_for(mode)))
    out = tmp_path / "report.json"
    args = ["reconcile", "--table", "item", "--snapshot", snap, "--format", "json"]
    args += ["--snapshot-time", SNAPSHOT_TIME.isoformat(), "--buckets", "28", "--checksum", "name"]
    result = CliRunner().invoke(app, [*args, "--report", str(out), "--config", str(config), "--dsn", wh.dsn])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, json.loads(out.read_text())


@both_modes
def test_reconcile_explains_tombstone_only_deletes_after_snapshot(deployed_item, spark, tmp_path):
    wh, pipeline, mode = deployed_item
    before = [
        {"timestamp": ms(BEFORE), "key": {"id": k}, "value": {"id": k, "name": f"v{k}", "__source_ts_ms": ms(BEFORE)}}
        for k in KEYS
    ]
    deleted = [k for k in KEYS if k % 3 == 0]
    updated = [k for k in KEYS if k % 3 == 1]
    after = [
        {"timestamp": ms(AFTER), "key": {"id": k}, "value": None if k % 2 else "null"}  # both tombstone spellings
        for k in deleted
    ]
    after += [
        {"timestamp": ms(AFTER), "key": {"id": k}, "value": {"id": k, "name": f"new{k}", "__source_ts_ms": ms(AFTER)}}
        for k in [*updated, 100, 101]
    ]
    stream(wh, pipeline, tmp_path, before + after)
    snap = snapshot(tmp_path, {k: f"v{k}" for k in KEYS})  # the source at SNAPSHOT_TIME
    run_backfill(wh, pipeline, "item", snap, "json", SNAPSHOT_TIME, spark=spark)
    source = {k: (f"new{k}" if k in updated else f"v{k}") for k in KEYS if k not in deleted}
    source.update({100: "new100", 101: "new101"})
    assert live(wh, mode) == source
    state = everything(wh, mode)
    run_backfill(wh, pipeline, "item", snap, "json", SNAPSHOT_TIME, spark=spark)
    assert everything(wh, mode) == state

    code, report = reconcile_cli(wh, mode, snap, tmp_path)
    assert report["unexplained"] == 0, [d for d in report["differences"] if not d["explained"]]
    assert code == 0
    kinds = {d["key"]: (d["kind"], d["explained"]) for d in report["differences"]}
    expected = {str(k): ("missing", True) for k in deleted}
    expected |= {str(k): ("changed", True) for k in updated} | {"100": ("extra", True), "101": ("extra", True)}
    assert kinds == expected

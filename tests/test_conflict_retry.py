"""Every path that CALLs runs a transaction stopped by a serialization conflict again.

AWS: at SERIALIZABLE isolation, Redshift stops one of two transactions that would not
serialize with "ERROR: 1023 DETAIL: Serializable isolation violation on table"; "you can
... retry the aborted transaction" ("Isolation levels in Amazon Redshift",
https://docs.aws.amazon.com/redshift/latest/dg/c_serial_isolation.html). PostgreSQL: "it
is possible for transactions to fail with a serialization failure (SQLSTATE 40001) ...
applications using this level must be prepared to retry transactions due to
serialization failures" (PostgreSQL manual, 13.2.3 "Serializable Isolation Level").

The failure is raised by the engine itself (a statement trigger on a table the
transaction writes, `fail_first_writes`), so the driver, the SQLSTATE and the rollback
are PostgreSQL's own. Each path: the conflict is retried, counted, and the data is as
if it had not happened; with `[operations] conflict_attempts = 1` it is not retried.
"""

from __future__ import annotations

import json

import pytest

from sync.config import parse_pipeline
from sync.operations.backfill import load_and_merge
from sync.operations.quarantine import Selection, list_records, replay
from sync.operations.recovery import rebase_offsets, reset_positions
from sync.operations.runner import deploy, sync_table
from sync.warehouse import WarehouseError
from tests.helpers import fail_first_writes, ingest, pipeline_toml, sync_one
from tests.test_backfill_load import snapshot_parts
from tests.test_cli import run
from tests.test_isolation import TOML, event

RUN_LOG = "cdc.sync_run_log"


def acc_pipeline(conflict_attempts: int = 4):
    import tomllib

    text = pipeline_toml(TOML) + f"\n[operations]\nconflict_attempts = {conflict_attempts}\n"
    return parse_pipeline(tomllib.loads(text)), text


@pytest.fixture
def acc(wh):
    pipeline, _ = acc_pipeline()
    deploy(wh, pipeline, "test")
    ingest(wh, pipeline, "acc", [event(i, 100 + i, 1000 + 10 * i) for i in range(20)])
    return wh, pipeline


def test_sync_runs_a_call_stopped_by_a_serialization_failure_again(acc, database_dsn, tmp_path):
    wh, _ = acc
    pipeline_file = tmp_path / "pipeline.toml"
    pipeline_file.write_text(acc_pipeline()[1])
    fail_first_writes(wh, RUN_LOG, times=2)  # the CALL's last write: everything before it rolls back

    out = run("sync", "--json", "--config", str(pipeline_file), "--dsn", database_dsn)

    assert out.returncode == 0, out.stderr
    (summary,) = json.loads(out.stdout)
    assert (summary["status"], summary["retries"], summary["events_read"]) == ("ok", 2, 20)
    assert summary["isolated"] == [] and summary["quarantined"] == 0
    assert wh.scalar('SELECT COUNT(*) FROM cdc."acc"') == 20
    assert wh.scalar(f"SELECT COUNT(*) FROM {RUN_LOG}") == 1  # the two stopped CALLs left nothing


def test_with_retry_off_a_conflict_fails_the_sync_and_no_record_is_isolated(wh):
    pipeline, _ = acc_pipeline(conflict_attempts=1)
    deploy(wh, pipeline, "test")
    ingest(wh, pipeline, "acc", [event(i, 100 + i, 1000 + 10 * i) for i in range(5)])
    fail_first_writes(wh, RUN_LOG, times=1)

    run = sync_table(wh, pipeline, "acc")

    assert (run.status, run.conflict, run.data_error, run.retries) == ("failed", True, False, 0)
    assert "could not serialize access" in (run.error or "")
    assert wh.scalar('SELECT COUNT(*) FROM cdc."sync_quarantine"') == 0  # a conflict is no record's fault
    assert sync_one(wh, pipeline, "acc").events_read == 5  # the next run applies everything


def test_record_isolation_runs_its_bounded_calls_again_after_a_conflict(acc):
    wh, pipeline = acc
    wh.execute('ALTER TABLE cdc."acc" ADD CONSTRAINT no_105 CHECK (balance <> 105)')  # record 5 fails
    fail_first_writes(wh, RUN_LOG, times=1)  # the first bounded CALL that applies is stopped

    run = sync_table(wh, pipeline, "acc")

    assert run.status == "ok", run.error
    assert run.retries == 1 and len(run.isolated) == 1 and "no_105" in run.isolated[0]
    assert wh.scalar('SELECT COUNT(*) FROM cdc."acc"') == 19


def test_quarantine_replay_runs_its_transaction_again_after_a_conflict(acc):
    wh, pipeline = acc
    wh.execute('ALTER TABLE cdc."acc" ADD CONSTRAINT no_105 CHECK (balance <> 105)')
    assert sync_one(wh, pipeline, "acc").quarantined == 1
    wh.execute('ALTER TABLE cdc."acc" DROP CONSTRAINT no_105')  # the fix
    fail_first_writes(wh, RUN_LOG, times=2)

    result = replay(wh, pipeline, Selection("acc"))

    assert (result.replayed, result.run.status, result.run.retries) == (1, "ok", 2)
    assert wh.scalar('SELECT balance FROM cdc."acc" WHERE id = 5') == 105
    assert list_records(wh, pipeline, Selection("acc"))[0] == 0  # nothing waits any more


def test_reset_positions_runs_its_transaction_again_after_a_conflict(acc):
    wh, pipeline = acc
    sync_one(wh, pipeline, "acc")
    fail_first_writes(wh, RUN_LOG, times=2)  # the recovery's run-log row, its last write

    reset = reset_positions(wh, pipeline, "acc", apply=True)

    assert reset.applied and reset.target_rows == 20
    assert wh.scalar('SELECT COUNT(*) FROM cdc."acc" WHERE _source_pos IS NOT NULL') == 0
    assert wh.scalar(f"SELECT COUNT(*) FROM {RUN_LOG} WHERE status = 'reset-positions'") == 1


def test_the_backfill_merge_runs_its_transaction_again_after_a_conflict(deployed, tmp_path):
    wh, pipeline = deployed
    fail_first_writes(wh, 'cdc."customer"', times=1)
    snapshot_parts(tmp_path, ["C1", "C2", "C3"])

    counts = load_and_merge(wh, pipeline, pipeline.table("customer"), tmp_path, lambda _: None)

    assert (counts["loaded"], counts["retries"]) == (3, 1)
    assert wh.scalar("SELECT COUNT(*) FROM cdc.customer") == 3


def test_a_conflict_that_outlasts_the_attempts_fails_with_the_engines_words(acc):
    wh, _ = acc
    pipeline, _ = acc_pipeline(conflict_attempts=2)
    sync_one(wh, pipeline, "acc")
    fail_first_writes(wh, RUN_LOG, times=10)
    with pytest.raises(WarehouseError, match="could not serialize access") as info:
        reset_positions(wh, pipeline, "acc", apply=True)
    assert info.value.sqlstate == "40001"
    assert wh.scalar("SELECT last_value FROM public.injected_conflicts") == 2  # two attempts, no more


def test_rebase_offsets_runs_its_transaction_again_after_a_conflict(acc):
    wh, pipeline = acc
    sync_one(wh, pipeline, "acc")
    # The topic re-created: new records at offsets the watermark already passed.
    ingest(wh, pipeline, "acc", [{**event(i, 500 + i, 9000 + 10 * i), "partition": 0, "offset": i} for i in range(3)])
    fail_first_writes(wh, RUN_LOG, times=2)  # the recovery's run-log row, its last write

    rebase = rebase_offsets(wh, pipeline, "acc", apply=True)

    assert rebase.applied and [p.last_offset_after for p in rebase.partitions] == [-1]
    assert wh.scalar("SELECT last_value FROM public.injected_conflicts") == 3  # two stopped, the third applied
    assert sync_one(wh, pipeline, "acc").events_read == 3
    assert wh.scalar('SELECT balance FROM cdc."acc" WHERE id = 2') == 502

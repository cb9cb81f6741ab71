"""Four sync callers and an ingest writer at once, for a bounded number of refreshes:
every record is read by exactly one run, watermarks only move forward, nobody
deadlocks, and a caller that will not wait for the lock gets a clear failed status."""

from __future__ import annotations

import random
import threading
import time

import pytest

from sync.local.stream import ingest_file
from sync.operations import runner
from sync.operations.runner import RunSummary, call_procedure, deploy, sync
from sync.sql.names import RUN_LOG
from sync.warehouse import connect
from tests.helpers import at_isolation_level, make_pipeline
from tests.reliability_support import (  # noqa: F401 (reliability_counts is a fixture)
    History,
    account_table,
    assert_consistent,
    reliability_counts,
    write_jsonl,
)

CALLERS = 4
REFRESHES = 30
TIME_LIMIT_S = 180  # a generous bound: a deadlock shows as threads that never finish


def _offsets(text: str | None) -> dict[int, int]:
    if not text:
        return {}
    return {int(p): int(o) for p, o in (part.split(":") for part in text.split(","))}


def _record_conflicts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The errors of the calls a serialization conflict stopped (each then retried): which
    statements conflicted, for the failure's message."""
    conflicts: list[str] = []

    def recorded(*args, **kwargs) -> RunSummary:
        run = call_procedure(*args, **kwargs)
        if run.conflict:
            conflicts.append(run.error or "")
        return run

    monkeypatch.setattr(runner, "call_procedure", recorded)
    return conflicts


@pytest.mark.slow
@pytest.mark.parametrize(
    "level",
    [None, "serializable", "repeatable read"],
)
def test_concurrent_callers_and_writer_apply_every_record_once(
    database_dsn, tmp_path, reliability_counts, level, request, monkeypatch
):
    """At the server's default level, and at both of Redshift's (see test_fleet_isolation.py):
    no call is stopped by a serialization conflict, none even retried. Each caller reads its
    call's run-log row inside the call's transaction, from the session's temporary table;
    read from the run log in a transaction of its own, it completed a read-only anomaly with
    another caller's CALL and the writer's refresh, which SERIALIZABLE stopped."""
    if level:
        request.getfixturevalue("whole_relation_predicate_locks")
        at_isolation_level(database_dsn, level)
    pipeline = make_pipeline(account_table())
    table = pipeline.tables[0]
    setup = connect(database_dsn)
    deploy(setup, pipeline, "test")
    history = History(seed=4, keys=300)
    conflicts = _record_conflicts(monkeypatch)
    writer_done = threading.Event()
    runs: list[tuple[int, RunSummary]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def writer() -> None:
        wh = connect(database_dsn)
        rng = random.Random(1)
        try:
            for i in range(REFRESHES):
                chunk = history.events(rng.randint(50, 300))
                ingest_file(wh, pipeline, table.name, write_jsonl(chunk, tmp_path / f"refresh-{i}.jsonl"))
                time.sleep(rng.uniform(0, 0.05))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            writer_done.set()
            wh.close()

    def caller(n: int) -> None:
        wh = connect(database_dsn)
        if n == 0:
            # This caller does not wait long for the lock: it must fail cleanly, not block.
            wh.execute("SET lock_timeout = '20ms'")
        try:
            while True:
                finished = writer_done.is_set()
                (run,) = sync(wh, pipeline, [table.name])
                with lock:
                    runs.append((n, run))
                if finished:
                    return
        except BaseException as exc:
            errors.append(exc)
        finally:
            wh.close()

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=caller, args=(n,)) for n in range(CALLERS)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + TIME_LIMIT_S
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "callers still running: a deadlock or a lost wake-up"
    assert not errors, errors

    failed = [(n, r) for n, r in runs if r.status != "ok"]
    for n, r in failed:
        assert n == 0 and "lock timeout" in (r.error or ""), f"caller {n}: {r.error}"
    assert [r.retries for _, r in runs if r.retries] == [], conflicts
    ok = [r for _, r in runs if r.status == "ok"]
    assert sum(r.events_read for r in ok) == len(history.records)

    # The run log is one chain in commit order: no run started from a stale watermark,
    # and every partition's offset only grows.
    wh = connect(database_dsn)
    chain = wh.query(f'SELECT watermark_before, watermark_after FROM cdc."{RUN_LOG}" ORDER BY run_id')
    assert len(chain) == len(ok)
    for before, after in chain:
        b, a = _offsets(before), _offsets(after)
        assert all(a.get(p, -1) >= o for p, o in b.items()), (before, after)
    assert assert_consistent(wh, pipeline, table, history.records) == len(history.records)
    wh.close()
    setup.close()
    reliability_counts["histories checked"] += 1
    reliability_counts["concurrent sync calls"] += len(runs)
    reliability_counts["lock waits that returned a clear failure"] += len(failed)


def test_a_caller_that_will_not_wait_for_the_lock_fails_cleanly_and_changes_nothing(database_dsn, tmp_path):
    pipeline = make_pipeline(account_table())
    table = pipeline.tables[0]
    holder, caller = connect(database_dsn), connect(database_dsn)
    deploy(holder, pipeline, "test")
    history = History(seed=7, keys=20)
    ingest_file(holder, pipeline, table.name, write_jsonl(history.events(40), tmp_path / "refresh.jsonl"))
    caller.execute("SET lock_timeout = '20ms'")
    with holder.transaction():  # another sync holds the table's lock
        holder.execute(f'LOCK TABLE cdc."{table.name}__watermark" IN SHARE ROW EXCLUSIVE MODE')
        (run,) = sync(caller, pipeline, [table.name])
    assert run.status == "failed" and "lock timeout" in (run.error or ""), run
    assert holder.scalar(f'SELECT COUNT(*) FROM cdc."{table.name}__watermark"') == 0
    assert holder.scalar(f'SELECT COUNT(*) FROM cdc."{RUN_LOG}"') == 0
    (run,) = sync(caller, pipeline, [table.name])  # the lock is free again
    assert run.status == "ok" and run.events_read == len(history.records)
    holder.close()
    caller.close()

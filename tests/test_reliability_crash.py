"""Crashes in the middle of a sync: the `sync` process killed (SIGKILL), its server backend
terminated or killed (PostgreSQL then resets every session and recovers), and the
embedded PostgreSQL restarted in immediate mode, each at a random moment while
`incremental_sync_<table>()` runs. After every injection the warehouse holds either
the state before that run or the state after it (target, quarantine, watermark and run
log agreeing, as the reference model says), and the next sync completes the history.

Runs on a dedicated server, because it crashes it."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter

import pytest

from sync.config import load_pipeline
from sync.local.stream import ingest_file
from sync.operations.runner import deploy, sync
from sync.warehouse import Warehouse, WarehouseError, connect
from tests.cdc_model import TopicModel
from tests.helpers import REPO, dsn_for_database, pipeline_toml
from tests.reliability_support import (  # noqa: F401 (reliability_counts is a fixture)
    History,
    account_table,
    assert_consistent,
    reliability_counts,
    watermarks,
    wm_key,
    write_jsonl,
)

INJECTIONS = {"client-sigkill": 26, "backend-terminate": 8, "backend-sigkill": 8, "server-restart": 8}
EVENTS_PER_RUN = 2000  # a run of a few hundred milliseconds


@pytest.fixture
def crash_server():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR is not set
        import pgserver
        from pgserver._commands import pg_ctl

    # Not under pytest's private tmp dir: the server runs as its own user when we are root.
    server = pgserver.get_server(tempfile.mkdtemp(prefix="rs-crash-pg-"), cleanup_mode="delete")

    def restart() -> None:
        pg_ctl(["-w", "-m", "immediate", "restart"], pgdata=server.pgdata, user=server.system_user, timeout=60)

    server.restart = restart
    yield server
    # A restarted postmaster is not the one pgserver started: stop it here.
    try:
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user, timeout=60)
    except subprocess.CalledProcessError:
        pass
    server.cleanup()


def _reconnect(dsn: str) -> Warehouse:
    deadline = time.monotonic() + 60
    while True:
        try:
            wh = connect(dsn)
            wh.execute("SELECT 1")
            return wh
        except WarehouseError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _running_call(wh: Warehouse, proc: subprocess.Popen) -> int | None:
    """The backend pid executing the CALL, once it runs (None if the client ended first)."""
    deadline = time.monotonic() + 30
    while proc.poll() is None and time.monotonic() < deadline:
        pid = wh.scalar(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' "
            "AND query LIKE 'CALL %%' LIMIT 1"
        )
        if pid is not None:
            return int(pid)
        time.sleep(0.005)
    return None


def _wait_gone(wh: Warehouse, pid: int) -> None:
    deadline = time.monotonic() + 60
    while wh.scalar("SELECT COUNT(*) FROM pg_stat_activity WHERE pid = %s", (pid,)):
        assert time.monotonic() < deadline, f"backend {pid} still running a minute after its client died"
        time.sleep(0.01)


@pytest.mark.slow
def test_sync_survives_kills_and_restarts_at_random_points(crash_server, tmp_path, reliability_counts):
    admin_dsn = crash_server.get_uri()
    admin = connect(admin_dsn)
    admin.execute('CREATE DATABASE "crash"')
    # A killed client aborts its transaction at once (as on Redshift, where the session
    # ends with the connection) instead of the backend finishing the call unnoticed.
    admin.execute("ALTER DATABASE \"crash\" SET client_connection_check_interval = '10ms'")
    admin.close()
    dsn = dsn_for_database(admin_dsn, "crash")
    config = tmp_path / "pipeline.toml"
    config.write_text(pipeline_toml(account_table()))
    pipeline, _ = load_pipeline(config)
    table = pipeline.tables[0]
    wh = connect(dsn)
    deploy(wh, pipeline, "test")

    rng = random.Random(20261121)
    history = History(seed=20261121, keys=400)
    model = TopicModel(table)
    # How long a run takes here: the kills land at a random moment within that.
    first = history.events(EVENTS_PER_RUN)
    ingest_file(wh, pipeline, table.name, write_jsonl(first, tmp_path / "chunk.jsonl"))
    model.add(first)
    (calibration,) = sync(wh, pipeline, [table.name])
    assert calibration.status == "ok", calibration.error
    run_seconds = calibration.duration_seconds
    kinds = [kind for kind, count in INJECTIONS.items() for _ in range(count)]
    rng.shuffle(kinds)
    outcomes: Counter[str] = Counter()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for kind in kinds:
        wm_before = watermarks(wh, pipeline, table)
        state_before = (model.rows(), model.quarantine())
        chunk = history.events(EVENTS_PER_RUN)
        ingest_file(wh, pipeline, table.name, write_jsonl(chunk, tmp_path / "chunk.jsonl"))
        model.add(chunk)
        wm_after = dict(history.next_offset)
        wm_after = {p: o - 1 for p, o in wm_after.items()}
        known = {wm_key(wm_before): state_before, wm_key(wm_after): (model.rows(), model.quarantine())}

        proc = subprocess.Popen(
            [sys.executable, "-m", "sync", "sync", "--dsn", dsn, "--config", str(config), "--table", table.name],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        backend = _running_call(wh, proc)
        time.sleep(rng.uniform(0, run_seconds))
        if kind == "client-sigkill":
            proc.send_signal(signal.SIGKILL)
        elif backend is not None and kind == "backend-terminate":
            wh.execute("SELECT pg_terminate_backend(%s)", (backend,))
        elif backend is not None and kind == "backend-sigkill":
            with contextlib.suppress(ProcessLookupError):  # the run may have finished already
                os.kill(backend, signal.SIGKILL)  # the postmaster resets all sessions and recovers
        elif kind == "server-restart":
            crash_server.restart()
        _, err = proc.communicate(timeout=120)
        if kind != "client-sigkill":
            assert "Traceback" not in err and proc.returncode in (0, 1), err
        wh.close()
        wh = _reconnect(dsn)
        if backend is not None:
            _wait_gone(wh, backend)  # a killed client's backend notices and stops (or commits)

        # Either the whole run or nothing of it.
        wm = watermarks(wh, pipeline, table)
        assert wm_key(wm) in known, f"after {kind}: watermark {wm} is neither {wm_before} nor {wm_after}"
        outcomes["aborted" if wm_key(wm) == wm_key(wm_before) else "committed"] += 1
        assert_consistent(wh, pipeline, table, history.records, known)

        # The next sync picks up exactly what the killed one did not apply.
        (run,) = sync(wh, pipeline, [table.name])
        assert run.status == "ok", run.error
        if run.events_read >= EVENTS_PER_RUN:
            run_seconds = run.duration_seconds  # follows the machine's load
        assert wm_key(watermarks(wh, pipeline, table)) == wm_key(wm_after)
        assert_consistent(wh, pipeline, table, history.records, known)
        reliability_counts["fault injections survived"] += 1
    wh.close()
    reliability_counts["histories checked"] += 1
    reliability_counts["fault injections that aborted a run"] += outcomes["aborted"]
    # The kills must land inside runs, or this test proves nothing.
    print(f"crash injections: {dict(outcomes)}")
    assert outcomes["aborted"] >= len(kinds) // 3, outcomes

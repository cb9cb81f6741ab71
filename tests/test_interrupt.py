"""Ctrl-C, a closed terminal and SIGTERM: the command says what became of its work, exits
with 128 + the signal's number (130 for SIGINT, as shells report it), prints no traceback,
and the embedded PostgreSQL it started does not outlive it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

from sync.local import embedded
from tests.helpers import REPO
from tests.test_connect_timeout import silent_port  # noqa: F401  (fixture)

LIMIT = 60


def start(*args: str, **env: str) -> subprocess.Popen:
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("REDSHIFT_SYNC_")} | {"PYTHONPATH": str(REPO)} | env
    return subprocess.Popen(
        [sys.executable, "-m", "sync", *args], env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + LIMIT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def running_statement(dsn: str, text: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return bool(
            conn.execute(
                "SELECT COUNT(*) FROM pg_stat_activity WHERE query = %s AND state = 'active' AND pid <> pg_backend_pid()",
                (text,),
            ).fetchone()[0]
        )


def test_ctrl_c_during_a_statement_says_nothing_was_applied_and_exits_130(database_dsn):
    sql = "CREATE TABLE interrupted AS SELECT 1 AS one FROM pg_sleep(60)"
    child = start("query", sql, "--dsn", database_dsn)
    wait_for(lambda: running_statement(database_dsn, sql), "the statement to run")
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=LIMIT)
    assert child.returncode == 130, err
    assert err.strip() == "interrupted: nothing of this run was applied"
    with psycopg.connect(database_dsn) as conn:
        assert conn.execute("SELECT to_regclass('interrupted')").fetchone()[0] is None  # rolled back


def test_ctrl_c_while_connecting_exits_130_without_a_traceback(silent_port):  # noqa: F811
    child = start("query", "SELECT 1", "--dsn", f"postgresql://u@127.0.0.1:{silent_port}/db")
    assert child.stderr.readline().strip() == f"connecting to 127.0.0.1:{silent_port} ..."
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=LIMIT)
    assert (child.returncode, err.strip()) == (130, "interrupted: nothing of this run was applied")


def postmaster_pid(home: Path) -> int | None:
    pid_file = home / "pgdata" / "postmaster.pid"
    try:
        return int(pid_file.read_text().splitlines()[0])
    except (FileNotFoundError, IndexError, ValueError):
        return None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM])
def test_a_closed_terminal_stops_the_embedded_warehouse_the_command_started(signum):
    # Outside pytest's temporary folders: as root, pgserver runs PostgreSQL as another
    # user, which must be able to reach the data folder.
    home = Path(tempfile.mkdtemp(prefix="rs-test-hup-"))
    child = start("query", "SELECT pg_sleep(60)", REDSHIFT_SYNC_HOME=str(home))
    try:
        wait_for(lambda: postmaster_pid(home) is not None, "the embedded PostgreSQL to start")
        server = postmaster_pid(home)
        time.sleep(2)  # the statement is under way
        child.send_signal(signum)
        _, err = child.communicate(timeout=LIMIT)
        assert child.returncode == 128 + signum and "Traceback" not in err, err
        wait_for(lambda: not alive(server), "the embedded PostgreSQL to stop")
    finally:
        child.kill()
        left = postmaster_pid(home)
        if left is not None and alive(left):  # the old behaviour: do not leak the server
            os.kill(left, signal.SIGQUIT)
        shutil.rmtree(home, ignore_errors=True)


class Server:
    """Stands in for a pgserver handle whose stop is interrupted by Ctrl-C."""

    stopped = False

    def cleanup(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)  # the signal arrives while the server stops
        self.stopped = True


def test_ctrl_c_while_the_embedded_warehouse_stops_neither_interrupts_nor_prints(monkeypatch):
    # The handler before (Python's default, or PySpark's when a SparkContext ran earlier
    # in this process) is what the stop restores.
    before = signal.getsignal(signal.SIGINT)
    server = Server()
    monkeypatch.setitem(embedded._servers, "/pgdata", server)
    embedded.stop()
    assert server.stopped and embedded._servers == {}
    assert signal.getsignal(signal.SIGINT) is before  # restored afterwards

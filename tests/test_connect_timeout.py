"""A warehouse that accepts the TCP connection and never answers (a wrong port behind a
load balancer, a paused cluster's proxy) must not hang a command: connecting gives up
after `connect_timeout` seconds and the error names the host.

libpq documents `connect_timeout` as "Maximum time to wait while connecting, in seconds
(write as a decimal integer, e.g., 10). Zero, negative, or not specified means wait
indefinitely. The minimum allowed timeout is 2 seconds" (PostgreSQL, libpq "Parameter Key
Words"); redshift_connector's `timeout` is "The number of seconds before the connection to
the server will timeout. By default there is no timeout." Each command runs in a child
process with a hard limit, so a hang fails the test instead of stalling the suite."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from sync.warehouse import CONNECT_TIMEOUT_ENV, DEFAULT_CONNECT_TIMEOUT, WarehouseError, connect_timeout, sqlalchemy_url
from tests.helpers import EXAMPLES, REPO

HARD_LIMIT = 30  # seconds: far above the timeouts below, far below "hangs"


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A server on 127.0.0.1 that accepts connections, reads nothing and never answers."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def run_status(dsn: str, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("REDSHIFT_SYNC_")} | {"PYTHONPATH": str(REPO)} | env
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "sync", "status", "--config", str(EXAMPLES / "salesdb" / "pipeline.toml"), "--dsn", dsn],
        capture_output=True,
        text=True,
        env=child_env,
        timeout=HARD_LIMIT,
    )
    return done, time.monotonic() - started


def assert_gave_up_naming_the_host(done: subprocess.CompletedProcess, waited: float, engine: str, port: int) -> None:
    err = " ".join(done.stderr.split())
    assert done.returncode == 1, done.stderr
    assert f"connecting to 127.0.0.1:{port} ..." in err  # said after a second, before giving up
    assert f"error: cannot connect to {engine} at 127.0.0.1:{port}: no answer within 2 s" in err
    assert "connect_timeout=SECONDS in the DSN" in err and "Traceback" not in done.stderr
    assert 2 <= waited < 2 + 10, waited


def test_a_silent_postgresql_server_times_out_by_the_environment_setting(silent_port):
    done, waited = run_status(f"postgresql://u@127.0.0.1:{silent_port}/db", **{CONNECT_TIMEOUT_ENV: "2"})
    assert_gave_up_naming_the_host(done, waited, "PostgreSQL", silent_port)


def test_a_silent_redshift_endpoint_times_out_by_the_dsn_setting(silent_port):
    done, waited = run_status(f"redshift+redshift_connector://u:p@127.0.0.1:{silent_port}/dev?connect_timeout=2")
    assert_gave_up_naming_the_host(done, waited, "Redshift", silent_port)


def test_the_dsn_setting_wins_over_the_environment(silent_port):
    done, waited = run_status(f"postgresql://u@127.0.0.1:{silent_port}/db?connect_timeout=2", **{CONNECT_TIMEOUT_ENV: "600"})
    assert_gave_up_naming_the_host(done, waited, "PostgreSQL", silent_port)


def test_deploy_to_a_silent_server_stops_before_alembic_runs(silent_port, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDSHIFT_SYNC_")} | {"PYTHONPATH": str(REPO)}
    (tmp_path / "pipeline.toml").write_text((EXAMPLES / "salesdb" / "pipeline.toml").read_text())
    rs = [sys.executable, "-m", "sync"]
    subprocess.run([*rs, "revision", "-m", "initial"], cwd=tmp_path, env=env, check=True, capture_output=True)
    dsn = f"postgresql://u@127.0.0.1:{silent_port}/db?connect_timeout=2"
    done = subprocess.run(
        [*rs, "deploy", "--dsn", dsn], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=HARD_LIMIT
    )
    assert done.returncode == 1
    assert f"cannot connect to PostgreSQL at 127.0.0.1:{silent_port}: no answer within 2 s" in " ".join(done.stderr.split())
    assert "rolled back" not in done.stderr


def test_the_default_is_finite_and_settings_read_as_seconds(monkeypatch):
    monkeypatch.delenv(CONNECT_TIMEOUT_ENV, raising=False)
    assert connect_timeout(None) == DEFAULT_CONNECT_TIMEOUT and 0 < DEFAULT_CONNECT_TIMEOUT <= 60
    monkeypatch.setenv(CONNECT_TIMEOUT_ENV, "7")
    assert (connect_timeout(None), connect_timeout("3"), connect_timeout("0")) == (7, 3, None)
    with pytest.raises(WarehouseError, match="connect_timeout 'soon' is not a whole number of seconds"):
        connect_timeout("soon")


def test_alembic_gets_the_redshift_dsn_without_the_setting_the_driver_does_not_know():
    url = sqlalchemy_url("redshift+redshift_connector://u:p%40ss@host.example:5439/dev?connect_timeout=5&sslmode=verify-full")
    assert url == "redshift+redshift_connector://u:p%40ss@host.example:5439/dev?sslmode=verify-full"

"""`redshift-sync` as most tests run it: a real process per command, with its own
arguments, folder, environment, stdin, stdout, stderr and exit status, forked from a server
that imported the package once (tests/warm_cli.py) instead of paying Python's start-up and
the package's imports (about a second of CPU) for each of the suite's many commands.

An environment the imports could read differently runs the installed console script
itself (warm_cli's rule); so do the tests of what only a process of its own shows (signals,
kills, start-up), which call `python -m sync` directly."""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import subprocess
import tempfile
from pathlib import Path

from tests.helpers import REPO
from tests.warm_cli import warm_cli


@functools.cache
def _warm_server() -> tuple[str, dict[str, str]]:
    """The client's path and the server's environment (the server started on first use,
    one per test process, ended at exit)."""
    stack = contextlib.ExitStack()
    atexit.register(stack.close)
    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rs-warm-")))
    # This checkout's package first, as `python -m sync` run in it imports it (also where
    # the venv's editable install is another checkout's).
    path = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = stack.enter_context(warm_cli(folder, {**os.environ, "PYTHONPATH": path}))
    return str(folder / "bin" / "redshift-sync"), env


def run_cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path = REPO, keep_settings: bool = True, timeout: int = 300
) -> subprocess.CompletedProcess:
    """Run `redshift-sync ARGS` in `cwd` with this process's environment plus `env` (without
    its REDSHIFT_SYNC_* settings unless `keep_settings`); its output is captured as text."""
    client, server = _warm_server()
    full = {k: v for k, v in os.environ.items() if keep_settings or not k.startswith("REDSHIFT_SYNC_")}
    full |= {"PATH": server["PATH"], "PYTHONPATH": server["PYTHONPATH"], **(env or {})}
    return subprocess.run([client, *args], capture_output=True, text=True, env=full, cwd=cwd, timeout=timeout)

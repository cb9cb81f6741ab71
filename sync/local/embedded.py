"""The embedded warehouse: a real PostgreSQL in a local data directory.

pgserver (wheels for CPython 3.9-3.12) bundles PostgreSQL and copes with running as
root. Where it is not installed, a PostgreSQL found on PATH (or in the usual Debian
location) is started instead, as the current user; as root that needs a non-root user,
because initdb refuses to run as root.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import warnings
from pathlib import Path

HOME_ENV_VAR = "REDSHIFT_SYNC_HOME"
DEFAULT_HOME = ".redshift-sync"


class EmbeddedWarehouseError(RuntimeError):
    pass


def data_dir(pipeline_file: Path | None = None) -> Path:
    """$REDSHIFT_SYNC_HOME/pgdata, else .redshift-sync/pgdata next to the pipeline file (the
    current folder without one): the warehouse belongs to its pipeline, wherever the
    command runs from."""
    home = os.environ.get(HOME_ENV_VAR)
    if home:
        return Path(home) / "pgdata"
    folder = pipeline_file.resolve().parent if pipeline_file is not None else Path.cwd()
    return folder / DEFAULT_HOME / "pgdata"


_servers: dict[str, object] = {}


def _pg_bin_dir() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True)
    return Path(candidates[0]).parent if candidates else None


def _start_with_pgserver(path: Path) -> str:
    import pgserver  # type: ignore[import-not-found]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR in containers
        server = pgserver.get_server(str(path), cleanup_mode="stop")
    _servers[str(path)] = server  # keep a reference: the server stops when the last one goes
    return server.get_uri()


def _start_with_path_postgres(path: Path) -> str:
    bindir = _pg_bin_dir()
    if bindir is None:
        raise EmbeddedWarehouseError(
            "no embedded PostgreSQL: pgserver is not installed (it has wheels for CPython 3.9-3.12 only; "
            f"this is {sys.version.split()[0]}) and no PostgreSQL server (pg_ctl) was found on PATH. "
            "Install PostgreSQL (e.g. apt-get install postgresql) or pass --dsn postgresql://... "
            "(or set REDSHIFT_SYNC_DSN)."
        )
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        raise EmbeddedWarehouseError(
            f"found PostgreSQL in {bindir}, but initdb refuses to run as root and pgserver (which handles "
            "that) is not installed. Run as a non-root user, use Python 3.11 or 3.12 with pgserver, or pass "
            "--dsn postgresql://... (or set REDSHIFT_SYNC_DSN)."
        )
    path.mkdir(parents=True, exist_ok=True)
    socket_dir = path / "socket"
    socket_dir.mkdir(exist_ok=True)
    if not (path / "PG_VERSION").exists():
        subprocess.run(
            [str(bindir / "initdb"), "-D", str(path), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
            check=True,
            capture_output=True,
        )
    status = subprocess.run([str(bindir / "pg_ctl"), "-D", str(path), "status"], capture_output=True)
    if status.returncode != 0:
        subprocess.run(
            [
                str(bindir / "pg_ctl"),
                "-D",
                str(path),
                "-w",
                "-l",
                str(path / "server.log"),
                "-o",
                f"-k {socket_dir} -c listen_addresses='' -F",
                "start",
            ],
            check=True,
            capture_output=True,
        )
    return f"postgresql://postgres@/postgres?host={socket_dir}"


def stop() -> None:
    """Stop the embedded servers this process started (pgserver would at exit), with Ctrl-C,
    hang-up and SIGTERM held off meanwhile: an interrupted stop printed a traceback and
    could leave the server running. A server other processes still use keeps running."""
    held = (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)
    previous = [signal.signal(s, signal.SIG_IGN) for s in held]
    try:
        while _servers:
            _, server = _servers.popitem()
            server.cleanup()  # type: ignore[attr-defined]
    finally:
        for s, handler in zip(held, previous):
            signal.signal(s, handler)


def start(path: Path | None = None) -> str:
    """Start (or join) the embedded PostgreSQL in `path`; returns its connection URI."""
    path = (path or data_dir()).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR in containers
            import pgserver  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        return _start_with_path_postgres(path)
    return _start_with_pgserver(path)

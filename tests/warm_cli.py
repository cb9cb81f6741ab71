"""`redshift-sync` for the documentation's transcripts, without paying Python's start-up
and the package's imports (about a second of CPU) for each of their commands.

A server process imports what the installed console script imports, then forks one process
per command; the `redshift-sync` the transcripts find first on PATH is a small client that
hands it its arguments, folder and environment and its own stdin, stdout and stderr, and
exits with the command's status. The forked process calls the console script's entry point
as the script does, writing to the very file descriptors the shell gave the client, so a
command prints what the installed script prints and exits as it exits. An environment the
imports could have read differently from the server's (any variable but the folder, the
shell's bookkeeping and the REDSHIFT_SYNC_* settings, which the package reads only when a
command runs) runs the installed script itself instead.

Run as a script, this module is the server: `python tests/warm_cli.py SOCKET`.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

SCRIPT = Path(sys.executable).parent / "redshift-sync"  # the installed console script
# Set by the shell (or pytest) for each command, or read by the package only when a command runs.
PER_COMMAND = {"PWD", "OLDPWD", "SHLVL", "_", "BASH_ENV", "PYTEST_CURRENT_TEST"}
PER_COMMAND_PREFIX = "REDSHIFT_SYNC_"
# What the commands import when they run (`-X importtime` of status, ingest, sync, deploy,
# explain, quarantine, prune, doctor), besides what the console script imports first.
COMMAND_IMPORTS = [
    "sync.cli.app",
    "sync.cli.progress",
    "sync.schema.revisions",
    "sync.local.stream",
    "sync.operations.doctor",
    "sync.operations.explain",
    "sync.operations.quarantine",
    "alembic.command",
    "psycopg",
]
HEADER = struct.Struct("!I")
STATUS = struct.Struct("!i")

CLIENT = """\
#!{python} -SI
import json, os, socket, struct, sys
server = socket.socket(socket.AF_UNIX)
server.connect({socket!r})
request = json.dumps([sys.argv[1:], os.getcwd(), dict(os.environ)]).encode()
socket.send_fds(server, [struct.pack("!I", len(request))], [0, 1, 2])
server.sendall(request)
status = server.makefile("rb").read(4)
sys.exit(struct.unpack("!i", status)[0] if len(status) == 4 else 70)  # EX_SOFTWARE: the server ended first
"""


@contextlib.contextmanager
def warm_cli(folder: Path, env: dict[str, str]) -> Iterator[dict[str, str]]:
    """Start the server with `env` plus a PATH leading to the client (written to `folder`);
    yields that environment, for the shells that run the commands."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True)
    sockets = tempfile.TemporaryDirectory(prefix="rs-cli-")  # a socket's path has at most 107 bytes
    address = str(Path(sockets.name) / "cli.sock")
    client = bin_dir / "redshift-sync"
    client.write_text(CLIENT.format(python=sys.executable, socket=address))
    client.chmod(0o755)
    env = {**env, "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"}
    with open(folder / "server.log", "wb") as log:
        server = subprocess.Popen(
            [sys.executable, __file__, address], env=env, cwd=folder, stdin=subprocess.DEVNULL, stdout=log, stderr=log
        )
    try:
        _wait_for(Path(address), server, folder / "server.log")
        yield env
    finally:
        server.terminate()
        server.wait()
        sockets.cleanup()


def _wait_for(address: Path, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 120
    while not address.exists():
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the command server did not start:\n{log.read_text()}")
        time.sleep(0.05)


def _import_what_commands_import() -> None:
    """Imports the commands' modules; the embedded warehouse's library as the package imports
    it (platformdirs warns about XDG_RUNTIME_DIR in containers). Any other import warning
    stops the server: a user would see it, so every command must."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.suppress(ImportError):
            import pgserver  # noqa: F401
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in COMMAND_IMPORTS:
            __import__(name)
    if caught:
        raise SystemExit(f"importing the commands' modules warned: {[str(w.message) for w in caught]}")


def _receive(conn: socket.socket) -> tuple[bytes, list[int]]:
    header, fds, _, _ = socket.recv_fds(conn, HEADER.size, 3)
    with conn.makefile("rb") as stream:
        header += stream.read(HEADER.size - len(header))
        return stream.read(HEADER.unpack(header)[0]), fds


def _serve(address: str) -> tuple[list[str], dict[str, str]]:
    """Accepts commands until terminated; returns (arguments, environment) only in a
    command's own process, whose stdin/stdout/stderr and folder are the client's by then."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(address)
    listener.listen()
    while True:
        conn, _ = listener.accept()
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        if os.fork() == 0:
            listener.close()
            return _run_one(conn)
        conn.close()


def _run_one(conn: socket.socket) -> tuple[list[str], dict[str, str]]:
    """In a process forked for one connection: forks the command's process, waits for it
    and sends the client its exit status (128 + N for signal N, as a shell reports it)."""
    request, fds = _receive(conn)
    argv, cwd, env = json.loads(request)
    pid = os.fork()
    if pid == 0:
        conn.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(cwd)
        return argv, env
    for fd in fds:
        os.close(fd)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    conn.sendall(STATUS.pack(128 - code if code < 0 else code))
    os._exit(0)


def _differs(env: dict[str, str]) -> bool:
    changed = {k for k in env.keys() | os.environ.keys() if env.get(k) != os.environ.get(k)}
    return any(k not in PER_COMMAND and not k.startswith(PER_COMMAND_PREFIX) for k in changed)


if __name__ == "__main__":
    sys.path[0] = str(SCRIPT.parent)  # as the console script's, not this folder
    _import_what_commands_import()
    arguments, environment = _serve(sys.argv[1])
    if _differs(environment):
        os.execve(SCRIPT, [str(SCRIPT), *arguments], environment)
    os.environ.clear()
    os.environ.update(environment)
    sys.argv = [str(SCRIPT), *arguments]
    from sync.cli.app import main

    sys.exit(main())

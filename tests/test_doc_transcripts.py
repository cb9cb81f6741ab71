"""Every shell transcript of the documentation runs as a reader would run it and prints
what the document shows (tests/doc_transcripts.py says how blocks are marked and compared).
A block that cannot run here is marked with the reason, and counted.

Each `redshift-sync` runs in a process of its own, forked from one that has imported the
package already (tests/warm_cli.py), and joins the embedded warehouse an earlier command of
the document started, which the test keeps running: a command prints the same either way."""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.doc_transcripts import NotRun, Transcript, matches, normalise, transcripts
from tests.helpers import REPO
from tests.warm_cli import warm_cli

DOCUMENTS = sorted(
    str(p.relative_to(REPO))
    for p in [REPO / "README.md", *REPO.glob("docs/*.md"), *REPO.glob("migrations/README.md")]
    + [*REPO.glob("examples/*/README.md"), *REPO.glob("backfill/README.md")]
)
# What a checkout holds that the documents' commands read (the default session's folder).
CHECKOUT = ["examples", "migrations", "alembic.ini", "tests/data"]


def _all() -> dict[str, list[Transcript]]:
    return {doc: transcripts(doc, (REPO / doc).read_text()) for doc in DOCUMENTS}


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDSHIFT_SYNC_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "120"
    env["TERM"] = "dumb"
    return env


@pytest.fixture(scope="module")
def environment(tmp_path_factory) -> Iterator[dict[str, str]]:
    """The readers' environment, `redshift-sync` in it the warm one (tests/warm_cli.py)."""
    with warm_cli(tmp_path_factory.mktemp("warm-cli"), _environment()) as env:
        yield env


class EmbeddedWarehouses:
    """The embedded warehouses a document's commands start, kept running from one command to
    the next (as a second terminal's command would keep one running): each command joins the
    running server instead of starting and stopping it, and prints what it prints alone."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.held: dict[Path, object] = {}

    def hold_new(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR is not set
            import pgserver

        for folder, subfolders, _ in os.walk(self.root):
            if Path(folder).name == "pgdata":
                subfolders.clear()
                if Path(folder) not in self.held and (Path(folder) / "PG_VERSION").exists() and _settled(Path(folder)):
                    self.held[Path(folder)] = pgserver.get_server(folder, cleanup_mode="stop")

    def stop(self) -> None:
        for server in self.held.values():
            server.cleanup()  # type: ignore[attr-defined]


def _settled(pgdata: Path) -> bool:
    """No server of `pgdata` is half-way through starting: a postmaster.pid, if there is one,
    has all 8 lines (its status line last; a standalone backend writes a negative pid and
    fewer lines). A server still starting is held after the next command instead."""
    pid = pgdata / "postmaster.pid"
    try:
        lines = pid.read_text().splitlines()
    except FileNotFoundError:
        return True
    return len(lines) >= 8 and not lines[0].startswith("-")


def _new_session(root: Path, name: str, sources: list[str]) -> Path:
    folder = root / name
    folder.mkdir()
    kept = [s.removeprefix("+") for s in sources if s.startswith("+")]
    whole = [s for s in sources if not s.startswith("+")]
    if sources == ["(empty)"]:
        return folder
    for source in whole:
        shutil.copytree(REPO / source, folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".redshift-sync"))
    for path in kept if sources else CHECKOUT:
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        copy = shutil.copytree if (REPO / path).is_dir() else shutil.copy
        copy(REPO / path, target, **({"ignore": shutil.ignore_patterns("__pycache__")} if (REPO / path).is_dir() else {}))
    return folder


def _check(document: str, transcript: Transcript, failed: str | None) -> None:
    assert failed is None, f"{document}:{transcript.line}: the steps before the block failed:\n{failed}"


def _shell(command: str, folder: Path, state: Path, env: dict[str, str], checked: bool = False) -> str | None:
    script = f"{command}\n__rc=$?\nexport -p > {state}\nexit $__rc"
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=folder,
        env={**env, "BASH_ENV": str(state)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
    )
    if checked:
        return done.stdout if done.returncode else None
    return done.stdout


def _run_document(document: str, root: Path, env: dict[str, str]) -> list[str]:
    warehouses = EmbeddedWarehouses(root)
    try:
        return _run_steps(document, root, env, warehouses)
    finally:
        warehouses.stop()


def _run_steps(document: str, root: Path, env: dict[str, str], warehouses: EmbeddedWarehouses) -> list[str]:
    failures: list[str] = []
    sessions = {"checkout": _new_session(root, "checkout", [])}
    folder = sessions["checkout"]

    def shell(command: str, checked: bool = False) -> str | None:
        output = _shell(command, folder, folder.parent / f"{folder.name}.environment.sh", env, checked)
        warehouses.hold_new()
        return output

    for transcript in _all()[document]:
        if transcript.session is not None:
            name, sources = transcript.session
            folder = sessions[name] = _new_session(root, name, sources)
        elif transcript.resume is not None:
            folder = sessions[transcript.resume]
        if transcript.not_run or transcript.excerpt_of:
            continue
        for script in transcript.setup:
            _check(document, transcript, shell(f"set -e\n{script}\nexit $?", checked=True))
        for program in transcript.scripts:
            _check(document, transcript, shell("python - <<'__SCRIPT__'\n" + program + "__SCRIPT__", checked=True))
        for command, expected in transcript.steps:
            actual = shell(command)
            if not matches(expected, actual, str(folder)):
                failures.append(f"{document}:{transcript.line}: $ {command}\n--- documented\n{expected}\n--- printed\n{actual}")
    return failures


def _runs(transcript: Transcript) -> bool:
    return transcript.not_run is None and transcript.excerpt_of is None


RUNNABLE = [doc for doc, found in _all().items() if any(_runs(t) for t in found)]


@pytest.mark.slow
@pytest.mark.parametrize("document", RUNNABLE)
def test_documented_transcripts_print_what_they_show(document, environment):
    """Each document runs in a folder of its own outside pytest's base temporary directory:
    the embedded warehouses its commands start run as pgserver's own system user, which
    pgserver lets through every folder above the data directory, and any pytest session
    that starts meanwhile (the Spark-version runs start some) makes that base directory its
    owner's alone again (`rootdir.chmod(mode & ~0o077)`, _pytest/tmpdir.py), and pg_ctl
    then fails with "could not access directory ...: Permission denied"."""
    with tempfile.TemporaryDirectory(prefix="rs-doc-") as folder:
        failures = _run_document(document, Path(folder), environment)
    assert not failures, "\n\n".join(failures)


def test_every_transcript_runs_or_says_why_not():
    """Counted, not skipped: each block that does not run names a reason from a closed list,
    and an excerpt is, normalised, a copy of steps the document it names runs."""
    counts: collections.Counter[str] = collections.Counter()
    found = _all()
    for document, blocks in found.items():
        for transcript in blocks:
            if transcript.excerpt_of:
                source = [step for t in found[transcript.excerpt_of] if _runs(t) for step in t.steps]
                for command, output in transcript.steps:
                    assert any(c == command and normalise(o) == normalise(output) for c, o in source), (
                        f"{document}:{transcript.line}: `{command}` is not run with this output in {transcript.excerpt_of}"
                    )
                counts["excerpt"] += 1
            else:
                counts[str(transcript.not_run or "run")] += 1
    assert counts["run"] >= 30, counts
    assert set(counts) <= {"run", "excerpt", *NotRun}, counts


def test_comparison_ignores_what_changes_and_catches_what_does_not():
    documented = "│ customer │ ok │ 16 │ 1.71 s │\nlast run 2026-11-24 03:00:03\n...\napplied 474a94aea2c7 x"
    assert matches(documented, "│ customer   │ ok │ 16 │ 7 min 3 s │\nlast run 2027-01-01 10:00:00\nmore\napplied 0123456789ab x")
    assert not matches(documented, "│ customer │ ok │ 17 │ 1.71 s │\nlast run 2026-11-24 03:00:03\napplied 474a94aea2c7 x")
    assert not matches("ingested 11 record(s)", "ingested 11 record(s)\nerror: boom")
    assert matches("wrote migrations/x.py", "wrote /tmp/s/migrations/x.py", "/tmp/s")
    assert matches(
        "wrote 20261126_7322f039d148_x.py (revision 7322f039d148)", "wrote 20270101_0123456789ab_x.py (revision 0123456789ab)"
    )
    assert not matches("wrote 20261126_7322f039d148_x.py", "wrote 20261126_7322f039d148_y.py")


@pytest.mark.parametrize(
    "command",
    [
        "redshift-sync --help",
        "redshift-sync status --config missing.toml",  # an error: exit 1, on stderr
        "redshift-sync query 'SELECT 41 + 1 AS answer' > out.txt; cat out.txt; echo",
        "redshift-sync query 'SELECT 1' | tr 1 x; exit ${PIPESTATUS[0]}",
        "NO_COLOR=1 redshift-sync sync --config missing.toml",  # another environment: the installed script
    ],
)
def test_the_warm_command_prints_and_exits_as_the_installed_script(command, environment, database_dsn, tmp_path):
    def run(env: dict[str, str]) -> tuple[int, str, str]:
        done = subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, env={**env, "REDSHIFT_SYNC_DSN": database_dsn}, capture_output=True, text=True
        )
        return done.returncode, done.stdout, done.stderr

    assert shutil.which("redshift-sync", path=environment["PATH"]) != shutil.which("redshift-sync", path=_environment()["PATH"])
    assert run(environment) == run(_environment())

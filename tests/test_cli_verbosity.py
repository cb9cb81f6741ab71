"""`--quiet` keeps only results, warnings and errors; `--verbose` adds each statement sent
to the warehouse with its time; counts read the same in every command (1,234,567)."""

from __future__ import annotations

import io
import subprocess
from types import SimpleNamespace

from rich.console import Console

from sync.cli.report import print_runs, readable_count
from tests.cli_runs import run_cli
from tests.helpers import EXAMPLES

PIPELINE = EXAMPLES / "salesdb" / "pipeline.toml"


def rs(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args, keep_settings=False)


def test_quiet_drops_the_where_lines_and_keeps_the_results(database_dsn):
    common = ["--config", str(PIPELINE), "--dsn", database_dsn]
    quiet = rs("--quiet", "deploy", *common)
    assert quiet.returncode == 0, quiet.stderr
    assert "applied 474a94aea2c7" in quiet.stdout and quiet.stderr == ""
    loud = rs("status", *common)
    assert loud.returncode == 0 and "warehouse: " in loud.stderr
    short = rs("-q", "status", *common)
    assert short.returncode == 0 and short.stderr == "" and short.stdout == loud.stdout


def test_verbose_prints_each_statement_with_its_time(database_dsn):
    out = rs("--verbose", "query", "SELECT 42 AS answer", "--dsn", database_dsn)
    assert out.returncode == 0, out.stderr
    assert "42" in out.stdout
    assert " s  SELECT 42 AS answer" in out.stderr


def test_verbose_and_quiet_exclude_each_other():
    out = rs("-v", "-q", "generate", "--config", str(PIPELINE))
    assert out.returncode == 2 and "--verbose and --quiet exclude each other" in out.stderr


def test_counts_read_alike_in_every_command():
    assert [readable_count(n) for n in (0, 999, 1000, 1234567, None)] == ["0", "999", "1,000", "1,234,567", "-"]
    run = SimpleNamespace(
        table="customer",
        status="ok",
        events_read=1_234_567,
        upserted=1000,
        deleted=0,
        quarantined=0,
        stale=0,
        superseded=0,
        watermark_after="0:1234566",
        lag_seconds=1.5,
        duration_seconds=12.0,
        error=None,
        isolated=[],
        retries=0,
        unmatched=None,
    )
    out = io.StringIO()
    print_runs([run], Console(file=out, width=200), Console(file=io.StringIO()))
    assert "1,234,567" in out.getvalue() and "1,000" in out.getvalue()

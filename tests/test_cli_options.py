"""What a data engineer expects of a CLI: `--version`, help that names values in words,
`--json` on the commands that report, and a dry run before discarding quarantined records."""

from __future__ import annotations

import json
import re
from importlib.metadata import version

import typer.main
from typer.testing import CliRunner

from sync.cli.app import app
from sync.local.stream import ingest_file
from tests.helpers import EXAMPLES, sync_one
from tests.test_cli_text import commands

PIPELINE = str(EXAMPLES / "salesdb" / "pipeline.toml")


def test_version_prints_the_installed_version():
    out = CliRunner().invoke(app, ["--version"])
    assert out.exit_code == 0 and out.stdout == f"redshift-sync {version('redshift-sync')}\n"


def test_every_value_is_named_by_a_word_in_help():
    """`--table TABLE`, `--days N`: never the Python type (`<str>`, `<int range>`, `<list[str]>`)."""
    named = {}
    for path, command in commands(typer.main.get_command(app)):
        shown = CliRunner().invoke(app, [*path, "--help"]).output
        for param in command.params:
            if param.param_type_name == "option" and not param.is_flag:
                assert param.metavar and re.fullmatch(r"[A-Z][A-Z0-9_]*", param.metavar), (path, param.opts, param.metavar)
                long = max(param.opts, key=len)
                assert f"{long} {param.metavar}" in shown, (path, param.opts)
                named[long] = param.metavar
        assert not re.search(r"--[a-z-]+ <", shown), (path, shown)
    assert (named["--table"], named["--days"], named["--dsn"]) == ("TABLE", "N", "DSN")


def quarantined(deployed) -> None:
    wh, pipeline = deployed
    ingest_file(wh, pipeline, "customer", EXAMPLES / "salesdb" / "events" / "customer-2.jsonl")
    sync_one(wh, pipeline, "customer")  # two records of it are quarantined


def test_quarantine_discard_dry_run_changes_nothing(deployed):
    quarantined(deployed)
    wh, _ = deployed
    args = ["quarantine", "discard", "--table", "customer", "--config", PIPELINE, "--dsn", wh.dsn]
    dry = CliRunner().invoke(app, [*args, "--dry-run"])
    assert dry.exit_code == 0 and dry.stdout == "would discard 2 record(s) of customer; nothing was changed\n"
    assert wh.scalar("SELECT COUNT(*) FROM cdc.sync_quarantine WHERE handled IS NULL") == 2
    dry_json = CliRunner().invoke(app, [*args, "--dry-run", "--json"])
    assert json.loads(dry_json.stdout) == {"table": "customer", "matching": 2, "discarded": 0, "applied": False}
    done = CliRunner().invoke(app, [*args, "--yes", "--json"])
    assert json.loads(done.stdout) == {"table": "customer", "matching": 2, "discarded": 2, "applied": True}
    assert wh.scalar("SELECT COUNT(*) FROM cdc.sync_quarantine WHERE handled = 'discarded'") == 2

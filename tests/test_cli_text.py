"""What the command line prints keeps its square brackets: the pipeline file's sections
(`[backfill]`, `[operations]`, `[[tables]]`), the extra in `redshift-sync[spark]`, JSON
arrays in quarantined values. Rich reads `[name]` as a markup tag and drops it ("Console
Markup": "Rich will interpret the text between square brackets as a style"), so no help text
is rendered as markup and no console the CLI prints with interprets it."""

from __future__ import annotations

import ast
import re
from typing import Any

import typer.main
from typer.testing import CliRunner

from sync.cli import app as cli
from tests.helpers import REPO, pipeline_toml

BRACKETED = re.compile(r"\[+[^\[\]\s]+\]+")


def commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every command and group under `group` (typer's click objects), with its path."""
    found = [(path, group)]
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            found += commands(command, (*path, name))
        else:
            found.append(((*path, name), command))
    return found


def test_every_help_text_keeps_its_square_brackets():
    checked = []
    for path, command in commands(typer.main.get_command(cli.app)):
        out = CliRunner().invoke(cli.app, [*path, "--help"])
        assert out.exit_code == 0, out.output
        shown = " ".join(out.output.split())
        for text in [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]:
            for token in BRACKETED.findall(text):
                assert token in shown, f"`redshift-sync {' '.join(path)} --help` lost {token!r} of: {text}"
                checked.append(token)
    assert {"[[tables]]", "[backfill]", "[operations]"} <= set(checked)


def test_an_error_message_keeps_its_square_brackets(tmp_path):
    config = tmp_path / "pipeline.toml"
    config.write_text("tables = []\n" + pipeline_toml(""))
    out = CliRunner().invoke(cli.app, ["generate", "--config", str(config)])
    assert out.exit_code == 2
    assert "at least one [[tables]] entry is needed" in out.output


def test_the_demo_hint_names_the_spark_extra(monkeypatch, capsys):
    from sync.cli import demo

    monkeypatch.setattr(demo, "installed", lambda module: False)
    demo._backfill_and_reconcile(cli.console, None, None)
    assert "pip install 'redshift-sync[spark]'" in capsys.readouterr().out


def test_warnings_and_table_cells_print_brackets_as_they_are(capsys):
    from rich.table import Table

    cli.warn("set [backfill] iam_role")
    grid = Table("value")
    grid.add_row('{"tags": [x]}')
    cli.console.print(grid)
    captured = capsys.readouterr()
    assert "warning: set [backfill] iam_role" in captured.err
    assert '{"tags": [x]}' in captured.out


def test_no_console_of_the_cli_reads_markup():
    """Every Console the CLI makes is built with markup=False, and no message is written
    with markup tags (they would print literally): colour comes as rich.text.Text styles."""
    tag = re.compile(r"\[/?(bold|dim|italic|red|green|yellow|cyan|blue|magenta)\b[^\]]*\]")
    for source in sorted((REPO / "sync").rglob("*.py")):
        tree = ast.parse(source.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Console":
                markup = {k.arg: k.value for k in node.keywords}.get("markup")
                where = f"{source.relative_to(REPO)}:{node.lineno}"
                assert isinstance(markup, ast.Constant) and markup.value is False, f"{where}: Console without markup=False"
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not tag.search(node.value), f"{source.relative_to(REPO)}:{node.lineno}: markup tag in {node.value!r}"

"""A second parser over the Redshift rendering: sqlfluff's redshift dialect parses every
statement of every example pipeline, each SQL statement of the procedure bodies included
(sqlfluff reads a dollar-quoted body as one string, so the bodies are split first).

Known gaps of sqlfluff's grammar, kept as exact texts so a new gap fails the test:
- `CREATE EXTERNAL SCHEMA ... FROM MSK ... CLUSTER_ARN '...'`: the MSK form of
  r_CREATE_EXTERNAL_SCHEMA (materialized-view-streaming-ingestion-getting-started-MSK);
  sqlfluff knows the KAFKA/URI form only.
"""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path

import pytest
from sqlfluff.core import FluffConfig, Linter

from sync.sql.render import render_files
from sync.sql.statements import procedure_body, split_statements
from tests.helpers import REPO
from tests.test_redshift_rules import EXAMPLE_PIPELINES, _example, procedure_statements

KNOWN_GAPS = ("CLUSTER_ARN '",)
QUOTED_IDENTIFIER = re.compile(r'"(?:[^"]|"")*"')


@functools.cache
def _linter():
    # The stage query nests deeper than sqlfluff's default guard of 600 levels, and its
    # recursive descent deeper than Python's default 1,000 frames under pytest's own.
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    # The raw templater: the SQL is no Jinja template (a `{{` in a literal is text), and
    # parsing skips the templating pass.
    return Linter(config=FluffConfig(overrides={"dialect": "redshift", "max_parse_depth": 0, "templater": "raw"}))


def _statements(path: Path) -> list[str]:
    """Every statement of the example's Redshift rendering, one of each shape: statements
    that differ only in their quoted identifiers (one table's names and another's) are one
    token sequence to the parser, so the first of them stands for the others."""
    out: dict[str, str] = {}
    for text in render_files(_example(path), "redshift", str(path.relative_to(REPO))).values():
        for sql in split_statements(text):
            found = [sql]
            if "PROCEDURE" in sql.split("\n")[0]:
                found += [s + ";" for s in procedure_statements(procedure_body(sql))]
            for statement in found:
                out.setdefault(QUOTED_IDENTIFIER.sub('"x"', statement), statement)
    return list(out.values())


def _unparsable(sql: str) -> list[str]:
    return [v.desc() for v in _linter().parse_string(sql).violations]


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLE_PIPELINES, ids=lambda p: p.parent.name)
def test_sqlfluff_parses_every_redshift_statement(path: Path):
    statements = _statements(path)
    assert len(statements) > 40
    failures = []
    for sql in statements:
        problems = _unparsable(sql)
        gap = any(g in p for p in problems for g in KNOWN_GAPS)
        if problems and not gap:
            failures.append(f"{sql[:200]}\n  -> {problems[0][:300]}")
    assert not failures, "\n".join(failures[:3])


def test_sqlfluff_rejects_what_redshift_rejects():
    # The check can fail: sqlfluff's redshift dialect refuses SQL outside Redshift's grammar.
    assert _unparsable("SELECT a FROM b WHERE;")
    assert _unparsable("CREATE TABLE t (a integer) DISTKEY;")
    assert not _unparsable('LOCK TABLE "cdc"."t__watermark";')

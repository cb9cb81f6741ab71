"""The SQL of `explain`: the Redshift rendering pinned by a golden file and parsed by
sqlglot and sqlfluff like the procedures; the steps it runs are the procedure's own (the
stage insert and every rule that writes the stage), never a copy."""

from __future__ import annotations

import os
import tomllib

import pytest
import sqlglot
from sqlglot import exp

from sync.config import parse_pipeline
from sync.sql.dialect import dialect_for, quote_literal
from sync.sql.explain import ExplainSql, read_steps, rule_steps
from sync.sql.procedure import APPLY_STEPS, SYNC_STEPS, TableSql
from sync.sql.statements import body_sql_statements, procedure_body
from tests.helpers import EXAMPLES, REPO

GOLDEN = REPO / "tests" / "golden" / "explain_redshift.sql"
OPAQUE = ("CALL ", "LOCK TABLE")  # sqlglot reads these as commands
EXAMPLE_TABLES = [
    (path.parent.name, table.name)
    for path in sorted(EXAMPLES.glob("*/pipeline.toml"))
    for table in parse_pipeline(tomllib.loads(path.read_text())).tables
    if not table.is_keyless  # explain names a key: refused for a table without one
]


def _pipeline(example: str, schema: str | None = None):
    data = tomllib.loads((EXAMPLES / example / "pipeline.toml").read_text())
    if schema is not None:
        data["pipeline"]["schema"] = schema
    return parse_pipeline(data)


def redshift_statements(example: str = "salesdb", table: str = "customer", schema: str | None = None) -> list[str]:
    """explain's statements on Redshift, the key bound to a literal (`schema`: the
    pipeline's schema instead of the example's)."""
    pipeline = _pipeline(example, schema)
    sql = ExplainSql(dialect_for("redshift", pipeline.schema), pipeline, pipeline.table(table), "explain_0")
    out = []
    for statement in sql.statements():
        for _ in range(statement.count("%s")):
            statement = statement.replace("%s", quote_literal("C001"), 1)
        out.append(statement if statement.endswith(";") else statement + ";")
    return out


def test_the_redshift_sql_of_explain_is_golden():
    text = "\n\n".join(redshift_statements()) + "\n"
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "regenerate with UPDATE_GOLDEN=1 and review the diff"


def test_in_another_schema_the_statements_are_the_golden_ones_with_that_schema():
    """What tests/test_redshift_live.py runs in its scratch schema is the golden file's SQL."""
    text = "\n\n".join(redshift_statements(schema="rs_test_0123abcd")) + "\n"
    assert text == GOLDEN.read_text().replace('"cdc"', '"rs_test_0123abcd"')


def _inner(statements: list[str]) -> list[str]:
    out = []
    for statement in statements:
        out.append(statement)
        if "PROCEDURE" in statement.split("\n")[0]:
            out += body_sql_statements(procedure_body(statement))
    return [s for s in out if not s.startswith(OPAQUE)]


@pytest.mark.parametrize("example, table", EXAMPLE_TABLES)
def test_every_redshift_statement_of_explain_parses(example, table):
    statements = _inner(redshift_statements(example, table))
    assert len(statements) > 20
    for statement in statements:
        assert not isinstance(sqlglot.parse_one(statement, read="redshift"), exp.Command), statement[:200]


@pytest.mark.slow
def test_sqlfluff_parses_every_redshift_statement_of_explain():
    from tests.test_redshift_sqlfluff import _unparsable

    failures = [f"{s[:200]}\n  -> {p[0][:300]}" for s in _inner(redshift_statements()) if (p := _unparsable(s))]
    assert not failures, "\n".join(failures[:3])


@pytest.mark.parametrize("example, table", EXAMPLE_TABLES)
def test_explain_runs_the_stage_insert_and_every_rule_that_writes_the_stage(example, table):
    pipeline = _pipeline(example)
    ctx = TableSql(dialect_for("redshift", pipeline.schema), pipeline, pipeline.table(table))
    reads = read_steps()
    assert reads == SYNC_STEPS[: len(reads)] and reads[-1].writes and not any(s.writes for s in reads[:-1])
    applicable = [s for s in APPLY_STEPS if s.applies(ctx)]
    rules = rule_steps(ctx)
    assert list(rules) == applicable[: len(rules)]
    assert {s for s in applicable if s.writes} <= set(rules)
    # What follows the rules applies the stage and keeps the books: it writes nothing of the stage.
    assert not any(s.writes for s in applicable[len(rules) :])

"""History mode's SQL (sync/sql/procedure/history.py): the stage contract of its step, its
statements on the common path, and tables without history untouched."""

from __future__ import annotations

import re

import pytest

from sync.config import HistoryConfig
from sync.sql.procedure.context import Action
from sync.sql.procedure.history import history_sql
from sync.sql.procedure.steps import SYNC_STEPS
from tests.helpers import COMPOSITE_KEY, ONE_COLUMN, table_sql
from tests.test_procedure_steps import COLUMNS, read_before_written, walk

TABLES = {
    f"{dialect}-{name}-{deletes}": table_sql(toml, dialect, history=HistoryConfig(deletes=deletes))
    for dialect in ("redshift", "postgres")
    for name, toml in (("one-column", ONE_COLUMN), ("composite-key", COMPOSITE_KEY))
    for deletes in ("close", "tombstone")
}


@pytest.mark.parametrize("ctx", TABLES.values(), ids=TABLES.keys())
def test_history_step_keeps_the_stage_contract(ctx):
    steps = walk(SYNC_STEPS, ctx)
    assert history_sql in [s.sql for s in steps]
    assert read_before_written(steps) == []
    (step,) = [s for s in steps if s.sql is history_sql]
    sql = step.sql(ctx)
    named = {c for c in COLUMNS if re.search(rf"\b{c}\b", sql)} | {a for a in Action if f"'{a}'" in sql}
    assert named <= step.reads | step.writes


def statements(sql: str) -> int:
    return len(re.findall(r"^\s*(INSERT|UPDATE|DELETE)\b", sql, re.MULTILINE))


def test_history_adds_at_most_three_statements_to_the_common_path():
    """Insert the new versions, recompute the touched keys' intervals, and, for unwrapped
    topics (tombstone-only deletes), drop re-sent tombstones; a truncate's branch (rare)
    adds its markers and a recompute of every key."""
    one = TABLES["redshift-one-column-close"]
    assert statements(history_sql(one)) == 2
    unwrapped = table_sql(ONE_COLUMN, format="debezium-unwrap", history=HistoryConfig())
    assert statements(history_sql(unwrapped)) == 3
    with_truncates = TABLES["redshift-composite-key-close"]
    common, _, truncate_branch = history_sql(with_truncates).partition("IF v_truncates > 0")
    _, otherwise = re.split(r"^ELSE$", truncate_branch, flags=re.MULTILINE)
    assert statements(common) + statements(otherwise) == 2


def test_tables_without_history_do_not_run_the_step():
    assert history_sql not in [s.sql for s in walk(SYNC_STEPS, table_sql(COMPOSITE_KEY))]


@pytest.mark.parametrize("deletes", ["close", "tombstone"])
def test_every_history_statement_parses_as_redshift(deletes):
    """The TOAST windows, truncate markers and re-sent tombstones, which the golden example
    (no TOAST-able column, no truncates, full envelope) does not show, parse with sqlglot's
    Redshift dialect."""
    import sqlglot

    ctx = table_sql(COMPOSITE_KEY, "redshift", history=HistoryConfig(deletes=deletes), format="debezium-unwrap")
    sql = history_sql(ctx).replace("v_truncate_ts", "CAST(NULL AS timestamp)").replace("v_truncate_pos", "'x'")
    body = "\n".join(line for line in sql.splitlines() if not re.fullmatch(r"\s*(--.*|IF .* THEN|ELSE|END IF;)", line))
    statements = [s for s in sqlglot.parse(body, read="redshift") if s is not None]
    assert [type(s).__name__ for s in statements] == ["Insert", "Delete", "Insert", "Update", "Update"]

"""History mode's SQL (sync/sql/procedure/history.py): the stage contract of its step, its
statements on the common path, and tables without history untouched."""

from __future__ import annotations

import re

import pytest

from sync.config import HistoryConfig
from sync.sql.procedure.bookkeeping import batch_counts_sql
from sync.sql.procedure.context import Action
from sync.sql.procedure.history import history_sql
from sync.sql.procedure.steps import SYNC_STEPS
from tests.helpers import COMPOSITE_KEY, ONE_COLUMN, table_sql
from tests.procedure_shape import COMMON_PATH, parse, statements_on_path, touches_a_table
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


def common_path(sql: str, **values: object) -> list[str]:
    """The history's statements that touch a table on the procedure's common path (no
    TOAST placeholder, truncate, ...; `values` change it)."""
    return [s for s in statements_on_path(parse(sql), {**COMMON_PATH, **values}) if touches_a_table(s)]


def test_history_adds_at_most_three_statements_to_the_common_path():
    """Close each key's current version, then insert the new versions (a batch after every
    stored version of its keys; otherwise insert, then recompute the touched keys'
    intervals), and, for unwrapped topics (tombstone-only deletes), drop re-sent tombstones;
    a truncate's branch (rare) adds its markers and a recompute of every key."""
    one = TABLES["redshift-one-column-close"]
    assert [s.split()[0] for s in common_path(history_sql(one))] == ["UPDATE", "INSERT"]
    # A recompute under postgres-lsn first gives a stored version read from a copy to an earlier record of it.
    assert one.table.order_by == "postgres-lsn"
    assert [s.split()[0] for s in common_path(history_sql(one), v_history_recompute=1)] == ["DELETE", "INSERT", "UPDATE"]
    unwrapped = table_sql(ONE_COLUMN, format="debezium-unwrap", history=HistoryConfig())
    assert len(common_path(history_sql(unwrapped))) == 3
    with_truncates_and_toast = TABLES["redshift-composite-key-close"]
    assert [s.split()[0] for s in common_path(history_sql(with_truncates_and_toast))] == ["UPDATE", "INSERT"]
    truncated = common_path(history_sql(with_truncates_and_toast), v_truncates=1, v_truncate_pos="x")
    assert [s.split()[0] for s in truncated] == ["INSERT", "INSERT", "UPDATE"]


@pytest.mark.parametrize("dialect", ["redshift", "postgres"])
def test_toast_placeholders_are_filled_only_when_the_batch_or_its_keys_versions_hold_one(dialect):
    """The windows that fill TOAST placeholders from the version before (one per TOAST-able
    column) run only when `v_unavailable` counts the batch's placeholders, or a stored
    version lies at or after its key's first change in the batch (an event inserted before
    a stored placeholder changes its value: tests/test_history.py,
    test_toast_placeholder_takes_the_previous_versions_value). A stored placeholder before
    every change of the batch keeps its value: the short path
    (`test_a_batch_after_a_stored_toast_placeholder_keeps_the_short_path`). Unwrapped
    topics, which recompute every batch, fill when a stored version of its keys holds one."""
    ctx = table_sql(COMPOSITE_KEY, dialect, history=HistoryConfig())
    (common,) = [s for s in common_path(history_sql(ctx)) if s.startswith("UPDATE")]
    (placeholders,) = [s for s in common_path(history_sql(ctx), v_unavailable=1) if s.startswith("UPDATE")]
    assert "FIRST_VALUE" not in common and "_unavailable" not in common.partition(" FROM ")[0]
    assert placeholders.count("FIRST_VALUE") == 1 and '"note" = CASE WHEN h._unavailable' in placeholders
    (late,) = [s for s in common_path(history_sql(ctx), v_history_recompute=1) if s.startswith("UPDATE")]
    assert late.count("FIRST_VALUE") == 1
    counts = batch_counts_sql(ctx)
    assert "WHERE COALESCE(h._valid_from_pos, '') >= (SELECT MIN(COALESCE(s._source_pos, ''))" in counts
    assert "'%|%|%'" not in counts
    unwrapped = batch_counts_sql(table_sql(COMPOSITE_KEY, dialect, format="debezium-unwrap", history=HistoryConfig()))
    assert "WHERE h._unavailable LIKE '%|%|%'" in unwrapped and "_valid_from_pos" not in unwrapped
    assert ctx.rel.history not in batch_counts_sql(table_sql(COMPOSITE_KEY, dialect)), "only with a history"


def test_tables_without_history_do_not_run_the_step():
    assert history_sql not in [s.sql for s in walk(SYNC_STEPS, table_sql(COMPOSITE_KEY))]


@pytest.mark.parametrize("deletes", ["close", "tombstone"])
def test_every_history_statement_parses_as_redshift(deletes):
    """The TOAST windows (and the recompute without them), truncate markers, re-sent
    tombstones and the count of the history's placeholders, which the golden example (no
    TOAST-able column, no truncates, full envelope) does not show, parse with sqlglot's
    Redshift dialect."""
    import sqlglot

    ctx = table_sql(COMPOSITE_KEY, "redshift", history=HistoryConfig(deletes=deletes), format="debezium-unwrap")
    sql = history_sql(ctx).replace("v_truncate_ts", "CAST(NULL AS timestamp)").replace("v_truncate_pos", "'x'")
    body = "\n".join(line for line in sql.splitlines() if not re.fullmatch(r"\s*(--.*|(ELS)?IF .* THEN|ELSE|END IF;)", line))
    statements = [s for s in sqlglot.parse(body, read="redshift") if s is not None]
    assert [type(s).__name__ for s in statements] == ["Insert", "Delete", "Insert", "Update", "Update", "Update"]
    # the batch's count of TOAST placeholders, with those of its keys' versions
    counts = re.sub(r"^INTO .*\n(\s+v_.*\n)*", "", batch_counts_sql(ctx), flags=re.MULTILINE)
    assert "line__history" in counts
    assert [type(s).__name__ for s in sqlglot.parse(counts, read="redshift") if s is not None] == ["Select"]


def test_the_closing_update_parses_as_redshift_with_no_outer_join_in_its_from_list():
    """The short path of a full-envelope table with TOAST-able columns (each key's current
    version closed by its first event), which no golden example shows, parses with
    sqlglot's Redshift dialect; its FROM list has no outer join (r_UPDATE: "Left, right,
    and full outer joins aren't supported in the FROM clause of an UPDATE statement")."""
    import sqlglot

    ctx = TABLES["redshift-composite-key-close"]
    sql = history_sql(ctx).replace("v_truncate_ts", "CAST(NULL AS timestamp)").replace("v_truncate_pos", "'x'")
    assert "first__" in sql
    body = "\n".join(line for line in sql.splitlines() if not re.fullmatch(r"\s*(--.*|(ELS)?IF .* THEN|ELSE|END IF;)", line))
    updates = [s for s in sqlglot.parse(body, read="redshift") if isinstance(s, sqlglot.exp.Update)]
    closing = [u for u in updates if "first__" in u.sql("redshift")]
    assert len(closing) == 1
    source = closing[0].args["from_"]
    assert not [j for j in source.this.args.get("joins") or [] if j.side]


@pytest.mark.parametrize("ctx", TABLES.values(), ids=TABLES.keys())
def test_stored_versions_are_probed_only_from_the_batchs_oldest_position(ctx):
    """A copy repeats versions at its own position, so the stored versions a batch's events
    can repeat lie at or after the batch's oldest position: the history's older versions
    (all of them, when no event is late) never reach the join with the batch."""
    stored = history_sql(ctx).split("_at AS (", 1)[1].split("_dup AS (")[0]  # the stored versions
    assert f"FROM {ctx.rel.history} h" in stored
    assert "AND COALESCE(h._valid_from_pos, '') >= (SELECT MIN(COALESCE(e._valid_from_pos, '')) FROM _ev e)" in stored


def _on_path(ctx, **values: object) -> list[str]:
    """The statements of the table's whole procedure body a call with `values` runs."""
    from sync.sql.procedure.steps import steps_sql

    return statements_on_path(parse(steps_sql(ctx, SYNC_STEPS)), {**COMMON_PATH, **values})


def _toast_step(ctx, statement: str) -> bool:
    """The current state's TOAST step: it completes the stage's placeholders (`toast.py`)."""
    return statement.startswith(f"UPDATE {ctx.rel.stage} s SET") and "AS unknown__" in statement


@pytest.mark.parametrize("dialect", ["redshift", "postgres"])
def test_the_current_states_toast_step_runs_only_for_the_batchs_own_placeholders(dialect):
    """`v_unavailable` counts the batch's TOAST placeholders, which the current state's
    TOAST step completes; the stored versions that need the history's full recompute are
    counted apart (`v_history_recompute`), so a late event on a table with TOAST-able
    columns recomputes the history without running the current state's TOAST step."""
    ctx = table_sql(COMPOSITE_KEY, dialect, history=HistoryConfig())
    counts = batch_counts_sql(ctx)
    unavailable = counts.split(" AS unavailable")[0].rsplit(" AS ", 1)[-1]
    assert ctx.rel.history not in unavailable, "v_unavailable counts the stage's placeholders alone"
    assert re.search(r"\(SELECT COUNT\(\*\) FROM \S+__history\" h\s.*\) AS history_recompute", counts, re.S)
    late = _on_path(ctx, v_unavailable=0, v_history_recompute=1)
    assert not [s for s in late if _toast_step(ctx, s)], "the current state has no placeholder to fill"
    assert [s for s in late if s.startswith(f"UPDATE {ctx.rel.history}") and "FIRST_VALUE" in s]
    placeholders = _on_path(ctx, v_unavailable=1, v_history_recompute=0)
    assert [s for s in placeholders if _toast_step(ctx, s)]
    assert [s for s in placeholders if s.startswith(f"UPDATE {ctx.rel.history}") and "FIRST_VALUE" in s]


@pytest.mark.parametrize("dialect", ["redshift", "postgres"])
def test_a_full_envelope_table_without_toastable_columns_takes_the_short_path(dialect):
    """Without TOAST-able columns no placeholder is filled, so the short path (each key's
    current version closed by its first event, no window over the history) is exact
    whenever no stored version of the batch's keys lies at or after its oldest position;
    otherwise the intervals are recomputed. Unwrapped topics always recompute (re-sent
    tombstones: `history._touched_intervals`)."""
    ctx = TABLES[f"{dialect}-one-column-close"]
    (common,) = [s for s in common_path(history_sql(ctx)) if s.startswith("UPDATE")]
    assert "first__" in common and "LEAD(" not in common
    (late,) = [s for s in common_path(history_sql(ctx), v_history_recompute=1) if s.startswith("UPDATE")]
    assert "LEAD(" in late and "first__" not in late
    assert "COALESCE(h._valid_from_pos, '') >= (SELECT MIN(COALESCE(s._source_pos, ''))" in batch_counts_sql(ctx)
    unwrapped = table_sql(ONE_COLUMN, dialect, format="debezium-unwrap", history=HistoryConfig())
    assert "IF " not in history_sql(unwrapped) and "history_recompute" not in batch_counts_sql(unwrapped)


@pytest.mark.parametrize("ctx", TABLES.values(), ids=TABLES.keys())
def test_stored_versions_are_read_only_when_the_batch_count_found_one_at_its_positions(ctx):
    """The batch's count (`v_history_recompute`) holds every stored version of its keys at or
    after its oldest position (full envelope), a superset of those the INSERT can find at an
    event's position: without one, the INSERT does not read the history (most batches: no
    late event, no re-sent copy); with one, it reads those versions as before."""
    counts = batch_counts_sql(ctx)
    assert "COALESCE(h._valid_from_pos, '') >= (SELECT MIN(COALESCE(s._source_pos, ''))" in counts
    assert re.search(r"FROM \S+__history\" h.*\) AS history_recompute", counts, re.S)
    stored = history_sql(ctx).split("_at AS (", 1)[1].split("_dup AS (")[0]
    assert "AND v_history_recompute > 0\n" in stored
    unwrapped = table_sql(COMPOSITE_KEY, format="debezium-unwrap", history=HistoryConfig())  # counts no positions
    assert "v_history_recompute > 0\n" not in history_sql(unwrapped).split("_at AS (", 1)[1].split("_dup AS (")[0]


@pytest.mark.parametrize("ctx", TABLES.values(), ids=TABLES.keys())
def test_only_positions_with_more_than_one_version_are_numbered(ctx):
    """An event alone at its key's position (most of a batch's events) repeats no version
    and is no copy: the sequence windows (`_seq`) and the copy rules read only the positions
    where the history and the batch hold more than one version (`_dup`), and every other
    event goes to the INSERT without them (one sort of the batch fewer, no join back)."""
    sql = history_sql(ctx)
    dup = sql.split("_dup AS (", 1)[1].split("_seq AS (")[0]
    assert "FROM _at" in dup and "FROM _ev e" in dup and "HAVING COUNT(*) > 1" in dup
    sequence = sql.split("_seq AS (", 1)[1].split("_rep AS (")[0]
    assert "WHERE EXISTS (SELECT 1 FROM _dup u WHERE" in sequence
    alone, numbered = sql.split("_copy AS (", 1)[1].split("UNION ALL")[-2:]
    assert "FROM _ev e\n" in alone and "NOT EXISTS (SELECT 1 FROM _dup u WHERE" in alone
    assert "FROM _seq x" in numbered and "NOT EXISTS (SELECT 1 FROM _copy c" in numbered

"""The stage contract (sync/sql/procedure/steps.py): each step declares the stage columns
and record states (`Action`) it reads and writes. Walked in output order, no step may
read what only a later step writes; and what a step's SQL names of the stage, it declares."""

from __future__ import annotations

import dataclasses
import re
import tomllib

import pytest

from sync.config import parse_pipeline
from sync.sql.dialect import dialect_for
from sync.sql.procedure.context import Action, TableSql
from sync.sql.procedure.keyless_steps import KEYLESS_APPLY_STEPS, KEYLESS_SYNC_STEPS
from sync.sql.procedure.steps import APPLY_STEPS, STAGE, SYNC_STEPS, Step, apply_batch_sql
from tests.helpers import COMPOSITE_KEY, EXAMPLES, ONE_COLUMN, table_sql

COLUMNS = sorted(STAGE - set(Action) - {"values"})


def walk(steps: tuple[Step, ...], ctx: TableSql) -> list[Step]:
    """The steps a table's procedure runs, in output order, APPLY_STEPS in their place."""
    order: list[Step] = []
    for step in steps:
        if step.sql is apply_batch_sql:
            order += walk(APPLY_STEPS, ctx)
        elif step.applies(ctx):
            order.append(step)
    return order


def read_before_written(steps: list[Step]) -> list[str]:
    """The reads of a stage column or state that no earlier step wrote and a later one does."""
    found, written = [], set()
    for i, step in enumerate(steps):
        later = set().union(*(s.writes for s in steps[i + 1 :]))
        found += [f"{step.sql.__name__} reads {name}" for name in sorted((step.reads - written) & later)]
        written |= step.writes
    return found


def _tables() -> list[TableSql]:
    tables = [table_sql(ONE_COLUMN), table_sql(COMPOSITE_KEY), table_sql(ONE_COLUMN, order_by="kafka", on_truncate="delete")]
    for path in sorted(EXAMPLES.glob("*/pipeline.toml")):
        pipeline = parse_pipeline(tomllib.loads(path.read_text()))
        for dialect in ("redshift", "postgres"):
            tables += [TableSql(dialect_for(dialect, pipeline.schema), pipeline, t) for t in pipeline.tables]
    return tables


TABLES = _tables()


@pytest.mark.parametrize("ctx", TABLES, ids=lambda ctx: f"{ctx.d.name}-{ctx.table.name}-{ctx.table.order_by}")
def test_no_step_reads_what_only_a_later_step_writes(ctx: TableSql):
    assert read_before_written(walk(SYNC_STEPS, ctx)) == []


def test_a_misordered_step_list_is_found():
    """The same walk over the steps with the stale rules moved after the run-log row (which
    counts the `stale` records they set), and the batch counts before the stage INSERT."""
    ctx = table_sql(COMPOSITE_KEY)
    steps = walk(SYNC_STEPS, ctx)
    names = [s.sql.__name__ for s in steps]
    rules = [s for s in steps if s.sql.__name__ in ("stale_sql", "tied_order_sql")]
    assert len(rules) == 2
    others = [s for s in steps if s not in rules]
    result = [s.sql.__name__ for s in others].index("call_result_sql")
    assert read_before_written([*others[: result + 1], *rules, *others[result + 1 :]]) == ["call_result_sql reads stale"]
    counts, stage = names.index("batch_counts_sql"), names.index("stage_sql")
    early = [*steps[:stage], steps[counts], steps[stage], *steps[counts + 1 :]]
    assert read_before_written(early) == [
        f"batch_counts_sql reads {name}"
        for name in sorted(
            [
                "_action",
                "_drift_img",
                "_kafka_partition",
                "_source_pos",
                "_source_ts",
                "_unavailable",
                Action.DELETE,
                Action.QUARANTINE,
                Action.TRUNCATE,
                Action.UPSERT,
            ]
        )
    ]


@pytest.mark.parametrize("ctx", TABLES[:3], ids=["one-column", "composite-key", "kafka-order"])
def test_each_step_declares_the_stage_columns_and_states_its_sql_names(ctx: TableSql):
    for step in walk(SYNC_STEPS, ctx):
        sql = step.sql(ctx)
        named = {c for c in COLUMNS if re.search(rf"\b{c}\b", sql)}
        named |= {a for a in Action if f"'{a}'" in sql}
        assert named <= step.reads | step.writes, (
            f"{step.sql.__name__} does not declare {sorted(named - step.reads - step.writes)}"
        )


def uncounted_quarantines(steps: tuple[Step, ...]) -> list[str]:
    """The steps that quarantine records after the batch counts with no step counting them
    (`v_quarantined`) before the quarantine step, which runs only when that count says so."""
    names = [s.sql.__name__ for s in steps]
    last = names.index("quarantine_sql")
    return [
        step.sql.__name__
        for i, step in enumerate(steps[:last])
        if Action.QUARANTINE in step.writes and not any("v_quarantined" in s.uses for s in steps[i:last])
    ]


@pytest.mark.parametrize("steps", [APPLY_STEPS, KEYLESS_APPLY_STEPS], ids=["keyed", "keyless"])
def test_records_quarantined_by_a_rule_reach_the_quarantine(steps: tuple[Step, ...]):
    assert uncounted_quarantines(steps) == []
    # The same steps with the quarantining rules' counting left out: found.
    silent = tuple(
        dataclasses.replace(s, uses=()) if "v_quarantined" in s.uses and s.sql.__name__ != "quarantine_sql" else s for s in steps
    )
    assert uncounted_quarantines(silent)


@pytest.mark.parametrize("ctx", TABLES, ids=lambda ctx: f"{ctx.d.name}-{ctx.table.name}-{ctx.table.order_by}")
def test_reason_only_ever_holds_a_reason(ctx: TableSql):
    """No step parks a record's action in `_reason` to restore it later: a winner moves to
    `stale` and stays there, and `_reason` says why a record is quarantined or routed."""
    steps = (
        [s for s in (*KEYLESS_SYNC_STEPS, *KEYLESS_APPLY_STEPS) if s.applies(ctx)]
        if ctx.table.is_keyless
        else walk(SYNC_STEPS, ctx)
    )
    parked = [step.sql.__name__ for step in steps if re.search(r"_reason\s*=\s*\w*\.?_action\b", step.sql(ctx))]
    assert parked == []
    restored = [step.sql.__name__ for step in steps if re.search(r"_action\s*=\s*\w*\.?_reason\b", step.sql(ctx))]
    assert restored == []

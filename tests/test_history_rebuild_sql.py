"""The Redshift text of `history rebuild` and of the backfill's history statements parses
with sqlglot's Redshift dialect; the rebuild's procedure is the sync procedure's steps
over the temporary relations, and takes the watermark lock first."""

from __future__ import annotations

import sqlglot

from sync.config import HistoryConfig
from sync.sql.backfill_merge import BackfillSql
from sync.sql.history_rebuild import TEMPORARY, RebuildSql
from sync.sql.procedure import SYNC_STEPS
from sync.sql.procedure.steps import steps_sql
from tests.helpers import COMPOSITE_KEY, table_sql


def rebuild_sql(dialect: str = "redshift") -> RebuildSql:
    ctx = table_sql(COMPOSITE_KEY, dialect, history=HistoryConfig(), format="debezium-unwrap")
    pipeline = ctx.pipeline.model_copy(update={"tables": [ctx.table]})
    return RebuildSql(ctx.d, pipeline, ctx.table, "history_rebuild_0")


def test_rebuild_statements_parse_as_redshift():
    sql = rebuild_sql()
    statements = [sql.lock(), *sql.setup(), *sql.call_sql(), *sql.below_stream(), sql.differences_sql(), sql.differing_sql(10)]
    statements += [*sql.replace_sql(), *sql.cleanup()]
    for statement in statements:
        assert sqlglot.parse_one(statement, read="redshift") is not None, statement


def test_the_rebuild_runs_the_sync_procedure_over_temporary_relations_only():
    sql = rebuild_sql()
    body = sql.procedure_sql()
    assert " ".join(steps_sql(sql.rebuilt, SYNC_STEPS).split()) in " ".join(body.split())
    rel = sql.ctx.rel
    shared = [rel.stage, rel.target, rel.deleted, rel.watermark, rel.quarantine, rel.schema_drift, rel.history, rel.stream]
    assert [r for r in shared if r in body] == [], "the procedure names a shared relation"
    assert f'LOCK TABLE "{TEMPORARY["watermark"]}";' in body
    assert sql.lock() == f"LOCK TABLE {rel.watermark};"


def test_backfill_history_statements_parse_as_redshift_and_only_with_history():
    ctx = table_sql(COMPOSITE_KEY, "redshift", history=HistoryConfig())
    pipeline = ctx.pipeline.model_copy(update={"tables": [ctx.table]})
    with_history = [s.sql for s in BackfillSql(ctx.d, pipeline, ctx.table).merge()]
    history = [s for s in with_history if ctx.rel.history in s]
    assert len(history) == 2
    for statement in history:
        assert sqlglot.parse_one(statement, read="redshift") is not None, statement
    plain = table_sql(COMPOSITE_KEY, "redshift")
    without = [s.sql for s in BackfillSql(plain.d, plain.pipeline, plain.table).merge()]
    assert without == [s for s in with_history if s not in history]

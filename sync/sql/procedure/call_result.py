"""8. The run-log row a sync call leaves for its caller, in a temporary table of the
session (`CALL_RESULT`), copied from there into the shared run log.

The caller reads the row back inside the call's own transaction, before it commits. Reading
the shared run log instead would conflict: every table's call writes it, and Redshift at
SERIALIZABLE tracks reads and writes per table ("Isolation levels in Amazon Redshift",
c_serial_isolation), so a read of it in the call's transaction forms a cycle with any other
table's call, and a read in a transaction of its own forms PostgreSQL's read-only anomaly
with a call and the stream's writer. A temporary table is the session's alone: "Temporary
tables are created in a separate session-specific schema"; "the temporary schema becomes
the first schema in the search path, so the temporary table takes precedence over the
permanent table" (CREATE TABLE, r_CREATE_TABLE_NEW), and AWS names it as the way a
procedure returns a result set (stored-procedure-result-set). No other session can write
it, so it takes part in no conflict (PostgreSQL takes no predicate locks on it either).
"""

from __future__ import annotations

from sync.config import Pipeline, TableConfig
from sync.sql import schemas
from sync.sql.names import CALL_RESULT
from sync.sql.procedure.bookkeeping import run_log_row_sql
from sync.sql.procedure.context import TableSql
from sync.sql.procedure.routing import run_log_columns
from sync.sql.procedure.text import wrapped

# The run-log columns but its identity, which only the shared run log numbers.
RESULT_COLUMNS = tuple(c for c in schemas.RUN_LOG if c.name != "run_id")


def result_columns(pipeline: Pipeline, table: TableConfig) -> tuple[schemas.Column, ...]:
    """The columns of a table's result row: those its calls write (`run_log_columns`)."""
    return tuple(c for c in run_log_columns(pipeline, table) if c.name != "run_id")


def call_result_sql(ctx: TableSql) -> str:
    """The session's result table made anew (DROP, not DELETE: a Redshift DELETE leaves its
    rows marked for deletion), the run-log row into it, then from there into the run log
    (`SELECT *`: the columns of the table it made, in that order)."""
    result = ctx.d.q(CALL_RESULT)
    written = result_columns(ctx.pipeline, ctx.table)
    definitions = wrapped(schemas.definitions(ctx.d, written), (4, 11, 15)[: len(written) - 14])
    columns = wrapped(schemas.names(written), (7,))
    return (
        "-- 8. One run-log row per call, also when nothing was new (9.), left for the caller in a temporary table (call_result.py).\n"
        f"DROP TABLE IF EXISTS {result};\nCREATE TEMP TABLE {result} ({definitions});\n"
        + run_log_row_sql(ctx, into=result)
        + f"\nINSERT INTO {ctx.rel.run_log} ({columns})\nSELECT * FROM {result};"
    )

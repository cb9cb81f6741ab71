"""The shared run log's columns added since its first layout (`schemas.RUN_LOG_ADDED`):
which of them a recorded revision's run log lacks, and the statements that add or drop one.

A revision records a fingerprint of each object's SQL, not its columns. The run log a
revision made is told by its fingerprint: it is the current layout without the last few
added columns, and `missing_run_log_columns` finds how many, so `redshift-sync revision`
adds exactly those (ADD COLUMN appends: the column order stays that of a new run log)."""

from __future__ import annotations

from sync.config import Pipeline
from sync.schema.state import State, object_digest, pipeline_of
from sync.sql import schemas
from sync.sql.dialect import DIALECTS, PostgresDialect, dialect_for
from sync.sql.names import RUN_LOG
from sync.sql.objects import run_log_sql


def run_log_label(pipeline: Pipeline) -> str:
    return f"table {pipeline.schema}.{RUN_LOG}"


def missing_run_log_columns(state: State) -> tuple[str, ...] | None:
    """The added columns the run log recorded in `state` lacks, in the order to add them
    (none: it is the current layout); None when its fingerprint matches no earlier layout."""
    pipeline = pipeline_of(state)
    recorded = {dialect: state["fingerprints"].get(dialect, {}).get(run_log_label(pipeline)) for dialect in DIALECTS}
    added = schemas.RUN_LOG_ADDED
    for kept in range(len(added), -1, -1):
        columns = tuple(c for c in schemas.RUN_LOG if c.name not in added[kept:])
        layouts = {
            dialect: object_digest(run_log_sql(dialect_for(dialect, pipeline.schema), pipeline.schema, columns))
            for dialect in DIALECTS
        }
        if layouts == recorded:
            return added[kept:]
    return None


def alter_run_log_sql(d: PostgresDialect, pipeline: Pipeline, name: str, add: bool) -> str:
    """ADD (or DROP) one of the added columns, as the current layout defines it."""
    relation = d.qualified(pipeline.schema, RUN_LOG)
    if add:
        return f"ALTER TABLE {relation} ADD COLUMN {schemas.column(schemas.RUN_LOG, name).definition(d)};"
    return f"ALTER TABLE {relation} DROP COLUMN {schemas.column(schemas.RUN_LOG, name).sql_name(d)};"

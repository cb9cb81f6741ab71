"""Stored rows whose value of a column is unknown: NULL, while the record that wrote the row
carries the TOAST placeholder for it. PostgreSQL never stores a NULL out of line, so the
placeholder says the value is a real one that did not change; the warehouse just never saw
it (a column added after the last record that carried it was retained, see
`sync.sql.column_fill`). Never a silent NULL: `status` and `deploy` show the count.
"""

from __future__ import annotations

from dataclasses import dataclass

from sync.config import Pipeline
from sync.debezium.vocabulary import TOAST_PLACEHOLDER
from sync.sql.column_fill import unknown_values_sql
from sync.sql.procedure import toastable
from sync.warehouse import Warehouse


@dataclass(frozen=True)
class UnknownValues:
    table: str
    column: str  # the target column
    rows: int

    def describe(self) -> str:
        return (
            f"{self.table}.{self.column}: {self.rows} stored row(s) whose value is unknown: the record that wrote "
            f"each carries the TOAST placeholder ({TOAST_PLACEHOLDER}) and no retained record before it carries "
            "the value (the next change of the column brings it; so does an incremental snapshot of the table)"
        )


def unknown_values(wh: Warehouse, pipeline: Pipeline, table: str) -> list[UnknownValues]:
    """The columns of `table` with rows whose value is unknown, and how many."""
    config = pipeline.table(table)
    sql = unknown_values_sql(wh.dialect.bind_schema(pipeline.schema), pipeline, config)
    if sql is None:
        return []
    counts = wh.query(sql)[0]
    cols = [c.target_name for c in config.value_columns if toastable(c)]
    return [UnknownValues(table, col, int(n)) for col, n in zip(cols, counts, strict=True) if n]

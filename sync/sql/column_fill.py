"""A column added to a table, filled for the rows already there.

The stream relation keeps the history of the topic (the streaming MV holds what the topic
retains; locally every ingested record). Each stored row names the record that wrote it
(`_kafka_partition`, `_kafka_offset`), so the revision that adds a column reads that
record's row image again and converts the field exactly as the procedure does (the same
field access, semantic decoding and type conversion). A value that does not convert, the
TOAST placeholder, or a record no longer retained leaves the column NULL for that row;
rows a backfill loaded carry no Kafka position and stay NULL as well.
"""

from __future__ import annotations

from sync.config import ColumnConfig, Pipeline, TableConfig
from sync.sql.dialect import PostgresDialect
from sync.sql.envelope import envelope_sql, unwrap_schema
from sync.sql.names import table_names
from sync.sql.procedure import raw_field_sql, read_as_text, toastable, unavailable_sql
from sync.sql.semantic import check_column, decode_sql


def _nest(d: PostgresDialect, select: str, inner: str) -> str:
    """`select` over the subquery `inner` (fenced, so each level is evaluated once)."""
    body = f"{inner}\n{d.subquery_fence}" if d.subquery_fence else inner
    return f"{select}\nFROM (\n" + "\n".join("  " + line if line else line for line in body.splitlines()) + "\n) f"


def column_fill_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig, col: ColumnConfig) -> str:
    """UPDATE of the target that sets `col` from the record that wrote each row."""
    check_column(col, table.name)
    n = table_names(pipeline, table)
    q = d.q
    target, stream = d.qualified(n.schema, n.target), d.qualified(n.schema, n.stream)
    raw = f"f.{q('j__' + col.target_name)}"
    # The records that wrote the stored rows, unwrapped to their row image (`before` for a
    # delete, which soft mode keeps).
    records = (
        "SELECT s.kafka_partition, s.kafka_offset,\n"
        f"       {unwrap_schema(d, 's.payload')} AS env\n"
        f"FROM {stream} s\n"
        f"JOIN {target} stored ON stored._kafka_partition = s.kafka_partition AND stored._kafka_offset = s.kafka_offset"
    )
    level = _nest(d, f"SELECT f.kafka_partition, f.kafka_offset,\n       {envelope_sql(d, table, 'f.env').image} AS img", records)
    level = _nest(
        d,
        f"SELECT f.kafka_partition, f.kafka_offset,\n       {raw_field_sql(d, 'f.img', col)} AS {q('j__' + col.target_name)}",
        level,
    )
    if read_as_text(d, col):
        value = d.text_to_char(raw, col.sql_type)
    else:
        decoded = decode_sql(d, col, raw, "v0")
        for extra in decoded.levels:
            level = _nest(d, "SELECT f.*,\n" + ",\n".join(f"       {expr} AS {q(alias)}" for alias, expr in extra.items()), level)
        value = decoded.value
    if toastable(col):
        value = f"CASE WHEN {unavailable_sql(d, raw, col)} THEN NULL ELSE {value} END"
    values = _nest(d, f"SELECT f.kafka_partition, f.kafka_offset,\n       {value} AS value", level)
    indented = "\n".join("  " + line if line else line for line in values.splitlines())
    return (
        f"-- {table.name}.{col.target_name} for the rows already stored: the value the record that wrote\n"
        "-- each row carried (NULL when that record is no longer retained or the value does not convert).\n"
        f"UPDATE {target} t SET {q(col.target_name)} = v.value\n"
        f"FROM (\n{indented}\n) v\n"
        "WHERE t._kafka_partition = v.kafka_partition AND t._kafka_offset = v.kafka_offset\n"
        "  AND v.value IS NOT NULL;"
    )

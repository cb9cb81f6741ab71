"""How a Debezium message maps to an operation, a row image, a source time and a position.

Each function returns SQL expressions over the unwrapped message `env` (JSON) for one
`format` of the pipeline file; the procedure generator composes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from sync.config import TableConfig
from sync.sql.dialect import PostgresDialect

# Width of each zero-padded part of the position key: compared as text, equal-width
# decimal strings order like the numbers they spell.
POS_WIDTH = 20


@dataclass(frozen=True)
class EnvelopeSql:
    op: str  # 'c' | 'r' | 'u' | 'd' | 't' | other text | NULL
    image: str  # JSON row image the columns are read from
    source: str  # JSON object holding the source metadata (read once, then `source_sql`)


@dataclass(frozen=True)
class SourceSql:
    ts_ms: str  # JSON number (ms since epoch) or NULL
    position: str  # text ordering key or NULL


def unwrap_schema(d: PostgresDialect, expr: str) -> str:
    """`{"schema": {...}, "payload": X}` (JsonConverter with schemas.enable=true) -> X."""
    return f"CASE WHEN {d.json_is_object(d.json_get(expr, 'schema'))} THEN {d.json_get(expr, 'payload')} ELSE {expr} END"


def _pad(d: PostgresDialect, text_expr: str) -> str:
    return d.lpad_number(f"COALESCE({text_expr}, '')", POS_WIDTH)


def _mysql_position(d: PostgresDialect, file: str, pos: str, row: str) -> str:
    """file.pos.row, NULL without a file or a pos. `[0-9]*$` matches the file's trailing
    digits, or nothing ('') when it has none; on a NULL file it is NULL, and so is the
    whole concatenation, as it is for a NULL pos: no CASE, each field read once."""
    file_number = d.regex_match(file, "[0-9]*$")
    return f"{d.lpad_number(file_number, POS_WIDTH)} || '.' || {d.lpad_number(pos, POS_WIDTH)} || '.' || {_pad(d, row)}"


def _postgres_position(d: PostgresDialect, sequence: str, lsn: str) -> str:
    """commit.lsn from source.sequence, the text '["<last commit lsn>","<lsn>"]' where
    "either value may be null" (Debezium PostgreSQL connector, `sequence`). A null last
    commit LSN is what a connector that starts without an offset sends (a re-created
    connector's snapshot, then its first transaction): that event comes after everything
    streamed before the restart, so its own LSN stands in for the commit part, never 0.
    An empty match (no digits) is no value on either engine (NULLIF)."""
    first = d.regex_group(sequence, '^[[]"?([0-9]*)')
    second = d.regex_group(sequence, '([0-9]+)"?[]]$')
    commit_lsn = f"NULLIF({first}, '')"
    change_lsn = f"COALESCE(NULLIF({second}, ''), {lsn})"
    return (
        f"CASE WHEN {change_lsn} IS NOT NULL THEN "
        f"{d.lpad_number(f'COALESCE({commit_lsn}, {change_lsn})', POS_WIDTH)} || '.' || {d.lpad_number(change_lsn, POS_WIDTH)} END"
    )


def envelope_sql(d: PostgresDialect, table: TableConfig, env: str) -> EnvelopeSql:
    """Operation, row image and source block of the unwrapped message `env`."""
    if table.format == "debezium":
        op = d.json_get_text(env, "op")
        image = f"CASE WHEN {op} = 'd' THEN {d.json_get(env, 'before')} ELSE {d.json_get(env, 'after')} END"
        return EnvelopeSql(op, image, d.json_get(env, "source"))
    # debezium-unwrap (ExtractNewRecordState): the row itself, plus __deleted/__op/...
    # A tombstone (no value, or JSON null in the SMT's `tombstone` mode) has no op.
    deleted = d.json_get_text(env, "__deleted")
    op = (
        f"CASE WHEN {d.json_is_object(env)} THEN\n"
        f"  CASE WHEN {deleted} = 'true' THEN 'd' ELSE COALESCE({d.json_get_text(env, '__op')}, 'u') END\nEND"
    )
    return EnvelopeSql(op, env, env)


def source_sql(d: PostgresDialect, table: TableConfig, source: str) -> SourceSql:
    """Source time and ordering position, read from the `source` object of `envelope_sql`
    (the `source` block; the row itself for unwrapped messages, whose fields carry `__`)."""
    prefix = "" if table.format == "debezium" else "__"

    def text(name: str) -> str:
        return d.json_get_text(source, prefix + name)

    if table.order_by == "mysql-binlog":
        position = _mysql_position(d, text("file"), text("pos"), text("row"))
    elif table.order_by == "postgres-lsn":
        position = _postgres_position(d, text("sequence"), text("lsn"))
    else:
        position = "NULL"
    ts_ms = "ts_ms" if table.format == "debezium" else "__source_ts_ms"
    return SourceSql(d.json_get(source, ts_ms), position)

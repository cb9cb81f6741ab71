"""How a Debezium message maps to an operation, a row image, a source time and a position.

Each function returns SQL expressions over the unwrapped message `env` (JSON) for one
`format` of the pipeline file; the procedure generator composes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from sync.config import TableConfig
from sync.sql.dialects import PostgresDialect

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


# A text timestamp of an order column: ISO 8601 date and time ('T' or a space between),
# optional fraction, optional 'Z'; the part before any 'Z' is group 1.
ISO_TIMESTAMP = "^([0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]+)?)Z?$"


def column_position(d: PostgresDialect, text: str) -> str:
    """The position of an order column's value (format = "row"), NULL when it has none.
    A number (an incrementing id, a Kafka Connect Timestamp's milliseconds since the epoch)
    is its digits, zero-padded; an ISO timestamp text is its digits to the microsecond,
    'YYYYMMDDHHMISSffffff'. Both are POS_WIDTH characters, and within one form the text
    order is the value order. A connector sends a column in one form (its converter and
    the column's type decide), so the forms do not meet. Anything else (a negative or
    fractional number, a zoned or malformed text) has no position. TRANSLATE drops the
    characters it has no substitute for, and RPAD truncates a longer fraction on the
    right, on both engines (Redshift: r_TRANSLATE, r_LPAD)."""
    number = d.regex_group(text, f"^([0-9]{{1,{POS_WIDTH}}})$")
    stamp = d.regex_group(text, ISO_TIMESTAMP)
    digits = f"TRANSLATE({stamp}, '-:T .', '')"
    return f"COALESCE({d.lpad_number(number, POS_WIDTH)}, RPAD({digits}, {POS_WIDTH}, '0'))"


def envelope_sql(d: PostgresDialect, table: TableConfig, env: str) -> EnvelopeSql:
    """Operation, row image and source block of the unwrapped message `env`."""
    if table.format == "debezium":
        op = d.json_get_text(env, "op")
        image = f"CASE WHEN {op} = 'd' THEN {d.json_get(env, 'before')} ELSE {d.json_get(env, 'after')} END"
        return EnvelopeSql(op, image, d.json_get(env, "source"))
    if table.format == "row":
        # Query-based capture: every message is the row as last read, an upsert ('r', a
        # read); it never sees a delete, and a tombstone is skipped (docs/debezium.md).
        return EnvelopeSql(f"CASE WHEN {d.json_is_object(env)} THEN 'r' END", env, env)
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
    (the `source` block; the row itself for unwrapped messages, whose fields carry `__`,
    and for rows, ordered by a column of their own)."""
    prefix = "" if table.format == "debezium" else "__"

    def text(name: str) -> str:
        return d.json_get_text(source, prefix + name)

    order_column = table.order_column
    if order_column is not None:
        position = column_position(d, d.json_get_text(source, order_column.name))
    elif table.order_by == "mysql-binlog":
        position = _mysql_position(d, text("file"), text("pos"), text("row"))
    elif table.order_by == "postgres-lsn":
        position = _postgres_position(d, text("sequence"), text("lsn"))
    else:
        position = "NULL"
    if table.format == "row":  # a row carries no commit time
        return SourceSql(f"CAST(NULL AS {d.json_type})", position)
    ts_ms = "ts_ms" if table.format == "debezium" else "__source_ts_ms"
    return SourceSql(d.json_get(source, ts_ms), position)

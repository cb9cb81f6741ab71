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
    source_ts_ms: str  # JSON number (ms since epoch) or NULL
    position: str  # text ordering key or NULL


def unwrap_schema(d: PostgresDialect, expr: str) -> str:
    """`{"schema": {...}, "payload": X}` (JsonConverter with schemas.enable=true) -> X."""
    return f"CASE WHEN {d.json_is_object(d.json_get(expr, 'schema'))} THEN {d.json_get(expr, 'payload')} ELSE {expr} END"


def _pad(d: PostgresDialect, text_expr: str) -> str:
    return d.lpad_number(f"COALESCE({text_expr}, '')", POS_WIDTH)


def _mysql_position(d: PostgresDialect, file: str, pos: str, row: str) -> str:
    file_number = d.regex_group(file, "([0-9]+)$")
    return (
        f"CASE WHEN {file} IS NOT NULL AND {pos} IS NOT NULL THEN "
        f"{_pad(d, file_number)} || '.' || {_pad(d, pos)} || '.' || {_pad(d, row)} END"
    )


def _postgres_position(d: PostgresDialect, sequence: str, lsn: str) -> str:
    # source.sequence is the text '["<last commit lsn>","<lsn>"]' (either may be null).
    commit_lsn = d.regex_group(sequence, '^[[]"?([0-9]*)')
    change_lsn = d.regex_group(sequence, '([0-9]+)"?[]]$')
    return (
        f"CASE WHEN COALESCE({change_lsn}, {lsn}) IS NOT NULL THEN "
        f"{_pad(d, commit_lsn)} || '.' || {_pad(d, f'COALESCE({change_lsn}, {lsn})')} END"
    )


def envelope_sql(d: PostgresDialect, table: TableConfig, env: str) -> EnvelopeSql:
    text = d.json_get_text
    if table.format == "debezium":
        op = text(env, "op")
        source = d.json_get(env, "source")
        image = (
            f"CASE WHEN {op} = 'd' THEN {d.json_get(env, 'before')} ELSE {d.json_get(env, 'after')} END"
        )
        source_ts = d.json_get(source, "ts_ms")
        if table.order_by == "mysql-binlog":
            position = _mysql_position(d, text(source, "file"), text(source, "pos"), text(source, "row"))
        elif table.order_by == "postgres-lsn":
            position = _postgres_position(d, text(source, "sequence"), text(source, "lsn"))
        else:
            position = "NULL"
        return EnvelopeSql(op, image, source_ts, position)

    # debezium-unwrap (ExtractNewRecordState): the row itself, plus __deleted/__op/...
    deleted = text(env, "__deleted")
    op = f"CASE WHEN {deleted} = 'true' THEN 'd' ELSE COALESCE({text(env, '__op')}, 'u') END"
    source_ts = d.json_get(env, "__source_ts_ms")
    if table.order_by == "mysql-binlog":
        position = _mysql_position(d, text(env, "__file"), text(env, "__pos"), text(env, "__row"))
    elif table.order_by == "postgres-lsn":
        position = _postgres_position(d, text(env, "__sequence"), text(env, "__lsn"))
    else:
        position = "NULL"
    return EnvelopeSql(op, env, source_ts, position)

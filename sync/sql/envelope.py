"""How a Debezium message maps to an operation, a row image, a source time and a position.

Each function returns SQL expressions over the unwrapped message `env` (JSON) for one
`format` of the pipeline file; the procedure generator composes them.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    Each group takes one digit at least, so a value without digits is no match: NULL on
    either engine (`regex_group`)."""
    commit_lsn = d.regex_group(sequence, '^[[]"?([0-9]+)')
    change_group = d.regex_group(sequence, '([0-9]+)"?[]]$')
    change_lsn = f"COALESCE({change_group}, {lsn})"
    return (
        f"CASE WHEN {change_lsn} IS NOT NULL THEN "
        f"{d.lpad_number(f'COALESCE({commit_lsn}, {change_lsn})', POS_WIDTH)} || '.' || {d.lpad_number(change_lsn, POS_WIDTH)} END"
    )


# SQL Server and Db2 LSNs as Debezium writes them (`Lsn.toString()`): lower-case hex of
# each byte, ':' after bytes 4 and 8. SQL Server's are 10 bytes (8:8:4 digits); Db2's are
# 16 (8:8:16; IBMSNAP_COMMITSEQ VARCHAR(16) FOR BIT DATA), 10 in the Db2 page's examples.
LSN_PATTERN = {
    "sqlserver-lsn": "^([0-9A-Fa-f]{8}:[0-9A-Fa-f]{8}:[0-9A-Fa-f]{4})$",
    "db2-lsn": "^([0-9A-Fa-f]{8}:[0-9A-Fa-f]{8}:[0-9A-Fa-f]{4,16})$",
}
# Hex digits of an LSN, padded: SQL Server's 10 bytes, Db2's up to 16.
LSN_WIDTH = {"sqlserver-lsn": 20, "db2-lsn": 32}
# A number of the position as decimal digits (up to 2^64): an Oracle SCN (a string in the
# source block), `txSeq`, `event_serial_no`. Anything else is no value.
NUMBER_PATTERN = "^([0-9]{1,20})$"


def _lsn_parts(d: PostgresDialect, commit_lsn: str, change_lsn: str, order_by: str) -> tuple[str, str]:
    """Commit and change LSN as fixed-width upper-case hex (equal-width hex of one case
    orders like the bytes it spells: Debezium compares LSNs byte by byte, `Lsn.compareTo`).
    The commit part is NULL when it is not an LSN. A missing change LSN (a snapshot row)
    is all F: after every change of its commit. A snapshot reads at the database's max
    LSN, the commit LSN of the newest captured transaction, and the streaming that follows
    it starts after that commit (`incrementLsn`, as "the snapshot completed" in the SQL
    Server and Db2 connectors' streaming sources): the read holds that commit's effect."""

    def digits(lsn: str) -> str:
        return f"UPPER(REPLACE({d.regex_group(lsn, LSN_PATTERN[order_by])}, ':', ''))"

    width = LSN_WIDTH[order_by]
    after_commit = "F" * width
    return d.lpad_number(digits(commit_lsn), width), d.lpad_number(f"COALESCE({digits(change_lsn)}, '{after_commit}')", width)


def _sqlserver_position(d: PostgresDialect, commit_lsn: str, change_lsn: str, serial: str) -> str:
    """commit.change.serial, the order the SQL Server connector emits in (`TxLogPosition`:
    commit LSN, then change LSN; `event_serial_no` tells apart the events that share both).
    NULL without a commit LSN; a snapshot row has no change LSN (after its commit's
    changes, `_lsn_parts`) and no serial (zeros), and neither has an event whose change
    LSN or serial is not one."""
    commit, change = _lsn_parts(d, commit_lsn, change_lsn, "sqlserver-lsn")
    return f"{commit} || '.' || {change} || '.' || {_pad(d, d.regex_group(serial, NUMBER_PATTERN))}"


def _db2_position(d: PostgresDialect, commit_lsn: str, change_lsn: str) -> str:
    """commit then change LSN, 32 hex digits each and no separator (the 64 characters of
    `_source_pos`). NULL without a commit LSN; a snapshot row has no change LSN (after
    its commit's changes, `_lsn_parts`)."""
    commit, change = _lsn_parts(d, commit_lsn, change_lsn, "db2-lsn")
    return f"{commit} || {change}"


def _oracle_position(d: PostgresDialect, commit_scn: str, scn: str, tx_seq: str) -> str:
    """commit_scn.scn.txSeq: transactions in commit order, a transaction's changes by SCN
    and then by their index in it (`txSeq`, Debezium 3.2+). A snapshot row has no commit
    SCN: its own SCN (the snapshot's) stands in, as it precedes every streamed commit.
    NULL without an SCN."""
    change = d.regex_group(scn, NUMBER_PATTERN)
    commit = f"COALESCE({d.regex_group(commit_scn, NUMBER_PATTERN)}, {change})"
    return (
        f"{d.lpad_number(commit, POS_WIDTH)} || '.' || {d.lpad_number(change, POS_WIDTH)} || '.' || "
        f"{_pad(d, d.regex_group(tx_seq, NUMBER_PATTERN))}"
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


def envelope_fields(table: TableConfig) -> list[str]:
    """The fields of the message whose text the operation is made of."""
    return {"debezium": ["op"], "debezium-unwrap": ["__deleted", "__op"]}.get(table.format, [])


def envelope_sql(d: PostgresDialect, table: TableConfig, env: str, named: Mapping[str, str] | None = None) -> EnvelopeSql:
    """Operation, row image and source block of the unwrapped message `env` (`named`: the
    text of fields of `envelope_fields` computed by the caller already, by field name)."""
    named = named or {}

    def text(name: str) -> str:
        return named.get(name) or d.json_get_text(env, name)

    if table.format == "debezium":
        op = text("op")
        image = f"CASE WHEN {op} = 'd' THEN {d.json_get(env, 'before')} ELSE {d.json_get(env, 'after')} END"
        return EnvelopeSql(op, image, d.json_get(env, "source"))
    if table.format == "row":
        # Query-based capture: every message is the row as last read, an upsert ('r', a
        # read); it never sees a delete, and a tombstone is skipped (docs/debezium.md).
        return EnvelopeSql(f"CASE WHEN {d.json_is_object(env)} THEN 'r' END", env, env)
    # debezium-unwrap (ExtractNewRecordState): the row itself, plus __deleted/__op/...
    # A tombstone (no value, or JSON null in the SMT's `tombstone` mode) has no op.
    op = (
        f"CASE WHEN {d.json_is_object(env)} THEN\n"
        f"  CASE WHEN {text('__deleted')} = 'true' THEN 'd' ELSE COALESCE({text('__op')}, 'u') END\nEND"
    )
    return EnvelopeSql(op, env, env)


# The `source` fields each source order reads, in the order its position builder takes
# them (the backfill reads the same fields: backfill/normalise.py).
POSITION_FIELDS = {
    "mysql-binlog": ("file", "pos", "row"),
    "postgres-lsn": ("sequence", "lsn"),
    "sqlserver-lsn": ("commit_lsn", "change_lsn", "event_serial_no"),
    "oracle-scn": ("commit_scn", "scn", "txSeq"),
    "db2-lsn": ("commit_lsn", "change_lsn"),
}
_POSITIONS = {
    "mysql-binlog": _mysql_position,
    "postgres-lsn": _postgres_position,
    "sqlserver-lsn": _sqlserver_position,
    "oracle-scn": _oracle_position,
    "db2-lsn": _db2_position,
}


def position_fields(table: TableConfig) -> list[str]:
    """The fields of the `source` object whose text the position is made of."""
    if table.order_column is not None:
        return [table.order_column.name]
    prefix = "" if table.format == "debezium" else "__"
    return [prefix + name for name in POSITION_FIELDS.get(table.order_by, ())]


def source_sql(d: PostgresDialect, table: TableConfig, source: str, named: Mapping[str, str] | None = None) -> SourceSql:
    """Source time and ordering position, read from the `source` object of `envelope_sql`
    (the `source` block; the row itself for unwrapped messages, whose fields carry `__`,
    and for rows, ordered by a column of their own). `named`: the text of fields of
    `position_fields` computed by the caller already, by field name."""
    prefix = "" if table.format == "debezium" else "__"
    named = named or {}

    def text(name: str) -> str:
        return named.get(name) or d.json_get_text(source, name)

    order_column = table.order_column
    if order_column is not None:
        position = column_position(d, text(order_column.name))
    elif table.order_by in POSITION_FIELDS:
        position = _POSITIONS[table.order_by](d, *(text(prefix + f) for f in POSITION_FIELDS[table.order_by]))
    else:
        position = "NULL"
    if table.format == "row":  # a row carries no commit time
        return SourceSql(f"CAST(NULL AS {d.json_type})", position)
    ts_ms = "ts_ms" if table.format == "debezium" else "__source_ts_ms"
    return SourceSql(d.json_get(source, ts_ms), position)

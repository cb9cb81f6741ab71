"""The columns of every control table, each schema defined once: the DDL, the INSERT and
SELECT column lists, and the readers of these tables (run summaries, the quarantine
queue, recovery) all take their names and types from here.

A column's type is a SQL type, a configured column's type (`SqlType`, spelled by the
dialect), or one of the types each dialect spells its own way (`JSON`, `BYTES`,
`LONG_TEXT`, `IDENTITY`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sync.config import ColumnConfig, TableConfig
from sync.sql.dialect import PostgresDialect
from sync.sql.types import SqlType

JSON = "json"
BYTES = "bytes"
LONG_TEXT = "long text"
IDENTITY = "identity"
# The dialect's attribute that spells each of these types.
_DIALECT_TYPES = {JSON: "json_type", BYTES: "bytes_type", LONG_TEXT: "long_text_type", IDENTITY: "identity_column"}


def type_sql(d: PostgresDialect, type_: str | SqlType) -> str:
    """A column's (or a procedure variable's) type as the dialect spells it."""
    if isinstance(type_, SqlType):
        return d.type_sql(type_)
    return getattr(d, _DIALECT_TYPES[type_]) if type_ in _DIALECT_TYPES else type_


@dataclass(frozen=True)
class Column:
    name: str
    type: str | SqlType
    constraint: str = ""  # NOT NULL, DEFAULT ...
    comment: str = ""  # what the column holds, where its name does not tell

    def type_sql(self, d: PostgresDialect) -> str:
        return type_sql(d, self.type)

    def sql_name(self, d: PostgresDialect, quoted: bool = False) -> str:
        """The name as statements spell it: a configured column's always quoted, a control
        column's where `quoted` (the tables that also hold configured columns)."""
        return d.q(self.name) if quoted or isinstance(self.type, SqlType) else self.name

    def definition(self, d: PostgresDialect, quoted: bool = False) -> str:
        """The column as CREATE TABLE lists it."""
        return f"{self.sql_name(d, quoted)} {self.type_sql(d)}" + (f" {self.constraint}" if self.constraint else "")

    def read(self, value: Any) -> Any:
        """A value of this column as Python reads it (counts as int, the lag as float),
        whatever type the driver returned it in (int, Decimal, text)."""
        if value is None:
            return None
        if self.type in ("bigint", "integer"):
            return int(value)
        if self.type == "double precision":
            return float(value)
        return value


def names(columns: Iterable[Column]) -> list[str]:
    return [c.name for c in columns]


def column(columns: Iterable[Column], name: str) -> Column:
    for c in columns:
        if c.name == name:
            return c
    raise KeyError(name)


def definitions(d: PostgresDialect, columns: Iterable[Column], quoted: bool = False) -> list[str]:
    return [c.definition(d, quoted) for c in columns]


def ordered(
    d: PostgresDialect, columns: Sequence[Column], values: Mapping[str, str], quoted: bool = False
) -> tuple[list[str], list[str]]:
    """(column names as statements spell them, values) of the columns `values` names, in
    the table's order: an INSERT's column and value lists. A name that is not a column of
    the table is an error, not a silently dropped value."""
    unknown = set(values) - set(names(columns))
    if unknown:
        raise KeyError(f"not columns of the table: {', '.join(sorted(unknown))}")
    chosen = [c for c in columns if c.name in values]
    return [c.sql_name(d, quoted) for c in chosen], [values[c.name] for c in chosen]


def insert_select_sql(
    d: PostgresDialect, relation: str, columns: Sequence[Column], values: Mapping[str, str], rest: str, quoted: bool = False
) -> str:
    """INSERT INTO `relation` (the columns `values` names) SELECT their values `rest`
    (FROM ..., WHERE ...;)."""
    chosen, selected = ordered(d, columns, values, quoted)
    return f"INSERT INTO {relation} ({', '.join(chosen)})\nSELECT {', '.join(selected)}\n{rest}"


def row_values(d: PostgresDialect, columns: Iterable[Column], alias: str, quoted: bool = False) -> dict[str, str]:
    """Each column of the row `alias`, by name: the values of an INSERT ... SELECT that
    copies them."""
    return {c.name: f"{alias}.{c.sql_name(d, quoted)}" for c in columns}


def as_row(columns: Sequence[Column], row: Sequence[Any]) -> dict[str, Any]:
    """A row selected with `columns` (in that order), by column name, each value read."""
    return {c.name: c.read(value) for c, value in zip(columns, row, strict=True)}


def data_columns(columns: Iterable[ColumnConfig], not_null: Collection[str] = ()) -> tuple[Column, ...]:
    """Configured columns, by their target names and types; those named in `not_null`
    (the key) NOT NULL."""
    return tuple(Column(c.target_name, c.sql_type, "NOT NULL" if c.target_name in not_null else "") for c in columns)


# Where an event sits in the source and in Kafka: the target's rows, deleted keys and the
# backfill's stage carry it.
POSITION = (
    Column("_source_ts", "timestamp"),
    Column("_source_pos", "varchar(64)"),
    Column("_kafka_partition", "bigint"),
    Column("_kafka_offset", "bigint"),
)
# The target table: the configured columns, then these.
METADATA = (*POSITION, Column("_synced_at", "timestamp"))
SOFT_DELETED = Column("_deleted", "boolean", "NOT NULL DEFAULT false")  # delete_mode = 'soft'
# Deleted keys (delete_mode = 'hard'): the key columns, then these.
DELETED_KEYS = (
    *POSITION,
    # The delete's Kafka timestamp: no earlier than its commit, and the only time a
    # tombstone-only delete has (the backfill's merge compares snapshots with it).
    Column("_kafka_timestamp", "timestamp"),
    Column("_deleted_at", "timestamp"),
)
# The backfill's stage, in Parquet order: the configured columns, then these.
BACKFILL_STAGE = (*POSITION, Column("_delete", "boolean"))

# The procedure's stage: these, the configured columns, then STAGE_AFTER_DATA.
STAGE_BEFORE_DATA = (
    Column("_kafka_partition", "bigint"),
    Column("_kafka_offset", "bigint"),
    Column("_kafka_timestamp", "timestamp"),
    Column("_kafka_time", "timestamp", comment="the newest Kafka timestamp of its partition up to it (Kafka order)"),
    Column("_refresh_time", "timestamp"),
    Column("_op", "varchar(64)"),
    Column("_action", "varchar(16)"),
    Column("_reason", "varchar(1024)"),
    Column("_rn", "bigint"),
    Column("_source_ts", "timestamp"),
    Column("_source_pos", "varchar(64)"),
    Column("_rank_pos", "varchar(64)", comment="the position the event ranks by (inherited when it has none)"),
)
STAGE_AFTER_DATA = (
    Column("_unavailable", LONG_TEXT),
    Column("_payload", JSON),
    Column("_raw_value", BYTES),
    Column("_drift_img", JSON, comment="the row image, when its fields differ from the configured ones"),
)


def stage(table: TableConfig) -> tuple[Column, ...]:
    return (*STAGE_BEFORE_DATA, *data_columns(table.columns), *STAGE_AFTER_DATA)


def target(table: TableConfig) -> tuple[Column, ...]:
    keys = [c.target_name for c in table.key_columns]
    soft = (SOFT_DELETED,) if table.delete_mode == "soft" else ()
    return (*data_columns(table.columns, not_null=keys), *METADATA, *soft)


# A keyless table's deleted-keys table holds the positions applied; a delete that found no
# row equal to its image (its row's insert is late, in another partition) is kept pending
# by the hash of that image (sync/sql/procedure/keyless_pending.py).
PENDING_HASH = Column("_row_hash", "char(32)")


def deleted_keys(table: TableConfig) -> tuple[Column, ...]:
    keys = [c.target_name for c in table.key_columns]
    pending = (PENDING_HASH,) if table.is_keyless else ()
    return (*data_columns(table.key_columns, not_null=keys), *DELETED_KEYS, *pending)


# A history table (history = true): the configured columns, then these. A version is one
# event of its key; its interval runs from its source commit time to the next version's.
HISTORY = (
    Column("_valid_from", "timestamp", comment="the event's source commit time (a tombstone's: its Kafka time)"),
    Column("_valid_to", "timestamp", comment="the next version's _valid_from; NULL while current"),
    Column("_valid_from_pos", "varchar(64)", comment="the event's source position (the order of versions)"),
    Column("_valid_to_pos", "varchar(64)"),
    Column("_op", "char(1)", "NOT NULL", comment="c, r, u, d; t: closed by a truncate"),
    Column("_is_current", "boolean", "NOT NULL DEFAULT false"),
    Column("_kafka_partition", "bigint"),
    Column("_kafka_offset", "bigint"),
    Column("_kafka_timestamp", "timestamp", comment="orders versions at one position across partitions"),
    Column("_unavailable", LONG_TEXT, comment="columns the event carried as a TOAST placeholder: the previous version's value"),
)


def history(table: TableConfig) -> tuple[Column, ...]:
    keys = [c.target_name for c in table.key_columns]
    return (*data_columns(table.columns, not_null=keys), *HISTORY)


# The stream relation on PostgreSQL (a table `ingest` fills, shaped like Redshift's
# streaming materialized view).
STREAM = (
    Column("kafka_partition", "bigint", "NOT NULL"),
    Column("kafka_offset", "bigint", "NOT NULL"),
    Column("kafka_timestamp_type", "char(1)"),
    Column("kafka_timestamp", "timestamp"),
    Column("kafka_key", BYTES),
    Column("kafka_headers", JSON),
    Column("refresh_time", "timestamp", "NOT NULL"),
    Column("payload", JSON),
    Column("raw_value", BYTES),
    Column("key_payload", JSON),
)
# A table's watermark: one row per partition, the last offset read.
WATERMARK = (
    Column("kafka_partition", "bigint", "NOT NULL"),
    Column("last_offset", "bigint", "NOT NULL"),
    Column("last_refresh_time", "timestamp"),
    Column("updated_at", "timestamp"),
)
# One row per call of a table's procedure (and per recovery command).
RUN_LOG = (
    Column("run_id", IDENTITY),
    Column("table_name", "varchar(127)", "NOT NULL"),
    Column("backend_pid", "integer"),
    Column("started_at", "timestamp", "NOT NULL"),
    Column("finished_at", "timestamp"),
    Column("events_read", "bigint"),
    Column("upserted", "bigint"),
    Column("deleted", "bigint"),
    Column("quarantined", "bigint"),
    Column("tombstones", "bigint"),
    Column("stale", "bigint"),
    Column("superseded", "bigint"),
    Column("truncates", "bigint"),
    Column("watermark_before", LONG_TEXT),
    Column("watermark_after", LONG_TEXT),
    Column("lag_seconds", "double precision"),
    Column("status", "varchar(16)", "NOT NULL"),
    Column("unmatched", "bigint", comment="records of a shared topic no table selects (its first table; else NULL)"),
)
# The run-log columns added since its first layout, in the order revisions add them (ADD
# COLUMN appends, so a new run log lists them last too: both have one column order).
RUN_LOG_ADDED = ("unmatched",)
# Records that cannot be applied, with the raw value and the reason.
QUARANTINE = (
    Column("table_name", "varchar(127)", "NOT NULL"),
    Column("kafka_partition", "bigint"),
    Column("kafka_offset", "bigint"),
    Column("kafka_timestamp", "timestamp"),
    Column("reason", "varchar(1024)", "NOT NULL"),
    Column("payload", JSON),
    Column("raw_value", BYTES),
    Column("run_started_at", "timestamp"),
    Column("handled", "varchar(16)", comment="NULL: waiting; replaying (inside a replay), replayed, discarded"),
    Column("handled_at", "timestamp"),
)
SCHEMA_DRIFT = (
    Column("table_name", "varchar(127)", "NOT NULL"),
    Column("run_started_at", "timestamp", "NOT NULL"),
    Column("kind", "varchar(16)", "NOT NULL", comment="unknown: in events, not in the pipeline file; missing: the reverse"),
    Column("field", "varchar(256)", "NOT NULL"),
    Column("events", "bigint", "NOT NULL"),
)
# PostgreSQL only: one row per `ingest` (a refresh), the columns of Redshift's
# SYS_MV_REFRESH_HISTORY that freshness reads, so one query reads either.
REFRESH_HISTORY = (
    Column("schema_name", "varchar(128)", "NOT NULL"),
    Column("mv_name", "varchar(128)", "NOT NULL"),
    Column("status", "varchar(256)", "NOT NULL"),
    Column("end_time", "timestamp", "NOT NULL"),
)

"""The pipeline file: one TOML document describing the source topics and target tables.

Everything here is validated before any SQL is generated. Names end up in SQL text, so
they are checked against strict patterns (and are quoted everywhere on top of that):
configuration is input, and a table or column name must never inject SQL.
"""

from __future__ import annotations

import os
import re
import tomllib
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from sync.debezium.vocabulary import Semantic
from sync.keyless_config import check_keyless
from sync.route import RouteConfig
from sync.sql.types import SqlType, parse_type

DEFAULT_CONFIG_PATH = "pipeline.toml"
CONFIG_ENV_VAR = "REDSHIFT_SYNC_CONFIG"

# Target-side names: lower-case, so Redshift's case folding can never change them.
TARGET_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
# Source field names as Debezium's JSON converter emits them: the source's column names,
# unchanged (no Avro name adjustment), so letters of any script, digits, _ and $ (MySQL
# allows $). Every use quotes them (a JSON key literal, a quoted PartiQL step); Redshift
# keeps at most 127 bytes of an identifier (r_names), hence the byte limit.
SOURCE_FIELD = re.compile(r"^[^\W\d][\w$]*$")
FIELD_NAME_BYTES = 127
# Kafka topic names: [a-zA-Z0-9._-], at most 249 characters.
TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
ARN = re.compile(r"^arn:aws[a-z-]*:[a-z0-9-]+:[a-z0-9-]*:\d{12}:[A-Za-z0-9/_.:+=@-]+$")
BROKERS = re.compile(r"^[A-Za-z0-9.-]+:\d{1,5}(,[A-Za-z0-9.-]+:\d{1,5})*$")

# The connectors' source orders (order_by): each change's position in the source's log.
SOURCE_ORDERS = ("postgres-lsn", "mysql-binlog", "sqlserver-lsn", "oracle-scn", "db2-lsn")
# order_by = "column:<field>": a column of the row orders a query-based (format = "row") topic.
COLUMN_ORDER = re.compile(r"^column:([^\W\d][\w$]*)$")
# What an order column may be: the JDBC source connector's timestamp or incrementing column.
ORDER_COLUMN_FAMILIES = ("timestamp", "timestamptz", "date", "smallint", "integer", "bigint", "char", "varchar")

# Names the generator uses for its own objects; a table may not take them.
RESERVED_TABLE_NAMES = {"sync_run_log", "sync_quarantine", "sync_schema_drift", "sync_mv_refresh_history", "alembic_version"}
METADATA_PREFIX = "_"


class Policy(StrEnum):
    """A column policy: what of a field's value may land in the warehouse."""

    HASH = "hash"  # keyed SHA-256 (hex), the key held by the warehouse
    MASK = "mask"  # a fixed value of the column's type
    DROP = "drop"  # not loaded at all


# A keyed hash is 64 hexadecimal characters.
HASH_LENGTH = 64
# The column families a mask has a fixed value for (sync.sql.policy.MASKS).
MASKABLE_FAMILIES = (
    "smallint", "integer", "bigint", "decimal", "real", "double", "boolean",
    "char", "varchar", "date", "timestamp", "timestamptz", "time", "timetz",
)  # fmt: skip


def check_policy(policy: Policy, sql_type: SqlType, field: str) -> None:
    """Raise ValueError when the column's type cannot hold what the policy stores."""
    if policy == Policy.HASH and not (
        sql_type.family == "varchar" and (sql_type.length is None or sql_type.length >= HASH_LENGTH)
    ):
        raise ValueError(
            f"column {field!r}: policy = 'hash' stores {HASH_LENGTH} hexadecimal characters; declare the "
            f"column as text: type = 'varchar({HASH_LENGTH})' or longer (a number field is read as its text)"
        )
    if policy == Policy.MASK and sql_type.family not in MASKABLE_FAMILIES:
        raise ValueError(f"column {field!r}: policy = 'mask' has no fixed value for type {sql_type}; use 'hash' or 'drop'")


class ConfigError(Exception):
    """The pipeline file is missing, unreadable or invalid; the message names the key."""


def _check_target_name(value: str, what: str) -> str:
    if not TARGET_NAME.match(value):
        raise ValueError(
            f"{what} {value!r} is not allowed: use lower-case letters, digits and _, "
            "starting with a letter, at most 63 characters"
        )
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PipelineSection(_Model):
    schema_: Annotated[str, Field(alias="schema")] = "cdc"

    @field_validator("schema_")
    @classmethod
    def _schema_name(cls, v: str) -> str:
        return _check_target_name(v, "schema")

    @property
    def schema_name(self) -> str:
        return self.schema_


class SourceSection(_Model):
    kind: Literal["msk", "kafka"] = "msk"
    external_schema: str = "msk_cdc"
    cluster_arn: str | None = None
    uri: str | None = None
    iam_role: str | None = None
    authentication: Literal["none", "iam", "mtls"] = "iam"
    authentication_arn: str | None = None
    secret_arn: str | None = None

    @field_validator("external_schema")
    @classmethod
    def _external_schema(cls, v: str) -> str:
        return _check_target_name(v, "external schema")

    @field_validator("cluster_arn", "iam_role", "authentication_arn", "secret_arn")
    @classmethod
    def _arn(cls, v: str | None) -> str | None:
        if v is not None and not ARN.match(v):
            raise ValueError(f"{v!r} is not an AWS ARN")
        return v

    @field_validator("uri")
    @classmethod
    def _uri(cls, v: str | None) -> str | None:
        if v is not None and not BROKERS.match(v):
            raise ValueError(f"{v!r} is not a broker list like 'host1:9094,host2:9094'")
        return v

    @model_validator(mode="after")
    def _kind_fields(self) -> SourceSection:
        if self.kind == "msk" and not self.cluster_arn:
            raise ValueError("kind = 'msk' needs cluster_arn")
        if self.kind == "kafka" and not self.uri:
            raise ValueError("kind = 'kafka' needs uri (the broker list)")
        if self.authentication in ("iam", "mtls") and not self.iam_role:
            raise ValueError(f"authentication = '{self.authentication}' needs iam_role")
        if self.kind == "msk" and self.authentication == "mtls":
            raise ValueError("authentication = 'mtls' needs kind = 'kafka' with uri (FROM KAFKA ... URI)")
        if self.authentication == "mtls" and not (self.authentication_arn or self.secret_arn):
            raise ValueError("authentication = 'mtls' needs authentication_arn or secret_arn")
        return self


class ColumnConfig(_Model):
    name: str
    type: str
    target: str | None = None
    semantic: str | None = None
    scale: int | None = None  # Decimal: the scale declared in the Connect schema
    # What lands in the warehouse (sync.sql.policy): the keyed hash, a fixed mask, or nothing.
    policy: Policy | None = None

    @model_serializer(mode="wrap")
    def _without_policy(self, handler: SerializerFunctionWrapHandler) -> dict:
        """A column without a policy is recorded as before policies existed."""
        data = handler(self)
        if data.get("policy") is None:
            data.pop("policy", None)
        return data

    @model_validator(mode="after")
    def _policy_fits(self) -> ColumnConfig:
        if self.policy is not None:
            check_policy(self.policy, self.sql_type, self.name)
        return self

    @field_validator("name")
    @classmethod
    def _source_name(cls, v: str) -> str:
        if not SOURCE_FIELD.match(v) or len(v.encode()) > FIELD_NAME_BYTES:
            raise ValueError(
                f"field name {v!r} is not allowed: letters (of any script), digits, _ and $, starting with a letter "
                f"or _, at most {FIELD_NAME_BYTES} bytes in UTF-8"
            )
        return v

    @field_validator("type")
    @classmethod
    def _type(cls, v: str) -> str:
        parse_type(v)  # raises ValueError naming the type
        return v

    @field_validator("target")
    @classmethod
    def _target(cls, v: str | None) -> str | None:
        if v is None:
            return v
        _check_target_name(v, "target column")
        if v.startswith(METADATA_PREFIX):
            raise ValueError(f"target column {v!r} starts with '_', which is reserved for metadata columns")
        return v

    @field_validator("semantic")
    @classmethod
    def _semantic(cls, v: str | None) -> str | None:
        if v is not None and v not in {s.value for s in Semantic}:
            raise ValueError(f"unknown semantic type {v!r}; known: {', '.join(Semantic)}")
        return v

    @property
    def target_name(self) -> str:
        return self.target or self.name.lower()

    @property
    def sql_type(self) -> SqlType:
        return parse_type(self.type)


class HistoryConfig(_Model):
    """`history = true`, or `history = { table = "...", deletes = "..." }`: every version
    of every row in `<name>__history` (or `table`), besides the current-state target.
    `deletes`: "close" (a delete ends the last version; its record is kept as a version
    of no duration) or "tombstone" (the delete is a version of its own, `_op = 'd'`,
    open until the key is written again)."""

    table: str | None = None
    deletes: Literal["close", "tombstone"] = "close"

    @field_validator("table")
    @classmethod
    def _table(cls, v: str | None) -> str | None:
        if v is None:
            return None
        _check_target_name(v, "history table name")
        if "__" in v or v in RESERVED_TABLE_NAMES:
            raise ValueError(
                f"history table name {v!r} is a name the generator uses for its own objects "
                "(names with '__', sync_*): leave `table` out for <name>__history"
            )
        return v


class TableConfig(_Model):
    name: str
    topic: str
    format: Literal["debezium", "debezium-unwrap", "row"] = "debezium"
    # [] (or `keyless = true`): a table without a primary key (docs/correctness.md, "Tables
    # without a primary key"; sync/keyless_config.py says which settings it needs).
    primary_key: list[str] = []
    keyless: Annotated[bool, Field(exclude=True)] = False
    # The source table's REPLICA IDENTITY (PostgreSQL): what its before images hold. Revisions
    # record it only when set (sync/schema/state.py), as files written before it had it.
    replica_identity: Literal["default", "full"] = "default"
    delete_mode: Literal["hard", "soft"] = "hard"
    # A source order, or "column:<field>" (COLUMN_ORDER) for row topics.
    order_by: Literal["kafka", "postgres-lsn", "mysql-binlog", "sqlserver-lsn", "oracle-scn", "db2-lsn"] | str = "kafka"
    on_truncate: Literal["ignore", "delete"] = "ignore"
    distkey: str | None = None
    sortkey: list[str] = []
    columns: list[ColumnConfig]
    # Gaps in the topic's offsets that lose no record: "transaction-markers" (an exactly-once
    # producer's commit marker, one offset per transaction), "compacted" (cleanup.policy =
    # compact: any gap). How the tool reads the topic, not what it deploys: revisions leave it out.
    offset_gaps: Annotated[Literal["none", "transaction-markers", "compacted"], Field(exclude=True)] = "none"
    # Which records of the topic are this table's (sync.route): set when tables share a topic.
    route: RouteConfig | None = None
    # Fields never loaded (columns with policy = "drop"): known, so schema drift does not
    # report them, and redacted from the quarantine's payloads (sync.sql.policy).
    dropped: list[str] = []

    @model_validator(mode="before")
    @classmethod
    def _split_dropped(cls, data: object) -> object:
        """A column with policy = "drop" is not a column of the warehouse: its field name
        moves to `dropped`, so nothing that builds tables or statements ever sees it."""
        if not isinstance(data, dict) or not isinstance(data.get("columns"), list):
            return data
        drop = [c for c in data["columns"] if isinstance(c, dict) and c.get("policy") == Policy.DROP]
        if not drop:
            return data
        kept = [c for c in data["columns"] if c not in drop]
        return {**data, "columns": kept, "dropped": [*data.get("dropped", []), *(c.get("name") for c in drop)]}

    @model_serializer(mode="wrap")
    def _without_dropped(self, handler: SerializerFunctionWrapHandler) -> dict:
        """A table without dropped fields is recorded as before policies existed."""
        data = handler(self)
        if not data.get("dropped"):
            data.pop("dropped", None)
        return data

    @field_validator("dropped")
    @classmethod
    def _dropped_names(cls, v: list[str]) -> list[str]:
        for name in v:
            ColumnConfig._source_name(name)
        return v

    # Every version of every row (docs/correctness.md, "History mode"); None: current state only.
    history: HistoryConfig | None = None

    @field_validator("history", mode="before")
    @classmethod
    def _history(cls, v: object) -> object:
        if isinstance(v, bool):
            return {} if v else None
        if v is not None and not isinstance(v, dict | HistoryConfig):
            raise ValueError(f'history = {v!r}: write true, false or {{ table = "...", deletes = "close" | "tombstone" }}')
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        _check_target_name(v, "table name")
        if "__" in v:
            raise ValueError(f"table name {v!r} may not contain '__' (used for generated objects)")
        if v in RESERVED_TABLE_NAMES:
            raise ValueError(f"table name {v!r} is reserved")
        if len("incremental_sync_") + len(v) > 63:
            raise ValueError(f"table name {v!r} is too long for incremental_sync_{v} (63 characters at most)")
        return v

    @field_validator("topic")
    @classmethod
    def _topic(cls, v: str) -> str:
        if not TOPIC.match(v):
            raise ValueError(f"topic {v!r} is not a Kafka topic name ([A-Za-z0-9._-], 1-249 characters)")
        return v

    @field_validator("order_by")
    @classmethod
    def _order_by(cls, v: str) -> str:
        orders = get_args(get_args(cls.model_fields["order_by"].annotation)[0])
        if v in orders or COLUMN_ORDER.match(v):
            return v
        raise ValueError(f"order_by {v!r} is not one of {', '.join(map(repr, orders))} or 'column:<field name>'")

    @model_validator(mode="after")
    def _cross_fields(self) -> TableConfig:
        if not self.columns:
            raise ValueError("columns: at least one column is needed")
        if self.history is not None and not self.primary_key:
            raise ValueError(
                "history: a table without a primary key cannot keep a history yet (a version is a state of one "
                "key); set primary_key, or remove history"
            )
        if not self.primary_key and not self.keyless and "primary_key" not in self.model_fields_set:
            raise ValueError("primary_key: at least one column is needed (primary_key = [] for a table without one)")
        if self.keyless and self.primary_key:
            raise ValueError("keyless: a table with keyless = true has primary_key = [] (or none)")
        if self.history is not None and self.order_by == "kafka":
            raise ValueError(
                "history: order_by = 'kafka' cannot keep an exact history: Kafka order cannot tell a re-delivered "
                "event from a new one; set order_by to the connector's source order: " + ", ".join(repr(o) for o in SOURCE_ORDERS)
            )
        seen_source: set[str] = set()
        seen_target: set[str] = set()
        for col in self.columns:
            if col.name in seen_source and col.name in self.primary_key:
                raise ValueError(f"columns: key field {col.name!r} is listed twice")
            if col.target_name in seen_target:
                raise ValueError(f"columns: target column {col.target_name!r} is used twice")
            seen_source.add(col.name)
            seen_target.add(col.target_name)
            if col.target is None:
                _check_target_name(col.target_name, f"target column (from field {col.name!r}; set target =)")
                if col.target_name.startswith(METADATA_PREFIX):
                    raise ValueError(
                        f"columns: field {col.name!r} maps to {col.target_name!r}, which starts with '_' "
                        "(reserved for metadata columns); set target = '...'"
                    )
        for key in self.primary_key:
            if key in self.dropped:
                raise ValueError(f"primary_key: {key!r} has policy = 'drop'; a key field is always loaded")
            if key not in seen_source:
                raise ValueError(f"primary_key: {key!r} is not one of the columns' field names")
        for col in self.key_columns:
            if col.policy is not None:
                raise ValueError(
                    f"columns: key field {col.name!r} has policy = '{col.policy}'; the key identifies the row (a mask "
                    "would merge rows, and a key rotation would orphan them): pseudonymize it at the source instead"
                )
        if self.distkey is not None:
            dist = self.column_by_any_name(self.distkey)
            if dist is None:
                raise ValueError(f"distkey: {self.distkey!r} is not a column of table {self.name!r}")
            if self.primary_key and dist.name not in self.primary_key:
                raise ValueError(
                    f"distkey: {self.distkey!r} is not a primary-key column; the merge joins on the key, "
                    "so a key column as DISTKEY keeps that join on one slice"
                )
        for key in self.sortkey:
            if self.column_by_any_name(key) is None:
                raise ValueError(f"sortkey: {key!r} is not a column of table {self.name!r}")
        self._check_row_order()
        self._check_route()
        if self.is_keyless:
            check_keyless(self)
        return self

    @property
    def image_columns(self) -> list[ColumnConfig]:
        """The columns read from the row image: all but the routing SMT's key field, which
        only the Kafka key carries (so the image never lacks it as schema drift)."""
        key_field = self.route.key_field if self.route is not None else None
        return [c for c in self.columns if c.name != key_field]

    @property
    def image_key_columns(self) -> list[ColumnConfig]:
        return [c for c in self.image_columns if c.name in self.primary_key]

    @property
    def is_keyless(self) -> bool:
        """A table without a primary key: its target is a multiset of rows."""
        return not self.primary_key

    def _check_route(self) -> None:
        route = self.route
        if route is None:
            return
        if route.field is not None and self.format == "debezium":
            raise ValueError("route: field selects on an unwrapped record; a full envelope routes by db, schema and table")
        if self.format == "row" and any(route.source_values):
            raise ValueError("route: a row topic has no source block; route by field and values")
        if route.key_field is not None and route.key_field not in self.primary_key:
            raise ValueError(
                f"route: key_field {route.key_field!r} (the field the routing SMT adds to the Kafka key) "
                "is not in primary_key: a sharded table keeps it in the key"
            )
        if route.merges_sources and self.on_truncate == "delete":
            raise ValueError(
                'route: on_truncate = "delete" deletes every stored row of the table, and this route merges '
                "several source tables into it (a list of names, or a key_field): a truncate of one would delete "
                'the rows of the others; keep on_truncate = "ignore"'
            )

    def _check_row_order(self) -> None:
        """format = "row" has no source block: Kafka order, or a column of the row."""
        column = COLUMN_ORDER.match(self.order_by)
        if self.format == "row" and not (column or self.order_by == "kafka"):
            raise ValueError(
                f"order_by: {self.order_by!r} reads Debezium's source block, which format = 'row' does not have; "
                "use 'column:<field name>' (the connector's timestamp or incrementing column) or 'kafka'"
            )
        if column is None:
            return
        if self.format != "row":
            raise ValueError(f"order_by: {self.order_by!r} orders by a column of the row, for format = 'row' only")
        col = self.order_column
        if col is None:
            raise ValueError(
                f"order_by: {column.group(1)!r} is not one of the columns' field names of table {self.name!r}; "
                f"they are: {', '.join(c.name for c in self.columns)}"
            )
        if col.sql_type.family not in ORDER_COLUMN_FAMILIES:
            raise ValueError(
                f"order_by: column {col.name!r} is {col.sql_type}; the order column is a timestamp, date, "
                "integer or text (ISO timestamp) column: the connector's timestamp or incrementing column"
            )

    @property
    def order_column(self) -> ColumnConfig | None:
        """The column of `order_by = "column:<field>"`, else None."""
        column = COLUMN_ORDER.match(self.order_by)
        if column is None:
            return None
        return next((c for c in self.columns if c.name == column.group(1)), None)

    def column_by_any_name(self, name: str) -> ColumnConfig | None:
        """The column with this target name, else the first one read from this field (a
        field may feed several columns, e.g. while its type changes)."""
        by_target = (c for c in self.columns if c.target_name == name)
        return next(by_target, None) or next((c for c in self.columns if c.name == name), None)

    @property
    def key_columns(self) -> list[ColumnConfig]:
        by_name = {c.name: c for c in self.columns}
        return [by_name[k] for k in self.primary_key]

    @property
    def value_columns(self) -> list[ColumnConfig]:
        keys = set(self.primary_key)
        return [c for c in self.columns if c.name not in keys]

    @property
    def distkey_column(self) -> ColumnConfig:
        """The distribution key: as configured, else the first primary-key column."""
        if self.distkey is not None:
            col = self.column_by_any_name(self.distkey)
            assert col is not None
            return col
        return self.key_columns[0]

    @property
    def distkey_name(self) -> str | None:
        """The distribution key's target name; None for a keyless table without `distkey`
        (Redshift then chooses: DISTSTYLE AUTO)."""
        return self.distkey_column.target_name if self.primary_key or self.distkey else None

    @property
    def sortkey_columns(self) -> list[ColumnConfig]:
        if self.sortkey:
            return [c for k in self.sortkey if (c := self.column_by_any_name(k)) is not None]
        return self.key_columns


class OperationsSection(_Model):
    """How the tool runs, not what it deploys: no revision records these settings."""

    # The revisions folder of this pipeline, relative to the pipeline file (instead of
    # --versions DIR on every command; $REDSHIFT_SYNC_VERSIONS overrides it).
    versions: str | None = None
    # Run-log, schema-drift and handled quarantine rows older than this are pruned.
    retention_days: Annotated[int, Field(ge=1, le=36500)] = 30
    # Attempts of a transaction stopped by a serialization conflict (Redshift error 1023,
    # SQLSTATE 40001) before the command fails; 1 turns retrying off.
    conflict_attempts: Annotated[int, Field(ge=1, le=20)] = 4
    # A table whose runs read records and applied none, every one older than what is stored,
    # this many runs in a row, is reported as an ordering break (reset-positions).
    ordering_break_runs: Annotated[int, Field(ge=1, le=1000)] = 3
    # The Lambda's maintenance run vacuums a table's stage once it keeps more deleted,
    # not yet reclaimed rows than this (docs/redshift.md, "Stage vacuum").
    stage_vacuum_rows: Annotated[int, Field(ge=1)] = 100_000


# Sections outside the warehouse model (see schema_state: revisions do not record them).
OPERATIONAL_SECTIONS = frozenset({"operations"})


class BackfillSection(_Model):
    """`[backfill]`: the role Redshift's COPY assumes to read the staged Parquet (S3 read
    on the staging prefix). The streaming role of `[source]` reads MSK, not S3."""

    iam_role: str | None = None

    @field_validator("iam_role")
    @classmethod
    def _arn(cls, v: str | None) -> str | None:
        if v is not None and not ARN.match(v):
            raise ValueError(f"{v!r} is not an AWS ARN")
        return v


class HeartbeatSection(_Model):
    """`[heartbeat]`: the connector's heartbeat topic (Debezium's `heartbeat.interval.ms`
    sends to `__debezium-heartbeat.<topic.prefix>` by default); the generator makes its
    stream relation, and `status` and the Lambda tell an idle table from a dead connector."""

    topic: str
    # A heartbeat older than this means capture is down; a table whose records have waited
    # longer (or whose view has not refreshed for this long while the heartbeat's did) is
    # stalled. How the tool reads the heartbeat, not what it deploys: revisions leave it out.
    stale_after_seconds: Annotated[int, Field(ge=1, le=86400 * 7, exclude=True)] = 300

    @field_validator("topic")
    @classmethod
    def _topic(cls, v: str) -> str:
        if not TOPIC.match(v):
            raise ValueError(f"topic {v!r} is not a Kafka topic name ([A-Za-z0-9._-], 1-249 characters)")
        return v


class Pipeline(_Model):
    pipeline: PipelineSection = PipelineSection()
    operations: OperationsSection = OperationsSection()
    source: SourceSection
    heartbeat: HeartbeatSection | None = None
    # Not part of the warehouse model (recorded revision states leave it out).
    backfill: Annotated[BackfillSection, Field(exclude=True)] = BackfillSection()
    tables: list[TableConfig]

    @model_validator(mode="after")
    def _unique_tables(self) -> Pipeline:
        names = [t.name for t in self.tables]
        if not names:
            raise ValueError("tables: at least one [[tables]] entry is needed")
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"tables: {', '.join(dupes)} defined more than once")
        topics = [t.topic for t in self.tables]
        unrouted = sorted({t.topic for t in self.tables if t.route is None and topics.count(t.topic) > 1})
        if unrouted:
            raise ValueError(f"tables: topic {', '.join(unrouted)} is read by more than one table: give each of them a route")
        mixed = sorted({t.topic for t in self.tables if len({s.format for s in self.sharing(t)}) > 1})
        if mixed:
            raise ValueError(
                f"tables: the tables reading topic {', '.join(mixed)} give different formats; one topic has one format"
            )
        if self.heartbeat is not None and self.heartbeat.topic in topics:
            raise ValueError(f"heartbeat: topic {self.heartbeat.topic!r} is a table's topic")
        # A history table of its own name must not take another relation's (a table's target, another history).
        taken = set(names)
        for t in self.tables:
            if t.history is not None and t.history.table is not None:
                if t.history.table in taken:
                    raise ValueError(
                        f"tables: {t.name}: history table {t.history.table!r} is already the name of a table or of another history "
                        "in this pipeline: give it a name of its own (or leave `table` out for "
                        f"{t.name}__history)"
                    )
                taken.add(t.history.table)
        return self

    @property
    def schema(self) -> str:
        return self.pipeline.schema_name

    def sharing(self, table: TableConfig) -> list[TableConfig]:
        """The tables reading the topic of `table` (itself included), in file order: the
        first one owns the streaming view they share, so its name stays what a table
        alone on the topic had."""
        return [t for t in self.tables if t.topic == table.topic]

    def table(self, name: str) -> TableConfig:
        for t in self.tables:
            if t.name == name:
                return t
        known = ", ".join(t.name for t in self.tables)
        raise ConfigError(f"unknown table {name!r}; the pipeline file defines: {known}")


def _format_location(loc: tuple[object, ...], data: object) -> str:
    """Turn pydantic's location tuple into a TOML-ish key path, with the table name when known."""
    parts: list[str] = []
    node = data
    for item in loc:
        if isinstance(item, int):
            label = f"[{item}]"
            if isinstance(node, list) and item < len(node) and isinstance(node[item], dict):
                name = node[item].get("name")
                if isinstance(name, str):
                    label = f"[{item}] ({name})"
            parts.append(label)
            node = node[item] if isinstance(node, list) and item < len(node) else None
        else:
            parts.append(("." if parts else "") + str(item))
            node = node.get(item) if isinstance(node, dict) else None
    return "".join(parts) or "(top level)"


def parse_pipeline(data: dict, origin: str = "<pipeline>") -> Pipeline:
    try:
        return Pipeline.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            where = _format_location(tuple(err["loc"]), data)
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown key (check the spelling)"
            lines.append(f"  {where}: {msg}")
        raise ConfigError(f"{origin} is invalid:\n" + "\n".join(lines)) from None


def resolve_config_path(path: str | os.PathLike[str] | None) -> Path:
    return Path(path or os.environ.get(CONFIG_ENV_VAR) or DEFAULT_CONFIG_PATH)


def load_pipeline(path: str | os.PathLike[str] | None = None) -> tuple[Pipeline, Path]:
    """Read and validate the pipeline file; returns the model and the path it came from."""
    resolved = resolve_config_path(path)
    try:
        text = resolved.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"pipeline file {str(resolved)!r} not found; pass --config PATH or set {CONFIG_ENV_VAR}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read pipeline file {str(resolved)!r}: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{resolved} is not valid TOML: {exc}") from None
    return parse_pipeline(data, str(resolved)), resolved

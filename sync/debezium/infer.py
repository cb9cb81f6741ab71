"""`infer`: a ready `[[tables]]` block from sample Debezium messages that carry schemas
(JsonConverter with schemas.enable=true), or from rows of a query-based topic (the JDBC
source connector: no envelope, no `__` metadata fields) with their schemas.

Connect types and semantic names map to column types (precision and scale from the
schema parameters), the primary key comes from the key schema, source names keep their
case and get lower-case targets. The block is validated like the pipeline file before it
is printed, so `deploy` accepts it as is.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sync.config import TARGET_NAME, ConfigError, parse_pipeline
from sync.debezium.infer_values import ValueSample
from sync.debezium.vocabulary import SchemaName, Semantic
from sync.local.stream import read_records

# Connect schema name -> (column type, semantic) for names whose encoding needs decoding.
SEMANTIC_NAMES: dict[str, tuple[str, Semantic | None]] = {
    Semantic.DATE: ("date", Semantic.DATE),
    SchemaName.CONNECT_DATE: ("date", Semantic.DATE),
    Semantic.TIME: ("time", Semantic.TIME),
    SchemaName.CONNECT_TIME: ("time", Semantic.TIME),
    Semantic.MICRO_TIME: ("time", Semantic.MICRO_TIME),
    Semantic.NANO_TIME: ("time", Semantic.NANO_TIME),
    Semantic.TIMESTAMP: ("timestamp", Semantic.TIMESTAMP),
    SchemaName.CONNECT_TIMESTAMP: ("timestamp", Semantic.TIMESTAMP),
    Semantic.MICRO_TIMESTAMP: ("timestamp", Semantic.MICRO_TIMESTAMP),
    Semantic.NANO_TIMESTAMP: ("timestamp", Semantic.NANO_TIMESTAMP),
    Semantic.ZONED_TIMESTAMP: ("timestamptz", Semantic.ZONED_TIMESTAMP),
    Semantic.YEAR: ("integer", Semantic.YEAR),
    Semantic.MICRO_DURATION: ("bigint", Semantic.MICRO_DURATION),
    Semantic.INTERVAL: ("varchar(64)", Semantic.INTERVAL),
    Semantic.VARIABLE_SCALE_DECIMAL: ("decimal(38,10)", Semantic.VARIABLE_SCALE_DECIMAL),
    Semantic.JSON: ("super", Semantic.JSON),
    Semantic.UUID: ("varchar(36)", Semantic.UUID),
    SchemaName.XML: ("varchar(65535)", None),
    SchemaName.BITS: ("varbyte", Semantic.BYTES),
}
PLAIN_TYPES = {
    "int8": "smallint",
    "int16": "smallint",
    "int32": "integer",
    "int64": "bigint",
    "float": "real",
    "float32": "real",
    "double": "double precision",
    "float64": "double precision",
    "boolean": "boolean",
    "string": "varchar(65535)",
    "bytes": "varbyte",
    "array": "super",
    "map": "super",
    "struct": "super",
}
ENUMS = (Semantic.ENUM, Semantic.ENUM_SET)
MAX_PRECISION = 38
# Columns a query-based connector plausibly polls by (`timestamp.column.name`): timestamps
# whose name says they change with each write.
TIMESTAMP_NAMES = {k for k, (typ, _) in SEMANTIC_NAMES.items() if typ in ("timestamp", "timestamptz")}
UPDATE_COLUMN = re.compile(r"(updat|modif|chang|last)", re.IGNORECASE)


@dataclass
class Column:
    name: str
    type: str
    semantic: str | None = None
    scale: int | None = None
    notes: list[str] = field(default_factory=list)


def column_for(fld: dict[str, Any]) -> Column:
    """One Connect schema field -> a column (type, semantic, scale)."""
    name, connect_type = fld["field"], fld.get("type")
    semantic_name, params = fld.get("name"), fld.get("parameters") or {}
    if semantic_name == Semantic.DECIMAL:
        scale = int(params.get("scale", 0))
        precision = int(params.get("connect.decimal.precision", MAX_PRECISION))
        col = Column(name, "", Semantic.DECIMAL, scale)
        # A negative scale (Oracle NUMBER(p, -s)) rounds to 10**s: p - s integer digits.
        digits = precision - min(scale, 0)
        if digits > MAX_PRECISION or scale > MAX_PRECISION:
            col.notes.append(f"{name}: source precision {digits} exceeds DECIMAL(38); values beyond it are quarantined")
        precision = max(min(digits, MAX_PRECISION), min(scale, MAX_PRECISION), 1)
        col.type = f"decimal({precision},{min(max(scale, 0), precision)})"
        return col
    if semantic_name in ENUMS:
        allowed = [v for v in str(params.get("allowed", "")).split(",") if v]
        longest = len(",".join(allowed)) if semantic_name == Semantic.ENUM_SET else max((len(v) for v in allowed), default=0)
        return Column(name, f"varchar({min(max(longest * 4, 16), 65535)})", semantic_name)
    if semantic_name in SEMANTIC_NAMES:
        typ, semantic = SEMANTIC_NAMES[semantic_name]
        col = Column(name, typ, semantic)
        if semantic_name == Semantic.VARIABLE_SCALE_DECIMAL:
            col.notes.append(
                f"{name}: variable-scale number (NUMERIC/NUMBER without a scale, FLOAT, DECFLOAT), "
                "stored as decimal(38,10); adjust to the data"
            )
        if semantic_name == Semantic.MICRO_DURATION:
            col.notes.append(f"{name}: an INTERVAL in microseconds, a month counted as 30.4375 days")
        return col
    if connect_type == "bytes":
        return Column(name, "varbyte", Semantic.BYTES)
    if connect_type in PLAIN_TYPES:
        return Column(name, PLAIN_TYPES[connect_type])
    raise ValueError(f"field {name!r}: unknown Connect type {connect_type!r}")


def target_for(name: str, taken: set[str]) -> str:
    """A valid lower-case target name for a source field, unique in the table."""
    base = re.sub(r"[^a-z0-9_]", "_", name.lower()).lstrip("_")
    if not base or not base[0].isalpha():
        base = "col_" + base
    base = base[:60]
    candidate, n = base, 2
    while candidate in taken:
        candidate, n = f"{base}_{n}", n + 1
    assert TARGET_NAME.match(candidate)
    return candidate


def _source_schema_connector(schema: dict[str, Any]) -> str | None:
    """The connector named by the `source` struct's schema, `io.debezium.connector.<name>.Source`
    (for messages whose source block has no `connector` field)."""
    for fld in schema.get("fields") or []:
        if fld.get("field") == "source":
            m = re.fullmatch(r"io\.debezium\.connector\.([a-z0-9]+)\.Source", str(fld.get("name")))
            return m.group(1) if m else None
    return None


def _struct_fields(schema: dict[str, Any], name: str) -> list[dict[str, Any]] | None:
    for fld in schema.get("fields") or []:
        if fld.get("field") == name and fld.get("type") == "struct":
            return fld.get("fields") or []
    return None


@dataclass
class Sample:
    """What the sample messages tell about one table."""

    fields: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> Connect field, first seen
    key: list[str] = field(default_factory=list)
    format: str = "debezium"
    connector: str | None = None
    messages: int = 0
    # A bare key (ExtractField$Key): the row fields that equalled it in every message.
    bare_key: set[str] | None = None

    def add(self, key: Any, value: Any) -> None:
        if isinstance(key, dict) and isinstance(key.get("schema"), dict) and not self.key:
            self.key = [f["field"] for f in key["schema"].get("fields") or []]
        if not (isinstance(value, dict) and isinstance(value.get("schema"), dict)):
            return
        schema, payload = value["schema"], value.get("payload")
        row = _struct_fields(schema, "after") or _struct_fields(schema, "before")
        if row is None and any(f.get("field") == "op" for f in schema.get("fields") or []):
            return  # a truncate or message event: no row schema
        if row is None and _is_plain_row(schema):  # a query-based topic: the row alone
            self.format = "row"
            row = schema.get("fields") or []
            self._match_bare_key(key, payload)
        elif row is None:  # ExtractNewRecordState: the row itself, plus __ metadata fields
            self.format = "debezium-unwrap"
            row = [f for f in schema.get("fields") or [] if not f.get("field", "").startswith("__")]
            names = {f.get("field") for f in schema.get("fields") or []}
            if "__lsn" in names:
                self.connector = self.connector or "postgresql"
            elif {"__file", "__pos"} <= names:
                self.connector = self.connector or "mysql"
            elif {"__commit_lsn", "__event_serial_no"} <= names:
                self.connector = self.connector or "sqlserver"
            elif "__scn" in names:
                self.connector = self.connector or "oracle"
        elif isinstance(payload, dict) and isinstance(payload.get("source"), dict):
            self.connector = self.connector or payload["source"].get("connector") or _source_schema_connector(schema)
        for fld in row:
            self.fields.setdefault(fld["field"], fld)
        self.messages += 1

    def _match_bare_key(self, key: Any, payload: Any) -> None:
        if not (isinstance(key, dict) and isinstance(key.get("schema"), dict) and key["schema"].get("type") != "struct"):
            return
        if isinstance(payload, dict):
            equal = {name for name, v in payload.items() if v == key.get("payload") and v is not None}
            self.bare_key = equal if self.bare_key is None else self.bare_key & equal

    def order_column(self) -> str | None:
        """The row's plausible polling column: the one timestamp, or the one timestamp
        named like an update time."""
        stamps = [name for name, f in self.fields.items() if f.get("name") in TIMESTAMP_NAMES]
        named = [name for name in stamps if UPDATE_COLUMN.search(name)]
        if len(named) == 1:
            return named[0]
        return stamps[0] if len(stamps) == 1 else None


def _is_plain_row(schema: dict[str, Any]) -> bool:
    """A row without Debezium's marks: no `__` metadata field, and its schema not named
    `<prefix>.<table>.Value` as the row schemas Debezium writes are."""
    names = [f.get("field", "") for f in schema.get("fields") or []]
    return not any(n.startswith("__") for n in names) and not str(schema.get("name", "")).endswith(".Value")


def read_sample(path: Path) -> tuple[Sample, ValueSample]:
    """The messages with schemas, and those without (schemas.enable=false)."""
    sample, schemaless = Sample(), ValueSample()
    for record, _ in read_records(path):
        try:
            key = json.loads(record.key) if record.key else None
            value = json.loads(record.value) if record.value else None
        except ValueError:
            continue
        sample.add(key, value)
        schemaless.add(key, value)
    return sample, schemaless


def _from_values(sample: Sample, schemaless: ValueSample) -> list[str]:
    """Fill `sample` from messages without schemas; the comment lines that say what was
    guessed and what needs a look."""
    sample.fields, guesses, looks = schemaless.connect_fields()
    sample.key, sample.format, sample.connector = schemaless.key, schemaless.format, schemaless.connector
    sample.messages = schemaless.messages
    return [
        "# No schema in the messages (schemas.enable=false): every type is guessed from the values.",
        *[f"# GUESS {g}" for g in guesses],
        *[f"# CHECK {c}" for c in looks],
    ]


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


# `source.connector` -> the order of its positions. MariaDB's connector (its own since
# Debezium 2.7) writes the same binlog `file`/`pos`/`row` as MySQL's.
CONNECTOR_ORDERS = {
    "postgresql": "postgres-lsn",
    "mysql": "mysql-binlog",
    "mariadb": "mysql-binlog",
    "sqlserver": "sqlserver-lsn",
    "oracle": "oracle-scn",
    "db2": "db2-lsn",
}


def infer_block(path: Path, table: str, topic: str, primary_key: list[str] | None = None) -> str:
    """The [[tables]] block for the sample file, validated as the pipeline file would be."""
    if not path.exists():
        raise FileNotFoundError(f"sample file {str(path)!r} not found")
    sample, schemaless = read_sample(path)
    guessed = _from_values(sample, schemaless) if not sample.messages else []
    if not sample.messages:
        raise ValueError(f"{path}: no change event or row in the sample (a value that is a JSON object)")
    keys = primary_key or sample.key or (sorted(sample.bare_key) if sample.bare_key and len(sample.bare_key) == 1 else [])
    if not keys:
        raise ValueError(f"{path}: no key schema in the sample; pass --primary-key")
    missing = [k for k in keys if k not in sample.fields]
    if missing:
        raise ValueError(f"{path}: key field(s) {', '.join(missing)} are not fields of the row schema")
    order_by = CONNECTOR_ORDERS.get(sample.connector or "", "kafka")
    order_note = []
    if sample.format == "row":
        column = sample.order_column()
        order_by = f"column:{column}" if column else "kafka"
        order_note = (
            [] if column else ['# order_by: pick the connector\'s polling column: "column:<field>" (timestamp.column.name)']
        )

    columns, notes, taken = [], [], set()
    for fld in sample.fields.values():
        col = column_for(fld)
        target = target_for(col.name, taken)
        taken.add(target)
        notes += col.notes
        parts = [f"name = {_toml_string(col.name)}", f"type = {_toml_string(col.type)}"]
        if target != col.name.lower():
            parts.append(f"target = {_toml_string(target)}")
        if col.semantic:
            parts.append(f"semantic = {_toml_string(col.semantic)}")
        if col.scale is not None:
            parts.append(f"scale = {col.scale}")
        columns.append("  { " + ", ".join(parts) + " },")
    lines = [f"# Inferred from {sample.messages} message(s) of {path.name}.", *guessed]
    lines += [f"# NOTE {n}" for n in notes]
    lines += [
        "[[tables]]",
        f"name = {_toml_string(table)}",
        f"topic = {_toml_string(topic)}",
        f"format = {_toml_string(sample.format)}",
        f"primary_key = [{', '.join(_toml_string(k) for k in keys)}]",
        *order_note,
        f"order_by = {_toml_string(order_by)}",
        "columns = [",
        *columns,
        "]",
    ]
    block = "\n".join(lines) + "\n"
    _validate(block)
    return block


def _validate(block: str) -> None:
    import tomllib

    data = tomllib.loads(block)
    data["source"] = {"kind": "kafka", "uri": "broker:9092", "authentication": "none"}
    try:
        parse_pipeline(data, "the inferred block")
    except ConfigError as exc:
        raise ValueError(str(exc)) from None

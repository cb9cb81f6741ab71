"""Debezium's vocabulary, spelled once: the semantic type names, the text patterns of their
encodings, the TOAST placeholder, and the quarantine reasons the procedure and the
backfill both write.

The pipeline file (`sync/config.py`), `infer`, the reference decoder (`sync/debezium/decode.py`),
the SQL decoder (`sync/sql/semantic.py`), the procedure and the PySpark backfill read
these names from here. What each type means and how it lands in a column is the table in
docs/debezium.md, "Semantic types".
"""

from __future__ import annotations

import base64
import json
from enum import StrEnum


class Semantic(StrEnum):
    """The values of a column's `semantic = "..."`: a Connect schema name whose JSON needs
    decoding, or one of the two encodings that have no schema name (`bytes`,
    `boolean-int`)."""

    DATE = "io.debezium.time.Date"
    TIME = "io.debezium.time.Time"
    MICRO_TIME = "io.debezium.time.MicroTime"
    NANO_TIME = "io.debezium.time.NanoTime"
    TIMESTAMP = "io.debezium.time.Timestamp"
    MICRO_TIMESTAMP = "io.debezium.time.MicroTimestamp"
    NANO_TIMESTAMP = "io.debezium.time.NanoTimestamp"
    ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
    YEAR = "io.debezium.time.Year"
    MICRO_DURATION = "io.debezium.time.MicroDuration"
    INTERVAL = "io.debezium.time.Interval"
    DECIMAL = "org.apache.kafka.connect.data.Decimal"
    VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
    JSON = "io.debezium.data.Json"
    ENUM = "io.debezium.data.Enum"
    ENUM_SET = "io.debezium.data.EnumSet"
    UUID = "io.debezium.data.Uuid"
    BYTES = "bytes"
    BOOLEAN_INT = "boolean-int"


class SchemaName(StrEnum):
    """Connect schema names `infer` meets that are not a `semantic` of their own: Kafka
    Connect's logical types (read as the Debezium type of the same encoding) and types
    whose JSON is plain text or base64."""

    CONNECT_DATE = "org.apache.kafka.connect.data.Date"
    CONNECT_TIME = "org.apache.kafka.connect.data.Time"
    CONNECT_TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
    XML = "io.debezium.data.Xml"
    BITS = "io.debezium.data.Bits"


# Units per second of the epoch-number encodings (since 1970-01-01 00:00:00, UTC wall clock).
EPOCH_UNITS = {
    Semantic.TIMESTAMP: 1_000,
    Semantic.MICRO_TIMESTAMP: 1_000_000,
    Semantic.NANO_TIMESTAMP: 1_000_000_000,
}
# Units per second of the time-of-day encodings (past midnight).
TIME_UNITS = {
    Semantic.TIME: 1_000,
    Semantic.MICRO_TIME: 1_000_000,
    Semantic.NANO_TIME: 1_000_000_000,
}
# Encodings that are plain JSON text.
TEXT_SEMANTICS = (Semantic.ENUM, Semantic.ENUM_SET, Semantic.UUID, Semantic.INTERVAL)

# One pattern serves Python's `re`, PostgreSQL and Redshift (POSIX) and Spark (Java).
# Base64 with padding, as the JsonConverter writes bytes (TO_VARBYTE raises on anything else).
BASE64_PATTERN = r"^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
# ZonedTimestamp text: ISO-8601 with 0-9 fraction digits and Z or an offset, +hh:mm or
# +hh:mm:ss (Java's offset id of a zone's historic local mean time, e.g. Oracle TIMESTAMP
# WITH TIME ZONE in Africa/Monrovia before 1972: -00:44:30). Hours 00-23 and seconds 00-59
# only: PostgreSQL would read 24:00:00 as the next day and :60 as the next minute, where
# Debezium has no such times. Offsets under 20 hours (Java's ZoneOffset is at most
# 18:00), so an offset moves a time by less than a day and only the first and the last
# day can leave 0001-01-01 .. 9999-12-31. Groups: hour, fraction (with its dot), zone,
# zone seconds.
ZONED_PATTERN = (
    "^[0-9]{4}-[0-9]{2}-[0-9]{2}T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]([.][0-9]{1,9})?"
    "(Z|[+-][01][0-9]:[0-5][0-9](:[0-5][0-9])?)$"
)
# A number as text (decimal.handling.mode=string, numbers quoted by a producer).
NUMBER_PATTERN = r"^\s*[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]{1,3})?\s*$"

# The TOAST placeholder: an unchanged out-of-line value Debezium did not read
# (docs/debezium.md, "TOAST placeholders").
TOAST_PLACEHOLDER = "__debezium_unavailable_value"
# Its JSON forms: text columns, bytea (base64 of the same bytes) and text[] columns.
TOAST_PLACEHOLDER_FORMS = (
    TOAST_PLACEHOLDER,
    base64.b64encode(TOAST_PLACEHOLDER.encode()).decode(),
    [TOAST_PLACEHOLDER],
)
# The same forms as the text the SQL compares a field with (an array as its JSON text).
TOAST_PLACEHOLDER_TEXTS = tuple(f if isinstance(f, str) else json.dumps(f) for f in TOAST_PLACEHOLDER_FORMS)


class Reason(StrEnum):
    """Quarantine reasons of a record that is not a change event, worded alike by the
    procedure and the backfill."""

    NOT_JSON = "value is not valid JSON"
    NOT_OBJECT = "value is not a JSON object"
    NO_OP = "no op field: not a Debezium change event"
    # A table without a primary key names the row a delete removes by its before image.
    NO_DELETE_IMAGE = "delete without a full before image: the source table needs REPLICA IDENTITY FULL"


def key_reason(field: str, semantic: str | None, column_type: object) -> str:
    """The quarantine reason of a key field that is missing or does not convert."""
    if semantic:
        return f"primary key field {field} is missing or does not convert from {semantic} to {column_type}"
    article = "an" if str(column_type)[:1] in "aeiou" else "a"
    return f"primary key field {field} is missing or not {article} {column_type}"


def field_reason(field: str, semantic: str | None, column_type: object) -> str:
    """The quarantine reason of a present value that does not convert to its column."""
    encoding = f"from {semantic} " if semantic else ""
    return f"field {field} does not convert {encoding}to {column_type}"

"""Decoding Debezium semantic types in SQL, one text for both dialects.

A column that declares `semantic = ...` is decoded from its JSON encoding here; the
dialect supplies only the few primitives the engines spell differently (base64 to hex,
hex to bigint, days to date, text to timestamp/decimal/JSON). The plain-Python reference
decoder `sync/semantic.py` defines the expected results; tests hold the two together.

Decoding a value may need intermediate values (the hex digits of a decimal, its
magnitude): `decode_sql` returns them as extra projection levels the stage query
evaluates between the envelope level and the typed level, so no expression is repeated.
Every expression reads the previous level through the alias `f`. A value that does not
decode yields NULL, which the procedure turns into a quarantine reason naming the column.

Redshift: the rendering is parsed with sqlglot but not executed by the test suite. What
rests on documentation rather than on a run: TO_VARBYTE(text, 'base64') and
FROM_VARBYTE(.., 'hex') for the Decimal bytes; STRTOL(hex, 16) on 14-digit chunks; the
DECIMAL(38,0) products staying exact (values are range-checked first, so no product
exceeds 10^38); CAST(varchar AS DECIMAL(p,s)) rounding half away from zero like
PostgreSQL (a value whose rounding carries into one more integer digit than fits would
raise there instead of being quarantined); CAST(varchar AS timestamp) on text already
matched against a strict pattern (a calendar-invalid date such as February 30 would
raise); and whether the planner evaluates each decoding level once (PostgreSQL needs
OFFSET 0 fences for that; Redshift has no equivalent that keeps the query parallel).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sync.config import ColumnConfig
from sync.semantic import EPOCH_UNITS, MAX_DECIMAL_DIGITS, TIME_UNITS
from sync.sql.dialects import PostgresDialect
from sync.sql.types import SqlType

BASE64_PATTERN = r"^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
ZONED_PATTERN = (
    "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})$"
)
_BIGINT = SqlType("bigint")
_INTEGER = SqlType("integer")
# Timestamps both warehouses hold: 0001-01-01 00:00:00 .. 9999-12-31 23:59:59 (seconds).
MIN_EPOCH_SECONDS = -62_135_596_800
MAX_EPOCH_SECONDS = 253_402_300_799
MIN_EPOCH_DAYS, MAX_EPOCH_DAYS = -719_162, 2_932_896
# A 16-byte two's complement split into hex chunks that fit a bigint: 2 + 7 + 7 bytes.
CHUNK_HI_MAX, CHUNK_MAX = 0xFFFF, 2**56 - 1
TWO_56, TWO_112 = 2**56, 2**112
# |value| <= 10**38 - 1  <=>  hi < HI_LIMIT or (hi = HI_LIMIT and low <= LOW_LIMIT)
HI_LIMIT = (10**MAX_DECIMAL_DIGITS - 1) // TWO_112
LOW_LIMIT = 10**MAX_DECIMAL_DIGITS - 1 - HI_LIMIT * TWO_112

# Which column types each decoded kind may land in.
TARGET_FAMILIES = {
    "timestamp": ("timestamp", "timestamptz", "date"),
    "date": ("date", "timestamp"),
    "time": ("time",),
    "decimal": ("decimal", "double", "real"),
    "json": ("super", "varchar"),
}


@dataclass
class DecodeSql:
    levels: list[dict[str, str]] = field(default_factory=list)  # alias -> expression, per level
    value: str = "NULL"


def natural_kind(semantic: str) -> str | None:
    if semantic in EPOCH_UNITS or semantic == "io.debezium.time.ZonedTimestamp":
        return "timestamp"
    if semantic in TIME_UNITS:
        return "time"
    if semantic == "io.debezium.time.Date":
        return "date"
    if semantic in ("org.apache.kafka.connect.data.Decimal", "io.debezium.data.VariableScaleDecimal"):
        return "decimal"
    if semantic == "io.debezium.data.Json":
        return "json"
    return None  # encoded as the plain JSON of its type: the ordinary conversion applies


def check_column(col: ColumnConfig, table: str) -> None:
    """Refuse a semantic type whose decoded value cannot land in the column's type."""
    if col.semantic is None:
        return
    kind = natural_kind(col.semantic)
    allowed = TARGET_FAMILIES.get(kind or "", None)
    if allowed is not None and col.sql_type.family not in allowed:
        raise ValueError(
            f"table {table}, column {col.name}: semantic {col.semantic} decodes to a {kind}, "
            f"which does not fit type {col.type} (use {' or '.join(allowed)})"
        )
    if col.semantic == "org.apache.kafka.connect.data.Decimal" and col.scale is None:
        raise ValueError(f"table {table}, column {col.name}: semantic {col.semantic} needs scale = <n> (the schema's 'scale' parameter)")


def _epoch_to_timestamp(int_expr: str, per_second: int) -> str:
    """Epoch units -> timestamp, exact: whole seconds plus the remainder in microseconds
    (integer division and modulo truncate toward zero in both engines)."""
    remainder = f"({int_expr} % {per_second})"
    micros = f"{remainder} * {1_000_000 // per_second}" if per_second <= 1_000_000 else f"{remainder} / {per_second // 1_000_000}"
    lo = max(MIN_EPOCH_SECONDS * per_second, -(2**63))
    hi = min((MAX_EPOCH_SECONDS + 1) * per_second - 1, 2**63 - 1)
    return (
        f"CASE WHEN {int_expr} BETWEEN {lo} AND {hi} THEN TIMESTAMP '1970-01-01 00:00:00'"
        f" + ({int_expr} / {per_second}) * INTERVAL '1 second' + {micros} * INTERVAL '1 microsecond' END"
    )


def _time_of_day(int_expr: str, per_second: int) -> str:
    return (
        f"CASE WHEN {int_expr} >= 0 AND {int_expr} < {86_400 * per_second} THEN "
        f"CAST({_epoch_to_timestamp(int_expr, per_second)} AS time) END"
    )


def _zoned(d: PostgresDialect, raw: str) -> str:
    """ISO-8601 text with 0-9 fraction digits and Z or +hh:mm -> UTC timestamp. The
    fraction is truncated to microseconds; the offset is subtracted."""
    text = d.json_number_text(raw)
    local = d.text_to_timestamp(f"REPLACE(SUBSTRING({text}, 1, 19), 'T', ' ')")
    fraction = d.regex_group(text, "^.{19}[.]([0-9]{1,9})")
    micros = f"CAST(RPAD(SUBSTRING(COALESCE({fraction}, ''), 1, 6), 6, '0') AS integer)"
    zone = f"SUBSTRING({text}, LENGTH({text}) - 5, 6)"
    offset = (
        f"CASE WHEN {text} LIKE '%Z' THEN 0 ELSE "
        f"(CASE WHEN SUBSTRING({zone}, 1, 1) = '-' THEN -1 ELSE 1 END) * "
        f"(CAST(SUBSTRING({zone}, 2, 2) AS integer) * 60 + CAST(SUBSTRING({zone}, 5, 2) AS integer)) END"
    )
    return (
        f"CASE WHEN {d.json_is_string(raw)} AND {text} ~ {d.lit(ZONED_PATTERN)} THEN "
        f"{local} + {micros} * INTERVAL '1 microsecond' - {offset} * INTERVAL '1 minute' END"
    )


def _decimal_levels(d: PostgresDialect, b64_json: str, alias: str, scale: str) -> list[dict[str, str]]:
    """Base64 two's complement + scale -> plain decimal text `t__` ('-12345.67'), one small
    step per level so that no expression is evaluated twice."""
    text = d.json_number_text(b64_json)
    x, h, n = f"x__{alias}", f"h__{alias}", f"n__{alias}"
    a, b, c, low, m, g = (f"{p}__{alias}" for p in "abclmg")
    hex_digits = (
        f"CASE WHEN {d.json_is_string(b64_json)} AND {text} ~ {d.lit(BASE64_PATTERN)}"
        f" AND LENGTH({text}) BETWEEN 4 AND 24 THEN {d.base64_to_hex(text)} END"
    )
    # Sign-extended to 16 bytes; a negative number is read as its inverted bits + 1:
    # |n * max - chunk| is the chunk, or its complement when negative.
    sign = f"CASE WHEN SUBSTRING(f.{x}, 1, 1) >= '8' THEN 1 ELSE 0 END"
    padded = (
        f"CASE WHEN LENGTH(f.{x}) <= 32 THEN "
        f"LPAD(f.{x}, 32, CASE WHEN SUBSTRING(f.{x}, 1, 1) >= '8' THEN 'f' ELSE '0' END) END"
    )

    def chunk(start: int, length: int, top: int) -> str:
        return f"ABS(f.{n} * {top} - {d.hex_to_bigint(f'SUBSTRING(f.{h}, {start}, {length})')})"

    magnitude = (
        f"CASE WHEN f.{a} < {HI_LIMIT} OR (f.{a} = {HI_LIMIT} AND f.{low} <= {LOW_LIMIT})"
        f" THEN CAST(CAST(f.{a} AS decimal(38,0)) * {TWO_112} + f.{low} AS varchar(40)) END"
    )
    # At least scale + 1 digits, so the integer part is never empty.
    digits = f"LPAD(f.{m}, GREATEST(LENGTH(f.{m}), {scale} + 1), '0')"
    decimal_text = (
        f"CASE WHEN f.{g} IS NOT NULL AND {scale} BETWEEN 0 AND {MAX_DECIMAL_DIGITS} THEN "
        f"(CASE WHEN f.{n} = 1 THEN '-' ELSE '' END) || SUBSTRING(f.{g}, 1, LENGTH(f.{g}) - {scale})"
        f" || (CASE WHEN {scale} > 0 THEN '.' || SUBSTRING(f.{g}, LENGTH(f.{g}) - {scale} + 1) ELSE '' END) END"
    )
    return [
        {x: hex_digits},
        {h: padded, n: sign},
        {a: chunk(1, 4, CHUNK_HI_MAX), b: chunk(5, 14, CHUNK_MAX), c: chunk(19, 14, CHUNK_MAX)},
        {low: f"CAST(f.{b} AS decimal(38,0)) * {TWO_56} + f.{c} + f.{n}"},
        {m: magnitude},
        {g: digits},
        {f"t__{alias}": decimal_text},
    ]


def _land(d: PostgresDialect, kind: str, expr: str, t: SqlType) -> str:
    """A decoded value of `kind` in the column type `t`."""
    if kind == "timestamp" and t.family == "timestamptz":
        return f"(({expr}) AT TIME ZONE 'UTC')"
    if kind in ("timestamp", "date") and t.family in ("date", "timestamp") and kind != t.family:
        return f"CAST({expr} AS {t.family})"
    if kind == "decimal":
        if t.family == "decimal":
            return d.text_to_decimal(expr, t.precision or 18, t.scale or 0)
        return f"CAST({expr} AS {d.type_sql(t)})"
    return expr


def decode_sql(d: PostgresDialect, col: ColumnConfig, raw: str, alias: str) -> DecodeSql:
    """SQL that decodes the JSON value `raw` (over alias `f`) of a column to its type."""
    semantic, t = col.semantic, col.sql_type
    kind = natural_kind(semantic) if semantic else None
    if kind is None:
        return DecodeSql([], d.cast_json(raw, t))
    integer = d.cast_json(raw, _BIGINT)
    if semantic in EPOCH_UNITS:
        return DecodeSql([], _land(d, kind, _epoch_to_timestamp(integer, EPOCH_UNITS[semantic]), t))
    if semantic in TIME_UNITS:
        return DecodeSql([], _time_of_day(integer, TIME_UNITS[semantic]))
    if semantic == "io.debezium.time.Date":
        days = f"CASE WHEN {integer} BETWEEN {MIN_EPOCH_DAYS} AND {MAX_EPOCH_DAYS} THEN {d.epoch_days_to_date(integer)} END"
        return DecodeSql([], _land(d, kind, days, t))
    if semantic == "io.debezium.time.ZonedTimestamp":
        return DecodeSql([], _land(d, kind, _zoned(d, raw), t))
    if semantic == "io.debezium.data.Json":
        if t.family == "super":
            text = d.json_number_text(raw)
            return DecodeSql([], f"CASE WHEN {d.json_is_string(raw)} THEN {d.parse_json_text(text)} END")
        return DecodeSql([], d.cast_json(raw, t))
    if semantic == "org.apache.kafka.connect.data.Decimal":
        levels = _decimal_levels(d, raw, alias, str(col.scale or 0))
        return DecodeSql(levels, _land(d, kind, f"f.t__{alias}", t))
    # VariableScaleDecimal: {"scale": n, "value": base64}; the scale travels with the value.
    levels = _decimal_levels(d, d.json_get(raw, "value"), alias, f"f.k__{alias}")
    levels[0][f"k__{alias}"] = d.cast_json(d.json_get(raw, "scale"), _INTEGER)
    return DecodeSql(levels, _land(d, kind, f"f.t__{alias}", t))

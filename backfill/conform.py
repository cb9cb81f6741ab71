"""Conform raw snapshot fields to the target's column types, exactly as the SQL path does.

Every conversion returns NULL when the value does not convert or fit, like the
null-on-error casts of the generated SQL (`sync/sql/dialect/postgres.py` on PostgreSQL, SUPER casts
on Redshift); `conform` turns "present but NULL after conversion" into the same
reason text the procedure writes to the quarantine, so a bad value is rejected, never
loaded as a silent NULL.

Semantic types (Debezium's encodings of dates, timestamps, decimals) plug in through
`SEMANTIC_DECODERS`: one function per semantic type from the raw value to a Spark Column
of the target type. Columns without a decoder (or without `semantic`) use the plain
conversion of their SQL type.
"""

from __future__ import annotations

import json
import typing as t

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from backfill import json_tokens
from backfill.compat import try_cast
from sync.config import ColumnConfig, TableConfig
from sync.debezium.decode import UndecodableValue, decode_for_column
from sync.debezium.vocabulary import EPOCH_UNITS, NUMBER_PATTERN, TIME_UNITS, ZONED_PATTERN, Semantic, field_reason, key_reason
from sync.sql.dialect import LOADABLE_FLOAT_RANGES
from sync.sql.semantic import MAX_EPOCH_DAYS, MAX_EPOCH_SECONDS, MIN_EPOCH_DAYS, MIN_EPOCH_SECONDS
from sync.sql.types import INTEGER_BOUNDS, SqlType

# A decoder gets the raw field, its Spark type and, for JSON inputs, the token-aware
# `exact_value`.
Decoder = t.Callable[[Column, T.DataType, ColumnConfig, "Column | None"], Column]

# Numbers are read through a wide decimal first: exact for every bigint and for the
# integer digits of any decimal(p,s) column, with spare fractional digits for rounding.
WIDE_DECIMAL = T.DecimalType(38, 18)


_SPARK_TYPES: dict[str, T.DataType] = {
    "smallint": T.ShortType(),
    "integer": T.IntegerType(),
    "bigint": T.LongType(),
    "real": T.FloatType(),
    "double": T.DoubleType(),
    "boolean": T.BooleanType(),
    "date": T.DateType(),
    "timestamp": T.TimestampNTZType(),
    "timestamptz": T.TimestampType(),
    **{family: T.StringType() for family in ("char", "varchar", "super", "time", "timetz")},
}


def spark_type(sql_type: SqlType) -> T.DataType:
    """The Spark type a target column is written as (Parquet maps onto the stage by position)."""
    if sql_type.family == "decimal":
        return T.DecimalType(sql_type.precision or 18, sql_type.scale or 0)
    try:
        return _SPARK_TYPES[sql_type.family]
    except KeyError:
        raise ValueError(f"column type {sql_type} is not supported by the backfill yet") from None


def number_type(sql_type: SqlType) -> T.DecimalType:
    """The decimal a number is read as before it is checked and rounded: every integer
    digit the column can hold (20 for integer columns: any bigint), the rest fraction."""
    if sql_type.family == "decimal":
        return T.DecimalType(38, 38 - ((sql_type.precision or 18) - (sql_type.scale or 0)))
    return WIDE_DECIMAL


def exact_value(json_text: Column, field: str, col: ColumnConfig) -> Column | None:
    """For JSON inputs: a field read straight from its JSON token, where the token's kind
    matters. Numbers: exact decimals (no double in between). Booleans: JSON true/false or
    the numbers 0/1 only, as the SQL path accepts (the text "true" is not a boolean).
    Integer-encoded semantic types (epoch and day counts): exact numbers. Decimal bytes and
    Json: the token itself as JSON text (a string keeps its quotes), since the SQL decodes
    only the token kind Debezium sends. None for the other types, which convert from the
    field's text."""

    def typed(dtype: T.DataType) -> Column:
        return F.from_json(json_text, T.StructType([T.StructField(field, dtype)]))[field]

    sql_type = col.sql_type
    if col.semantic in TOKEN_SEMANTICS:
        return _json_token(json_text, F.lit(field))
    if col.semantic in INTEGER_SEMANTICS:
        return typed(WIDE_DECIMAL)
    if sql_type.is_integer or sql_type.family == "decimal":
        return typed(number_type(sql_type))
    if sql_type.family == "boolean":
        number = typed(T.LongType())
        return F.coalesce(typed(T.BooleanType()), F.when(number == 1, F.lit(True)).when(number == 0, F.lit(False)))
    return None


# Python UDFs (no Arrow: the executors need nothing but pyspark).
_json_token = F.udf(json_tokens.token_text, T.StringType(), useArrow=False)
_parses_as_json = F.udf(json_tokens.parses, T.BooleanType(), useArrow=False)


def _text(raw: Column, dtype: T.DataType) -> Column:
    return raw if isinstance(dtype, T.StringType) else raw.cast("string")


def _number(raw: Column, dtype: T.DataType, exact: Column | None, wide: T.DecimalType) -> Column:
    """A numeric value as a wide decimal, NULL when it is not a number (NaN, text, bool).
    From text the digits are exact; JSON numbers come exact through `exact`."""
    if isinstance(dtype, T.StringType):
        parsed = F.when(raw.rlike(NUMBER_PATTERN), try_cast(F.trim(raw), wide))
        return parsed if exact is None else F.coalesce(exact, parsed)
    if isinstance(dtype, T.BooleanType):
        return F.lit(None).cast(wide)
    if isinstance(dtype, (T.FloatType, T.DoubleType)):
        return F.when(~F.isnan(raw) & (F.abs(raw) != F.lit(float("inf"))), try_cast(raw, wide))
    return try_cast(raw, wide)


def plain_value(raw: Column, dtype: T.DataType, sql_type: SqlType, exact: Column | None = None) -> Column:
    """The column's value from a raw field of Spark type `dtype`, or NULL."""
    f = sql_type.family
    if sql_type.is_integer:
        lo, hi = INTEGER_BOUNDS[f]
        n = _number(raw, dtype, exact, WIDE_DECIMAL)
        return F.when((n == F.floor(n)) & n.between(lo, hi), n.cast(spark_type(sql_type)))
    if f == "decimal":
        p, s = sql_type.precision or 18, sql_type.scale or 0
        rounded = F.round(_number(raw, dtype, exact, number_type(sql_type)), s)  # HALF_UP, like PostgreSQL round()
        return F.when(F.abs(rounded) < F.lit(10) ** (p - s), try_cast(rounded, T.DecimalType(p, s)))
    if f in ("real", "double"):
        if isinstance(dtype, T.StringType):
            n = F.when(raw.rlike(NUMBER_PATTERN), try_cast(F.trim(raw), T.DoubleType()))
            # A zero only when the digits say so: text that underflows also reads as 0.0.
            zero = (n == 0) & (F.regexp_replace(F.regexp_replace(raw, "[eE].*$", ""), "[^1-9]", "") == "")
        elif isinstance(dtype, T.NumericType):
            n = try_cast(raw, T.DoubleType())
            zero = n == 0
        else:
            return F.lit(None).cast(spark_type(sql_type))
        # Within the magnitudes every warehouse stores (`conform_float`); NaN and infinity are not.
        largest, smallest = (float(limit) for limit in LOADABLE_FLOAT_RANGES[f])
        in_range = (F.abs(n) <= largest) & (zero | (F.abs(n) >= smallest))
        return F.when(~F.isnan(n) & in_range, n.cast(spark_type(sql_type)))
    if f == "boolean":
        if isinstance(dtype, T.BooleanType):
            return raw
        if exact is not None:
            return exact
        if isinstance(dtype, T.StringType):
            return F.when(raw.isin("true", "1"), F.lit(True)).when(raw.isin("false", "0"), F.lit(False))
        return F.when(raw == 1, F.lit(True)).when(raw == 0, F.lit(False))
    if f in ("char", "varchar"):
        text = _text(raw, dtype)
        return F.when(F.octet_length(text) <= sql_type.byte_limit, text)
    if f in ("date", "timestamp", "timestamptz"):
        target = spark_type(sql_type)
        if isinstance(dtype, T.StringType):
            # Like the SQL helpers: only text that starts with a digit is parsed as a date/time.
            return F.when(raw.rlike(r"^\s*[0-9]"), try_cast(F.trim(raw), target))
        if isinstance(dtype, (T.DateType, T.TimestampType, T.TimestampNTZType)):
            return try_cast(raw, target)
        return F.lit(None).cast(target)
    if f in ("time", "timetz"):
        text = _text(raw, dtype)
        return F.when(
            text.rlike(r"^\s*[0-9]{1,2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?([+-][0-9]{2}(:?[0-9]{2})?)?\s*$"), F.trim(text)
        )
    if f == "super":
        return _text(raw, dtype)
    raise ValueError(f"column type {sql_type} is not supported by the backfill yet")


# ---- semantic types ------------------------------------------------------------------
# Each decoder reads the raw value of a Debezium semantic type (text from JSON, or a number
# from a typed snapshot) and returns the column's value, or NULL when it does not decode
# (which rejects the row). The rules are those of the SQL (`sync/sql/semantic.py`) and of
# the reference decoder (`sync/debezium/decode.py`): same range checks, sub-microsecond digits
# truncated toward zero, decimals rounded half away from zero to the column's scale.

_BIGINT = SqlType("bigint")
MIN_TIMESTAMP, MAX_TIMESTAMP = "0001-01-01 00:00:00", "9999-12-31 23:59:59.999999"
INTEGER_SEMANTICS = (*EPOCH_UNITS, *TIME_UNITS, Semantic.DATE)
# Encodings whose JSON token kind matters (a base64 string, a {scale, value} object, JSON
# text in a string): the decoder gets the token itself, as JSON text.
TOKEN_SEMANTICS = (Semantic.DECIMAL, Semantic.VARIABLE_SCALE_DECIMAL, Semantic.JSON)


def _integer(raw: Column, dtype: T.DataType, exact: Column | None) -> Column:
    """The whole number an integer-encoded semantic type carries, as the SQL's bigint
    conversion reads it (JSON numbers or numeric text with an integral value)."""
    return plain_value(raw, dtype, _BIGINT, exact)


def _ntz(text: str) -> Column:
    return F.lit(text).cast(T.TimestampNTZType())


def _micros_since_epoch(n: Column, per_second: int) -> Column:
    """Epoch units -> whole microseconds, truncated toward zero (like the SQL's integer
    division and modulo)."""
    if per_second <= 1_000_000:
        return F.try_multiply(n, F.lit(1_000_000 // per_second))
    return (n.cast(T.DecimalType(20, 0)) / (per_second // 1_000_000)).cast(T.LongType())


def _epoch(per_second: int) -> Decoder:
    lo = max(MIN_EPOCH_SECONDS * per_second, -(2**63))
    hi = min((MAX_EPOCH_SECONDS + 1) * per_second - 1, 2**63 - 1)

    def decode(raw: Column, dtype: T.DataType, col: ColumnConfig, exact: Column | None) -> Column:
        n = _integer(raw, dtype, exact)
        ts = _plus_micros(_ntz("1970-01-01 00:00:00"), _micros_since_epoch(n, per_second))
        return _as_target(F.when(n.between(lo, hi), ts), col)

    return decode


def _time_of_day(per_second: int) -> Decoder:
    def decode(raw: Column, dtype: T.DataType, col: ColumnConfig, exact: Column | None) -> Column:
        n = _integer(raw, dtype, exact)
        us = _micros_since_epoch(n, per_second)
        text = F.format_string(
            "%02d:%02d:%02d.%06d",
            (us / 3_600_000_000).cast("long"),
            (us / 60_000_000 % 60).cast("long"),
            (us / 1_000_000 % 60).cast("long"),
            us % 1_000_000,
        )
        return F.when(n.between(0, 86_400 * per_second - 1), text)

    return decode


def _date_from_days(raw: Column, dtype: T.DataType, col: ColumnConfig, exact: Column | None) -> Column:
    days = _integer(raw, dtype, exact)
    day = F.date_add(F.lit("1970-01-01").cast("date"), days.cast("int"))
    return _as_target(F.when(days.between(MIN_EPOCH_DAYS, MAX_EPOCH_DAYS), day), col)


def _plus_micros(timestamp_ntz: Column, micros: Column) -> Column:
    """A UTC wall-clock time plus a number of microseconds (the session time zone is UTC)."""
    return F.timestamp_micros(F.unix_micros(timestamp_ntz.cast(T.TimestampType())) + micros).cast(T.TimestampNTZType())


def _as_target(value: Column, col: ColumnConfig) -> Column:
    """A decoded date or UTC wall-clock timestamp in the column's type (timestamptz: the
    instant, read in the session's UTC zone)."""
    return value.cast(spark_type(col.sql_type))


def _zoned(raw: Column, dtype: T.DataType, col: ColumnConfig, exact: Column | None) -> Column:
    """ISO-8601 text with 0-9 fraction digits and Z, +hh:mm or +hh:mm:ss -> UTC: the
    fraction truncated to microseconds, the offset subtracted."""
    text = _text(raw, dtype)
    local = try_cast(F.regexp_replace(F.substring(text, 1, 19), "T", " "), T.TimestampNTZType())
    fraction = F.regexp_extract(text, r"^.{19}[.]([0-9]{1,9})", 1)
    micros = try_cast(F.rpad(F.substring(fraction, 1, 6), 6, "0"), "long")
    with_seconds = F.substring(text, -6, 1) == ":"  # +hh:mm:ss rather than +hh:mm
    zone = F.when(with_seconds, F.substring(text, -9, 9)).otherwise(F.substring(text, -6, 6))
    zone_seconds = F.when(with_seconds, try_cast(F.substring(zone, 8, 2), "int")).otherwise(F.lit(0))
    seconds = F.when(text.endswith("Z"), F.lit(0)).otherwise(
        F.when(zone.startswith("-"), F.lit(-1)).otherwise(F.lit(1))
        * (try_cast(F.substring(zone, 2, 2), "int") * 3600 + try_cast(F.substring(zone, 5, 2), "int") * 60 + zone_seconds)
    )
    utc = _plus_micros(local, micros - seconds.cast("long") * 1_000_000)
    in_range = utc.between(_ntz(MIN_TIMESTAMP), _ntz(MAX_TIMESTAMP))
    return _as_target(F.when(text.rlike(ZONED_PATTERN) & in_range, utc), col)


def _json(raw: Column, dtype: T.DataType, col: ColumnConfig, exact: Column | None) -> Column:
    """JSON text in a JSON string -> the text, when it parses (super: jsonb/SUPER on load)."""
    text = _text(raw, dtype)
    is_string = exact.startswith('"') if exact is not None else F.lit(True)
    parses = _parses_as_json(text)
    value = F.when(is_string & parses, text)
    return value if col.sql_type.family == "super" else plain_value(value, T.StringType(), col.sql_type)


def _by_reference(raw: Column, dtype: T.DataType, col: ColumnConfig, exact: Column | None) -> Column:
    """Decimal bytes (Connect Decimal, VariableScaleDecimal): decoded by the reference
    decoder itself, so the rounding to the column is the SQL's to the last digit."""
    semantic, scale, column_type = col.semantic, col.scale, col.type
    from_token = exact is not None or semantic == Semantic.VARIABLE_SCALE_DECIMAL

    def decode(value: str | None) -> t.Any:
        if value is None:
            return None
        try:
            return decode_for_column(semantic, scale, column_type, json.loads(value) if from_token else value)
        except (UndecodableValue, ValueError):
            return None

    target = spark_type(col.sql_type)
    udf = F.udf(decode, target, useArrow=False)
    return udf(exact if exact is not None else _text(raw, dtype))


SEMANTIC_DECODERS: dict[str, Decoder] = {
    Semantic.DATE: _date_from_days,
    **{semantic: _epoch(per_second) for semantic, per_second in EPOCH_UNITS.items()},
    **{semantic: _time_of_day(per_second) for semantic, per_second in TIME_UNITS.items()},
    Semantic.ZONED_TIMESTAMP: _zoned,
    Semantic.DECIMAL: _by_reference,
    Semantic.VARIABLE_SCALE_DECIMAL: _by_reference,
    Semantic.JSON: _json,
}
# Year, MicroDuration, Interval, Enum, EnumSet, Uuid and boolean-int are the plain JSON of
# their column type: the plain conversion applies, as in the SQL. bytes needs a varbyte column, which the backfill
# does not load (see `spark_type`).


def still_encoded(col: ColumnConfig, dtype: T.DataType) -> bool:
    """True when a snapshot field holds the semantic type's encoding rather than the
    decoded value: text (JSON, CSV), or a whole number for the epoch and day counts."""
    if isinstance(dtype, T.StringType):
        return True
    return col.semantic in INTEGER_SEMANTICS and isinstance(dtype, (T.IntegralType, T.DecimalType))


def column_value(raw: Column, dtype: T.DataType, col: ColumnConfig, exact: Column | None = None) -> Column:
    """The conformed value of one column: the semantic decoder when the column has one and
    the raw value is still encoded, else the plain conversion."""
    decoder = SEMANTIC_DECODERS.get(col.semantic or "")
    if decoder is not None and still_encoded(col, dtype):
        value = decoder(raw, dtype, col, exact)
    else:
        value = plain_value(raw, dtype, col.sql_type, exact)
    return value.cast(spark_type(col.sql_type))


def raw_name(col: ColumnConfig) -> str:
    return f"f__{col.target_name}"


def exact_name(col: ColumnConfig) -> str:
    return f"n__{col.target_name}"


def conform(df: t.Any, table: TableConfig) -> t.Any:
    """Add each target column (typed) and fill `_reason` for rows that cannot be loaded:
    the first failing check wins, with the procedure's wording. Expects the normalised
    shape: `f__<col>` raw fields (optionally `n__<col>` exact numbers), `_op`, `_reason`."""
    fields = {f.name: f.dataType for f in df.schema.fields}
    values = {}
    for col in table.columns:
        exact = F.col(exact_name(col)) if exact_name(col) in fields else None
        try:
            values[col.target_name] = column_value(F.col(raw_name(col)), fields[raw_name(col)], col, exact)
        except ValueError as exc:
            raise ValueError(f"table {table.name}, column {col.name}: {exc}") from None
    out = df.withColumns(values)
    # One flat COALESCE: nesting one per column makes Spark's common-subexpression search
    # exponential in the number of columns.
    reasons = [F.col("_reason")]
    for col in table.key_columns:
        reasons.append(F.when(F.col(col.target_name).isNull(), F.lit(key_reason(col.name, col.semantic, col.sql_type))))
    for col in table.value_columns:
        bad = (F.col("_op") != "d") & F.col(raw_name(col)).isNotNull() & F.col(col.target_name).isNull()
        reasons.append(F.when(bad, F.lit(field_reason(col.name, col.semantic, col.sql_type))))
    return out.withColumn("_reason", F.coalesce(*reasons))

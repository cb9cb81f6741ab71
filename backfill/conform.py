"""Conform raw snapshot fields to the target's column types, exactly as the SQL path does.

Every conversion returns NULL when the value does not convert or fit, like the
null-on-error casts of the generated SQL (`sync/sql/helpers.py` on PostgreSQL, SUPER casts
on Redshift); `field_reasons` turns "present but NULL after conversion" into the same
reason text the procedure writes to the quarantine, so a bad value is rejected, never
loaded as a silent NULL.

Semantic types (Debezium's encodings of dates, timestamps, decimals) plug in through
`SEMANTIC_DECODERS`: one function per semantic type from the raw value to a Spark Column
of the target type. Columns without a decoder (or without `semantic`) use the plain
conversion of their SQL type.
"""

from __future__ import annotations

import base64
import binascii
import typing as t
from decimal import Decimal

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sync.config import ColumnConfig, TableConfig
from sync.sql.helpers import NUMBER_PATTERN
from sync.sql.types import INTEGER_BOUNDS, SqlType

# A decoder gets the raw field (text) and, for JSON inputs, the token-aware `exact_value`.
Decoder = t.Callable[[Column, ColumnConfig, "Column | None"], Column]
CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"

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
    Connect Decimals: only JSON numbers (decimal.format=NUMERIC); their strings are base64.
    None for the other types, which convert from the field's text."""

    def typed(dtype: T.DataType) -> Column:
        return F.from_json(json_text, T.StructType([T.StructField(field, dtype)]))[field]

    sql_type = col.sql_type
    if col.semantic == CONNECT_DECIMAL:
        # A DoubleType read succeeds for number tokens only, not for strings.
        return F.when(typed(T.DoubleType()).isNotNull(), typed(number_type(sql_type)))
    if sql_type.is_integer or sql_type.family == "decimal":
        return typed(number_type(sql_type))
    if sql_type.family == "boolean":
        number = typed(T.LongType())
        return F.coalesce(typed(T.BooleanType()), F.when(number == 1, F.lit(True)).when(number == 0, F.lit(False)))
    return None


def _text(raw: Column, dtype: T.DataType) -> Column:
    return raw if isinstance(dtype, T.StringType) else raw.cast("string")


def _number(raw: Column, dtype: T.DataType, exact: Column | None, wide: T.DecimalType) -> Column:
    """A numeric value as a wide decimal, NULL when it is not a number (NaN, text, bool).
    From text the digits are exact; JSON numbers come exact through `exact`."""
    if isinstance(dtype, T.StringType):
        parsed = F.when(raw.rlike(NUMBER_PATTERN), F.trim(raw).try_cast(wide))
        return parsed if exact is None else F.coalesce(exact, parsed)
    if isinstance(dtype, T.BooleanType):
        return F.lit(None).cast(wide)
    if isinstance(dtype, (T.FloatType, T.DoubleType)):
        return F.when(~F.isnan(raw) & (F.abs(raw) != F.lit(float("inf"))), raw.try_cast(wide))
    return raw.try_cast(wide)


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
        return F.when(F.abs(rounded) < F.lit(10) ** (p - s), rounded.try_cast(T.DecimalType(p, s)))
    if f in ("real", "double"):
        if isinstance(dtype, T.StringType):
            return F.when(raw.rlike(NUMBER_PATTERN), F.trim(raw).try_cast(spark_type(sql_type)))
        return raw.try_cast(spark_type(sql_type)) if isinstance(dtype, T.NumericType) else F.lit(None).cast(spark_type(sql_type))
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
            return F.when(raw.rlike(r"^\s*[0-9]"), F.trim(raw).try_cast(target))
        if isinstance(dtype, (T.DateType, T.TimestampType, T.TimestampNTZType)):
            return raw.try_cast(target)
        return F.lit(None).cast(target)
    if f in ("time", "timetz"):
        text = _text(raw, dtype)
        return F.when(text.rlike(r"^\s*[0-9]{1,2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?([+-][0-9]{2}(:?[0-9]{2})?)?\s*$"), F.trim(text))
    if f == "super":
        return _text(raw, dtype)
    raise ValueError(f"column type {sql_type} is not supported by the backfill yet")


# ---- semantic types ------------------------------------------------------------------
# Each decoder reads the raw JSON value (text) of a Debezium semantic type and returns the
# column's value, or NULL when it does not decode (which rejects the row).


def _whole(raw: Column) -> Column:
    return F.when(raw.rlike(r"^\s*-?[0-9]{1,19}\s*$"), F.trim(raw).try_cast(T.LongType()))


def _date_from_days(raw: Column, col: ColumnConfig, exact: Column | None) -> Column:
    days = _whole(raw)
    return F.when(days.between(-(10**6), 10**6), F.date_add(F.lit("1970-01-01").cast("date"), days.cast("int")))


def _from_epoch(unit: str) -> Decoder:
    convert = {"ms": F.timestamp_millis, "us": F.timestamp_micros}[unit]

    def decode(raw: Column, col: ColumnConfig, exact: Column | None) -> Column:
        ts = convert(_whole(raw))
        return _as_target(ts, col)

    return decode


def _as_target(ts: Column, col: ColumnConfig) -> Column:
    family = col.sql_type.family
    if family == "timestamp":
        return ts.cast(T.TimestampNTZType())
    if family == "date":
        return ts.cast(T.DateType())
    return ts


def _zoned(raw: Column, col: ColumnConfig, exact: Column | None) -> Column:
    # ISO-8601 with an offset (Debezium normalises it to UTC, "...Z"): an instant.
    ts = F.when(raw.rlike(r"^[0-9]"), raw.try_cast(T.TimestampType()))
    return _as_target(ts, col)


def unscaled_decimal_text(b64: str | None, scale: int) -> str | None:
    """Kafka Connect Decimal: base64 of the big-endian two's-complement unscaled value.
    Returns the plain decimal text, or None when the value is not base64."""
    if b64 is None:
        return None
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        return None
    if not raw:
        return None
    return format(Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale), "f")


def _connect_decimal(raw: Column, col: ColumnConfig, exact: Column | None) -> Column:
    # A JSON string is base64 (precise mode, the default), scaled by the Connect schema's
    # scale, else the column's; a JSON number (decimal.format=NUMERIC) is the value itself.
    scale = col.scale if col.scale is not None else (col.sql_type.scale or 0)
    decode = F.udf(lambda v: unscaled_decimal_text(v, scale), T.StringType(), useArrow=False)
    decoded = plain_value(decode(raw), T.StringType(), col.sql_type)
    if exact is None:
        return decoded
    return F.when(exact.isNotNull(), plain_value(exact, number_type(col.sql_type), col.sql_type)).otherwise(decoded)


def _time_of_day(unit_per_second: int) -> Decoder:
    def decode(raw: Column, col: ColumnConfig, exact: Column | None) -> Column:
        n = _whole(raw)
        seconds = F.floor(n / unit_per_second)
        fraction = F.lpad((n % unit_per_second).cast("string"), len(str(unit_per_second)) - 1, "0")
        text = F.concat_ws(
            ":",
            F.lpad(F.floor(seconds / 3600).cast("string"), 2, "0"),
            F.lpad(F.floor(seconds / 60 % 60).cast("string"), 2, "0"),
            F.lpad((seconds % 60).cast("string"), 2, "0"),
        )
        return F.when(n.between(0, 24 * 3600 * unit_per_second - 1), F.concat(text, F.lit("."), fraction))

    return decode


SEMANTIC_DECODERS: dict[str, Decoder] = {
    "io.debezium.time.Date": _date_from_days,
    "io.debezium.time.Timestamp": _from_epoch("ms"),
    "io.debezium.time.MicroTimestamp": _from_epoch("us"),
    "io.debezium.time.ZonedTimestamp": _zoned,
    "io.debezium.time.Time": _time_of_day(1000),
    "io.debezium.time.MicroTime": _time_of_day(1_000_000),
    CONNECT_DECIMAL: _connect_decimal,
}


def column_value(raw: Column, dtype: T.DataType, col: ColumnConfig, exact: Column | None = None) -> Column:
    """The conformed value of one column: the semantic decoder when the column has one and
    the raw value is still encoded (text from JSON), else the plain conversion."""
    decoder = SEMANTIC_DECODERS.get(col.semantic or "")
    if decoder is not None and isinstance(dtype, T.StringType):
        value = decoder(raw, col, exact)
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
        values[col.target_name] = column_value(F.col(raw_name(col)), fields[raw_name(col)], col, exact)
    out = df.withColumns(values)
    reason = F.col("_reason")
    for col in table.key_columns:
        reason = F.coalesce(
            reason,
            F.when(F.col(col.target_name).isNull(), F.lit(f"primary key field {col.name} is missing or not a {col.sql_type}")),
        )
    for col in table.value_columns:
        bad = (F.col("_op") != "d") & F.col(raw_name(col)).isNotNull() & F.col(col.target_name).isNull()
        reason = F.coalesce(reason, F.when(bad, F.lit(f"field {col.name} does not convert to {col.sql_type}")))
    return out.withColumn("_reason", reason)

"""Reference decoder of Debezium semantic types, in plain Python.

The generated SQL (`sync/sql/semantic.py`) decodes the same encodings inside the
warehouse; this module is the executable specification it is tested against, and what
the PySpark backfill calls so that a snapshot row and a streamed row decode identically.

`decode_value(semantic, scale, json_value)` returns the natural Python value, and
`decode_for_column(semantic, scale, column_type, json_value)` the value the SQL stores in
a column of that type (decimals rounded to the column's scale, timestamptz aware in UTC):

| semantic                                   | JSON                          | result                      |
|--------------------------------------------|-------------------------------|-----------------------------|
| io.debezium.time.Date                      | days since 1970-01-01         | datetime.date               |
| io.debezium.time.Time / MicroTime / NanoTime | ms / µs / ns past midnight  | datetime.time               |
| io.debezium.time.Timestamp / Micro / Nano  | ms / µs / ns since the epoch  | naive datetime (UTC wall)   |
| io.debezium.time.ZonedTimestamp            | ISO-8601 text, Z or offset    | naive datetime in UTC       |
| io.debezium.time.Year                      | number                        | int                         |
| io.debezium.time.MicroDuration             | µs (INTERVAL)                 | int                         |
| org.apache.kafka.connect.data.Decimal      | base64 two's complement       | decimal.Decimal (scale)     |
| io.debezium.data.VariableScaleDecimal      | {"scale": n, "value": base64} | decimal.Decimal             |
| io.debezium.data.Json                      | JSON text                     | the parsed JSON value       |
| Enum / EnumSet / Uuid / time.Interval      | text                          | str                         |
| bytes                                      | base64                        | bytes                       |
| boolean-int                                | 0 / 1 (or true / false)       | bool                        |

Sub-microsecond digits (NanoTime, NanoTimestamp, ZonedTimestamp with 7-9 fraction
digits) are truncated toward zero, as the SQL does: both warehouses store microseconds.
Decimal scales run from -38 to 38 (a negative scale appends zeros: Oracle NUMBER(p, -s),
Db2 DECFLOAT) and a decoded decimal has at most 38 digits.
A value that cannot be decoded raises `UndecodableValue` (the procedure quarantines the
record); JSON null decodes to None. The TOAST placeholder is detected by
`is_unavailable`, before decoding.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from datetime import date, datetime, time, timedelta, timezone
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation
from typing import Any

from sync.debezium.vocabulary import (
    BASE64_PATTERN,
    EPOCH_UNITS,
    NUMBER_PATTERN,
    TEXT_SEMANTICS,
    TIME_UNITS,
    TOAST_PLACEHOLDER_FORMS,
    ZONED_PATTERN,
    Semantic,
)

EPOCH = datetime(1970, 1, 1)
EPOCH_DATE = date(1970, 1, 1)
MIN_DATETIME = datetime(1, 1, 1)
MAX_DATETIME = datetime(9999, 12, 31, 23, 59, 59, 999999)
MAX_DECIMAL_DIGITS = 38
# Per float family, the (largest, smallest nonzero) magnitudes a column stores, as decimal text.
FloatRanges = Mapping[str, tuple[str, str]]
MAX_DECIMAL_BYTES = 16  # 10**38 - 1 < 2**127: two's complement in 16 bytes
# Exact arithmetic for 38 digits whatever the caller's decimal context.
_EXACT = Context(prec=100, rounding=ROUND_HALF_UP)

BASE64 = re.compile(BASE64_PATTERN)
ZONED = re.compile(ZONED_PATTERN)
NUMBER = re.compile(NUMBER_PATTERN)


class UndecodableValue(ValueError):
    """The JSON value is not a valid encoding of the semantic type."""


def is_unavailable(json_value: Any) -> bool:
    """True for the TOAST placeholder: the column did not change and was not sent."""
    return any(json_value == form for form in TOAST_PLACEHOLDER_FORMS)


def _integer(value: Any) -> int:
    """A JSON number (or numeric string) with an integral value that fits a bigint, as the
    SQL reads it."""
    n = None
    if isinstance(value, bool):
        raise UndecodableValue(f"{value!r} is not a number")
    if isinstance(value, int):
        n = value
    elif isinstance(value, float) and value.is_integer():
        n = int(value)
    elif isinstance(value, str) and NUMBER.match(value):
        number = Decimal(value.strip())
        if number == number.to_integral_value():
            n = int(number)
    if n is None:
        raise UndecodableValue(f"{value!r} is not an integer")
    if not -(2**63) <= n < 2**63:
        raise UndecodableValue(f"{value!r} does not fit a bigint")
    return n


def _epoch_parts(n: int, per_second: int) -> timedelta:
    """Whole seconds plus the remainder in whole microseconds, both truncated toward zero
    (SQL integer division and modulo)."""
    seconds = abs(n) // per_second * (1 if n >= 0 else -1)
    rest = n - seconds * per_second
    micros = abs(rest) * 1_000_000 // per_second * (1 if rest >= 0 else -1)
    return timedelta(seconds=seconds, microseconds=micros)


def _timestamp(n: int, per_second: int) -> datetime:
    try:
        value = EPOCH + _epoch_parts(n, per_second)
    except OverflowError:
        raise UndecodableValue(f"{n} is out of the timestamp range") from None
    if not MIN_DATETIME <= value <= MAX_DATETIME:
        raise UndecodableValue(f"{n} is out of the timestamp range")
    return value


def _time(n: int, per_second: int) -> time:
    if not 0 <= n < 86_400 * per_second:
        raise UndecodableValue(f"{n} is not a time of day")
    return (EPOCH + _epoch_parts(n, per_second)).time()


def _zoned(value: Any) -> datetime:
    m = ZONED.match(value) if isinstance(value, str) else None
    if not m:
        raise UndecodableValue(f"{value!r} is not an ISO-8601 timestamp with Z or an offset")
    _, fraction, zone, _ = m.groups()
    try:
        local = datetime.fromisoformat(f"{value[:10]} {value[11:19]}")
    except ValueError:
        raise UndecodableValue(f"{value!r} is not a valid timestamp") from None
    micros = int((fraction or ".")[1:7].ljust(6, "0"))
    offset = 0
    if zone != "Z":
        offset = (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60 + int(zone[7:9] or 0)) * (-1 if zone[0] == "-" else 1)
    try:
        return local + timedelta(microseconds=micros) - timedelta(seconds=offset)
    except OverflowError:
        raise UndecodableValue(f"{value!r} is out of the timestamp range") from None


def unscaled_from_base64(value: Any) -> int:
    """Kafka Connect Decimal bytes: big-endian two's complement, base64 in JSON."""
    if not isinstance(value, str) or not value or not BASE64.match(value):
        raise UndecodableValue(f"{value!r} is not base64")
    try:
        raw = base64.b64decode(value, validate=True)
    except binascii.Error:
        raise UndecodableValue(f"{value!r} is not base64") from None
    if len(raw) > MAX_DECIMAL_BYTES:
        raise UndecodableValue(f"{value!r} has more than {MAX_DECIMAL_DIGITS} digits")
    n = int.from_bytes(raw, "big", signed=True)
    if abs(n) >= 10**MAX_DECIMAL_DIGITS:
        raise UndecodableValue(f"{value!r} has more than {MAX_DECIMAL_DIGITS} digits")
    return n


def _scaled(unscaled: int, scale: int) -> Decimal:
    """unscaled * 10**-scale. A negative scale (Oracle NUMBER(p, -s), Db2 DECFLOAT) appends
    zeros; the result keeps to 38 digits either way."""
    if not -MAX_DECIMAL_DIGITS <= scale <= MAX_DECIMAL_DIGITS:
        raise UndecodableValue(f"scale {scale} is outside -{MAX_DECIMAL_DIGITS}..{MAX_DECIMAL_DIGITS}")
    if scale >= 0:
        return Decimal(unscaled).scaleb(-scale, context=_EXACT)
    value = unscaled * 10**-scale
    if abs(value) >= 10**MAX_DECIMAL_DIGITS:
        raise UndecodableValue(f"{unscaled}E{-scale} has more than {MAX_DECIMAL_DIGITS} digits")
    return Decimal(value)


def _variable_scale(value: Any) -> Decimal:
    if not isinstance(value, dict) or "value" not in value or "scale" not in value:
        raise UndecodableValue(f"{value!r} is not a {{scale, value}} struct")
    return _scaled(unscaled_from_base64(value["value"]), _integer(value["scale"]))


def _json(value: Any) -> Any:
    if not isinstance(value, str):
        raise UndecodableValue(f"{value!r} is not JSON text")
    try:
        return json.loads(value)
    except ValueError:
        raise UndecodableValue(f"{value!r} is not valid JSON") from None


def _bytes(value: Any) -> bytes:
    if not isinstance(value, str) or not BASE64.match(value):
        raise UndecodableValue(f"{value!r} is not base64")
    return base64.b64decode(value)


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return value == 1
    raise UndecodableValue(f"{value!r} is not 0, 1, true or false")


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise UndecodableValue(f"{value!r} is not text")
    return value


def decode_value(semantic: str | None, scale: int | None, json_value: Any) -> Any:
    """Decode one field's JSON value; None stays None. Raises UndecodableValue."""
    if json_value is None:
        return None
    if semantic in EPOCH_UNITS:
        return _timestamp(_integer(json_value), EPOCH_UNITS[semantic])
    if semantic in TIME_UNITS:
        return _time(_integer(json_value), TIME_UNITS[semantic])
    if semantic == Semantic.DATE:
        days = _integer(json_value)
        try:
            return EPOCH_DATE + timedelta(days=days)
        except OverflowError:
            raise UndecodableValue(f"{days} days is out of the date range") from None
    if semantic == Semantic.ZONED_TIMESTAMP:
        return _zoned(json_value)
    if semantic in (Semantic.YEAR, Semantic.MICRO_DURATION):
        return _integer(json_value)
    if semantic == Semantic.DECIMAL:
        return _scaled(unscaled_from_base64(json_value), scale or 0)
    if semantic == Semantic.VARIABLE_SCALE_DECIMAL:
        return _variable_scale(json_value)
    if semantic == Semantic.JSON:
        return _json(json_value)
    if semantic in TEXT_SEMANTICS:
        return _text(json_value)
    if semantic == Semantic.BYTES:
        return _bytes(json_value)
    if semantic == Semantic.BOOLEAN_INT:
        return _boolean(json_value)
    if semantic is None:
        return json_value
    raise ValueError(f"unknown semantic type {semantic!r}")


def conform_decimal(value: Decimal, precision: int, scale: int) -> Decimal:
    """A decoded decimal in a DECIMAL(precision, scale) column: rounded half away from
    zero to the scale; more integer digits than fit is undecodable (as in the SQL)."""
    try:
        rounded = value.quantize(Decimal(1).scaleb(-scale, context=_EXACT), context=_EXACT)
    except InvalidOperation:
        raise UndecodableValue(f"{value} does not fit decimal({precision},{scale})") from None
    if rounded.copy_abs() >= Decimal(10 ** (precision - scale)):
        raise UndecodableValue(f"{value} does not fit decimal({precision},{scale})")
    return rounded


def conform_float(value: Decimal, family: str, float_ranges: FloatRanges | None = None) -> float:
    """A number in a real/double column: stored when its magnitude is within the engine's
    (largest, smallest nonzero) limits, both inclusive (`float_ranges` of a dialect; by
    default those every supported engine stores, `sync.sql.dialect.LOADABLE_FLOAT_RANGES`),
    else undecodable, as in the SQL."""
    from sync.sql.dialect import LOADABLE_FLOAT_RANGES

    largest, smallest = (Decimal(limit) for limit in (float_ranges or LOADABLE_FLOAT_RANGES)[family])
    magnitude = value.copy_abs()
    if magnitude > largest or (value != 0 and magnitude < smallest):
        raise UndecodableValue(f"{value} is outside the {family} range")
    return float(value)


def decode_for_column(
    semantic: str | None, scale: int | None, column_type: str, json_value: Any, float_ranges: FloatRanges | None = None
) -> Any:
    """What the generated SQL stores in a column of `column_type` (a pipeline-file type
    such as "decimal(12,2)" or "timestamptz") for a field declared with `semantic`:
    `decode_value`, then landed in the type as the SQL lands it (reals and doubles within
    `float_ranges`, see `conform_float`). Fields without a semantic type are returned
    unchanged."""
    from sync.sql.types import parse_type

    if semantic is None:
        return json_value
    decoded = decode_value(semantic, scale, json_value)
    if decoded is None:
        return None
    t = parse_type(column_type)
    if isinstance(decoded, Decimal):
        if t.family == "decimal":
            return conform_decimal(decoded, t.precision or 18, t.scale or 0)
        return conform_float(decoded, t.family, float_ranges)
    if isinstance(decoded, datetime):
        if t.family == "timestamptz":
            return decoded.replace(tzinfo=timezone.utc)
        return decoded.date() if t.family == "date" else decoded
    if isinstance(decoded, date) and t.family == "timestamp":
        return datetime(decoded.year, decoded.month, decoded.day)
    if semantic == Semantic.JSON and t.family != "super":
        decoded = json_value  # the JSON text itself
    return _fits(decoded, t)


def _fits(value: Any, t: Any) -> Any:
    """Integers and text land in their column only within its range and byte length."""
    from sync.sql.types import INTEGER_BOUNDS

    if isinstance(value, int) and not isinstance(value, bool) and t.is_integer:
        lo, hi = INTEGER_BOUNDS[t.family]
        if not lo <= value <= hi:
            raise UndecodableValue(f"{value} does not fit {t}")
    if isinstance(value, str) and t.byte_limit is not None and len(value.encode()) > t.byte_limit:
        raise UndecodableValue(f"{value!r} is longer than {t}")
    return value

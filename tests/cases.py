"""Debezium semantic-type cases that both decoders are held to: the SQL of the generated
procedure (tests/test_semantic_types.py) and the backfill's Spark conform
(tests/spark/test_semantic_parity.py), each also against the reference decoder
`sync.debezium.decode.decode_for_column`.

The exact values follow Debezium's documentation of the temporal, decimal and JSON types
(https://debezium.io/documentation/reference/stable/connectors/mysql.html#mysql-data-types,
.../connectors/postgresql.html#postgresql-data-types): Date counts days since the epoch,
Timestamp/MicroTimestamp/NanoTimestamp milli/micro/nanoseconds, Time/MicroTime/NanoTime
since midnight, ZonedTimestamp is ISO 8601 text with an offset, Decimal is the base64 of the
unscaled big-endian two's complement with the scale in the schema, VariableScaleDecimal a
{scale, value} struct, Json the document as text."""

from __future__ import annotations

import base64
from datetime import date, datetime, time, timezone
from decimal import Decimal

from sync.debezium.decode import conform_decimal, decode_for_column

DATE = "io.debezium.time.Date"
TS, MTS, NTS = "io.debezium.time.Timestamp", "io.debezium.time.MicroTimestamp", "io.debezium.time.NanoTimestamp"
TIME, MTIME, NTIME = "io.debezium.time.Time", "io.debezium.time.MicroTime", "io.debezium.time.NanoTime"
ZONED = "io.debezium.time.ZonedTimestamp"
YEAR = "io.debezium.time.Year"
DEC = "org.apache.kafka.connect.data.Decimal"
VSD = "io.debezium.data.VariableScaleDecimal"
JSON_T = "io.debezium.data.Json"
MAX38 = "SztMqFqGxHoJiiI//////w=="  # base64 of 10**38 - 1, the largest unscaled decimal(38, s)
MIN38 = "tMSzV6V5O4X2dd3AAAAAAQ=="  # -(10**38 - 1)
UTC = timezone.utc

# (semantic type, column type, scale, [(JSON value, the value stored)]).
SEMANTIC_DECODINGS = [
    (
        DATE,
        "date",
        None,
        [(19000, date(2022, 1, 8)), (-1, date(1969, 12, 31)), (-25567, date(1900, 1, 1)), (0, date(1970, 1, 1))],
    ),
    (DATE, "timestamp", None, [(19000, datetime(2022, 1, 8))]),
    (TIME, "time", None, [(45296789, time(12, 34, 56, 789000)), (0, time(0))]),
    (MTIME, "time", None, [(45296789000, time(12, 34, 56, 789000)), (86399999999, time(23, 59, 59, 999999))]),
    (NTIME, "time", None, [(45296789123456, time(12, 34, 56, 789123))]),
    (
        TS,
        "timestamp",
        None,
        [
            (1600000000250, datetime(2020, 9, 13, 12, 26, 40, 250000)),
            (-1, datetime(1969, 12, 31, 23, 59, 59, 999000)),
            (-2208988800000, datetime(1900, 1, 1)),
        ],
    ),
    (
        MTS,
        "timestamp",
        None,
        [
            (1700000000654321, datetime(2023, 11, 14, 22, 13, 20, 654321)),
            (-1000000000000001, datetime(1938, 4, 24, 22, 13, 19, 999999)),
            (1529507596945104, datetime(2018, 6, 20, 15, 13, 16, 945104)),
        ],
    ),
    (
        NTS,
        "timestamp",
        None,
        [
            (1700000000654321987, datetime(2023, 11, 14, 22, 13, 20, 654321)),
            (-1500, datetime(1969, 12, 31, 23, 59, 59, 999999)),
        ],
    ),
    (MTS, "timestamptz", None, [(1700000000654321, datetime(2023, 11, 14, 22, 13, 20, 654321, tzinfo=UTC))]),
    (
        ZONED,
        "timestamptz",
        None,
        [
            ("2023-03-23T22:00:10.123456Z", datetime(2023, 3, 23, 22, 0, 10, 123456, tzinfo=UTC)),
            ("2023-03-23T07:10:00Z", datetime(2023, 3, 23, 7, 10, tzinfo=UTC)),
            ("2023-03-23T12:00:00+05:30", datetime(2023, 3, 23, 6, 30, tzinfo=UTC)),
            ("1969-07-20T20:17:40.123456789-04:00", datetime(1969, 7, 21, 0, 17, 40, 123456, tzinfo=UTC)),
            ("2023-01-01T00:00:00.5+00:00", datetime(2023, 1, 1, 0, 0, 0, 500000, tzinfo=UTC)),
            # Offsets with seconds: Java's offset id of a local mean time (Africa/Monrovia
            # before 1972, Europe/Amsterdam before 1937), as Oracle TIMESTAMP WITH TIME ZONE sends it.
            ("1970-01-01T00:00:00-00:44:30", datetime(1970, 1, 1, 0, 44, 30, tzinfo=UTC)),
            ("1900-01-01T00:00:00.25+00:19:32", datetime(1899, 12, 31, 23, 40, 28, 250000, tzinfo=UTC)),
        ],
    ),
    (ZONED, "timestamp", None, [("2023-12-31T23:30:00.1-01:00", datetime(2024, 1, 1, 0, 30, 0, 100000))]),
    (YEAR, "integer", None, [(2023, 2023), (1901, 1901)]),
    (
        DEC,
        "decimal(12,2)",
        2,
        [("/+0peQ==", Decimal("-12345.67")), ("AA==", Decimal("0.00")), ("D9I=", Decimal("40.50")), ("C+o=", Decimal("30.50"))],
    ),
    (
        DEC,
        "decimal(38,0)",
        0,
        [
            ("BVqlTTjlJn7q", Decimal(98765432109876543210)),
            (MAX38, Decimal(10**38 - 1)),
            (MIN38, Decimal(-(10**38 - 1))),
            ("K2c=", Decimal(11111)),
            ("/w==", Decimal(-1)),
        ],
    ),
    (DEC, "decimal(10,1)", 1, [("Cw==", Decimal("1.1"))]),
    (DEC, "decimal(12,3)", 3, [("ALxfFg==", Decimal("12345.110"))]),
    (DEC, "decimal(38,38)", 38, [(MAX38, Decimal("0." + "9" * 38))]),
    (
        VSD,
        "decimal(20,4)",
        None,
        [
            ({"scale": 3, "value": "ALxfFg=="}, Decimal("12345.1100")),
            ({"scale": 0, "value": "/w=="}, Decimal("-1.0000")),
            ({"scale": 6, "value": "/+0peQ=="}, Decimal("-1.2346")),
        ],
    ),
    # Negative scales: Oracle NUMBER(36, -2) (AbstractOracleDatatypesTest.java, Debezium's
    # Oracle connector tests: 36 nines at scale -2), Db2 DECFLOAT 1E+10 (unscaled 1, scale -10).
    (DEC, "decimal(38,0)", -2, [("AMCXznvJBxWzS58P/////w==", Decimal("9" * 36 + "00")), ("AA==", Decimal(0))]),
    (
        VSD,
        "decimal(38,10)",
        None,
        [
            ({"scale": -10, "value": "AQ=="}, Decimal(10**10)),
            ({"scale": -5, "value": "/w=="}, Decimal(-100000)),
            ({"scale": -38, "value": "AA=="}, Decimal(0)),
        ],
    ),
    ("io.debezium.time.MicroDuration", "bigint", None, [(-110451600000000, -110451600000000), ("-93784560000", -93784560000)]),
    ("io.debezium.time.Interval", "varchar(64)", None, [("P1Y2M3DT4H5M6.78S", "P1Y2M3DT4H5M6.78S")]),
    # decimal.handling.mode = string / double: no semantic type, the plain number, rounded
    # half away from zero to the column's scale.
    (
        None,
        "decimal(12,2)",
        None,
        [
            ("-12345.67", Decimal("-12345.67")),
            (-12345.67, Decimal("-12345.67")),
            ("1.005", Decimal("1.01")),
            (-0.125, Decimal("-0.13")),
        ],
    ),
    (JSON_T, "super", None, [('{"a": [1, 2], "b": null}', {"a": [1, 2], "b": None}), ("[]", [])]),
    (JSON_T, "varchar(100)", None, [('{"a":1}', '{"a":1}')]),
    ("io.debezium.data.Enum", "varchar(16)", None, [("RED", "RED")]),
    ("io.debezium.data.EnumSet", "varchar(16)", None, [("a,b", "a,b")]),
    (
        "io.debezium.data.Uuid",
        "varchar(36)",
        None,
        [("0b4f7d4e-4d1e-4f7a-9d2a-3f8e6f3b9a11", "0b4f7d4e-4d1e-4f7a-9d2a-3f8e6f3b9a11")],
    ),
    ("bytes", "varbyte(16)", None, [("AQID", b"\x01\x02\x03")]),
    ("boolean-int", "boolean", None, [(1, True), (0, False)]),
]

# (semantic type, column type, scale, [JSON values that do not decode]): the procedure
# quarantines the record, the backfill rejects the row, both naming the field and type.
SEMANTIC_UNDECODABLE = [
    (DATE, "date", None, ["abc"]),
    (DEC, "decimal(12,2)", 2, ["!!notbase64", 12345]),
    (DEC, "decimal(38,0)", 0, ["AEs7TKhahsR6CYoiQAAAAAA="]),  # 10**38: 39 digits
    (
        ZONED,
        "timestamptz",
        None,
        [
            "2023-03-23 22:00:10",
            "2023-03-23T24:00:00Z",
            "2016-12-31T23:59:60Z",
            "2023-03-23T22:00:10+01:00:0",
            "2023-03-23T22:00:10+0100",
            # The offset moves the time out of 0001-01-01 .. 9999-12-31 (UTC).
            "0001-01-01T00:00:00+00:00:01",
            "0001-01-01T00:30:00+01:00",
            "9999-12-31T23:30:00-01:00",
            # An offset of a day or more is none (Java's ZoneOffset: at most 18:00).
            "0001-01-02T00:00:00+30:00",
            "9999-12-30T23:00:00-30:00",
        ],
    ),
    (DEC, "decimal(38,0)", -2, ["B4XuENXaRtkA9Daf/////w=="]),  # 37 nines at scale -2: 39 digits
    (VSD, "decimal(38,10)", None, [{"scale": -39, "value": "AQ=="}, {"scale": -2147483648, "value": "AQ=="}]),
    ("io.debezium.time.MicroDuration", "bigint", None, ["P1Y", 1.5]),
    (MTIME, "time", None, [86400000000]),
    (VSD, "decimal(20,4)", None, [{"scale": 2}]),
    (NTS, "timestamp", None, [2**63]),  # not a bigint
    (JSON_T, "varchar(100)", None, ["{bad", {"a": 1}]),
    ("io.debezium.data.Enum", "varchar(16)", None, ["é" * 9]),  # 18 bytes
    (YEAR, "smallint", None, [40000]),
]


def semantic_column(name: str, typ: str, semantic: str | None, scale: int | None) -> str:
    """A pipeline column as a TOML inline table."""
    extra = (f', semantic = "{semantic}"' if semantic else "") + (f", scale = {scale}" if scale is not None else "")
    return f'{{ name = "{name}", type = "{typ}"{extra} }}'


def reference_value(semantic: str | None, typ: str, scale: int | None, value: object) -> object:
    """What the reference decoder stores for a JSON value (raises UndecodableValue for what
    the procedure quarantines)."""
    if semantic is None:  # decimal.handling.mode = string / double: the plain number
        p, s = (int(x) for x in typ[len("decimal(") : -1].split(","))
        return conform_decimal(Decimal(str(value)), p, s)
    return decode_for_column(semantic, scale, typ, value)


def base64_decimal(unscaled: int) -> str:
    """Debezium's Decimal encoding of an unscaled value: BigInteger.toByteArray in base64."""
    length = max(1, (unscaled.bit_length() + 8) // 8)  # minimal two's complement
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()


def zoned_text(dt: datetime, digits: str, offset_seconds: int) -> str:
    """A ZonedTimestamp text: the local time, optional fraction digits, then Z, ±hh:mm or
    ±hh:mm:ss (an offset with seconds, as Java writes a local mean time's)."""
    off = offset_seconds
    zone = "Z" if off == 0 else f"{'+' if off > 0 else '-'}{abs(off) // 3600:02d}:{abs(off) // 60 % 60:02d}"
    zone += f":{abs(off) % 60:02d}" if off % 60 else ""
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + (f".{digits}" if digits else "") + zone


# (column type, JSON number text, stored on PostgreSQL, stored on Redshift): the float range
# limits of each engine (`float_ranges` of its dialect). The texts are how Java prints the
# extremes (Float.MAX_VALUE 3.4028235E38, Float.MIN_NORMAL 1.17549435E-38, Float.MIN_VALUE
# 1.4E-45, Double.MAX_VALUE, Double.MIN_NORMAL, Double.MIN_VALUE): Debezium's JSON converter
# writes a FLOAT32/FLOAT64 field through Jackson, which prints Java's Float/Double.toString.
# PostgreSQL stores every number that does not round to infinity or to zero (subnormals
# too); Redshift documents REAL as "a range of around 1E-37 to 1E+37" and DOUBLE PRECISION
# "around 1E-307 to 1E+308" (Numeric types, Floating-Point types). Every text is one a Java
# float or double prints (a JSON reader that parses numbers as doubles, like Spark's, reads
# them exactly).
FLOAT_RANGE_CASES = [
    ("real", "3.4028235E38", True, False),
    ("real", "-3.4028235E38", True, False),
    ("real", "1.17549435E-38", True, False),
    ("real", "1.4E-45", True, False),
    ("real", "9.999999E36", True, True),
    ("real", "1.0E-37", True, True),
    ("real", "0.0", True, True),
    ("real", "3.4028236E38", False, False),  # rounds to infinity
    ("real", "5.0E-46", False, False),  # rounds to zero
    ("double", "1.7976931348623157E308", True, False),
    ("double", "1.0E308", True, True),
    ("double", "2.2250738585072014E-308", True, False),
    ("double", "4.9E-324", True, False),
    ("double", "1.0E-307", True, True),
    ("double", "1.8E308", False, False),
]

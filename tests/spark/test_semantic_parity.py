"""The backfill decodes every Debezium semantic type exactly like the SQL path: Spark's
conformed values against the reference decoder `sync.debezium.decode.decode_for_column` (which
tests/test_semantic_types.py holds to the SQL on PostgreSQL), value by value, including
the rejects and their reasons. One Spark job per table of cases."""

from __future__ import annotations

import json
import struct
from datetime import date, datetime, time
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.sql import types as T

from backfill.conform import conform
from backfill.normalise import debezium_events, flat_rows, json_rows
from sync.debezium.decode import UndecodableValue, conform_float
from tests.cases import (
    DATE,
    DEC,
    FLOAT_RANGE_CASES,
    JSON_T,
    MAX38,
    MTIME,
    MTS,
    NTIME,
    NTS,
    SEMANTIC_DECODINGS,
    SEMANTIC_UNDECODABLE,
    TIME,
    TS,
    UTC,
    VSD,
    YEAR,
    ZONED,
    base64_decimal,
    reference_value,
    semantic_column,
    zoned_text,
)
from tests.helpers import make_pipeline
from tests.spark_envs import property_examples

pytestmark = pytest.mark.spark

# Values at and past each range limit, and malformed ones, beyond the shared cases:
# (semantic type, column type, scale, [JSON value, or (JSON value, the value stored)]).
# Every value is compared with the reference decoder, and a value it cannot decode must
# be rejected with the procedure's reason.
LIMITS = [
    (DATE, "date", None, ["19000", 19000.0, -719162, 2932896, -719163, 2932897, True, 1.5, {"a": 1}]),
    (DATE, "timestamp", None, [-1]),
    (TIME, "time", None, [86399999, 86400000, -1]),
    (MTIME, "time", None, [-1, "45296789000"]),
    (NTIME, "time", None, [86399999999999, 999, 86400000000000]),
    (TS, "timestamp", None, [-62135596800000, -62135596800001, 253402300799999, 253402300800000, "1e3", 1e3]),
    (TS, "date", None, [1600000000250, -1]),
    (MTS, "timestamp", None, [2**63 - 1, -(2**63)]),
    (MTS, "timestamptz", None, [-1]),
    (NTS, "timestamp", None, [-999, 2**63 - 1, -(2**63)]),
    (
        ZONED,
        "timestamptz",
        None,
        [
            "2023-03-23T07:10:00.1234567Z",
            "0001-01-01T00:00:00Z",
            "0001-01-01T00:30:00+01:00",
            "9999-12-31T23:59:59.999999999Z",
            "9999-12-31T23:30:00-01:00",
            "2023-02-30T00:00:00Z",
            "2023-03-23T22:00:10",
            "2023-03-23T22:00:10.Z",
            1679608810,
            "2023-03-23T22:00:10+01",
        ],
    ),
    (ZONED, "date", None, ["2023-12-31T23:30:00-01:00"]),
    (YEAR, "integer", None, ["1999", 2023.0, 1.5, "MMXX", True]),
    (DEC, "decimal(12,2)", 2, [40.5, "", "AQ=", True, {"value": "AA=="}]),
    (DEC, "decimal(6,1)", 3, ["ALxfFg==", "AYaf", "AYag", "/nlg"]),  # rounded half away from zero; 12345.110 does not fit
    (DEC, "double", 2, ["/+0peQ==", MAX38]),
    (
        VSD,
        "decimal(20,4)",
        None,
        [
            {"value": "AA=="},
            {"scale": 39, "value": "AQ=="},
            {"scale": -1, "value": "AQ=="},
            {"scale": "2", "value": "AQ=="},
            {"scale": 2, "value": 1},
            '{"scale": 2, "value": "AQ=="}',
        ],
    ),
    (JSON_T, "super", None, ['"x"', "{bad", {"a": 1}, 7]),
    (JSON_T, "varchar(10)", None, [('{"a":1}', '{"a":1}'), "{bad", '{"a": "long text"}', {"a": 1}]),
    ("io.debezium.data.Enum", "varchar(16)", None, [""]),
    ("boolean-int", "boolean", None, [True, 2, "1", 1.0]),
]
# One column per entry; bytes columns are refused by the backfill (tested below).
CASES = [
    *((semantic, typ, scale, pairs) for semantic, typ, scale, pairs in SEMANTIC_DECODINGS if semantic != "bytes"),
    *SEMANTIC_UNDECODABLE,
    *LIMITS,
]


def _pipeline(groups: list[tuple[str | None, str, int | None]]):
    columns = ['{ name = "id", type = "integer" }']
    columns += [semantic_column(f"c{k}", typ, semantic, scale) for k, (semantic, typ, scale) in enumerate(groups)]
    return make_pipeline(
        f'[[tables]]\nname = "sem"\ntopic = "sem"\nprimary_key = ["id"]\ncolumns = [{", ".join(columns)}]\n'
    ).table("sem")


def _collect(spark, table, rows: list[tuple[int, int, object]]) -> dict[int, tuple[object, str | None]]:
    """rows: (id, column index, JSON value) -> {id: (conformed value, reject reason)}, in one Spark job."""
    lines = [json.dumps({"id": i, f"c{k}": v}) for i, k, v in rows]
    df = json_rows(spark.createDataFrame([(line,) for line in lines], "value string"), table, F.lit(None))
    typed = conform(df, table)
    columns = []
    for col in table.columns[1:]:
        value = F.col(col.target_name)
        if col.sql_type.family == "timestamptz":
            value = value.cast(T.TimestampNTZType())  # the UTC instant, read as UTC wall clock
        columns.append((value.cast("string") if col.sql_type.family == "double" else value).alias(col.target_name))
    by_id = {r["id"]: r for r in typed.select("id", "_reason", *columns).collect()}
    return {i: (by_id[i][f"c{k}"], by_id[i]["_reason"]) for i, k, _ in rows}


def _land(col, spark_value):
    """Spark's value as the warehouse returns it (time text -> time, JSON text -> value)."""
    if spark_value is None:
        return None
    family = col.sql_type.family
    if family == "time":
        return time.fromisoformat(spark_value)
    if family == "timestamptz":
        return spark_value.replace(tzinfo=UTC)
    if family == "super":
        return json.loads(spark_value)
    if family == "double":
        return float(spark_value)
    return spark_value


def _check(table, groups, rows, got) -> None:
    for i, k, value in rows:
        col = table.columns[k + 1]
        semantic, typ, scale = groups[k]
        label = f"{semantic} {typ} {value!r}"
        stored, reason = got[i]
        try:
            want = reference_value(semantic, typ, scale, value)
        except UndecodableValue:
            assert reason == f"field c{k} does not convert {f'from {semantic} ' if semantic else ''}to {col.sql_type}", label
            continue
        assert reason is None, (label, reason)
        assert _land(col, stored) == want, (label, stored, want)


def test_every_semantic_type_decodes_like_the_sql(spark):
    groups = [(semantic, typ, scale) for semantic, typ, scale, _ in CASES]
    table = _pipeline(groups)
    rows, exact = [], {}
    for k, (*_, values) in enumerate(CASES):
        for v in values:
            value, expected = v if isinstance(v, tuple) else (v, None)
            if expected is not None:
                exact[len(rows)] = expected
            rows.append((len(rows), k, value))
    got = _collect(spark, table, rows)
    for i, expected in exact.items():  # the documented examples, exactly
        assert _land(table.columns[rows[i][1] + 1], got[i][0]) == expected, rows[i]
    _check(table, groups, rows, got)


def test_a_key_that_does_not_decode_is_rejected_with_the_procedures_reason(spark):
    table = make_pipeline(
        '[[tables]]\nname = "k"\ntopic = "k"\nprimary_key = ["day"]\n'
        'columns = [{ name = "day", type = "date", semantic = "io.debezium.time.Date" }]\n'
    ).table("k")
    lines = spark.createDataFrame([('{"day": 19000}',), ('{"day": "soon"}',)], "value string")
    got = sorted(conform(json_rows(lines, table, F.lit(None)), table).select("day", "_reason").collect(), key=str)
    assert [tuple(r) for r in got] == [
        (None, "primary key field day is missing or does not convert from io.debezium.time.Date to date"),
        (date(2022, 1, 8), None),
    ]


def test_typed_snapshot_columns_still_encoded_are_decoded(spark):
    """Parquet columns holding Debezium's numbers (epoch counts, base64 text) decode like
    JSON; a column that already holds dates or decimals is taken as it is."""
    table = make_pipeline(
        '[[tables]]\nname = "p"\ntopic = "p"\nprimary_key = ["id"]\ncolumns = [{ name = "id", type = "integer" },'
        ' { name = "ts", type = "timestamp", semantic = "io.debezium.time.NanoTimestamp" },'
        ' { name = "d", type = "date", semantic = "io.debezium.time.Date" },'
        ' { name = "amount", type = "decimal(12,2)", semantic = "org.apache.kafka.connect.data.Decimal", scale = 2 }]\n'
    ).table("p")
    df = spark.createDataFrame(
        [(1, -1500, date(2022, 1, 8), "/+0peQ=="), (2, 1700000000654321987, date(1969, 12, 31), "bad!")],
        "id int, ts long, d date, amount string",
    )
    got = conform(flat_rows(df, table, F.lit(datetime(2024, 1, 1)))[0], table).select("id", "ts", "d", "amount", "_reason")
    assert [tuple(r) for r in got.orderBy("id").collect()] == [
        (1, datetime(1969, 12, 31, 23, 59, 59, 999999), date(2022, 1, 8), Decimal("-12345.67"), None),
        (
            2,
            datetime(2023, 11, 14, 22, 13, 20, 654321),
            date(1969, 12, 31),
            None,
            "field amount does not convert from org.apache.kafka.connect.data.Decimal to decimal(12,2)",
        ),
    ]


def test_bytes_columns_are_refused_with_a_clear_message(spark):
    table = _pipeline([("bytes", "varbyte(16)", None)])
    lines = spark.createDataFrame([('{"id": 1, "c0": "AQID"}',)], "value string")
    with pytest.raises(ValueError, match=r"table sem, column c0: .*varbyte\(16\) is not supported by the backfill"):
        conform(json_rows(lines, table, F.lit(None)), table)


def test_decimal_key_of_a_delete_comes_from_the_kafka_key(spark):
    table = make_pipeline(
        '[[tables]]\nname = "k"\ntopic = "k"\nprimary_key = ["code"]\ncolumns = [{ name = "code", type = "decimal(20,0)",'
        ' semantic = "org.apache.kafka.connect.data.Decimal", scale = 0 }, { name = "n", type = "integer" }]\n'
    ).table("k")
    records = spark.createDataFrame(
        [
            ('{"before": {"code": null}, "after": null, "op": "d"}', '{"code": "BVqlTTjlJn7q"}', 0, 1),
            ('{"before": null, "after": {"code": "/w==", "n": 1}, "op": "c"}', '{"code": "/w=="}', 0, 2),
        ],
        "value string, key string, _kafka_partition long, _kafka_offset long",
    ).withColumn("_record", F.col("value"))
    got = conform(debezium_events(records, table), table).select("code", "_op", "_reason").orderBy("_kafka_offset")
    assert [tuple(r) for r in got.collect()] == [(Decimal(98765432109876543210), "d", None), (Decimal(-1), "c", None)]


# The numeric and time semantic types, with values around and past every range limit.
PROPERTY_GROUPS = [
    (TS, "timestamp", None),
    (MTS, "timestamptz", None),
    (NTS, "timestamp", None),
    (DATE, "date", None),
    (TIME, "time", None),
    (MTIME, "time", None),
    (NTIME, "time", None),
    (ZONED, "timestamp", None),
    (DEC, "decimal(20,4)", 6),
    (VSD, "decimal(38,6)", None),
    (YEAR, "smallint", None),
]
_epoch = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-(10**17), 10**17), st.integers(-(10**13), 10**13))
_unscaled = st.one_of(st.integers(-(10**38) + 1, 10**38 - 1), st.integers(-(10**20), 10**20), st.integers(-(2**130), 2**130))
PROPERTY_VALUES = [
    _epoch,
    _epoch,
    _epoch,
    st.integers(-800_000, 3_000_000),
    st.integers(-10, 86_400_010),
    st.integers(-10, 86_400_000_010),
    st.integers(-10, 86_400_000_000_010),
    st.builds(
        zoned_text,
        st.datetimes(datetime(1, 1, 2), datetime(9999, 12, 30)),
        st.one_of(st.just(""), st.from_regex(r"\A[0-9]{1,9}\Z")),
        st.one_of(st.integers(-24 * 60, 24 * 60).map(lambda m: m * 60), st.integers(-24 * 3600, 24 * 3600)),
    ),
    st.builds(base64_decimal, _unscaled),
    st.fixed_dictionaries({"scale": st.integers(-1, 40), "value": st.builds(base64_decimal, _unscaled)}),
    st.integers(-40_000, 40_000),
]


@settings(max_examples=property_examples(20))
@given(st.lists(st.one_of(*[st.tuples(st.just(k), v) for k, v in enumerate(PROPERTY_VALUES)]), min_size=50, max_size=50))
def test_property_spark_decodes_like_the_reference(spark, picks):
    table = _pipeline(PROPERTY_GROUPS)
    rows = [(i, k, value) for i, (k, value) in enumerate(picks)]
    _check(table, PROPERTY_GROUPS, rows, _collect(spark, table, rows))


def test_plain_floats_keep_to_the_range_every_engine_stores(spark):
    """A real/double field as Java prints its extremes (tests/cases.py FLOAT_RANGE_CASES):
    the backfill keeps what every warehouse stores (the files may be loaded into either)
    and rejects the rest with the procedure's reason, like the reference decoder."""
    table = make_pipeline(
        '[[tables]]\nname = "f"\ntopic = "f"\nprimary_key = ["id"]\n'
        'columns = [{ name = "id", type = "integer" }, { name = "r", type = "real" }, { name = "d", type = "double" }]\n'
    ).table("f")
    column = {"real": "r", "double": "d"}
    lines = [f'{{"id": {i}, "{column[typ]}": {text}}}' for i, (typ, text, _, _) in enumerate(FLOAT_RANGE_CASES)]
    df = json_rows(spark.createDataFrame([(line,) for line in lines], "value string"), table, F.lit(None))
    got = {
        r["id"]: r
        for r in conform(df, table)
        .select("id", "_reason", F.col("r").cast("double").alias("r"), F.col("d").cast("string").alias("d"))
        .collect()
    }
    for i, (typ, text, _, _) in enumerate(FLOAT_RANGE_CASES):
        name = column[typ]
        try:
            want = conform_float(Decimal(text), typ)
        except UndecodableValue:
            assert got[i]["_reason"] == f"field {name} does not convert to {typ}", text
            continue
        assert got[i]["_reason"] is None, text
        stored = float(got[i][name])
        assert stored == (struct.unpack("f", struct.pack("f", want))[0] if typ == "real" else want), text


def test_a_field_feeding_two_columns_fills_both(spark):
    """A field listed twice (its type changing: docs/operations.md) lands in each column
    with that column's conversion (a JSON snapshot)."""
    table = make_pipeline(
        '[[tables]]\nname = "t"\ntopic = "t"\nprimary_key = ["id"]\ncolumns = [{ name = "id", type = "integer" }, '
        '{ name = "n", type = "integer" }, { name = "n", target = "n_text", type = "varchar(20)" }]\n'
    ).table("t")
    lines = ['{"id": 1, "n": 7}', '{"id": 2, "n": "x"}']
    df = json_rows(spark.createDataFrame([(line,) for line in lines], "value string"), table, F.lit(None))
    got = sorted(tuple(r) for r in conform(df, table).select("id", "n", "n_text", "_reason").collect())
    assert got == [(1, 7, "7", None), (2, None, "x", "field n does not convert to integer")]

"""Floats hash alike in Spark and PostgreSQL, and exactly: the canonical text of a real or
double (`sync/sql/float_text.py`, `backfill/float_text.py`) is the same in both engines
for every value, and names the value (it reads back as the same double; two doubles
never share a text). Each engine's own text would not do: PostgreSQL prints 1e21 as
`1e+21` and 1e-7 as `1e-07` (float8out, shortest round-trip digits), Spark as `1.0E21`
and `1.0E-7` (Java's Double.toString).

The values: any double, NaN and both infinities included (PostgreSQL stores them: "In
addition to ordinary numeric values, the floating-point types have several special
values: Infinity, -Infinity, NaN", PostgreSQL manual, 8.1.3 Floating-Point Types), both
zeros, subnormals, and any real (float4), with 1e21, 1e-7, 0.1, -0.0 and the extremes
always among them.
"""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pyspark.sql import types as T

from backfill.float_text import float_text as spark_float_text
from backfill.reconcile import row_checksum
from sync.sql.buckets import canonical_text
from sync.sql.buckets import row_checksum as sql_row_checksum
from sync.sql.dialect import dialect_for
from sync.sql.float_text import finite_text, float_text
from sync.sql.types import SqlType
from tests.helpers import make_pipeline
from tests.spark_envs import property_examples

pytestmark = pytest.mark.spark

EDGES = [
    1e21, 1e-7, 0.1, -0.0, 0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 2.225073858507201e-308,
    1.7976931348623157e308, -1.7976931348623157e308, 1.0, 2.0, 0.5, 3.0, 2.0**53, 2.0**-1022,
    math.inf, -math.inf, math.nan, 123456.789, -1e300,
]  # fmt: skip
doubles = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True)
reals = st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)


def read_back(text: str) -> float:
    """The double a canonical text names."""
    special = {"0": 0.0, "NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
    if text in special:
        return special[text]
    significand, exponent = text.split("p")
    m, q = int(significand), int(exponent)
    assert 2**52 <= abs(m) < 2**53, text  # one text per value
    return math.ldexp(m, q)


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def in_postgres(wh, column_type: str, values: list[float]) -> list[str]:
    wh.execute(f"DROP TABLE IF EXISTS f; CREATE TABLE f (i int, v {column_type})")
    for i, v in enumerate(values):
        wh.execute("INSERT INTO f VALUES (%s, %s)", (i, v))
    return [t for (t,) in wh.query(f"SELECT {float_text('v')} FROM f ORDER BY i")]


def in_spark(spark, spark_type: T.DataType, values: list[float]) -> list[str]:
    schema = T.StructType([T.StructField("i", T.IntegerType()), T.StructField("v", spark_type)])
    df = spark.createDataFrame(list(enumerate(values)), schema)
    return [r["t"] for r in df.orderBy("i").select(spark_float_text(df["v"]).alias("t")).collect()]


@settings(max_examples=property_examples(20), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(doubles, min_size=1, max_size=30))
@example(EDGES)
def test_a_double_has_one_exact_text_in_spark_and_postgres(wh, spark, values):
    pg = in_postgres(wh, "double precision", values)
    assert in_spark(spark, T.DoubleType(), values) == pg
    for v, text in zip(values, pg, strict=True):
        assert same(read_back(text), v), (v, text)  # exact: the text names the value


@settings(max_examples=property_examples(10), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(reals, min_size=1, max_size=30))
@example([1e21, 1e-7, 0.1, -0.0, 1e-45, -1e-45, 1.1754942e-38, 3.4028235e38, math.inf, math.nan])
def test_a_real_has_the_text_of_its_double_in_spark_and_postgres(wh, spark, values):
    as_real = [struct.unpack("f", struct.pack("f", v))[0] for v in values]
    pg = in_postgres(wh, "real", as_real)
    assert in_spark(spark, T.FloatType(), as_real) == pg
    for v, text in zip(as_real, pg, strict=True):
        assert same(read_back(text), v), (v, text)


def test_the_engines_own_texts_differ_so_they_are_not_used(wh, spark):
    """Why a form of our own: the casts to text disagree on the same doubles."""
    (pg,) = wh.query("SELECT CAST(CAST(1e21 AS double precision) AS varchar), CAST(CAST(1e-7 AS double precision) AS varchar)")
    sp = spark.sql("SELECT CAST(CAST(1e21 AS double) AS string), CAST(CAST(1e-7 AS double) AS string)").collect()[0]
    assert list(pg) == ["1e+21", "1e-07"] and list(sp) == ["1.0E21", "1.0E-7"]


def test_row_hashes_of_float_columns_agree(wh, spark):
    """The row checksum reconcile compares (keyed and keyless) takes floats now."""
    pipeline = make_pipeline(
        '[[tables]]\nname = "m"\ntopic = "db.m"\nprimary_key = []\norder_by = "mysql-binlog"\n'
        'columns = [{ name = "r", type = "real" }, { name = "d", type = "double precision" }]'
    )
    columns = list(pipeline.table("m").columns)
    rows = [(0.1, 1e21), (-0.0, 1e-7), (None, 5e-324), (3.4028235e38, None)]
    wh.execute("CREATE TABLE m (r real, d double precision)")
    for r in rows:
        wh.execute("INSERT INTO m VALUES (%s, %s)", r)
    in_sql = sorted(h for (h,) in wh.query(f"SELECT {sql_row_checksum(dialect_for('postgres', 'cdc'), columns, 't')} FROM m t"))
    schema = T.StructType([T.StructField("r", T.FloatType()), T.StructField("d", T.DoubleType())])
    df = spark.createDataFrame(rows, schema)
    assert sorted(r["h"] for r in df.select(row_checksum(columns).alias("h")).collect()) == in_sql
    assert canonical_text("x", SqlType("real")) == float_text("x")


def test_the_finite_form_is_total_whatever_the_engine_evaluates_first(wh):
    # Redshift may evaluate a CASE branch for rows the CASE does not select (the reason of
    # PostgresDialect.total_cast), so the finite form alone must take zero, NaN and the
    # infinities without an error (LN(0), an infinite significand cast to bigint): NULL.
    texts = wh.query(
        "SELECT " + finite_text("v") + " FROM (VALUES (CAST(0 AS double precision)), ('-0'), ('NaN'), ('Infinity'), "
        "('-Infinity'), (NULL), (0.1)) t (v)"
    )
    assert [t for (t,) in texts] == [None] * 6 + ["7205759403792794p-56"]

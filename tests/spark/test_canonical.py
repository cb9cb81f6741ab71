"""The bucket and checksum functions give the same numbers in Spark and in PostgreSQL
for the same values (property test over every supported type, real engines)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from backfill.conform import spark_type
from backfill.reconcile import hash_number, key_text, row_checksum
from sync.operations.runner import deploy
from sync.sql.buckets import ReconcileSql
from sync.sql.dialect import dialect_for
from tests.helpers import make_pipeline

pytestmark = pytest.mark.spark

PIPELINE = make_pipeline(
    """
[[tables]]
name = "things"
topic = "db.things"
primary_key = ["ID", "CODE"]
columns = [
  { name = "ID", type = "bigint" },
  { name = "CODE", type = "varchar(64)" },
  { name = "QTY", type = "integer" },
  { name = "PRICE", type = "decimal(12,2)" },
  { name = "RATE", type = "decimal(20,8)" },
  { name = "ACTIVE", type = "boolean" },
  { name = "DAY", type = "date" },
  { name = "AT", type = "timestamp" },
]
"""
)
TABLE = PIPELINE.table("things")
text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
rows = st.lists(
    st.tuples(
        st.integers(-(2**63), 2**63 - 1),
        text,
        st.none() | st.integers(-(2**31), 2**31 - 1),
        st.none() | st.decimals(min_value=-(10**10) + 1, max_value=10**10 - 1, places=2),
        st.none() | st.decimals(min_value=-(10**12) + 1, max_value=10**12 - 1, places=8),
        st.none() | st.booleans(),
        st.none() | st.dates(min_value=datetime(1900, 1, 1).date(), max_value=datetime(2200, 1, 1).date()),
        st.none() | st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1)),
    ),
    min_size=1,
    max_size=40,
    unique_by=lambda r: (r[0], r[1]),
)


@settings(max_examples=3, suppress_health_check=[HealthCheck.function_scoped_fixture])  # the table is reset per example
@given(rows)
def test_spark_and_postgres_agree(wh, spark, data):
    deploy(wh, PIPELINE, "test")
    wh.execute('DELETE FROM cdc."things"')
    cols = [c.target_name for c in TABLE.columns]
    for r in data:
        wh.execute(f'INSERT INTO cdc."things" ({", ".join(cols)}) VALUES ({", ".join(["%s"] * len(cols))})', r)
    sql = ReconcileSql(dialect_for("postgres", "cdc"), PIPELINE, TABLE, 7, list(TABLE.columns))
    in_sql = {k: (c, ts is None) for k, c, _pos, ts, _ in wh.query(sql.bucket_rows(list(range(7))))}

    from pyspark.sql import types as T

    schema = T.StructType([T.StructField(c.target_name, spark_type(c.sql_type)) for c in TABLE.columns])
    df = spark.createDataFrame([tuple(Decimal(v) if isinstance(v, Decimal) else v for v in r) for r in data], schema)
    in_spark = {
        r["k"]: (r["c"], True)
        for r in df.select(key_text(TABLE).alias("k"), row_checksum(list(TABLE.columns)).alias("c")).collect()
    }
    assert in_spark == in_sql
    counts_sql = {b: (n, s) for b, n, s in wh.query(sql.bucket_counts())}
    counts_spark = {
        r["b"]: (r["n"], r["s"])
        for r in df.groupBy(F.pmod(hash_number(key_text(TABLE)), F.lit(7)).alias("b"))
        .agg(F.count(F.lit(1)).alias("n"), F.sum(hash_number(row_checksum(list(TABLE.columns)))).alias("s"))
        .collect()
    }
    assert counts_spark == counts_sql

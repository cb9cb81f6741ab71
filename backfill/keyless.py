"""A table without a primary key on the Spark side (docs/correctness.md, "Tables without a
primary key"): the snapshot is a multiset of rows, loaded whole, and reconcile compares
rows by their hash (`sync/sql/keyless_backfill.py` is the warehouse side).

Only a snapshot's reads (`op` "r", and every row of a table-shaped export) load: a change
event (c, u, d) in the input is rejected with its reason. A keyless change acts on a row
found by its values, which only the stream's procedure applies exactly (pending deletes,
re-sent copies); the changes after the snapshot are the stream's."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from backfill.reconcile import hash_number, row_checksum
from sync.config import TableConfig

CHANGE_EVENT = (
    "a change event: a backfill of a table without a primary key loads a snapshot's reads; "
    "the stream applies the changes after it"
)


def keyless_reasons(typed: DataFrame) -> DataFrame:
    """`typed` (conformed, with `_op` and `_reason`) with every change event rejected."""
    change = F.when(F.col("_op") != "r", F.lit(CHANGE_EVENT))
    return typed.withColumn("_reason", F.coalesce(F.col("_reason"), change))


def with_row_buckets(rows: DataFrame, table: TableConfig, buckets: int) -> DataFrame:
    """Live snapshot rows with their row hash (the row checksum over every column) and
    its bucket, and the row's values (to show a differing row)."""
    checksum = row_checksum(list(table.columns))
    live = rows.where(~F.col("_delete"))
    return live.select(
        checksum.alias("row_hash"),
        F.pmod(hash_number(checksum), F.lit(buckets)).alias("bucket"),
        *[c.target_name for c in table.columns],
    )


def row_bucket_counts(hashed: DataFrame) -> DataFrame:
    """Per bucket: the rows, and the sum of their hash numbers."""
    return hashed.groupBy("bucket").agg(F.count(F.lit(1)).alias("rows"), F.sum(hash_number(F.col("row_hash"))).alias("checksum"))

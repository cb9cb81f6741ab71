"""Reconcile on the snapshot side: the Spark twins of `sync/sql/buckets.py` (same
canonical text, key text, bucket and checksum for the same values)."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from backfill.float_text import float_text
from sync.config import ColumnConfig, TableConfig
from sync.sql.buckets import CHECKSUM_FAMILIES, FLOAT_FAMILIES, KEY_SEPARATOR
from sync.sql.types import SqlType


def canonical_text(c: Column, t: SqlType) -> Column:
    f = t.family
    if f in ("smallint", "integer", "bigint", "decimal", "char", "varchar"):
        return c.cast("string")
    if f in FLOAT_FAMILIES:
        return float_text(c)
    if f == "boolean":
        return F.when(c, F.lit("true")).when(~c, F.lit("false"))
    if f == "date":
        return F.date_format(c, "yyyy-MM-dd")
    if f in ("timestamp", "timestamptz"):
        return F.date_format(c, "yyyy-MM-dd HH:mm:ss.SSSSSS")  # session time zone is UTC
    raise ValueError(f"reconcile cannot compare {t} columns; usable types: {', '.join(CHECKSUM_FAMILIES)}")


def key_text(table: TableConfig) -> Column:
    parts = [canonical_text(F.col(c.target_name), c.sql_type) for c in table.key_columns]
    return F.concat_ws(KEY_SEPARATOR, *parts) if len(parts) > 1 else parts[0]


def hash_number(text: Column) -> Column:
    return F.conv(F.substring(F.md5(text), 1, 8), 16, 10).cast("long")


def row_checksum(columns: list[ColumnConfig]) -> Column:
    if not columns:
        return F.lit("")
    parts = [F.coalesce(F.md5(canonical_text(F.col(c.target_name), c.sql_type)), F.lit("N")) for c in columns]
    return F.md5(F.concat(*parts))


def with_buckets(rows: DataFrame, table: TableConfig, buckets: int, checksum: list[ColumnConfig]) -> DataFrame:
    """Live snapshot rows (deletes dropped) with key_text, bucket, checksum and where they
    sit in the source (`_source_pos`, `_source_ts`: `sync/sql/handover.py` compares them)."""
    live = rows.where(~F.col("_delete"))
    text = key_text(table)
    return live.select(
        text.alias("key_text"),
        F.pmod(hash_number(text), F.lit(buckets)).alias("bucket"),
        row_checksum(checksum).alias("checksum"),
        "_source_pos",
        "_source_ts",
    )


def bucket_counts(keyed: DataFrame, use_checksum: bool) -> DataFrame:
    chk = hash_number(F.col("checksum")) if use_checksum else F.lit(0).cast("long")
    return keyed.groupBy("bucket").agg(F.count(F.lit(1)).alias("rows"), F.sum(chk).alias("checksum")).orderBy("bucket")

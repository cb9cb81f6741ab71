"""The backfill as one pure pipeline: normalised rows -> typed rows, latest per key, in
the stage's column order; plus the rows that cannot be loaded, with their reason."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, Observation, Window
from pyspark.sql import functions as F

from backfill.conform import conform
from backfill.keyless import keyless_reasons
from sync.config import TableConfig

SKIPPED_REASONS = ("tombstone",)  # not applied and not an error (the procedure skips them too)


@dataclass
class Prepared:
    rows: DataFrame  # stage columns, one row per key (a table without a key: every row)
    rejects: DataFrame  # _kafka_partition, _kafka_offset, reason, record
    counted: Observation  # counts the rejects while `rows` is first evaluated
    notes: list[str]  # what the snapshot lacks (columns loaded as NULL)

    def rejected(self) -> int:
        """The number of rejects, counted in the same pass as the first action on `rows`
        (no second evaluation of the snapshot). Waits for that action: call it after.
        (When no row is left to stage, adaptive execution would prune the observation
        with the empty plan: `backfill.session.JOB_SQL_CONF` keeps it.)"""
        return int(self.counted.get["rejected"])


def latest_per_key(df: DataFrame, table: TableConfig) -> DataFrame:
    """One row per key: the latest by source position, then Kafka order as the procedure
    orders (offsets within a partition; across partitions, which a key's records span once
    the topic's partition count grew, the Kafka time, then partition and offset), then
    source time; ROW_NUMBER, so a tie never yields two. The Kafka time is the newest Kafka
    timestamp of the key's records in its partition up to the record: monotone along the
    partition like the procedure's (which takes every record of the partition in the
    batch), without sorting a whole Kafka partition on one executor."""
    keys = [F.col(c.target_name) for c in table.key_columns]
    along = Window.partitionBy(*keys, "_kafka_partition").orderBy("_kafka_offset")
    kafka_time = F.max("_kafka_timestamp").over(along.rowsBetween(Window.unboundedPreceding, Window.currentRow))
    order = [F.col("_source_pos").desc_nulls_last()] if table.order_by != "kafka" else []
    order += [
        F.col("_kafka_time").desc_nulls_last(),
        F.col("_kafka_partition").desc_nulls_last(),
        F.col("_kafka_offset").desc_nulls_last(),
        F.col("_source_ts").desc_nulls_last(),
        # Deterministic among snapshot rows of one key with no position or offset.
        F.xxhash64(*[F.col(c.target_name) for c in table.columns]).desc(),
    ]
    w = Window.partitionBy(*keys).orderBy(*order)
    ranked = df.withColumn("_kafka_time", kafka_time).withColumn("_rn", F.row_number().over(w))
    return ranked.where(F.col("_rn") == 1).drop("_rn", "_kafka_time")


def prepare(normalised: DataFrame, table: TableConfig, notes: list[str] | None = None) -> Prepared:
    typed = conform(normalised, table)
    if table.is_keyless:
        typed = keyless_reasons(typed)
    is_reject = F.col("_reason").isNotNull() & ~F.col("_reason").isin(*SKIPPED_REASONS)
    counted = Observation()
    applicable = typed.observe(counted, F.count(F.when(is_reject, 1)).alias("rejected")).where(F.col("_reason").isNull())
    rejects = typed.where(is_reject).select(
        "_kafka_partition", "_kafka_offset", F.col("_reason").alias("reason"), F.col("_record").alias("record")
    )
    # A table without a primary key is a multiset: every row of the snapshot loads.
    latest = applicable if table.is_keyless else latest_per_key(applicable, table)
    rows = latest.select(
        *[c.target_name for c in table.columns],
        "_source_ts",
        "_source_pos",
        "_kafka_partition",
        "_kafka_offset",
        (F.col("_op") == "d").alias("_delete"),
    )
    return Prepared(rows, rejects, counted, list(notes or []))

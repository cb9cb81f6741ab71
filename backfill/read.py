"""The input edge: a snapshot path and format -> the normalised DataFrame."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from backfill.normalise import debezium_events, event_lines, flat_rows, json_rows
from sync.config import TableConfig

FORMATS = ("parquet", "json", "csv", "debezium", "s3-sink")
# <topic>+<partition>+<start offset>.json[.gz]: the Confluent/Aiven S3 sink file name.
SINK_FILE_OFFSET = r"\+(\d+)\.json(?:\.gz)?$"


def _lines(spark: SparkSession, path: str, partitioned: bool) -> DataFrame:
    """Every line of every file with its file, its index in the file and the file's start
    offset (exact record positions: one file is read whole, then its lines are numbered)."""
    reader = spark.read.option("basePath", path) if partitioned else spark.read
    raw = reader.text(path, wholetext=True)
    parts = F.posexplode(F.split(F.regexp_replace("value", r"\r?\n$", ""), r"\r?\n")).alias("pos", "line")
    exploded = raw.select(
        (F.col("partition").cast("long") if partitioned else F.lit(None).cast("long")).alias("line_partition"),
        F.col("_metadata.file_path").alias("file"),
        F.col("_metadata.file_name").alias("file_name"),
        parts,
    )
    start = F.regexp_extract("file_name", SINK_FILE_OFFSET, 1) if partitioned else F.lit("0")
    return exploded.where(F.trim("line") != "").select(
        "line", "line_partition", "file", "pos", start.cast("long").alias("start_offset")
    )


def sink_topic_dir(path: str, topic: str) -> str:
    """The S3 sink's `topics/<topic>` folder under `path`, or `path` itself."""
    for candidate in (os.path.join(path, "topics", topic), os.path.join(path, topic)):
        if os.path.isdir(candidate):
            return candidate
    return path


def snapshot_timestamp(value: datetime | None) -> Column | None:
    return F.lit(value.replace(tzinfo=None)).cast("timestamp_ntz") if value is not None else None


@dataclass
class Snapshot:
    rows: DataFrame  # the normalised shape (`backfill.normalise`)
    notes: list[str] = field(default_factory=list)  # what the snapshot lacks, loaded as NULL


def read_snapshot(spark: SparkSession, table: TableConfig, path: str, fmt: str, snapshot_time: datetime | None) -> Snapshot:
    ts = snapshot_timestamp(snapshot_time)
    if fmt == "parquet":
        return Snapshot(*flat_rows(spark.read.parquet(path), table, ts))
    if fmt == "csv":
        return Snapshot(*flat_rows(spark.read.option("header", "true").option("inferSchema", "false").csv(path), table, ts))
    if fmt == "json":
        return Snapshot(json_rows(spark.read.text(path), table, ts))
    if fmt in ("debezium", "s3-sink"):
        partitioned = fmt == "s3-sink"
        base = sink_topic_dir(path, table.topic) if partitioned else path
        events = debezium_events(event_lines(_lines(spark, base, partitioned)), table)
        if ts is not None:
            events = events.withColumn("_source_ts", F.coalesce("_source_ts", ts))
        return Snapshot(events)
    raise ValueError(f"unknown snapshot format {fmt!r}; choose one of: {', '.join(FORMATS)}")

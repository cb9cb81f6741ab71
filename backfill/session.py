"""A SparkSession for local runs (the CLI, the demo, the tests)."""

from __future__ import annotations

import os
import sys
import typing as t
from pathlib import Path

if t.TYPE_CHECKING:
    from pyspark.sql import SparkSession


def local_session(master: str = "local[*]", shuffle_partitions: int = 4) -> SparkSession:
    """UTC session time zone: target `timestamp` columns hold UTC wall-clock values, and
    Debezium's epoch-based semantic types are decoded in UTC like the SQL path does."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers use this interpreter
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local only: no hostname lookup
    quiet_logging = Path(__file__).with_name("log4j2.properties")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master(master)
        .appName("redshift-sync-backfill")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.default.parallelism", str(shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.ansi.enabled", "true")
        # Latest-per-key keeps the first row of each key's window. Spark would also sort
        # every input partition before the shuffle to drop losers early: a second full
        # sort that only pays off with many rows per key on a network shuffle.
        .config("spark.sql.optimizer.windowGroupLimitThreshold", "-1")
        .config("spark.ui.showConsoleProgress", "false")
        # A batch job on a few cores: the throughput collector spends less CPU than G1 (the
        # default), whose concurrent threads compete with the job's own.
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={quiet_logging.as_uri()} -XX:+UseParallelGC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session

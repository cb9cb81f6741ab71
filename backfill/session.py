"""A SparkSession for local runs (the CLI, the demo, the tests)."""

from __future__ import annotations

import os
import sys
import typing as t
from pathlib import Path

if t.TYPE_CHECKING:
    from pyspark.sql import SparkSession


# SQL settings the transforms are written for, on any cluster: UTC (target `timestamp`
# columns hold UTC wall-clock values, Debezium's epoch types decode in UTC), ANSI
# arithmetic (an overflow fails instead of wrapping; conversions use try_cast), and
# latest-per-key without Spark's early per-partition sort (a second full sort that only
# pays off with many rows per key on a network shuffle), and the rejects' observation kept
# when every row is rejected (adaptive execution replaces a plan whose result is empty, and
# drops the observation with it: Spark 4 then fails to read it, Spark 3.5 waits forever).
JOB_SQL_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.ansi.enabled": "true",
    "spark.sql.optimizer.windowGroupLimitThreshold": "-1",
    "spark.sql.adaptive.optimizer.excludedRules": "org.apache.spark.sql.execution.adaptive.AQEPropagateEmptyRelation",
}


def configure(session: SparkSession) -> SparkSession:
    """Apply JOB_SQL_CONF to a session someone else built (spark-submit, Glue)."""
    for key, value in JOB_SQL_CONF.items():
        session.conf.set(key, value)
    return session


def local_session(master: str = "local[*]", shuffle_partitions: int = 4) -> SparkSession:
    """A local session with JOB_SQL_CONF, quiet logging and no UI."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers use this interpreter
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local only: no hostname lookup
    quiet_logging = Path(__file__).with_name("log4j2.properties")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master)
    for key, value in JOB_SQL_CONF.items():
        builder = builder.config(key, value)
    session = (
        builder.appName("redshift-sync-backfill")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.default.parallelism", str(shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.showConsoleProgress", "false")
        # A batch job on a few cores: the throughput collector spends less CPU than G1 (the
        # default), whose concurrent threads compete with the job's own.
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={quiet_logging.as_uri()} -XX:+UseParallelGC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session

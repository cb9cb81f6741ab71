"""The output edge: staged rows as Parquet (stage column order), rejects as JSON lines."""

from __future__ import annotations

from pyspark.sql import DataFrame


def write_stage(rows: DataFrame, path: str) -> None:
    """Parquet in exactly the stage's column order: Redshift's COPY maps Parquet columns
    by position, not by name."""
    rows.write.mode("overwrite").parquet(path)


def write_rejects(rejects: DataFrame, path: str) -> None:
    rejects.coalesce(1).write.mode("overwrite").json(path)

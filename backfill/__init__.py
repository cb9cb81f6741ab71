"""The PySpark backfill: read a snapshot, keep the latest row per key, conform it to the
target table, and write Parquet in the stage's column order. Pure DataFrame transforms
(`normalise`, `conform`, `transform`), I/O only in `read` and `write`; `job.py` is the
spark-submit entry point."""

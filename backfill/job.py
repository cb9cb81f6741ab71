"""spark-submit entry point: prepare a snapshot for loading.

    spark-submit --py-files redshift_sync.zip backfill/job.py \\
        --config pipeline.toml --table customer --snapshot s3://bucket/snap/ --format parquet \\
        --snapshot-time 2024-05-01T00:00:00Z --output s3://bucket/staging/customer/ \\
        --rejects s3://bucket/staging/customer-rejects/

Writes the latest row per key, conformed to the target, as Parquet in stage column order
(ready for `COPY ... FORMAT AS PARQUET`), and the rows that cannot be loaded, with their
reason, as JSON lines. Prints one JSON line of counts. `redshift-sync backfill` runs the
same transforms locally and then loads and merges.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

if __package__ in (None, ""):  # run as a script by spark-submit: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backfill.read import FORMATS, read_snapshot  # noqa: E402
from backfill.transform import Prepared, prepare  # noqa: E402
from backfill.write import write_rejects, write_stage  # noqa: E402
from sync.config import TableConfig, load_pipeline  # noqa: E402


def parse_time(text: str | None) -> datetime | None:
    """ISO 8601; a zone is converted to UTC (target timestamps are UTC)."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--snapshot-time {text!r} is not an ISO 8601 time like 2024-05-01T00:00:00Z") from None
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


VALUES = ("debezium", "decoded")


def decoded_table(table: TableConfig) -> TableConfig:
    """The table read as a plain export holds it (`--values decoded`: `row_to_json`, a
    `COPY ... TO` JSON or CSV, a Parquet export): every value is taken as decoded, in its
    column's plain form, whatever Debezium encoding the column has on the wire."""
    return table.model_copy(update={"columns": [c.model_copy(update={"semantic": None, "scale": None}) for c in table.columns]})


def run(
    spark, table: TableConfig, snapshot: str, fmt: str, snapshot_time: datetime | None, values: str = "debezium"
) -> Prepared:
    """`values`: "debezium" when the snapshot's values are in Debezium's wire encoding
    (base64 decimals, epoch days...), "decoded" for a plain export."""
    if values not in VALUES:
        raise ValueError(f"--values {values!r}: choose debezium (Debezium's wire encoding) or decoded (a plain export)")
    if values == "decoded":
        if fmt in ("debezium", "s3-sink"):
            raise ValueError(f"--values decoded does not apply to {fmt} snapshots: change events are always wire-encoded")
        table = decoded_table(table)
    snap = read_snapshot(spark, table, snapshot, fmt, snapshot_time)
    return prepare(snap.rows, table, snap.notes)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--snapshot", required=True)
    ap.add_argument("--format", default="parquet", choices=FORMATS)
    ap.add_argument("--snapshot-time")
    ap.add_argument("--output", required=True)
    ap.add_argument("--rejects", required=True)
    args = ap.parse_args(argv)

    from pyspark.sql import SparkSession

    pipeline, _ = load_pipeline(args.config)
    table = pipeline.table(args.table)
    spark = SparkSession.builder.appName(f"redshift-sync-backfill-{table.name}").getOrCreate()
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    prepared = run(spark, table, args.snapshot, args.format, parse_time(args.snapshot_time))
    write_stage(prepared.rows, args.output)
    rejected = prepared.rejected()
    if rejected:  # writing them evaluates the snapshot again
        write_rejects(prepared.rejects, args.rejects)
    staged = spark.read.parquet(args.output).count()
    print(json.dumps({"table": table.name, "staged": staged, "rejected": rejected, "output": args.output}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""spark-submit / Glue entry point: prepare a snapshot for loading, where the data is.

    spark-submit --py-files redshift_sync.zip job.py --config pipeline.toml --table customer \\
        --snapshot s3://bucket/snapshots/customer/ --format parquet \\
        --snapshot-time 2024-05-01T00:00:00Z --output s3://bucket/backfill/customer/run-1/

Writes the run folder `backfill/stage.py` describes: the latest row per key, conformed to
the target, as Parquet in stage column order (ready for `COPY ... FORMAT AS PARQUET`), the
rejects with their reason, a COPY manifest and a summary; prints the summary as one JSON
line. `redshift-sync backfill --staged <run folder>` loads it and merges. `--config` may be
a local file (shipped with `--files` / Glue's `--extra-files`) or an s3:// URL. Arguments
it does not know (Glue adds --JOB_NAME and others) are ignored. Executors import only
PySpark and the project's own pure-Python code (`redshift-sync package-backfill`).
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
from backfill.session import configure  # noqa: E402
from backfill.stage import DATA, MANIFEST, REJECTS, STAGE_VERSION, SUMMARY, HadoopFolder, join, manifest, table_fingerprint  # noqa: E402
from backfill.transform import Prepared, prepare  # noqa: E402
from backfill.write import write_rejects, write_stage  # noqa: E402
from sync.config import Pipeline, TableConfig, load_pipeline, parse_pipeline  # noqa: E402
from sync.times import parse_utc  # noqa: E402

VALUES = ("debezium", "decoded")


def decoded_table(table: TableConfig) -> TableConfig:
    """The table read as a plain export holds it (`--values decoded`: `row_to_json`, a
    `COPY ... TO` JSON or CSV, a Parquet export): every value is taken as decoded, in its
    column's plain form, whatever Debezium encoding the column has on the wire. An order
    column (format = "row") that had an encoding no longer holds the topic's form of its
    value: such rows carry no position, and the merge never lets them replace a row the
    stream wrote."""
    update: dict = {"columns": [c.model_copy(update={"semantic": None, "scale": None}) for c in table.columns]}
    order = table.order_column
    if order is not None and order.semantic is not None:
        update["order_by"] = "kafka"
    return table.model_copy(update=update)


def run(spark, table: TableConfig, snapshot: str, fmt: str, snapshot_time: datetime | None, values: str = "debezium") -> Prepared:
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


def load_config(spark, url: str) -> Pipeline:
    """The pipeline file from a local path, or through Hadoop's FileSystem (s3://)."""
    if "://" not in url:
        return load_pipeline(url)[0]
    import tomllib

    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(url)
    stream = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).open(path)
    try:
        text = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()
    return parse_pipeline(tomllib.loads(text), url)


def stage_snapshot(
    spark,
    pipeline: Pipeline,
    table: TableConfig,
    snapshot: str,
    fmt: str,
    snapshot_time: datetime | None,
    values: str,
    output: str,
) -> dict:
    """Prepare the snapshot and write the run folder; returns the summary."""
    folder = HadoopFolder(spark, output)
    for name in (SUMMARY, MANIFEST, REJECTS):  # first: a folder used before is incomplete until the end
        folder.delete(name)
    prepared = run(spark, table, snapshot, fmt, snapshot_time, values)
    write_stage(prepared.rows, join(output, DATA))
    rejected = prepared.rejected()
    if rejected:  # writing them evaluates the snapshot again
        write_rejects(prepared.rejects, join(output, REJECTS))
    parts = folder.parts(DATA)
    folder.write_json(MANIFEST, manifest(parts))
    summary = {
        "stage_version": STAGE_VERSION,
        "table": table.name,
        "schema": pipeline.schema,
        "fingerprint": table_fingerprint(pipeline, table),
        "columns": prepared.rows.columns,
        "staged": spark.read.parquet(*[url for url, _ in parts]).count() if parts else 0,  # the listed files
        "rejected": rejected,
        "notes": prepared.notes,
        "snapshot": snapshot,
        "format": fmt,
        "values": values,
        "snapshot_time": snapshot_time.isoformat() if snapshot_time else None,
        "data_files": len(parts),
        "spark_version": spark.version,
        "written_at": datetime.now(timezone.utc).replace(tzinfo=None).isoformat(timespec="seconds"),
    }
    folder.write_json(SUMMARY, summary)  # last: a folder with a summary is complete
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--snapshot", required=True)
    ap.add_argument("--format", default="parquet", choices=FORMATS)
    ap.add_argument("--snapshot-time")
    ap.add_argument("--values", default="debezium", choices=VALUES)
    ap.add_argument("--output", required=True, help="the run folder (s3://bucket/prefix/run/ or a local folder)")
    args, _glue_arguments = ap.parse_known_args(argv)

    from pyspark.sql import SparkSession

    spark = configure(SparkSession.builder.appName(f"redshift-sync-backfill-{args.table}").getOrCreate())
    pipeline = load_config(spark, args.config)
    table = pipeline.table(args.table)
    summary = stage_snapshot(
        spark,
        pipeline,
        table,
        args.snapshot,
        args.format,
        parse_utc(args.snapshot_time, "--snapshot-time"),
        args.values,
        args.output,
    )
    print(json.dumps(summary, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

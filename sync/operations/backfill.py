"""`redshift-sync backfill`: run the Spark transforms locally, load the stage, merge
(a cluster's run folder: `run_folder.py`).

PostgreSQL: the Parquet part files Spark wrote are streamed one record batch at a time
into `COPY <stage> FROM STDIN` (nothing is collected on the driver). Redshift: the part
files are uploaded to `--staging` with a manifest, loaded with `COPY ... FORMAT AS
PARQUET`, and removed afterwards. Either way the load and the merge run in one
transaction that holds the table's watermark and target locks.
"""

from __future__ import annotations

import io
import itertools
import json
import shutil
import tempfile
import time
import typing as t
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from sync.config import Pipeline, TableConfig
from sync.extras import require_pyarrow
from sync.operations.conflicts import conflict_policy, retry_conflicts
from sync.operations.keyless_backfill import check_replace
from sync.sql.backfill_merge import BackfillSql
from sync.sql.keyless_backfill import KeylessBackfillSql
from sync.warehouse import Warehouse, WarehouseError

Progress = Callable[[str], None]


@dataclass
class BackfillResult:
    table: str
    staged: int = 0  # rows after latest-per-key
    loaded: int = 0  # rows written to the target
    deleted: int = 0  # snapshot deletes applied
    keyless: bool = False  # a table without a primary key: the snapshot replaced its rows
    replaced: int = 0  # and these are the stored rows it replaced
    kept_newer: int = 0  # target rows as new as the snapshot row or newer (the stream's, or an earlier backfill's)
    kept_deleted: int = 0  # keys the stream deleted after the snapshot row
    retries: int = 0  # load-and-merge transactions stopped by a serialization conflict and run again
    rejected: int = 0
    rejects_path: str | None = None
    rejects_sample: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # e.g. a column the snapshot lacks, loaded as NULL
    history_versions: int | None = None  # history mode: snapshot rows that became versions below the stream
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def part_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("part-*.parquet") if p.stat().st_size > 0)


def copy_parquet_into(wh: Warehouse, stage_sql_name: str, files: list[Path], progress: Progress) -> int:
    """Stream Parquet files into COPY FROM STDIN (CSV), one record batch at a time."""
    require_pyarrow("loading a backfill stage into PostgreSQL")
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    options = pacsv.WriteOptions(include_header=False, quoting_style="all_valid")
    rows = 0
    try:
        with wh.copy_from(f"COPY {stage_sql_name} FROM STDIN (FORMAT csv)") as copy:
            for i, path in enumerate(files, start=1):
                for batch in pq.ParquetFile(path).iter_batches(batch_size=65_536):
                    buf = io.BytesIO()
                    pacsv.write_csv(batch, buf, options)
                    copy.write(buf.getvalue())
                    rows += batch.num_rows
                progress(f"COPY part {i}/{len(files)}: {rows:,} rows so far")
    except WarehouseError as exc:
        raise WarehouseError(f"loading the backfill stage failed: {exc}", exc.sqlstate) from exc
    return rows


def first_json_lines(directory: Path, limit: int) -> list[dict]:
    """The first `limit` records of the JSON-lines part files in `directory`."""
    records: list[dict] = []
    for path in sorted(directory.glob("part-*.json")):
        with path.open(encoding="utf-8") as lines:
            records += [json.loads(line) for line in itertools.islice(lines, limit - len(records))]
    return records


def merge_stage(wh: Warehouse, sql: BackfillSql | KeylessBackfillSql) -> dict[str, int]:
    """Run the merge steps on a loaded stage (inside the caller's transaction and locks)."""
    counts: dict[str, int] = {}
    for step in sql.merge():
        n = int(wh.scalar(step.sql) or 0) if step.query else wh.execute(step.sql)
        if step.count:
            counts[step.count] = counts.get(step.count, 0) + n
    return counts


def empty_target_primary_key(wh: Warehouse, sql: BackfillSql) -> str | None:
    """The name of the target's primary key when the target is empty and the engine keeps
    an index for it (PostgreSQL), else None. Called under the merge's locks."""
    if not sql.d.indexed_primary_key or not wh.scalar(sql.target_is_empty()):
        return None
    return wh.scalar(sql.primary_key_name())


def load_and_merge(
    wh: Warehouse,
    pipeline: Pipeline,
    table: TableConfig,
    files: list[Path],
    progress: Progress,
    staging: str | None = None,
    iam_role: str | None = None,
    manifest_url: str | None = None,
    check_rows: Callable[[int], None] | None = None,
) -> dict[str, int]:
    """Load the staged Parquet and merge it; returns the merge's counts (and `retries`: the
    transactions stopped by a serialization conflict and run again). PostgreSQL reads the
    Parquet `files`; Redshift COPYs `manifest_url` (a stage a cluster wrote) or uploads the
    files to `staging` first and removes them afterwards. `check_rows` sees the number of
    rows loaded before the merge, and may refuse them (raise: nothing is changed). A table
    without a primary key is replaced by the stage instead, where that is exact
    (`sync/operations/keyless_backfill.py`)."""
    sql = BackfillSql(wh.dialect.bind_schema(pipeline.schema), pipeline, table)
    keyless = KeylessBackfillSql(sql.d, pipeline, table) if table.is_keyless else None
    staged_s3 = None
    if sql.d.copy_reads_s3:
        if not iam_role or not (staging or manifest_url):
            raise ValueError(
                "a Redshift backfill needs a COPY role ([backfill] iam_role in the pipeline file, or --iam-role) "
                "that may read the staged objects (s3:GetObject, s3:ListBucket on the prefix; a Parquet COPY also "
                "needs the bucket in the cluster's region), and --staging s3://bucket/prefix/ unless the stage is "
                "already in S3 (--staged)"
            )
        if manifest_url is None:
            from sync.aws import s3

            client = s3.client()
            # A folder of its own per run: backfills of other tables may share --staging.
            run_folder = f"{(staging or '').rstrip('/')}/{table.name}-{uuid.uuid4().hex[:12]}/"
            staged_s3 = s3.upload_for_copy(client, files, run_folder, progress)
            manifest_url = staged_s3.manifest_url
    wh.execute(sql.drop_stage_table())
    wh.execute(sql.stage_table())

    def load_merge_once() -> dict[str, int]:
        with wh.transaction():
            wh.execute(sql.lock())
            wh.execute(sql.clear_stage())
            if manifest_url is not None:
                wh.execute(sql.copy_from_s3(manifest_url, iam_role or ""))
            else:
                copy_parquet_into(wh, sql.stage, files, progress)
            if check_rows is not None:
                check_rows(int(wh.scalar(sql.count_stage())))
            if keyless is not None:
                check_replace(wh, keyless)
                return merge_stage(wh, keyless)
            primary_key = empty_target_primary_key(wh, sql)
            if primary_key:
                progress("the target is empty: loading it without its primary-key index")
                wh.execute(sql.drop_primary_key(primary_key))
            counts = merge_stage(wh, sql)
            if primary_key:
                wh.execute(sql.add_primary_key(primary_key))
                progress(f"rebuilt the primary key {primary_key}")
        return counts

    try:
        # One transaction, run again whole after a serialization conflict.
        counts, retries = retry_conflicts(conflict_policy(pipeline), load_merge_once)
        counts["retries"] = retries
    finally:
        if staged_s3 is not None:
            s3.delete_keys(client, staged_s3.bucket, staged_s3.keys)
            progress(f"removed {len(staged_s3.keys)} staging objects")
    return counts


def localise_snapshot(snapshot: str, work: Path, progress: Progress) -> str:
    """Local Spark has no s3a connector: an s3:// snapshot is downloaded first (boto3)."""
    if not snapshot.startswith("s3://"):
        if not Path(snapshot).exists():
            raise FileNotFoundError(f"snapshot {snapshot!r} not found")
        return snapshot
    from sync.aws import s3

    dest = work / "snapshot"
    s3.download_prefix(s3.client(), snapshot, dest, progress)
    return str(dest)


def decoded_hint(table: TableConfig, fmt: str, values: str, rejected: int) -> list[str]:
    """A note for rejects that a plain export would explain: its values are decoded, while
    columns with a Debezium encoding expect the wire form by default."""
    encoded = [c.name for c in table.columns if c.semantic]
    if not rejected or values != "debezium" or fmt in ("debezium", "s3-sink") or not encoded:
        return []
    return [
        f"{', '.join(encoded)} are read in Debezium's wire encoding (base64 decimals, epoch days ...); "
        "if the snapshot is a plain export, pass --values decoded"
    ]


@contextmanager
def prepared_snapshot(
    table: TableConfig,
    snapshot: str,
    fmt: str,
    snapshot_time: datetime | None,
    spark: t.Any,
    progress: Progress,
    values: str = "debezium",
) -> Iterator[t.Any]:
    """The snapshot read, normalised, conformed and reduced to the latest row per key
    (`backfill.transform.Prepared`), with a scratch folder removed afterwards."""
    from backfill.job import run as prepare_snapshot
    from backfill.session import local_session

    work = Path(tempfile.mkdtemp(prefix=f"rs-{table.name}-"))
    try:
        local = localise_snapshot(snapshot, work, progress)
        spark = spark or local_session()
        progress(f"reading {fmt} snapshot {snapshot}")
        yield prepare_snapshot(spark, table, local, fmt, snapshot_time, values), work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_backfill(
    wh: Warehouse,
    pipeline: Pipeline,
    table_name: str,
    snapshot: str,
    fmt: str,
    snapshot_time: datetime | None = None,
    staging: str | None = None,
    iam_role: str | None = None,
    spark: t.Any = None,
    progress: Progress = lambda _: None,
    rejects_dir: Path | None = None,
    values: str = "debezium",
) -> BackfillResult:
    from backfill.write import write_rejects, write_stage

    started = time.perf_counter()
    table = pipeline.table(table_name)
    result = BackfillResult(table.name)
    report = progress

    def progress(message: str) -> None:
        report(f"{time.perf_counter() - started:6.1f} s  {message}")

    if staging and not wh.dialect.copy_reads_s3:
        progress(f"--staging {staging} is not used: PostgreSQL loads the stage with COPY FROM STDIN")
    with prepared_snapshot(table, snapshot, fmt, snapshot_time, spark, progress, values) as (prepared, work):
        stage_dir = work / "stage"
        write_stage(prepared.rows, str(stage_dir))
        result.rejected = prepared.rejected()
        result.notes = prepared.notes + decoded_hint(table, fmt, values, result.rejected)
        for note in result.notes:
            progress(f"note: {note}")
        if result.rejected:
            target = rejects_dir or Path.cwd() / f"{table.name}-backfill-rejects"
            write_rejects(prepared.rejects, str(target))
            result.rejects_path = str(target)
            # Read back from the written file: no further evaluation of the snapshot. Spark
            # leaves null fields out of the JSON; they come back as None.
            empty = dict.fromkeys(prepared.rejects.columns)
            result.rejects_sample = [{**empty, **r} for r in first_json_lines(target, 5)]
        progress(f"prepared {'every row' if table.is_keyless else 'the latest row per key'}; {result.rejected} rejected")
        counts = load_and_merge(wh, pipeline, table, part_files(stage_dir), progress, staging, iam_role)
    return merged(result, counts, started, progress)


def merged(result: BackfillResult, counts: dict[str, int], started: float, progress: Progress) -> BackfillResult:
    result.staged = counts.get("staged", 0)
    result.loaded = counts.get("loaded", 0)
    result.deleted = counts.get("deleted", 0)
    result.kept_newer = counts.get("kept_newer", 0)
    result.retries = counts.get("retries", 0)
    result.kept_deleted = counts.get("kept_deleted", 0)
    result.history_versions = counts.get("history_versions")
    result.seconds = time.perf_counter() - started
    if "replaced" in counts:
        result.keyless, result.replaced = True, counts["replaced"]
        progress(f"replaced: {result.replaced:,} stored rows by the {result.loaded:,} of the snapshot")
        return result
    progress(
        f"merged: {result.staged:,} staged, {result.loaded:,} loaded, {result.deleted:,} deleted, "
        f"{result.kept_newer:,} kept (the target's row is as new or newer), {result.kept_deleted:,} kept deleted"
    )
    return result

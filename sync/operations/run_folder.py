"""`redshift-sync backfill --staged`: load a run folder a backfill job wrote on a cluster
(`backfill/stage.py`), without Spark, and only if it is complete.

The job removes the folder's summary and manifest before it writes anything and writes them
last, so a folder whose run did not finish has no summary. A complete folder is loaded from
exactly the files its manifest lists: each must be in `data/` with the listed size, the
manifest must list as many files as the summary counts, and the rows loaded must be the
rows the summary counts; anything else is refused with the folder and what is missing.
Part files the manifest does not list (a killed rerun's, a failed task attempt's) are
never read. Redshift: "You can use a manifest to make sure that the COPY command loads
all of the required files, and only the required files" (Redshift Database Developer
Guide, "Using a manifest to specify data files"; for Parquet each entry's
`meta.content_length` is "the actual size of the file in bytes").
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sync.config import Pipeline, TableConfig
from sync.extras import require_pyarrow
from sync.operations.backfill import BackfillResult, first_json_lines, load_and_merge, merged
from sync.warehouse import Warehouse

Progress = Callable[[str], None]


class StageMismatch(ValueError):
    """The run folder was written for another table or another version of the pipeline."""


class IncompleteRun(ValueError):
    """The run folder is not what its job finished writing."""


def _is_s3(url: str) -> bool:
    return url.startswith("s3://")


def read_text(url: str, staged: str) -> str:
    """A file of the run folder `staged`; a missing one is named with the folder."""
    try:
        if _is_s3(url):
            from sync.aws import s3

            bucket, key = s3.parse_s3_url(url)
            return s3.client().get_object(Bucket=bucket, Key=key)["Body"].read().decode()
        return Path(url).read_text(encoding="utf-8")
    except Exception as exc:  # a missing object or file, named with the URL
        raise FileNotFoundError(
            f"{url} cannot be read ({type(exc).__name__}): {staged} is not the --output folder of a finished "
            "backfill job (the job writes summary.json last: a run that did not finish has none)"
        ) from exc


def check_stage(summary: dict, pipeline: Pipeline, table_name: str | None, staged: str) -> TableConfig:
    """The table the stage is for, once it is sure the stage fits this pipeline file."""
    from backfill.stage import STAGE_VERSION, table_fingerprint

    name = summary.get("table")
    if table_name is not None and name != table_name:
        raise StageMismatch(f"{staged} holds a backfill of table {name!r}, not {table_name!r}")
    if summary.get("stage_version") != STAGE_VERSION:
        raise StageMismatch(f"{staged} is a stage of version {summary.get('stage_version')!r}; this tool reads {STAGE_VERSION}")
    table = pipeline.table(name)
    expected = table_fingerprint(pipeline, table)
    if summary.get("schema") != pipeline.schema or summary.get("fingerprint") != expected:
        raise StageMismatch(
            f"{staged} was written for another version of table {name!r} (schema {summary.get('schema')!r}, "
            f"fingerprint {summary.get('fingerprint')}); this pipeline file's is schema {pipeline.schema!r}, "
            f"fingerprint {expected}: run the backfill job again with this pipeline file"
        )
    return table


@dataclass(frozen=True)
class RunFolder:
    url: str  # as given, no trailing slash
    summary: dict
    files: dict[str, int]  # file name in data/ -> size, as the manifest lists them
    urls: tuple[str, ...] = ()  # the manifest's URLs

    @property
    def rows(self) -> int:
        return int(self.summary.get("staged") or 0)

    def refuse(self, what: str) -> IncompleteRun:
        return IncompleteRun(
            f"{self.url} is not a complete backfill run: {what}. Run the backfill job into this folder again "
            "(or into a new one) and load that"
        )

    def check(self, present: dict[str, int]) -> None:
        """`present`: file name -> size of the files in data/. Every listed file must be
        there with its listed size."""
        missing = sorted(set(self.files) - set(present))
        if missing:
            shown = ", ".join(f"data/{n}" for n in missing[:5]) + (" ..." if len(missing) > 5 else "")
            raise self.refuse(f"{len(missing)} of the {len(self.files)} files manifest.json lists are missing ({shown})")
        for name, size in sorted(self.files.items()):
            if present[name] != size:
                raise self.refuse(f"data/{name} is {present[name]:,} bytes, manifest.json lists {size:,}")

    def check_urls(self) -> None:
        """For COPY, which reads the URLs as listed: each is in this folder's data/."""
        from backfill.stage import DATA, copy_url, join

        data = copy_url(join(self.url, DATA)) + "/"
        for url in self.urls:
            if url != data + url.rsplit("/", 1)[-1]:
                raise self.refuse(f"manifest.json lists {url}, which is not in {data}")

    def check_rows(self, rows: int) -> None:
        if rows != self.rows:
            raise self.refuse(f"its files hold {rows:,} rows, summary.json counts {self.rows:,}")


def open_run(staged: str) -> RunFolder:
    """The run folder's summary and manifest, consistent with each other: the manifest
    lists as many files as the summary counts."""
    from backfill.stage import MANIFEST, SUMMARY, join

    url = staged.rstrip("/")
    summary = json.loads(read_text(join(url, SUMMARY), staged))
    entries = json.loads(read_text(join(url, MANIFEST), staged)).get("entries", [])
    try:
        files = {e["url"].rsplit("/", 1)[-1]: int(e["meta"]["content_length"]) for e in entries}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise RunFolder(url, summary, {}, ()).refuse(
            f"manifest.json has an entry without a url and meta.content_length ({type(exc).__name__}: {exc})"
        ) from None
    run = RunFolder(url, summary, files, tuple(e["url"] for e in entries))
    if len(files) != len(entries) or len(files) != summary.get("data_files"):
        raise run.refuse(f"manifest.json lists {len(entries)} files, summary.json counts {summary.get('data_files')}")
    return run


def parquet_rows(files: list[Path]) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in files)


def run_staged(
    wh: Warehouse,
    pipeline: Pipeline,
    staged: str,
    table_name: str | None = None,
    iam_role: str | None = None,
    progress: Progress = lambda _: None,
) -> BackfillResult:
    """Load and merge a complete run folder. Redshift COPYs its manifest; PostgreSQL
    streams the files it lists (downloaded from S3 first)."""
    from backfill.stage import DATA, MANIFEST, REJECTS, join

    started = time.perf_counter()
    run = open_run(staged)
    table = check_stage(run.summary, pipeline, table_name, staged)
    summary = run.summary
    result = BackfillResult(table.name, rejected=int(summary.get("rejected") or 0), notes=list(summary.get("notes") or []))
    if result.rejected:
        result.rejects_path = join(staged, REJECTS)
    progress(
        f"stage of {table.name}: {run.rows:,} rows, {result.rejected:,} rejected, "
        f"snapshot {summary.get('snapshot')} at {summary.get('snapshot_time') or 'its rows’ own source times'}"
    )
    if _is_s3(staged):
        from sync.aws import s3

        client = s3.client()
        data_url = join(run.url, DATA)
        run.check({key.rsplit("/", 1)[-1]: size for key, size in s3.list_objects(client, data_url + "/")})
    if wh.dialect.copy_reads_s3:
        if not _is_s3(staged):
            raise ValueError(f"Redshift's COPY reads from S3: {staged} is not an s3:// URL")
        run.check_urls()
        counts = load_and_merge(
            wh, pipeline, table, [], progress, iam_role=iam_role, manifest_url=join(run.url, MANIFEST), check_rows=run.check_rows
        )
        return merged(result, counts, started, progress)
    require_pyarrow("loading a backfill stage into PostgreSQL")
    work = Path(tempfile.mkdtemp(prefix=f"rs-staged-{table.name}-"))
    try:
        if _is_s3(staged):
            bucket, prefix = s3.parse_s3_url(data_url + "/")
            for name in sorted(run.files):
                client.download_file(bucket, prefix + name, str(work / name))
            progress(f"downloaded the {len(run.files)} listed files from {data_url}/")
            data = work
        else:
            data = Path(staged) / DATA
            present = {p.name: p.stat().st_size for p in data.iterdir()} if data.is_dir() else {}
            run.check(present)
            if result.rejected:
                result.rejects_sample = first_json_lines(Path(staged) / REJECTS, 5)
        files = [data / name for name in sorted(run.files)]
        run.check_rows(parquet_rows(files))
        counts = load_and_merge(wh, pipeline, table, files, progress, check_rows=run.check_rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return merged(result, counts, started, progress)

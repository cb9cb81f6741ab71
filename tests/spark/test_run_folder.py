"""A run folder is loaded complete or refused: a rerun into a used `--output` that dies while
writing, or part files nobody listed, must never load.

Hadoop's FileOutputCommitter: with `mapreduce.fileoutputcommitter.algorithm.version=2`
"task output is moved directly to the final output directory" when each task commits, so a
job that dies midway leaves the finished tasks' files in place; with version 1 they stay in
`_temporary/` until the job commits (Hadoop, mapred-default.xml,
`mapreduce.fileoutputcommitter.algorithm.version`). Redshift: a manifest makes sure "that
the COPY command loads all of the required files, and only the required files" ("Using a
manifest to specify data files"), and for Parquet each entry's `meta.content_length` is the
file's actual size in bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from backfill import job
from backfill.transform import Prepared
from sync.operations.run_folder import IncompleteRun, run_staged
from tests.spark.test_backfill_merge import SNAPSHOT_TIME, write_snapshot

pytestmark = pytest.mark.spark
COMMITTER = "mapreduce.fileoutputcommitter.algorithm.version"
ROWS = {f"K{i:04d}": (f"name {i}", "BUILDING") for i in range(400)}


def stage(spark, pipeline, snapshot: str, output: Path) -> dict:
    return job.stage_snapshot(
        spark, pipeline, pipeline.table("customer"), snapshot, "json", SNAPSHOT_TIME, "debezium", str(output)
    )


def dies_while_writing(prepared: Prepared) -> Prepared:
    """The rows in 4 write tasks, the last of which fails: the job dies after the first
    tasks committed their files (local mode does not retry a task)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    def alive(_: int) -> bool:
        from pyspark import TaskContext

        if TaskContext.get().partitionId() == 3:
            raise RuntimeError("the driver was killed")
        return True

    rows = prepared.rows.repartition(4, "customer_id")
    alive_udf = F.udf(alive, T.BooleanType(), useArrow=False).asNondeterministic()  # not moved before the shuffle
    rows = rows.where(alive_udf(F.lit(1)))
    return Prepared(rows, prepared.rejects, prepared.counted, prepared.notes)


@pytest.fixture
def committer(spark, request):
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    before = conf.get(COMMITTER)
    conf.set(COMMITTER, request.param)
    yield request.param
    conf.set(COMMITTER, before) if before is not None else conf.unset(COMMITTER)


def rerun_killed(spark, pipeline, tmp_path, monkeypatch) -> Path:
    """A complete run into a folder, then a rerun of another snapshot into it that dies."""
    out = tmp_path / "run"
    first = stage(spark, pipeline, write_snapshot(tmp_path / "first.jsonl", ROWS), out)
    assert first["staged"] == len(ROWS)
    real_run = job.run
    monkeypatch.setattr(job, "run", lambda *a, **k: dies_while_writing(real_run(*a, **k)))
    with pytest.raises(Exception, match="the driver was killed"):
        stage(spark, pipeline, write_snapshot(tmp_path / "second.jsonl", ROWS), out)
    return out


def refused(wh, pipeline, out: Path) -> str:
    with pytest.raises((FileNotFoundError, IncompleteRun)) as info:
        run_staged(wh, pipeline, str(out), "customer")
    assert wh.scalar('SELECT COUNT(*) FROM cdc."customer"') == 0
    return " ".join(str(info.value).split())


@pytest.mark.parametrize("committer", ["2"], indirect=True)
def test_rerun_killed_into_used_folder_is_refused(deployed, spark, committer, tmp_path, monkeypatch):
    wh, pipeline = deployed
    out = rerun_killed(spark, pipeline, tmp_path, monkeypatch)
    assert list((out / "data").glob("part-*")), "version 2 leaves the committed tasks' files"
    message = refused(wh, pipeline, out)
    assert f"{out}/summary.json cannot be read" in message and "a finished backfill job" in message


@pytest.mark.parametrize("committer", ["1"], indirect=True)
def test_rerun_killed_into_used_folder_is_refused_with_the_v1_committer(deployed, spark, committer, tmp_path, monkeypatch):
    wh, pipeline = deployed
    out = rerun_killed(spark, pipeline, tmp_path, monkeypatch)
    assert not list((out / "data").glob("part-*")), "version 1 commits no file before the job does"
    assert f"{out}/summary.json cannot be read" in refused(wh, pipeline, out)


@pytest.fixture
def complete_run(spark, deployed, tmp_path) -> Path:
    _, pipeline = deployed
    out = tmp_path / "run"
    stage(spark, pipeline, write_snapshot(tmp_path / "snap.jsonl", ROWS), out)
    return out


def test_embedded_load_reads_only_manifest_files(deployed, complete_run):
    """A part file the manifest does not list (a failed task attempt's) is never read."""
    wh, pipeline = deployed
    data = complete_run / "data"
    listed = sorted(data.glob("part-*.parquet"))
    stray = pq.read_table(listed[0])
    stray = stray.set_column(0, "customer_id", pc.binary_join_element_wise("STRAY-", stray["customer_id"], ""))
    pq.write_table(stray, data / "part-99999-attempt-1.snappy.parquet")
    result = run_staged(wh, pipeline, str(complete_run), "customer")
    assert (result.staged, result.loaded) == (len(ROWS), len(ROWS))
    assert wh.scalar("SELECT COUNT(*) FROM cdc.\"customer\" WHERE customer_id LIKE 'STRAY-%%'") == 0


def test_a_listed_file_missing_is_refused_and_named(deployed, complete_run):
    wh, pipeline = deployed
    gone = sorted((complete_run / "data").glob("part-*.parquet"))[-1]
    gone.unlink()
    message = refused(wh, pipeline, complete_run)
    assert f"{complete_run} is not a complete backfill run" in message and f"data/{gone.name}" in message


def test_a_listed_file_of_another_size_is_refused(deployed, complete_run):
    wh, pipeline = deployed
    part = sorted((complete_run / "data").glob("part-*.parquet"))[0]
    part.write_bytes(part.read_bytes() + b"\0")  # e.g. overwritten by another run's file
    assert f"data/{part.name} is" in refused(wh, pipeline, complete_run)


def test_counts_that_disagree_with_the_summary_are_refused(deployed, complete_run):
    wh, pipeline = deployed
    summary_path = complete_run / "summary.json"
    summary = json.loads(summary_path.read_text())
    summary_path.write_text(json.dumps({**summary, "staged": summary["staged"] + 1}))
    assert f"hold {len(ROWS):,} rows, summary.json counts {len(ROWS) + 1:,}" in refused(wh, pipeline, complete_run)
    summary_path.write_text(json.dumps({**summary, "data_files": summary["data_files"] + 1}))
    assert "summary.json counts" in refused(wh, pipeline, complete_run)


def test_a_rerun_that_finishes_loads_its_own_run(deployed, spark, complete_run, tmp_path):
    """The folder used twice, the second run complete: its rows, not the first run's."""
    wh, pipeline = deployed
    second = {k: ("renamed", m) for k, (_, m) in list(ROWS.items())[:50]}
    stage(spark, pipeline, write_snapshot(tmp_path / "second.jsonl", second), complete_run)
    result = run_staged(wh, pipeline, str(complete_run), "customer")
    assert (result.staged, result.loaded) == (50, 50)
    assert wh.query('SELECT DISTINCT name FROM cdc."customer"') == [("renamed",)]

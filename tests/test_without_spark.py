"""The plain install (no `spark` extra): every command that does not run Spark imports
nothing from PySpark, `backfill --staged` loads what a cluster's job wrote (docs/backfill-on-aws.md:
"the warehouse side loads what the cluster wrote, without Spark"), and the commands that
do run Spark say what to install in one line instead of a traceback.

The commands run in a child Python whose import system refuses `pyspark` (a meta-path
finder raising ModuleNotFoundError, as an interpreter without the package does) and
records every attempt, so a lazy import inside a command fails the test as well as one
at the top of a module. tests/test_wheel.py runs the same commands from the built wheel."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from backfill.stage import DATA, MANIFEST, STAGE_VERSION, SUMMARY, table_fingerprint
from sync.config import Pipeline, TableConfig, parse_pipeline
from tests.helpers import EXAMPLES, REPO

# Run in the child: refuse the blocked top-level packages, run each command with typer's
# CliRunner, report exit code, output, an unexpected exception and the refused imports.
CHILD = """
import importlib.abc, json, sys

blocked, commands = sys.argv[1].split(","), json.loads(sys.argv[2])
refused = []


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            refused.append(name)
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Refuse())
from typer.testing import CliRunner
from sync.cli.app import app

results = [{"args": ["(import sync.cli.app)"], "exit_code": 0, "output": "", "exception": None, "refused": refused[:]}]
for args in commands:
    before = len(refused)
    out = CliRunner().invoke(app, args)
    unexpected = out.exception if out.exception is not None and not isinstance(out.exception, SystemExit) else None
    results.append(
        {"args": args, "exit_code": out.exit_code, "output": out.output, "stdout": out.stdout,
         "exception": repr(unexpected) if unexpected else None, "refused": sorted(set(refused[before:]))}
    )
print(json.dumps(results))
"""


def run_blocked(blocked: list[str], commands: list[list[str]], cwd: Path, dsn: str) -> list[dict]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "REDSHIFT_SYNC_DSN": dsn, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, ",".join(blocked), json.dumps(commands)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def write_run_folder(folder: Path, pipeline_file: Path) -> None:
    """A run folder as backfill/job.py writes it (backfill/stage.py): one customer row."""
    pipeline = parse_pipeline(tomllib.loads(pipeline_file.read_text()))
    table = pipeline.table("customer")
    rows = pa.table(
        {
            "customer_id": ["C-9"],
            "name": ["Initech"],
            "mktsegment": ["BUILDING"],
            "_source_ts": pa.array([datetime(2023, 11, 14)], pa.timestamp("us")),
            "_source_pos": pa.array([None], pa.string()),
            "_kafka_partition": pa.array([None], pa.int64()),
            "_kafka_offset": pa.array([None], pa.int64()),
            "_delete": [False],
        }
    )
    write_stage_files(folder, pipeline, table, rows, datetime(2023, 11, 14))


def write_stage_files(folder: Path, pipeline: Pipeline, table: TableConfig, rows: pa.Table, snapshot_time: datetime) -> None:
    """The run folder of a finished job: `rows` in one part file, its manifest and summary."""
    (folder / DATA).mkdir(parents=True)
    part = folder / DATA / "part-00000.parquet"
    pq.write_table(rows, part)
    entry = {"url": str(part), "mandatory": True, "meta": {"content_length": part.stat().st_size}}
    (folder / MANIFEST).write_text(json.dumps({"entries": [entry]}))
    summary = {
        "stage_version": STAGE_VERSION,
        "table": table.name,
        "schema": pipeline.schema,
        "fingerprint": table_fingerprint(pipeline, table),
        "staged": rows.num_rows,
        "data_files": 1,
        "rejected": 0,
        "notes": [],
        "snapshot": f"s3://lake/{table.name}/",
        "snapshot_time": snapshot_time.isoformat(),
    }
    (folder / SUMMARY).write_text(json.dumps(summary))


def project(tmp_path: Path) -> Path:
    work = tmp_path / "project"
    work.mkdir()
    shutil.copy(EXAMPLES / "salesdb" / "pipeline.toml", work / "pipeline.toml")
    write_run_folder(work / "run", work / "pipeline.toml")
    return work


EVENTS = str(EXAMPLES / "salesdb" / "events" / "customer-1.jsonl")
SNAPSHOT = str(EXAMPLES / "salesdb" / "snapshots" / "customer-20231114T221321Z.jsonl")
STAGED = ("backfill", "--table", "customer", "--staged", "run", "--json")
COUNT = ("query", "SELECT COUNT(*) AS n FROM cdc.customer", "--json")
SPARK_FREE = [
    ["--help"],
    ["generate"],
    ["revision", "-m", "initial"],
    ["deploy", "--sql"],
    ["deploy"],
    ["ingest", "--table", "customer", "--file", EVENTS],
    ["sync"],
    ["status"],
    list(STAGED),
    ["quarantine", "list", "--table", "customer"],
    ["prune"],
    list(COUNT),
    ["package-backfill", "--out", "dist"],
]
RUNS_SPARK = [
    ["reconcile", "--table", "customer", "--snapshot", SNAPSHOT, "--format", "json"],
    ["backfill", "--table", "customer", "--snapshot", SNAPSHOT, "--format", "json"],
]


def test_commands_that_run_no_spark_import_nothing_from_pyspark(tmp_path, database_dsn):
    results = run_blocked(["pyspark"], SPARK_FREE + RUNS_SPARK, project(tmp_path), database_dsn)
    ran = {tuple(r["args"]): r for r in results}
    for r in results[: 1 + len(SPARK_FREE)]:
        assert r["refused"] == [] and r["exception"] is None and r["exit_code"] == 0, r
    staged = json.loads(ran[STAGED]["stdout"])
    assert (staged["staged"], staged["loaded"]) == (1, 1)
    assert json.loads(ran[COUNT]["stdout"]) == [{"n": 6}]  # the 5 customers of the events, and the backfilled one
    for args in RUNS_SPARK:
        r = ran[tuple(args)]
        assert r["exception"] is None and r["exit_code"] == 1, r
        one_line = " ".join(r["output"].split())
        assert "runs PySpark, which is not installed: pip install 'redshift-sync[spark]'" in one_line, one_line


def test_a_staged_load_into_postgresql_without_pyarrow_says_what_to_install(tmp_path, database_dsn):
    commands = [["revision", "-m", "initial"], ["deploy"], ["backfill", "--table", "customer", "--staged", "run"]]
    *_, staged = run_blocked(["pyspark", "pyarrow"], commands, project(tmp_path), database_dsn)
    assert staged["exception"] is None and staged["exit_code"] == 1, staged
    assert "reads Parquet with pyarrow, which is not installed: pip install pyarrow" in " ".join(staged["output"].split())

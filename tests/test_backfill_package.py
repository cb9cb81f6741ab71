"""The cluster artifact (`package-backfill`) runs under a plain `spark-submit`, and what it
writes loads into the warehouse with `backfill --staged`, without Spark on that side.

Spark's Python package management ("Python Package Management", PySpark documentation):
`--py-files` ships .zip files of pure-Python code to every executor; compiled packages
must come as an environment (EMR Serverless: a venv archive in `spark.archives`) or be
installed on the nodes (Glue: `--additional-python-modules`). The proof here: a venv with
only PySpark runs the executors (no pydantic, nothing compiled beyond PySpark's own); the
driver gets the artifact's requirements, as Glue installs them; the project itself is not
installed and the work tree is not on the path."""

from __future__ import annotations

import json
import subprocess
import tomllib
from datetime import datetime

import pytest

from sync.config import parse_pipeline
from sync.operations.run_folder import StageMismatch, run_staged
from sync.operations.runner import deploy
from tests.helpers import EXAMPLES
from tests.spark_envs import clean_env, spark_venv
from tests.spark_submit import build_artifact, driver_python, submit_command, submit_env

pytestmark = [pytest.mark.slow, pytest.mark.spark]

PIPELINE = EXAMPLES / "inventory_pg" / "pipeline.toml"
# One products row in Debezium's wire encoding: a Connect Decimal (base64 of 1234, scale
# 2), a VariableScaleDecimal, epoch days, epoch microseconds, ZonedTimestamp and Json text.
WIRE_ROW = {
    "id": 1,
    "Sku": "S-1",
    "description": "bolt",
    "price": "BNI=",
    "weight": {"scale": 3, "value": "fQ=="},
    "released": 19844,
    "updated_at": 1714557600123456,
    "published_at": "2024-05-01T10:00:00Z",
    "attributes": '{"colour": "red"}',
    "in_stock": True,
}


@pytest.fixture(scope="module")
def staged_run(tmp_path_factory) -> dict:
    """Build the artifact, run it with spark-submit, return the run folder and its output."""
    tmp = tmp_path_factory.mktemp("cluster")
    dist = tmp / "dist"
    build_artifact(dist, PIPELINE)
    python = spark_venv("3.5.6", with_project=False)  # PySpark alone: Glue 5.1's Spark
    driver = driver_python(python, dist, tmp)  # the driver sees the requirements; the executors do not
    snapshot = tmp / "products.jsonl"
    snapshot.write_text(json.dumps(WIRE_ROW) + "\n")
    run = tmp / "run"
    job_args = ["--table", "products", "--snapshot", str(snapshot), "--format", "json"]
    job_args += ["--snapshot-time", "2024-05-01T12:00:00Z", "--output", str(run)]
    submit = subprocess.run(
        submit_command(python, driver, dist, "local[2]", job_args, {}),
        cwd=tmp,
        env=submit_env(python, driver),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert submit.returncode == 0, submit.stdout[-3000:] + submit.stderr[-6000:]
    return {"run": run, "stdout": submit.stdout, "python": python}


def test_executors_have_nothing_but_pyspark(staged_run):
    probe = subprocess.run([str(staged_run["python"]), "-c", "import pydantic"], capture_output=True, env=clean_env())
    assert probe.returncode != 0, "the executors' venv has pydantic: the proof would prove nothing"


def test_job_writes_data_manifest_and_summary(staged_run):
    run = staged_run["run"]
    summary = json.loads((run / "summary.json").read_text())
    assert json.loads(staged_run["stdout"].strip().splitlines()[-1]) == summary
    assert (summary["table"], summary["staged"], summary["rejected"], summary["spark_version"]) == ("products", 1, 0, "3.5.6")
    assert summary["snapshot_time"] == "2024-05-01T12:00:00"
    entries = json.loads((run / "manifest.json").read_text())["entries"]
    # Redshift, "Using a manifest to specify data files": Parquet entries need content_length.
    assert [e["meta"]["content_length"] for e in entries] == [
        p.stat().st_size for p in sorted((run / "data").glob("part-*")) if p.stat().st_size > 0
    ]


def test_staged_run_loads_without_spark(staged_run, wh):
    pipeline = parse_pipeline(tomllib.loads(PIPELINE.read_text()))
    deploy(wh, pipeline, str(PIPELINE))
    result = run_staged(wh, pipeline, str(staged_run["run"]), "products")
    assert (result.staged, result.loaded, result.rejected) == (1, 1, 0)
    assert wh.query(
        "SELECT price::text, weight::text, released::text, updated_at::text, attributes->>'colour', _source_ts "
        "FROM inventory.products"
    ) == [("12.34", "0.125000", "2024-05-01", "2024-05-01 10:00:00.123456", "red", datetime(2024, 5, 1, 12, 0))]


def test_stage_from_another_pipeline_version_is_refused(staged_run, wh):
    changed = tomllib.loads(PIPELINE.read_text())
    changed["tables"][0]["columns"].append({"name": "colour", "type": "varchar(16)"})
    pipeline = parse_pipeline(changed)
    deploy(wh, pipeline, "changed.toml")
    with pytest.raises(StageMismatch, match="another version of table 'products'"):
        run_staged(wh, pipeline, str(staged_run["run"]), "products")
    assert wh.scalar("SELECT COUNT(*) FROM inventory.products") == 0


def test_stage_of_another_table_is_refused(staged_run, wh):
    pipeline = parse_pipeline(tomllib.loads(PIPELINE.read_text()))
    with pytest.raises(StageMismatch, match="holds a backfill of table 'products', not 'stock_moves'"):
        run_staged(wh, pipeline, str(staged_run["run"]), "stock_moves")


def test_staged_run_in_s3_loads_without_spark(staged_run, wh, s3_server):
    """The run folder as the job leaves it in S3 (moto): `backfill --staged s3://...`."""
    run = staged_run["run"]
    for path in sorted(p for p in run.rglob("*") if p.is_file()):
        s3_server.upload_file(str(path), "lake", f"backfill/products/run-1/{path.relative_to(run).as_posix()}")
    pipeline = parse_pipeline(tomllib.loads(PIPELINE.read_text()))
    deploy(wh, pipeline, str(PIPELINE))
    result = run_staged(wh, pipeline, "s3://lake/backfill/products/run-1/", "products")
    assert (result.staged, result.loaded) == (1, 1)
    assert wh.query("SELECT id, sku FROM inventory.products") == [(1, "S-1")]


def test_missing_stage_names_the_summary(wh, s3_server):
    pipeline = parse_pipeline(tomllib.loads(PIPELINE.read_text()))
    with pytest.raises(FileNotFoundError, match="s3://lake/nothing/summary.json cannot be read"):
        run_staged(wh, pipeline, "s3://lake/nothing/", "products")


def test_cli_backfill_staged(staged_run, wh, tmp_path):
    from typer.testing import CliRunner

    from sync.cli.app import app

    pipeline = parse_pipeline(tomllib.loads(PIPELINE.read_text()))
    deploy(wh, pipeline, str(PIPELINE))
    args = ["backfill", "--table", "products", "--staged", str(staged_run["run"]), "--dsn", wh.dsn]
    out = CliRunner().invoke(app, [*args, "--config", str(PIPELINE)])
    assert out.exit_code == 0, out.output
    assert wh.scalar("SELECT COUNT(*) FROM inventory.products") == 1
    other = tmp_path / "other.toml"
    other.write_text(
        PIPELINE.read_text().replace(
            '{ name = "in_stock", type = "boolean" },',
            '{ name = "in_stock", type = "boolean" },\n  { name = "colour", type = "varchar(16)" },',
        )
    )
    refused = CliRunner().invoke(app, [*args, "--config", str(other)])
    assert refused.exit_code != 0
    assert "was written for another version of table 'products'" in " ".join(refused.output.split())

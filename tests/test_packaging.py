"""`package-lambda` builds a zip that runs on its own: unpacked, it imports with nothing but
the standard library and the Lambda runtime's botocore on the path (no venv, no pyspark) and
its handler syncs the embedded warehouse through the local Data API. Builds for this
interpreter's Python so the bundled pydantic-core loads here; needs PyPI (pip downloads the
Lambda-platform wheels)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sync.cli.app import app
from sync.local.stream import ingest_file
from tests.helpers import EXAMPLES

PIPELINE = EXAMPLES / "salesdb" / "pipeline.toml"
HERE_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"

# Runs inside the unpacked zip with `python -S`: only the zip, botocore (which the Lambda
# Python runtime provides with boto3) and the database driver of the local Data API are importable.
SCRIPT = """
import importlib.util, json, os, sys
assert importlib.util.find_spec("pyspark") is None, "pyspark is importable"
import sync.aws.lambda_handler as h
heavy = sorted(m for m in ("pyspark", "sqlalchemy", "typer", "rich", "psycopg", "redshift_connector") if m in sys.modules)
assert not heavy, f"the handler imported {heavy}"
import pydantic
assert pydantic.__file__.startswith(os.environ["TASK_ROOT"]), pydantic.__file__
from sync.local.data_api import LocalDataApi
with LocalDataApi(os.environ["TEST_DSN"]) as api:
    h.client_factory = lambda timeouts: api
    print(json.dumps(h.handler({}, None)))
"""


def driver_path(tmp: Path) -> Path:
    """A folder holding only psycopg (the local Data API's driver) and botocore with its
    dependencies (part of the Lambda Python runtime, like boto3), linked from this venv."""
    out = tmp / "driver"
    out.mkdir()
    site = Path(importlib.util.find_spec("psycopg").origin).parent.parent
    for name in ("psycopg", "psycopg_binary", "psycopg_binary.libs", "botocore", "jmespath", "dateutil", "urllib3", "six.py"):
        if (site / name).exists():
            (out / name).symlink_to(site / name)
    return out


@pytest.mark.slow
def test_the_zip_imports_without_spark_and_its_handler_syncs(deployed, database_dsn, tmp_path):
    wh, pipeline = deployed
    ingested = {
        "customer": ingest_file(wh, pipeline, "customer", EXAMPLES / "salesdb" / "events" / "customer-1.jsonl").records,
        "orders": ingest_file(wh, pipeline, "orders", EXAMPLES / "salesdb" / "events" / "orders-1.jsonl").records,
    }
    out = tmp_path / "dist" / "lambda.zip"
    result = CliRunner().invoke(
        app, ["package-lambda", "--out", str(out), "--config", str(PIPELINE), "--python-version", HERE_PYTHON]
    )
    assert result.exit_code == 0, result.output
    assert "MB zipped" in result.output and "sync.lambda_handler.handler" in result.output

    size = out.stat().st_size
    assert 0 < size < 50 * 1024 * 1024
    with zipfile.ZipFile(out) as zf:
        names = zf.namelist()
        assert zf.read("pipeline.toml") == PIPELINE.read_bytes()
        zf.extractall(tmp_path / "task")
    tops = {n.split("/")[0] for n in names}
    assert {"sync", "pydantic", "pydantic_core", "pipeline.toml"} <= tops
    assert not {t for t in tops if t.startswith(("pyspark", "boto3", "botocore"))}
    assert not [n for n in names if "__pycache__" in n]

    task = tmp_path / "task"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": f"{task}{os.pathsep}{driver_path(tmp_path)}",
        "TASK_ROOT": str(task),
        "TEST_DSN": database_dsn,
        "REDSHIFT_SYNC_WORKGROUP": "local",
        "REDSHIFT_SYNC_POLL_SECONDS": "0.05",
    }
    done = subprocess.run([sys.executable, "-S", "-c", SCRIPT], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["ok"]
    assert {t["table"]: t["events_read"] for t in summary["tables"]} == ingested


def test_a_broken_pipeline_file_stops_packaging(tmp_path):
    bad = tmp_path / "pipeline.toml"
    bad.write_text('[pipeline]\nschema = "Bad Name"\n')
    result = CliRunner().invoke(app, ["package-lambda", "--out", str(tmp_path / "x.zip"), "--config", str(bad)])
    assert result.exit_code == 2
    assert "schema" in result.output and not (tmp_path / "x.zip").exists()


def test_an_unknown_architecture_is_refused(tmp_path):
    result = CliRunner().invoke(
        app, ["package-lambda", "--out", str(tmp_path / "x.zip"), "--config", str(PIPELINE), "--arch", "sparc"]
    )
    assert result.exit_code == 1
    assert "unknown architecture 'sparc'" in result.output

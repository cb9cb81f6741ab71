"""The documented spark-submit of the cluster artifact (docs/backfill-on-aws.md) logs errors
only: the artifact carries log4j2.properties, and `--driver-java-options
-Dlog4j2.configurationFile=...` makes Log4j 2 read it at JVM start ("Log4j 2 configuration:
the log4j2.configurationFile system property"), before Spark logs its start-up at INFO."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sync.cli.app import app
from tests.helpers import EXAMPLES
from tests.spark_envs import clean_env

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_the_documented_spark_submit_prints_no_info_lines(tmp_path):
    dist = tmp_path / "dist" / "backfill"
    built = CliRunner().invoke(
        app, ["package-backfill", "--out", str(dist), "--config", str(EXAMPLES / "salesdb" / "pipeline.toml")]
    )
    assert built.exit_code == 0, built.output
    snapshot = EXAMPLES / "salesdb" / "snapshots" / "customer-20231114T221321Z.jsonl"
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "spark-submit"),
            "--master",
            "local[1]",
            "--driver-java-options",
            "-Dlog4j2.configurationFile=dist/backfill/log4j2.properties",
            "--py-files",
            "dist/backfill/redshift_sync.zip",
            "dist/backfill/job.py",
            "--config",
            "dist/backfill/pipeline.toml",
            "--table",
            "customer",
            "--snapshot",
            str(snapshot),
            "--format",
            "json",
            "--snapshot-time",
            "2023-11-14T22:13:21.5Z",
            "--output",
            "run/customer/",
        ],
        cwd=tmp_path,
        env=clean_env(PYSPARK_PYTHON=sys.executable),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["staged"] == 8
    chatter = [line for line in done.stderr.splitlines() if " INFO " in line or " WARN " in line]
    assert chatter == [], f"{len(chatter)} INFO/WARN lines, the first: {chatter[:3]}"

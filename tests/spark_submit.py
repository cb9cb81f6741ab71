"""The cluster artifact (`package-backfill`) run with a plain `spark-submit`, as a cluster
runs it: executors on a Python with nothing but PySpark, the driver with the artifact's
requirements added (as Glue installs them), the project not installed."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.spark_envs import clean_env


def build_artifact(dist: Path, config: Path) -> None:
    from typer.testing import CliRunner

    from sync.cli.app import app

    built = CliRunner().invoke(app, ["package-backfill", "--out", str(dist), "--config", str(config)])
    assert built.exit_code == 0, built.output


def driver_python(python: Path, dist: Path, folder: Path) -> Path:
    """An interpreter for the driver: `python` (PySpark alone) that also sees the artifact's
    requirements; the executors run `python` itself."""
    deps = folder / "driver-packages"
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--target", str(deps)]
    subprocess.run([*pip, "-r", str(dist / "requirements.txt")], check=True, env=clean_env())
    driver = folder / "driver-python"
    driver.write_text(f'#!/bin/sh\nPYTHONPATH="$PYTHONPATH:{deps}" exec "{python}" "$@"\n')
    driver.chmod(0o755)
    return driver


def submit_command(python: Path, driver: Path, dist: Path, master: str, job_args: list[str], conf: dict[str, str]) -> list[str]:
    """spark-submit of the artifact's job.py with `job_args`, in client mode on `master`."""
    command = [str(python.parent / "spark-submit"), "--master", master, "--py-files", str(dist / "redshift_sync.zip")]
    for key, value in {"spark.pyspark.python": str(python), "spark.pyspark.driver.python": str(driver), **conf}.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, str(dist / "job.py"), "--config", str(dist / "pipeline.toml"), *job_args]


def submit_env(python: Path, driver: Path) -> dict[str, str]:
    return clean_env(PYSPARK_PYTHON=str(python), PYSPARK_DRIVER_PYTHON=str(driver), SPARK_LOCAL_IP="127.0.0.1")

"""The Spark tests (tests/spark) on the PySpark versions AWS runs, each in its own venv.

AWS Glue 5.1 runs Spark 3.5.6 with Python 3.11 ("AWS Glue versions", Glue 5.1 release
notes); Amazon EMR 7.x runs Spark 3.5.x and `emr-spark-8.0.0` (EC2, EKS, Serverless) runs
Spark 4.0.2 with Python 3.11-3.13 (Amazon EMR release guide, Spark release history). The
project's own venv runs them on the newest PySpark (the rest of the suite)."""

from __future__ import annotations

import subprocess

import pytest

from tests.spark_envs import REPO, SIDE_RUN_ENV_VAR, SIDE_RUN_TESTS, SPARK_VERSIONS, clean_env, spark_venv

pytestmark = [pytest.mark.slow, pytest.mark.spark]


@pytest.mark.parametrize("version", sorted(SPARK_VERSIONS))
def test_spark_tests_pass_on(version: str) -> None:
    python = spark_venv(version)
    installed = subprocess.run(
        [str(python), "-c", "import pyspark; print(pyspark.__version__)"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert installed == version
    # The slow Spark tests (a million-row backfill, the demo) measure scale, not the API a
    # version offers: they run on the newest PySpark with the rest of the suite, and so do
    # the quick tests whose lines others run too (spark_envs.SIDE_RUN_TESTS), most examples
    # of the property tests (spark_envs.property_examples) and all but the first case of
    # each parametrized test (tests/spark/conftest.py).
    run = subprocess.run(
        [str(python), "-m", "pytest", "tests/spark", "-m", "not slow", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"],
        cwd=REPO,
        env=clean_env(**{SIDE_RUN_ENV_VAR: "1"}),
        capture_output=True,
        text=True,
        timeout=1500,
    )
    tail = "\n".join((run.stdout + run.stderr).splitlines()[-40:])
    assert run.returncode == 0, f"tests/spark failed on pyspark {version}:\n{tail}"
    # Every listed test ran: a renamed one would otherwise drop out of the side runs unseen.
    assert f"{len(SIDE_RUN_TESTS)} passed" in tail and " failed" not in tail, tail

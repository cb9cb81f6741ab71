"""Virtual environments with other PySpark versions, for the tests that prove the backfill
runs on the Spark versions AWS runs: Glue 5.1 (Spark 3.5.6), EMR 7.x (Spark 3.5.x) and
EMR 8 (`emr-spark-8.0.0`, Spark 4.0.2). The project's own venv has the newest PySpark.

Each is made once in a cache folder outside the work tree (several GB together):
`$REDSHIFT_SYNC_TEST_VENVS`, else `$XDG_CACHE_HOME/redshift-sync/venvs`, else
`~/.cache/redshift-sync/venvs`; delete it to reclaim the space. A venv with PySpark alone
(`-bare`) is shared by every checkout; one with the project installed (editable) belongs
to one checkout, so its name carries a hash of the checkout's path. Each is brought up to
date with pip on every use; a file lock keeps two test workers from installing at the same
time."""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# pyspark version -> venv folder
SPARK_VERSIONS = {"3.5.6": "spark35", "4.0.2": "spark40"}
VENVS_ENV_VAR = "REDSHIFT_SYNC_TEST_VENVS"


def venvs_folder() -> Path:
    """Where the side venvs live: never inside the work tree."""
    given = os.environ.get(VENVS_ENV_VAR)
    if given:
        return Path(given)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "redshift-sync" / "venvs"


def venv_path(version: str, with_project: bool) -> Path:
    checkout = hashlib.sha256(str(REPO).encode()).hexdigest()[:10]
    return venvs_folder() / (f"{SPARK_VERSIONS[version]}-{checkout}" if with_project else f"{SPARK_VERSIONS[version]}-bare")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for a child Python: nothing of this process's Spark or pytest set-up
    (a PYSPARK_PYTHON pointing at this venv would run the wrong PySpark on the workers)."""
    drop = ("PYSPARK_", "SPARK_", "PYTEST_", "PYTHONPATH", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(extra)
    return env


def spark_venv(version: str, with_project: bool = True) -> Path:
    """The Python of a venv with `pyspark==version` (and the project with its test tools,
    unless `with_project` is false: then PySpark alone)."""
    venv = venv_path(version, with_project)
    python = venv / "bin" / "python"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        wanted = ["-e", ".[dev]", f"pyspark=={version}"] if with_project else [f"pyspark=={version}"]
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *wanted],
            cwd=REPO,
            check=True,
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
    return python

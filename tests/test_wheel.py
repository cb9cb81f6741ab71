"""The package as a user installs it: the wheel built from this checkout, installed with its
dependencies (not the spark extra) in a fresh venv, every command run from an empty folder
outside the checkout. Nothing may depend on files that only a checkout has (the alembic
environment, the revision template, the example pipeline and events ship in the wheel)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.test_without_spark import write_run_folder

UNSHIPPED = (
    ".git",
    ".venv*",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    ".hypothesis",
    ".redshift-sync",
    "spark-warehouse",
    "metastore_db",
)


def sh(*args: str, cwd: Path, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    out = subprocess.run(list(args), capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)
    assert out.returncode == 0, f"{' '.join(args)}\n{out.stdout}\n{out.stderr}"
    return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from this checkout (once for the module), from a private copy of it:
    setuptools builds in the source tree's `build/` folder, so two test workers building from
    the checkout itself race on it ("File exists: build/bdist...")."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*UNSHIPPED))
    sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(root), str(source), cwd=root)
    (built,) = root.glob("redshift_sync-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A venv with the built wheel installed; returns its bin folder."""
    root = tmp_path_factory.mktemp("installed")
    venv.create(root / "venv", with_pip=True)
    bin_dir = root / "venv" / "bin"
    sh(str(bin_dir / "python"), "-m", "pip", "install", "-q", str(wheel), cwd=root)
    return bin_dir


def test_the_wheel_adds_no_top_level_package_but_its_own(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == {"sync", "backfill"}  # no `benchmarks`


@pytest.mark.slow
def test_installed_wheel_runs_every_command_outside_the_checkout(installed, tmp_path, database_dsn):
    rs = str(installed / "redshift-sync")
    work = tmp_path / "project"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDSHIFT_SYNC_")}
    env |= {"REDSHIFT_SYNC_HOME": str(tmp_path / "home"), "PYTHONPATH": ""}
    examples = Path(
        sh(
            str(installed / "python"), "-c", "from sync.resources import bundled; print(bundled('examples'))", cwd=work, env=env
        ).stdout.strip()
    )
    assert installed.parent in examples.parents  # the examples come from the installed package
    (work / "pipeline.toml").write_text((examples / "salesdb" / "pipeline.toml").read_text())

    out = sh(rs, "revision", "-m", "initial", cwd=work, env=env)
    assert 'r.create_table("customer")' in out.stdout and list((work / "migrations" / "versions").glob("*_initial.py"))
    script = sh(rs, "deploy", "--sql", "--dialect", "redshift", cwd=work, env=env).stdout
    assert "CREATE MATERIALIZED VIEW" in script and "INSERT INTO alembic_version" in script

    db = env | {"REDSHIFT_SYNC_DSN": database_dsn}
    assert "applied" in sh(rs, "deploy", cwd=work, env=db).stdout
    ing = sh(
        rs, "ingest", "--table", "customer", "--file", str(examples / "salesdb" / "events" / "customer-1.jsonl"), cwd=work, env=db
    )
    assert "ingested 5 record(s) into customer" in ing.stdout
    (customer, _) = json.loads(sh(rs, "sync", "--json", cwd=work, env=db).stdout)
    assert customer["status"] == "ok" and customer["upserted"] == 5
    (status, _) = json.loads(sh(rs, "status", "--json", cwd=work, env=db).stdout)
    assert status["target_rows"] == 5 and status["pending"] == 0

    # No spark extra: the warehouse side of a cluster's backfill imports nothing from PySpark
    # (the PostgreSQL load reads the Parquet with pyarrow, which this venv lacks), and the
    # commands that run Spark say what to install.
    write_run_folder(tmp_path / "run", work / "pipeline.toml")
    snapshot = str(examples / "salesdb" / "snapshots" / "customer-20231114T221321Z.jsonl")
    for args, says in [
        (
            ["backfill", "--table", "customer", "--staged", str(tmp_path / "run")],
            "reads Parquet with pyarrow, which is not installed",
        ),
        (
            ["reconcile", "--table", "customer", "--snapshot", snapshot, "--format", "json"],
            "runs PySpark, which is not installed",
        ),
    ]:
        done = subprocess.run([rs, *args], capture_output=True, text=True, cwd=work, env=db)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert says in " ".join(done.stderr.split())

    demo = sh(rs, "demo", cwd=work, env=env)  # the embedded warehouse of the installed pgserver
    assert "demo finished" in demo.stdout and "Globex Corporation" in demo.stdout
    assert "backfill and reconcile skipped: PySpark is not installed" in demo.stdout
    assert sorted(p.name for p in work.iterdir()) == ["migrations", "pipeline.toml"]

"""The embedded warehouse belongs to its pipeline file, not to the folder a command runs
from: `status --config ../proj/pipeline.toml` reads the warehouse `deploy` wrote in proj/,
creates nothing where it runs, and says which warehouse it read."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sync.local import embedded
from tests.helpers import EXAMPLES, REPO


def test_the_data_folder_is_next_to_the_pipeline_file_unless_the_environment_moves_it(monkeypatch, tmp_path):
    monkeypatch.delenv(embedded.HOME_ENV_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    assert embedded.data_dir(Path("proj/pipeline.toml")) == tmp_path / "proj" / ".redshift-sync" / "pgdata"
    assert embedded.data_dir(None) == tmp_path / ".redshift-sync" / "pgdata"
    monkeypatch.setenv(embedded.HOME_ENV_VAR, "/srv/rs")
    assert embedded.data_dir(Path("proj/pipeline.toml")) == Path("/srv/rs/pgdata")


@pytest.fixture
def workspace() -> Path:
    # Outside pytest's temporary folders: as root, pgserver runs PostgreSQL as another
    # user, which must be able to reach the data folder.
    root = Path(tempfile.mkdtemp(prefix="rs-test-home-"))
    os.chmod(root, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_a_command_run_elsewhere_uses_the_warehouse_of_its_pipeline_file(workspace):
    proj, elsewhere = workspace / "proj", workspace / "elsewhere"
    proj.mkdir()
    elsewhere.mkdir()
    # The revisions folder is relative to the pipeline file too ([operations] versions).
    (proj / "pipeline.toml").write_text(
        (EXAMPLES / "salesdb" / "pipeline.toml").read_text() + '\n[operations]\nversions = "migrations/versions"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDSHIFT_SYNC_")} | {"PYTHONPATH": str(REPO)}

    def rs(*args: str, cwd: Path) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [sys.executable, "-m", "sync", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        return done

    rs("revision", "-m", "initial", cwd=proj)
    deployed = rs("deploy", cwd=proj)
    assert "warehouse: the embedded PostgreSQL in .redshift-sync/pgdata" in deployed.stderr
    status = rs("status", "--config", "../proj/pipeline.toml", cwd=elsewhere)
    assert f"warehouse: the embedded PostgreSQL in {proj / '.redshift-sync' / 'pgdata'}" in status.stderr
    assert "customer" in status.stdout and "not deployed" not in status.stdout
    assert list(elsewhere.iterdir()) == []  # no second, empty warehouse where the command ran


def test_deploy_from_a_checkout_of_a_pipeline_in_a_subfolder_reads_back_its_own_warehouse(workspace):
    """README's first deploy, run in a checkout: the upgrade goes to the warehouse next to
    examples/salesdb/pipeline.toml, and the look at what it wrote after it (rows whose value
    is unknown) reads that warehouse too, not one in the folder the command runs from; the
    checkout's alembic.ini does not turn alembic's INFO logging on."""
    for name in ("examples", "migrations", "alembic.ini"):
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy
        copy(REPO / name, workspace / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDSHIFT_SYNC_")} | {"PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "sync", "deploy", "--config", "examples/salesdb/pipeline.toml"],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("applied 474a94aea2c7 salesdb pipeline")
    assert done.stderr == "warehouse: the embedded PostgreSQL in examples/salesdb/.redshift-sync/pgdata\n"
    assert not (workspace / ".redshift-sync").exists()

"""Messages that told the user something untrue or unusable: each says what happened and
what the command in hand can do about it."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sync.cli.app import app
from sync.warehouse import WarehouseError
from tests.cli_runs import run_cli
from tests.helpers import EXAMPLES

EXAMPLE = EXAMPLES / "salesdb" / "pipeline.toml"


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there any more: connections are refused
    return port


def rs(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return run_cli(*args, cwd=cwd, keep_settings=False)


def folder_with_revision(path: Path) -> Path:
    path.mkdir()
    shutil.copy(EXAMPLE, path / "pipeline.toml")
    assert rs("revision", "-m", "initial", cwd=path).returncode == 0
    return path


def test_the_unknown_revision_error_names_only_settings_the_command_has(tmp_path, database_dsn):
    deployed_from = folder_with_revision(tmp_path / "a")
    assert rs("deploy", "--dsn", database_dsn, cwd=deployed_from).returncode == 0
    other = folder_with_revision(tmp_path / "b")  # another initial revision: another id
    out = rs("status", "--dsn", database_dsn, cwd=other)
    said = " ".join(out.stderr.split())
    assert out.returncode == 1 and "does not hold: point the tool at the pipeline's revisions folder" in said
    assert "([operations] versions in the pipeline file, or $REDSHIFT_SYNC_VERSIONS)" in said
    assert "--versions" not in said
    assert "No such option" in CliRunner().invoke(app, ["status", "--versions", "x"]).output  # why it must not say it


def test_deploy_to_a_closed_port_says_it_cannot_connect_not_that_a_revision_rolled_back(tmp_path):
    folder = folder_with_revision(tmp_path / "a")
    port = closed_port()
    out = rs("deploy", "--dsn", f"postgresql://u@127.0.0.1:{port}/db", cwd=folder)
    said = " ".join(out.stderr.split())
    assert out.returncode == 1 and f"cannot connect to PostgreSQL at 127.0.0.1:{port}" in said
    assert "rolled back" not in said


def test_the_deploy_function_on_a_closed_port_says_nothing_was_deployed(tmp_path, monkeypatch):
    from sync.config import load_pipeline
    from sync.schema.revisions import alembic_config, deploy, versions_setting

    folder = folder_with_revision(tmp_path / "a")
    monkeypatch.chdir(folder)
    pipeline, path = load_pipeline(folder / "pipeline.toml")
    cfg = alembic_config(versions_setting(None, pipeline, path), f"postgresql://u@127.0.0.1:{closed_port()}/db", path)
    with pytest.raises(WarehouseError) as failed:
        deploy(cfg, pipeline)
    assert str(failed.value).startswith("cannot connect to the warehouse, nothing was deployed: ")
    assert "rolled back" not in str(failed.value)


def test_generate_takes_no_dsn_since_nothing_connects():
    out = CliRunner().invoke(app, ["generate", "--config", str(EXAMPLE), "--dsn", "postgresql://u@h/db"])
    assert out.exit_code == 2 and "No such option: --dsn" in out.output


@pytest.mark.parametrize(
    ("name", "says"), [("missing.jsonl", "not found"), ("a-folder", "is a folder: give one JSON-lines file")]
)
def test_ingest_names_a_wrong_file_before_looking_at_the_warehouse(tmp_path, database_dsn, name, says):
    (tmp_path / "a-folder").mkdir()
    args = ["ingest", "--table", "customer", "--file", str(tmp_path / name), "--config", str(EXAMPLE), "--dsn", database_dsn]
    out = CliRunner().invoke(app, args)  # the database is empty: nothing is deployed
    assert out.exit_code == 1 and isinstance(out.exception, SystemExit), out.output
    assert says in out.output and "not deployed" not in out.output


def test_revision_names_the_file_it_wrote_relative_to_the_folder_and_only_once(tmp_path, monkeypatch):
    """A path below the working folder reads relative to it (as the docs show it, and as
    long paths would otherwise wrap); alembic's own "Generating <absolute path>" line is
    not printed besides ours."""
    shutil.copy(EXAMPLE, tmp_path / "pipeline.toml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("REDSHIFT_SYNC_VERSIONS", raising=False)
    out = CliRunner().invoke(app, ["revision", "-m", "initial"])
    assert out.exit_code == 0, out.output
    (written,) = (tmp_path / "migrations" / "versions").glob("*_initial.py")
    assert out.output.splitlines()[0] == f"wrote migrations/versions/{written.name} (revision {written.name.split('_')[1]})"
    assert "Generating" not in out.output and str(tmp_path) not in out.output

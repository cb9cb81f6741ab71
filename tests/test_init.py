"""`redshift-sync init`: a project folder a wheel user can start from, through the CLI."""

from __future__ import annotations

import tomllib

from tests.helpers import EXAMPLES
from tests.test_cli import run


def test_init_from_an_example_then_revision_and_deploy(tmp_path, database_dsn):
    made = run("init", "project", "--example", "salesdb", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "next: cd project && redshift-sync revision -m initial && redshift-sync deploy" in made.stdout
    project = tmp_path / "project"
    assert tomllib.loads((project / "pipeline.toml").read_text())["operations"]["versions"] == "revisions"
    assert (project / "events" / "customer-1.jsonl").is_file()

    assert run("revision", "-m", "initial", cwd=project).returncode == 0
    (written,) = (project / "revisions").glob("*_initial.py")
    deployed = run("deploy", "--dsn", database_dsn, cwd=project)
    assert deployed.returncode == 0 and written.name.split("_")[1] in deployed.stdout, deployed.stdout + deployed.stderr


def test_init_from_a_sample_writes_a_valid_pipeline_with_the_inferred_order(tmp_path):
    made = run(
        "init", "p", "--sample", str(EXAMPLES / "connector_types" / "oracle.jsonl"), "--table", "customers",
        "--topic", "server1.DEBEZIUM.CUSTOMERS", cwd=tmp_path,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    pipeline = tomllib.loads((tmp_path / "p" / "pipeline.toml").read_text())
    (table,) = pipeline["tables"]
    assert (table["name"], table["order_by"]) == ("customers", "oracle-scn")
    assert "CHANGE-ME" in pipeline["source"]["iam_role"]


def test_init_never_overwrites_a_project_and_names_what_is_wrong(tmp_path):
    assert run("init", "--example", "salesdb", cwd=tmp_path).returncode == 0
    again = run("init", "--example", "salesdb", cwd=tmp_path)
    assert again.returncode == 1 and "pipeline.toml exists already" in again.stderr
    neither = run("init", "other", cwd=tmp_path)
    assert neither.returncode == 1 and "name one example (" in neither.stderr and "salesdb" in neither.stderr
    unknown = run("init", "third", "--example", "nope", cwd=tmp_path)
    assert unknown.returncode == 1 and "no example 'nope'" in unknown.stderr
    half = run("init", "fourth", "--sample", "x.jsonl", cwd=tmp_path)
    assert half.returncode == 1 and "--sample needs --table and --topic" in half.stderr

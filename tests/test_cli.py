"""The command line as a user runs it: real subprocesses, a real PostgreSQL."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.cli_runs import run_cli
from tests.helpers import EXAMPLES, REPO

PIPELINE = EXAMPLES / "salesdb" / "pipeline.toml"
EVENTS = EXAMPLES / "salesdb" / "events"


def run(*args: str, env: dict | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return run_cli(*args, env=env, cwd=cwd)


def test_deploy_ingest_sync_status_flow(database_dsn):
    common = ["--config", str(PIPELINE), "--dsn", database_dsn]
    first = run("deploy", *common)
    assert first.returncode == 0, first.stderr
    assert "applied" in first.stdout
    second = run("deploy", *common)
    assert second.returncode == 0 and "nothing to do" in second.stdout

    ing = run("ingest", "--table", "customer", "--file", str(EVENTS / "customer-2.jsonl"), *common)
    assert ing.returncode == 0, ing.stderr
    assert "ingested 11 record(s) into customer (partition 0: offsets 0-10)" in ing.stdout
    assert "1 value(s) are not JSON" in ing.stdout

    out = run("sync", "--table", "customer", "--json", *common)
    assert out.returncode == 0, out.stderr
    (summary,) = json.loads(out.stdout)
    assert summary["table"] == "customer" and summary["events_read"] == 11 and summary["quarantined"] == 2

    st = run("status", *common)
    assert st.returncode == 0
    assert "customer" in st.stdout and "value is not valid JSON" in st.stdout


def test_dsn_and_config_from_the_environment(database_dsn, tmp_path):
    env = {"REDSHIFT_SYNC_DSN": database_dsn, "REDSHIFT_SYNC_CONFIG": str(PIPELINE)}
    assert run("deploy", env=env).returncode == 0
    out = run("sync", env=env)
    assert out.returncode == 0 and "customer" in out.stdout and "orders" in out.stdout


def test_errors_are_one_clear_line_and_a_nonzero_exit(database_dsn, tmp_path):
    missing = run("sync", "--config", str(tmp_path / "nope.toml"), "--dsn", database_dsn)
    assert missing.returncode == 2
    assert "nope.toml' not found; pass --config PATH or set REDSHIFT_SYNC_CONFIG" in missing.stderr
    assert "Traceback" not in missing.stderr

    bad = tmp_path / "bad.toml"
    bad.write_text(PIPELINE.read_text().replace('name = "customer"', 'name = "customer; drop table x"'))
    out = run("generate", "--config", str(bad))
    assert out.returncode == 2 and "tables[0] (customer; drop table x).name" in out.stderr

    unknown = run("sync", "--table", "nope", "--config", str(PIPELINE), "--dsn", database_dsn)
    assert unknown.returncode == 2 and "unknown table 'nope'; the pipeline file defines: customer, orders" in unknown.stderr

    not_deployed = run("sync", "--config", str(PIPELINE), "--dsn", database_dsn)
    assert not_deployed.returncode == 1 and "does not exist" in not_deployed.stderr + not_deployed.stdout

    bad_dsn = run("status", "--config", str(PIPELINE), "--dsn", "mysql://x")
    assert bad_dsn.returncode == 1 and "unsupported DSN scheme 'mysql'" in bad_dsn.stderr


def test_ingest_refuses_redshift(tmp_path):
    from sync.config import load_pipeline
    from sync.local.stream import ingest_file
    from sync.sql.dialect import dialect_for
    from sync.warehouse import Warehouse, WarehouseError

    pipeline, _ = load_pipeline(PIPELINE)
    with pytest.raises(WarehouseError, match="streaming materialized view reads the topic itself"):
        ingest_file(Warehouse(dialect_for("redshift"), "redshift://x", None), pipeline, "customer", EVENTS / "customer-1.jsonl")


def test_generate_writes_redshift_and_postgres(tmp_path):
    out = run("generate", "--config", str(PIPELINE), "--dialect", "postgres", "--out", str(tmp_path / "pg"))
    assert out.returncode == 0
    assert sorted(p.name for p in (tmp_path / "pg").iterdir()) == ["00_pipeline.sql", "customer.sql", "orders.sql"]
    assert "jsonb" in (tmp_path / "pg" / "customer.sql").read_text()
    rs = run("generate", "--config", str(PIPELINE))
    assert rs.returncode == 0 and "CREATE MATERIALIZED VIEW" in rs.stdout and "SUPER" in rs.stdout.upper()


def test_kcat_lines_replay_a_real_topic(deployed, tmp_path):
    from sync.local.stream import ingest_file
    from sync.operations.runner import sync

    wh, pipeline = deployed
    value = json.loads((EVENTS / "customer-1.jsonl").read_text().splitlines()[0])["value"]
    kcat = {
        "topic": "salesdb.salesdb.CUSTOMER",
        "partition": 2,
        "offset": 41,
        "tstype": "create",
        "ts": 1700000000000,
        "broker": 1,
        "key": json.dumps({"CUST_ID": "C001"}),
        "payload": json.dumps(value),
    }
    path = tmp_path / "kcat.jsonl"
    path.write_text(json.dumps(kcat) + "\n")
    result = ingest_file(wh, pipeline, "customer", path)
    assert result.partitions == {2: (41, 41)}
    (run_,) = sync(wh, pipeline, ["customer"])
    assert run_.upserted == 1 and run_.watermark_after == "2:41"
    assert wh.scalar('SELECT kafka_timestamp FROM cdc."customer__stream"').isoformat() == "2023-11-14T22:13:20"

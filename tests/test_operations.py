"""Day-2 operations as a user meets them: every command checks the pipeline file against
the revision deployed first, status as JSON with readable durations, drift that clears once
handled, retention of the control tables, the revisions folder set once, the offline SQL
from an installed package, querying the embedded warehouse, and ingest messages that say
what to do. Real subprocesses against a real PostgreSQL."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sync.cli.report import readable_seconds
from sync.debezium.events import ChangeStream, MySqlSource
from sync.operations.runner import prune, status
from sync.sql.dialect import dialect_for
from tests.cli_runs import run_cli
from tests.helpers import EXAMPLES, REPO, ingest, make_pipeline, sync_one
from tests.test_migrations import EVENTS, project, revise, upgraded  # noqa: F401  (fixtures)

PIPELINE = EXAMPLES / "salesdb" / "pipeline.toml"


def cli(*args: str, cwd: Path, dsn: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_cli(*args, env={**({"REDSHIFT_SYNC_DSN": dsn} if dsn else {}), **(env or {})}, cwd=cwd, keep_settings=False)


def test_status_stops_when_the_pipeline_file_differs_from_the_deployed_revision(project, upgraded, database_dsn):  # noqa: F811
    """Was: an edited pipeline whose revision was refused, and `status` said nothing."""
    text = (project / "pipeline.toml").read_text()
    (project / "pipeline.toml").write_text(text.replace('type = "varchar(64)" }', 'type = "integer" }', 1))
    out = cli("status", cwd=project, dsn=database_dsn)
    assert out.returncode == 1
    assert "the pipeline file differs from revision" in out.stderr and "redshift-sync revision -m MESSAGE" in out.stderr


def test_backfill_stops_before_spark_when_the_revision_is_not_deployed(project, upgraded, database_dsn):  # noqa: F811
    """Was: Spark ran for 21 s, then `relation "shop.accounts__deleted" does not exist`."""
    cfg = upgraded
    revise(
        cfg,
        project,
        '{ name = "MKTSEGMENT", type = "varchar(64)" },',
        '{ name = "MKTSEGMENT", type = "varchar(64)" },\n  { name = "EMAIL", type = "varchar(128)" },',
        "email",
    )
    out = cli(
        "backfill",
        "--table",
        "customer",
        "--snapshot",
        str(project / "none.json"),
        "--format",
        "json",
        cwd=project,
        dsn=database_dsn,
    )
    assert out.returncode == 1 and "pyspark" not in out.stderr.lower()
    assert "the pipeline file is revision" in out.stderr and "run `redshift-sync deploy` first" in out.stderr


def test_ingest_before_deploy_says_to_deploy(tmp_path, database_dsn):
    """Was: a bare `schema "shop" does not exist`."""
    out = cli(
        "ingest",
        "--config",
        str(PIPELINE),
        "--table",
        "customer",
        "--file",
        str(EVENTS / "customer-1.jsonl"),
        cwd=tmp_path,
        dsn=database_dsn,
    )
    assert out.returncode == 1 and "run `redshift-sync deploy` first" in out.stderr


def test_ingest_names_the_lines_that_are_not_records(deployed, tmp_path):
    """Was: a truncated JSON line was kept as a raw value without its line number."""
    from sync.local.stream import ingest_file

    wh, pipeline = deployed
    good = json.dumps({"value": {"op": "c", "after": {"CUST_ID": "C1"}}})
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join([good, good[:20], good, "[1, 2]"]) + "\n")
    assert ingest_file(wh, pipeline, "customer", path).malformed_lines == [2, 4]


def test_status_json_and_readable_lag(deployed, tmp_path, database_dsn):
    """Was: no `status --json`, and a lag printed as `63044378.7` seconds."""
    wh, pipeline = deployed
    stream = ChangeStream(["CUST_ID"], MySqlSource(table="CUSTOMER"))
    records = [stream.insert({"CUST_ID": f"C{i}", "NAME": "n", "MKTSEGMENT": "m"}) for i in range(5)]
    ingest(wh, pipeline, "customer", [{**r, "timestamp": 1_700_000_000_000} for r in records])  # November 2023
    sync_one(wh, pipeline, "customer")
    out = cli("status", "--json", "--config", str(PIPELINE), cwd=tmp_path, dsn=database_dsn)
    assert out.returncode == 0, out.stderr
    customer = json.loads(out.stdout)[0]
    assert customer["table"] == "customer" and customer["target_rows"] == 5 and customer["last_run"]["lag_seconds"] > 86400 * 365
    table = cli("status", "--config", str(PIPELINE), cwd=tmp_path, dsn=database_dsn).stdout
    days = int(customer["last_run"]["lag_seconds"] // 86400)
    assert f"{days} d " in table and str(int(customer["last_run"]["lag_seconds"])) not in table


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "-"),
        (0.004, "0.00 s"),
        (2.5, "2.50 s"),
        (42.25, "42.2 s"),
        (61, "1 min 1 s"),
        (3 * 3600 + 125, "3 h 2 min"),
        (63044378.7, "729 d 16 h"),
    ],
)
def test_durations_read_as_days_hours_minutes(seconds, text):
    assert readable_seconds(seconds) == text


def test_drift_clears_once_the_column_is_added(project, upgraded, wh, example_pipeline):  # noqa: F811
    """Was: `field not in the pipeline file: discount_pct (2 events)` stayed after the column was added."""
    stream = ChangeStream(["CUST_ID"], MySqlSource(table="CUSTOMER", file_number=9))
    ingest(
        wh,
        example_pipeline,
        "customer",
        [stream.insert({"CUST_ID": f"C{i}", "NAME": "n", "MKTSEGMENT": "m", "DISCOUNT_PCT": 5}) for i in range(2)],
    )
    sync_one(wh, example_pipeline, "customer")
    (customer, _) = status(wh, example_pipeline)
    assert customer.schema_drift == [("unknown", "DISCOUNT_PCT", 2)]

    pipeline, _ = revise(
        upgraded,
        project,
        '{ name = "MKTSEGMENT", type = "varchar(64)" },',
        '{ name = "MKTSEGMENT", type = "varchar(64)" },\n  { name = "DISCOUNT_PCT", type = "integer" },',
        "discount",
    )
    from sync.schema.revisions import deploy

    deploy(upgraded, pipeline)
    assert status(wh, pipeline)[0].schema_drift == []
    assert wh.scalar("SELECT COUNT(*) FROM cdc.sync_schema_drift WHERE table_name = 'customer'") == 0


def test_prune_removes_control_rows_past_the_retention(deployed):
    wh, pipeline = deployed
    for _ in range(3):
        sync_one(wh, pipeline, "customer")
    sync_one(wh, pipeline, "orders")
    wh.execute("UPDATE cdc.sync_run_log SET started_at = started_at - INTERVAL '40 days'")
    wh.execute(
        "INSERT INTO cdc.customer__drift VALUES ('customer', LOCALTIMESTAMP - INTERVAL '40 days', 'unknown', 'X', 1),"
        " ('customer', LOCALTIMESTAMP, 'unknown', 'Y', 1)"
    )
    wh.execute(
        "INSERT INTO cdc.customer__quarantine (table_name, kafka_partition, kafka_offset, reason, handled, handled_at) VALUES "
        "('customer', 0, 1, 'r', 'replayed', LOCALTIMESTAMP - INTERVAL '40 days'),"
        "('customer', 0, 2, 'r', 'discarded', LOCALTIMESTAMP - INTERVAL '40 days'),"
        "('customer', 0, 3, 'r', 'discarded', LOCALTIMESTAMP),"
        "('customer', 0, 4, 'r', NULL, NULL)"
    )
    wh.execute("UPDATE cdc.customer__quarantine SET run_started_at = LOCALTIMESTAMP - INTERVAL '400 days'")
    result = prune(wh, pipeline)
    assert (result.retention_days, result.run_log, result.schema_drift, result.quarantine) == (30, 2, 1, 2)
    # Each table keeps its newest run (status shows it); waiting records are never pruned.
    assert wh.query("SELECT table_name, COUNT(*) FROM cdc.sync_run_log GROUP BY 1 ORDER BY 1") == [("customer", 1), ("orders", 1)]
    assert wh.query("SELECT kafka_offset FROM cdc.sync_quarantine ORDER BY 1") == [(3,), (4,)]
    assert prune(wh, pipeline, days=1).run_log == 0


def test_revisions_folder_is_set_once_in_the_pipeline_file(tmp_path, database_dsn):
    """Was: `--versions DIR` on every command."""
    project = tmp_path / "project"
    shutil.copytree(REPO / "migrations" / "versions", project / "revs", ignore=shutil.ignore_patterns("__pycache__"))
    (project / "pipeline.toml").write_text('[operations]\nversions = "revs"\n\n' + PIPELINE.read_text())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    config = ["--config", str(project / "pipeline.toml")]
    assert "applied" in cli("deploy", *config, cwd=elsewhere, dsn=database_dsn).stdout
    assert cli("status", *config, cwd=elsewhere, dsn=database_dsn).returncode == 0
    # The environment overrides the file: a folder without the deployed revision is refused.
    empty = tmp_path / "empty"
    empty.mkdir()
    out = cli("status", *config, cwd=elsewhere, dsn=database_dsn, env={"REDSHIFT_SYNC_VERSIONS": str(empty)})
    assert out.returncode == 1 and f"which {empty} does not hold" in out.stderr


def test_offline_sql_without_an_alembic_ini(tmp_path):
    """Was: reviewing `alembic upgrade head --sql` needed a hand-made alembic.ini."""
    shutil.copytree(
        REPO / "migrations" / "versions", tmp_path / "migrations" / "versions", ignore=shutil.ignore_patterns("__pycache__")
    )
    out = cli("deploy", "--sql", "--config", str(PIPELINE), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout == (REPO / "tests" / "golden" / "alembic_upgrade_redshift.sql").read_text()


def test_query_runs_sql_on_the_warehouse(deployed, tmp_path, database_dsn):
    out = cli("query", "SELECT table_name, handled FROM cdc.sync_quarantine", "--json", cwd=tmp_path, dsn=database_dsn)
    assert out.returncode == 0 and json.loads(out.stdout) == []
    out = cli(
        "query",
        "INSERT INTO cdc.customer__drift VALUES ('customer', LOCALTIMESTAMP, 'unknown', 'X', 1)",
        cwd=tmp_path,
        dsn=database_dsn,
    )
    assert out.returncode == 0 and "ok, 1 row(s) affected" in out.stdout
    bad = cli("query", "SELECT nope FROM cdc.customer", cwd=tmp_path, dsn=database_dsn)
    assert bad.returncode == 1 and 'column "nope" does not exist' in bad.stderr


def test_quarantine_commands(deployed, tmp_path, database_dsn):
    from sync.local.stream import ingest_file

    wh, pipeline = deployed
    ingest_file(wh, pipeline, "customer", EVENTS / "customer-2.jsonl")
    sync_one(wh, pipeline, "customer")
    common = ["--config", str(PIPELINE), "--table", "customer"]
    listed = cli("quarantine", "list", *common, "--json", cwd=tmp_path, dsn=database_dsn)
    assert listed.returncode == 0, listed.stderr
    assert {r["reason"] for r in json.loads(listed.stdout)["records"]} == {
        "value is not valid JSON",
        "primary key field CUST_ID is missing or not a varchar(64)",
    }
    replayed = cli("quarantine", "replay", *common, "--reason", "valid JSON", cwd=tmp_path, dsn=database_dsn)
    assert replayed.returncode == 0, replayed.stderr
    assert "replayed 1 record(s) of customer" in replayed.stdout and "1 failed again: value is not valid JSON" in replayed.stdout
    discarded = cli("quarantine", "discard", *common, "--before", "2999-01-01T00:00:00Z", cwd=tmp_path, dsn=database_dsn)
    assert discarded.returncode == 0 and "discarded 2 record(s) of customer" in discarded.stdout
    assert wh.query("SELECT handled, COUNT(*) FROM cdc.sync_quarantine GROUP BY 1 ORDER BY 1") == [
        ("discarded", 2),
        ("replayed", 1),
    ]
    bad = cli("quarantine", "list", *common, "--before", "yesterday", cwd=tmp_path, dsn=database_dsn)
    assert bad.returncode == 1 and "--before 'yesterday' is not an ISO 8601 time" in bad.stderr


def test_prune_stream_keeps_unread_records_and_those_that_wrote_stored_rows(deployed):
    """The stream relation only grows (the streaming MV on Redshift): `prune --stream` deletes
    what nothing needs: read records that wrote no stored row."""
    from sync.local.stream import ingest_file

    wh, pipeline = deployed
    ingest_file(wh, pipeline, "customer", EVENTS / "customer-1.jsonl")
    ingest_file(wh, pipeline, "customer", EVENTS / "customer-2.jsonl")
    sync_one(wh, pipeline, "customer")
    ingest_file(wh, pipeline, "customer", EVENTS / "customer-3.jsonl")  # not read yet
    wh.execute("UPDATE cdc.customer__stream SET refresh_time = refresh_time - INTERVAL '40 days'")
    writers = set(wh.query("SELECT _kafka_partition, _kafka_offset FROM cdc.customer"))
    pending = wh.scalar("SELECT COUNT(*) FROM cdc.customer__stream WHERE kafka_offset > 15")
    total = wh.scalar("SELECT COUNT(*) FROM cdc.customer__stream")

    result = prune(wh, pipeline, stream=True)
    assert result.stream == {"customer": total - pending - len(writers), "orders": 0}
    kept = set(wh.query("SELECT kafka_partition, kafka_offset FROM cdc.customer__stream WHERE kafka_offset <= 15"))
    assert kept == writers
    assert wh.scalar("SELECT COUNT(*) FROM cdc.customer__stream WHERE kafka_offset > 15") == pending
    wh.execute("UPDATE cdc.customer__stream SET refresh_time = LOCALTIMESTAMP WHERE kafka_offset > 15")  # as refreshed
    assert sync_one(wh, pipeline, "customer").events_read == pending


def test_prune_stream_sql_for_redshift_parses():
    import sqlglot

    from sync.operations.runner import stream_prune_sql

    pipeline = make_pipeline(
        '[[tables]]\nname = "item"\ntopic = "t"\nprimary_key = ["id"]\ncolumns = [{ name = "id", type = "integer" }]\n'
    )
    sql = stream_prune_sql(
        pipeline, pipeline.tables[0], dialect_for("redshift", pipeline.schema), "GETDATE() - INTERVAL '30 days'"
    )
    statement = sqlglot.parse_one(sql, read="redshift")
    assert statement.key == "delete" and '"cdc"."item__stream".kafka_offset <=' in sql

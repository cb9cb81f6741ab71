"""Column policies through the CLI on the embedded PostgreSQL ('postgres' dialect): the
scenarios both engines run (tests/policy_scenarios.py: hash, mask and drop in the target
and the redacted quarantine payload, a policy added to a stored column by a revision, key
rotation), then unparseable and isolated records, backfills and column fills under
policies, and a secret that never appears in generated SQL.

The events are shaped as Debezium's MySQL connector emits them: "before" and "after" hold
the row images, "source" the binlog position
(https://debezium.io/documentation/reference/stable/connectors/mysql.html#mysql-events):
both images carry every column, so both must be redacted.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp
from typer.testing import CliRunner

from sync.cli.app import app
from sync.config import MASKABLE_FAMILIES, ConfigError, load_pipeline, parse_pipeline
from sync.debezium.events import ChangeStream, MySqlSource, write_jsonl
from sync.sql.column_fill import column_fill_sql
from sync.sql.dialect import dialect_for
from sync.sql.objects import pipeline_objects
from sync.sql.policy import hash_sql, mask_literal
from sync.sql.types import parse_type
from sync.warehouse import Warehouse
from tests import policy_scenarios as scenarios
from tests.helpers import cli_project
from tests.policy_scenarios import ALICE, CLEAR, EXAMPLE, REPO, SECRET, customers, keyed


@pytest.fixture
def policy_cli(database_dsn: str, tmp_path: Path) -> scenarios.PolicyCli:
    """The example on a database of its own, deployed with `revision` and `deploy`."""
    return scenarios.PolicyCli(database_dsn, tmp_path, "crm")


def test_hash_mask_and_drop_in_the_target_and_the_quarantine(policy_cli):
    scenarios.hash_mask_and_drop_in_the_target_and_the_quarantine(policy_cli)


def test_a_policy_added_by_a_revision_converts_stored_values(policy_cli):
    scenarios.a_policy_added_by_a_revision_converts_stored_values(policy_cli)


def test_a_rotated_key_hashes_new_values_and_stored_ones_keep_theirs(policy_cli):
    scenarios.a_rotated_key_hashes_new_values_and_stored_ones_keep_theirs(policy_cli)


def test_in_a_scratch_schema_as_the_live_suite_runs_them(wh, database_dsn, tmp_path):
    """tests/test_redshift_live.py's way, each scenario in a scratch schema of one database:
    deployed as `doctor --verify` deploys, the revision applied from `deploy --sql`."""
    for i, scenario in enumerate(scenarios.SCENARIOS):
        folder = tmp_path / str(i)
        folder.mkdir()
        scenario(scenarios.scratch_cli(database_dsn, wh, f"rs_test_0123abc{i}", folder))
    assert wh.scalar("SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'alembic_version'") == 0


def test_every_shared_scenario_runs_here():
    assert {f"test_{s.__name__}" for s in scenarios.SCENARIOS} <= set(globals())


@pytest.fixture
def project(tmp_path: Path, database_dsn: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("POLICY_KEY", SECRET)
    return cli_project(tmp_path, EXAMPLE, database_dsn, monkeypatch)


def cli(*args: str) -> str:
    out = CliRunner().invoke(app, list(args))
    assert out.exit_code == 0, out.output
    return out.output


def deploy_with_key(secret_env: str | None = "POLICY_KEY") -> None:
    cli("revision", "-m", "crm")
    cli("deploy")
    if secret_env:
        cli("policy", "rotate-key", "--secret-env", secret_env)


def ingest_sync(project: Path, records: list[dict], table: str = "customers") -> dict:
    path = project / "events.jsonl"
    write_jsonl(records, path)
    cli("ingest", "--table", table, "--file", str(path))
    (summary,) = json.loads(cli("sync", "--table", table, "--json"))
    return summary


def every_written_table(wh: Warehouse) -> str:
    return scenarios.every_written_value(wh, "crm")


def test_unparseable_value_keeps_no_raw_value_under_policies(project, wh):
    deploy_with_key()
    path = project / "bad.jsonl"
    path.write_text(json.dumps({"partition": 0, "offset": 0, "key": {"id": 1}, "value": "{not json 123-45-6789"}) + "\n")
    cli("ingest", "--table", "customers", "--file", str(path))
    cli("sync", "--table", "customers")
    assert wh.query("SELECT raw_value, reason FROM crm.sync_quarantine")[0][0] is None
    assert "123-45-6789" not in every_written_table(wh)


def test_isolated_record_is_redacted(project, wh):
    deploy_with_key()
    s = customers()
    ingest_sync(project, [s.insert(ALICE)])
    wh.execute("TRUNCATE crm.customers__watermark")  # the record is pending again
    wh.execute("CALL crm.isolate_record_customers('engine error')")
    (payload,) = wh.query("SELECT payload FROM crm.sync_quarantine")[0]
    assert payload["after"]["email"] == keyed(SECRET, "alice@example.com")
    assert not any(v in every_written_table(wh) for v in CLEAR)


def test_sync_without_a_key_stops_and_names_the_command(project, wh):
    deploy_with_key(secret_env=None)
    path = project / "events.jsonl"
    write_jsonl([customers().insert(ALICE)], path)
    cli("ingest", "--table", "customers", "--file", str(path))
    out = CliRunner().invoke(app, ["sync", "--table", "customers", "--json"])
    assert "policy rotate-key" in out.output
    # A failure of the procedure itself, not of a record: nothing isolated or quarantined.
    assert wh.scalar("SELECT COUNT(*) FROM crm.customers") == 0
    assert wh.scalar("SELECT COUNT(*) FROM crm.sync_quarantine") == 0
    doctor = json.loads(CliRunner().invoke(app, ["doctor", "--json"]).output)["checks"]
    assert {"name": "policy key", "state": "failed", "detail": "no key yet: run redshift-sync policy rotate-key"} in doctor
    cli("policy", "rotate-key", "--secret-env", "POLICY_KEY")
    assert json.loads(cli("sync", "--table", "customers", "--json"))[0]["upserted"] == 1
    assert json.loads(cli("doctor", "--json"))["checks"][-1]["state"] == "ok"


def test_too_short_a_key_is_refused(project, monkeypatch):
    deploy_with_key(secret_env=None)
    monkeypatch.setenv("POLICY_KEY", "short")
    out = CliRunner().invoke(app, ["policy", "rotate-key", "--secret-env", "POLICY_KEY"])
    assert out.exit_code != 0 and "32 to 256 characters" in out.output


def test_policy_cannot_be_removed_or_changed_by_a_revision(project):
    deploy_with_key()
    path = project / "pipeline.toml"
    path.write_text(path.read_text().replace(', policy = "hash" },    # joinable', " },    # joinable"))
    out = CliRunner().invoke(app, ["revision", "-m", "no policy"])
    assert out.exit_code != 0 and "policy hash -> none" in out.output


def test_the_secret_never_appears_in_generated_sql_revisions_or_procedures(project, wh):
    deploy_with_key()
    pipeline, _ = load_pipeline(EXAMPLE)
    for dialect in ("redshift", "postgres"):
        for obj in pipeline_objects(pipeline, dialect, "examples/customers_pii/pipeline.toml"):
            assert SECRET not in obj.sql
    assert SECRET not in cli("generate", "--dialect", "redshift")
    for revision in (project / "versions").glob("*.py"):
        assert SECRET not in revision.read_text()
    bodies = wh.query("SELECT prosrc FROM pg_proc WHERE proname LIKE '%%customers'")
    assert bodies and not any(SECRET in body for (body,) in bodies)
    # The procedures that read the key run as their owner (SECURITY DEFINER); the scheduled
    # incremental_sync_customers() only calls incremental_sync_customers(bigint).
    definer = "SELECT proname, pronargs, prosecdef FROM pg_proc WHERE proname LIKE '%%_customers' ORDER BY 1, 2"
    assert wh.query(definer) == [
        ("incremental_sync_customers", 0, False),
        ("incremental_sync_customers", 1, True),
        ("isolate_record_customers", 1, True),
    ]


BASE = {
    "source": {"kind": "kafka", "uri": "h:9092", "authentication": "none"},
    "tables": [{"name": "t", "topic": "x", "primary_key": ["id"], "columns": [{"name": "id", "type": "bigint"}]}],
}


@pytest.mark.parametrize(
    "column, message",
    [
        ({"name": "n", "type": "integer", "policy": "hash"}, "policy = 'hash' stores 64 hexadecimal characters"),
        ({"name": "n", "type": "varchar(32)", "policy": "hash"}, "varchar(64)"),
        ({"name": "n", "type": "super", "policy": "mask"}, "no fixed value for type super"),
        ({"name": "n", "type": "varchar", "policy": "encrypt"}, "Input should be 'hash', 'mask' or 'drop'"),
    ],
)
def test_policies_a_type_cannot_hold_are_refused(column, message):
    data = json.loads(json.dumps(BASE))
    data["tables"][0]["columns"].append(column)
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_pipeline(data)


@pytest.mark.parametrize(
    "policy, message",
    [("hash", "the key identifies the row"), ("mask", "the key identifies the row"), ("drop", "a key field is always loaded")],
)
def test_a_key_column_takes_no_policy(policy, message):
    data = json.loads(json.dumps(BASE))
    data["tables"][0]["columns"] = [{"name": "id", "type": "varchar(64)", "policy": policy}, {"name": "n", "type": "integer"}]
    with pytest.raises(ConfigError, match=message):
        parse_pipeline(data)


def test_a_pipeline_without_policies_records_the_same_model():
    """No `policy` or `dropped` key in the recorded state of a table without policies, so
    revisions written before policies existed still match."""
    pipeline = parse_pipeline(BASE)
    dumped = pipeline.model_dump(mode="json")
    assert "dropped" not in dumped["tables"][0] and "policy" not in dumped["tables"][0]["columns"][0]


def test_backfilled_snapshot_rows_take_the_policies(project, wh, tmp_path):
    """A snapshot's clear values (the Parquet the Spark job stages, in target column order)
    are converted on their way into the target."""
    from datetime import datetime

    import pyarrow as pa
    import pyarrow.parquet as pq

    from sync.operations.backfill import load_and_merge, part_files

    deploy_with_key()
    pipeline, _ = load_pipeline(project / "pipeline.toml")
    folder = tmp_path / "staged"
    folder.mkdir()
    row = {k: [v] for k, v in ALICE.items() if k != "ssn"}  # a dropped field is not a column: not staged
    position = {
        "_source_ts": pa.array([datetime(2024, 1, 1)], pa.timestamp("us")),
        "_source_pos": pa.array([None], pa.string()),
        "_kafka_partition": pa.array([None], pa.int64()),
        "_kafka_offset": pa.array([None], pa.int64()),
        "_delete": [False],
    }
    pq.write_table(pa.table({**row, **position}), folder / "part-00000.parquet")
    counts = load_and_merge(wh, pipeline, pipeline.table("customers"), part_files(folder), lambda _: None)
    assert counts["loaded"] == 1
    assert wh.query("SELECT email, phone, birth_year FROM crm.customers") == [(keyed(SECRET, "alice@example.com"), "****", 0)]
    assert not any(v in every_written_table(wh) for v in CLEAR)


def test_prune_stream_bounds_the_clear_records_of_a_table_with_policies(project, wh):
    """The stream relation holds the topic's records in clear (the streaming view on
    Redshift). `prune --stream` keeps, for a table without policies, the record that wrote
    each stored row (for column fills); under policies it deletes those too."""
    deploy_with_key()
    s = customers()
    ingest_sync(project, [s.insert(ALICE)])
    assert "alice@example.com" in str(wh.query("SELECT payload::text FROM crm.customers__stream"))
    wh.execute("UPDATE crm.customers__stream SET refresh_time = refresh_time - INTERVAL '40 days'")
    cli("prune", "--stream", "--days", "30")
    assert wh.scalar("SELECT COUNT(*) FROM crm.customers__stream") == 0
    assert wh.scalar("SELECT COUNT(*) FROM crm.customers") == 1


def test_a_new_column_with_a_policy_is_filled_from_the_stream_and_converted(project, wh):
    path = project / "pipeline.toml"
    text = path.read_text()
    email = '  { name = "email", type = "varchar(64)", policy = "hash" },    # joinable, not readable\n'
    assert email in text
    path.write_text(text.replace(email, ""))
    deploy_with_key()
    s = customers()
    ingest_sync(project, [s.insert(ALICE), s.insert({**ALICE, "id": 2, "country": "USA"})])  # the second: quarantined
    path.write_text(text)
    assert 'add_column("customers", "email")' in cli("revision", "-m", "email, hashed")
    cli("deploy")
    assert wh.query("SELECT email FROM crm.customers") == [(keyed(SECRET, "alice@example.com"),)]
    (payload,) = wh.query("SELECT payload FROM crm.sync_quarantine")[0]
    assert payload["after"]["email"] == keyed(SECRET, "alice@example.com")
    assert not any(v in every_written_table(wh) for v in CLEAR)
    # The fill itself writes the policy's value (no clear value in the target, even inside
    # the revision's transaction): the Redshift statement hashes with the key table's key.
    pipeline, _ = load_pipeline(path)
    table = pipeline.table("customers")
    fill = column_fill_sql(dialect_for("redshift", "crm"), pipeline, table, table.column_by_any_name("email"))
    assert 'SHA2((SELECT secret FROM "crm"."sync_policy_key"' in fill and SECRET not in fill


# ---- the Redshift rendering (golden file sql/procedures/customers_pii/, parsed with sqlglot) ----


def redshift_statements() -> tuple:
    from tests.test_redshift_rules import rendering

    return rendering(EXAMPLE)


def projections(statement) -> dict[str, exp.Expression]:
    """The first expression under each alias of a parsed statement (innermost levels last)."""
    found: dict[str, exp.Expression] = {}
    for alias in statement.tree.find_all(exp.Alias):
        found.setdefault(alias.alias, alias.this)
    return found


def stored_projections(statement) -> dict[str, exp.Expression]:
    """The expressions of the stage query's `classified` step, where each column takes the
    value its policy stores (the step before types it once, in clear)."""
    (step,) = [cte for cte in statement.tree.find_all(exp.CTE) if cte.alias == "classified"]
    return {e.alias: e.this for e in step.this.expressions if isinstance(e, exp.Alias)}


def stage_insert(table: str):
    (stage,) = [s for s in redshift_statements() if s.in_procedure and s.sql.startswith(f'INSERT INTO "crm"."{table}__stage"')]
    return stage


def test_redshift_hash_is_sha2_nested_over_the_key_variable():
    """SHA2(string, bits): "a text representation of the hexadecimal value of the
    checksum" (https://docs.aws.amazon.com/redshift/latest/dg/SHA2.html). The typed email
    is SHA2(key || ':' || SHA2(key || ':' || value, 256), 256), the key a variable."""
    # The value is typed once (`typed`), the policy applied where the stage's row is made.
    email = stored_projections(stage_insert("customers"))["email"]
    # ... unless the record is a replayed one, whose field is its hash already (sync/sql/policy_replay.py)
    assert isinstance(email, exp.Case) and "_x_replayed" in email.args["ifs"][0].this.sql("redshift")
    email = email.args["default"]
    outer = email if isinstance(email, exp.SHA2) else None
    assert outer is not None, email.sql("redshift")
    inner = list(outer.this.find_all(exp.SHA2))
    assert len(inner) == 1 and outer.args["length"].this == inner[0].args["length"].this == "256"
    for sha in (outer, inner[0]):
        assert sha.this.sql("redshift").startswith("v_policy_key || ':' || ")
    ip = stored_projections(stage_insert("logins"))["ip_address"]
    assert isinstance(ip, exp.Case) and isinstance(ip.args["default"], exp.SHA2) and "v_policy_key" in ip.sql("redshift")


def test_redshift_mask_is_a_constant_of_the_column_type_and_drop_is_no_column():
    cols = stored_projections(stage_insert("customers"))
    assert "CAST('****' AS VARCHAR(32))" in cols["phone"].sql("redshift")
    assert "CAST('0' AS INTEGER)" in cols["birth_year"].sql("redshift")
    creates = [s for s in redshift_statements() if s.sql.startswith('CREATE TABLE IF NOT EXISTS "crm"."customers')]
    assert creates and all('"ssn"' not in s.sql for s in creates)
    assert all(
        "ssn" not in c.sql("redshift") for c in projections(stage_insert("customers")).values() if isinstance(c, exp.Column)
    )


def test_redshift_quarantine_payload_is_redacted_with_object_transform():
    """OBJECT_TRANSFORM(input SET path, value, ...): "path and value pairs to modify an
    exiting path or add a new path" (https://docs.aws.amazon.com/redshift/latest/dg/r_object_transform_function.html).
    Both row images of the envelope, every policy field; a raw value is never kept."""
    stage = stage_insert("customers")
    payload = projections(stage)["_quarantine_payload"].sql("redshift")
    for image in ("after", "before"):
        assert f"""'"{image}"."email"', CASE WHEN t._x_replayed = SHA2(""" in payload  # a replay's hash kept
        assert f"""'"{image}"."phone"', CASE WHEN NOT""" in payload
        assert f"""'"{image}"."ssn"', NULL""" in payload
    assert "OBJECT_TRANSFORM(t._env" in payload
    assert "c._raw_value" not in stage.sql  # the stage's _raw_value is NULL
    (isolate,) = [
        s
        for s in redshift_statements()
        if s.in_procedure
        and s.sql.startswith('INSERT INTO "crm"."customers__quarantine"')
        and "s.kafka_offset = v_offset" in s.sql
    ]
    assert "OBJECT_TRANSFORM(s.env" in isolate.sql and "s.raw_value" not in isolate.sql


def test_redshift_procedures_with_policies_run_as_their_owner_and_read_the_key_table():
    """CREATE PROCEDURE ... LANGUAGE plpgsql [SECURITY INVOKER | SECURITY DEFINER] [SET ...]
    (https://docs.aws.amazon.com/redshift/latest/dg/r_CREATE_PROCEDURE.html)."""
    text = (REPO / "sql" / "procedures" / "customers_pii" / "customers.sql").read_text()
    assert text.count("$$ LANGUAGE plpgsql\nSECURITY DEFINER\nSET timezone TO 'UTC';") == 2  # sync(bigint), isolate
    assert 'FROM "crm"."sync_policy_key" WHERE key_id = (SELECT MAX(key_id) FROM "crm"."sync_policy_key")' in text
    plain = (REPO / "sql" / "procedures" / "salesdb" / "customer.sql").read_text()
    assert "SECURITY DEFINER" not in plain and "policy" not in plain


def test_redshift_upgrade_script_of_a_policy_revision_converts_with_the_key_table(project):
    """`deploy --sql` prints the reviewable Redshift script: the stored values converted
    with the newest key, read from the key table in the statement, never written into it."""
    path = project / "pipeline.toml"
    text = path.read_text()
    path.write_text(text.replace(', policy = "hash" },    # joinable', " },    # joinable"))
    cli("revision", "-m", "crm")
    (written,) = (project / "versions").glob("*.py")
    first = re.search(r"^revision: str = '(\w+)'", written.read_text(), re.M).group(1)
    path.write_text(text)
    cli("revision", "-m", "email hashed")
    script = cli("deploy", "--sql", "--dialect", "redshift", "--from", first)
    (update,) = [s for s in script.split(";") if s.strip().startswith('UPDATE "crm"."customers" SET')]
    assert 'SET "email" = SHA2((SELECT secret FROM "crm"."sync_policy_key"' in update
    parsed = sqlglot.parse_one(update, read="redshift")
    assert isinstance(parsed, exp.Update) and len(list(parsed.find_all(exp.SHA2))) == 2
    (redact,) = [s for s in script.split(";") if s.strip().startswith('UPDATE "crm"."customers__quarantine"')]
    assert "OBJECT_TRANSFORM" in redact and "raw_value = NULL" in redact
    sqlglot.parse_one(redact, read="redshift")
    assert SECRET not in script


@pytest.mark.parametrize("family", MASKABLE_FAMILIES)
def test_every_maskable_type_has_a_mask_both_engines_take(family, wh):
    """The mask of each type is a constant of that type: PostgreSQL evaluates it, and
    sqlglot reads the Redshift text as a cast to the same type."""
    t = parse_type({"char": "char", "varchar": "varchar(3)", "decimal": "decimal(12,2)"}.get(family, family))
    pg = mask_literal(dialect_for("postgres", "crm"), t)
    assert wh.scalar(f"SELECT {pg} IS NOT NULL")
    if family in ("char", "varchar"):
        assert wh.scalar(f"SELECT {pg}") == "*" * min(4, t.byte_limit)  # char: char(1)
    redshift = sqlglot.parse_one(f"SELECT {mask_literal(dialect_for('redshift', 'crm'), t)}", read="redshift")
    assert isinstance(redshift.expressions[0], exp.Cast)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.text(min_size=0, max_size=40), secret=st.text(min_size=32, max_size=64))
def test_the_hash_postgres_computes_is_the_documented_construction(wh, value, secret):
    """Any text (quotes, non-ASCII, NUL excepted: PostgreSQL text holds none): the SQL
    hash equals SHA-256(key || ':' || SHA-256(key || ':' || value)) over UTF-8, hex."""
    value, secret = value.replace("\x00", ""), secret.replace("\x00", "") or "k"
    d = dialect_for("postgres", "crm")
    sql = f"SELECT {hash_sql(d, 'CAST(%(v)s AS text)', 'CAST(%(k)s AS text)')}"
    assert wh.scalar(sql, {"v": value, "k": secret}) == keyed(secret, value)


def test_a_schemas_enable_envelope_is_stored_unwrapped_and_redacted(project, wh):
    """JsonConverter with schemas.enable=true wraps each value as {"schema", "payload"}
    (https://debezium.io/documentation/reference/stable/configuration/avro.html): the
    quarantine keeps the envelope, redacted, without the wrapper."""
    deploy_with_key()
    s = ChangeStream(["id"], MySqlSource(db="crm", table="customers"), with_schema=True)
    assert ingest_sync(project, [s.insert({**ALICE, "country": "USA"})])["quarantined"] == 1
    (payload,) = wh.query("SELECT payload FROM crm.sync_quarantine")[0]
    assert "schema" not in payload and payload["after"]["email"] == keyed(SECRET, "alice@example.com")
    assert not any(v in every_written_table(wh) for v in CLEAR)

"""The real Lambda handler against the embedded warehouse, through the local Data API:
every statement is a real CALL on PostgreSQL, polled, retried or cancelled as on AWS."""

from __future__ import annotations

import json
import threading
import time

import psycopg
import pytest

from sync.aws import lambda_handler
from sync.config import ConfigError
from sync.local.data_api import LocalDataApi
from sync.local.stream import ingest_file
from sync.operations.runner import SUMMARY_COLUMNS, status
from sync.sql import schemas
from tests.helpers import EXAMPLES, data_api_calls, fail_first_writes

EVENTS = EXAMPLES / "salesdb" / "events"


class Context:
    """The part of the Lambda context the handler reads: the time left before the timeout."""

    def __init__(self, seconds: float = 120.0):
        self.deadline = time.monotonic() + seconds

    def get_remaining_time_in_millis(self) -> int:
        return int((self.deadline - time.monotonic()) * 1000)


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("REDSHIFT_SYNC_CONFIG", str(EXAMPLES / "salesdb" / "pipeline.toml"))
    monkeypatch.setenv("REDSHIFT_SYNC_WORKGROUP", "local")
    monkeypatch.setenv("REDSHIFT_SYNC_DATABASE", "dev")
    monkeypatch.delenv("REDSHIFT_SYNC_DSN", raising=False)
    monkeypatch.delenv("REDSHIFT_SYNC_CLUSTER", raising=False)
    monkeypatch.setenv("REDSHIFT_SYNC_POLL_SECONDS", "0.05")
    monkeypatch.setenv("REDSHIFT_SYNC_POLL_MAX_SECONDS", "0.2")
    monkeypatch.setenv("REDSHIFT_SYNC_RETRY_BASE_SECONDS", "0.05")
    monkeypatch.setenv("REDSHIFT_SYNC_DEADLINE_MARGIN_SECONDS", "2")
    monkeypatch.setenv("REDSHIFT_SYNC_CONNECT_TIMEOUT_SECONDS", "0.2")
    monkeypatch.setenv("REDSHIFT_SYNC_READ_TIMEOUT_SECONDS", "0.5")
    monkeypatch.setenv("REDSHIFT_SYNC_SDK_ATTEMPTS", "1")
    monkeypatch.setenv("REDSHIFT_SYNC_MIN_CALL_SECONDS", "0")
    monkeypatch.setenv("REDSHIFT_SYNC_API_BACKOFF_SECONDS", "0.02")
    return monkeypatch


@pytest.fixture
def loaded(deployed):
    """The example pipeline deployed, with the first batch of each topic ingested."""
    wh, pipeline = deployed
    ingested = {
        "customer": ingest_file(wh, pipeline, "customer", EVENTS / "customer-1.jsonl").records,
        "orders": ingest_file(wh, pipeline, "orders", EVENTS / "orders-1.jsonl").records,
    }
    return wh, pipeline, ingested


@pytest.fixture
def api(env, database_dsn, monkeypatch):
    with LocalDataApi(database_dsn) as local:
        monkeypatch.setattr(lambda_handler, "client_factory", lambda *_: local)
        yield local


def pending(wh, pipeline) -> dict[str, int]:
    return {s.table: s.pending for s in status(wh, pipeline)}


def latest_run_log(wh, table: str) -> dict:
    row = wh.query(
        f"SELECT {', '.join(schemas.names(SUMMARY_COLUMNS))} FROM cdc.sync_run_log WHERE table_name = %s ORDER BY run_id DESC LIMIT 1",
        (table,),
    )
    return schemas.as_row(SUMMARY_COLUMNS, row[0])


def test_every_table_syncs_and_the_summary_is_the_run_log(loaded, api, capsys):
    wh, pipeline, ingested = loaded
    summary = lambda_handler.handler({"version": "0", "detail-type": "Scheduled Event"}, Context())

    assert summary["ok"] and summary["mode"] == "data-api"
    assert [t["table"] for t in summary["tables"]] == ["customer", "orders"]
    for run in summary["tables"]:
        logged = latest_run_log(wh, run["table"])
        assert run["status"] == "ok" and run["attempts"] == 1
        assert run["events_read"] == ingested[run["table"]] == logged["events_read"]
        for key in ("upserted", "deleted", "quarantined", "watermark_after", "lag_seconds"):
            assert run[key] == logged[key], key
    assert pending(wh, pipeline) == {"customer": 0, "orders": 0}
    assert json.loads(json.dumps(summary)) == summary  # the Lambda can return it as is

    *lines, run_line = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert run_line["run"]["tables"] == run_line["run"]["ok"] == 2 and run_line["run"]["remaining_ms"] > 0
    assert [line["Table"] for line in lines] == ["customer", "orders"]
    for line, run in zip(lines, summary["tables"]):
        (directive,) = line["_aws"]["CloudWatchMetrics"]
        # Per table, and over all tables (an empty dimension set) for the alarms of deploy/lambda.yaml.
        assert directive["Dimensions"] == [["Table"], []] and directive["Namespace"] == "RedshiftSync"
        assert isinstance(line["_aws"]["Timestamp"], int)
        for metric in directive["Metrics"]:
            assert metric["Name"] in line and metric["Unit"] in ("Count", "Seconds")
        assert (line["EventsRead"], line["Upserted"], line["Failed"]) == (run["events_read"], run["upserted"], 0)


def test_event_tables_syncs_only_those(loaded, api):
    wh, pipeline, ingested = loaded
    summary = lambda_handler.handler({"tables": ["customer"]}, Context())

    assert [t["table"] for t in summary["tables"]] == ["customer"]
    assert pending(wh, pipeline) == {"customer": 0, "orders": ingested["orders"]}
    assert [c["QueryString"] for c in data_api_calls(api)] == ['CALL "cdc"."incremental_sync_customer"()']


def test_unknown_table_fails_before_anything_runs(loaded, api):
    with pytest.raises(ConfigError, match="unknown table 'nope'; the pipeline file defines: customer, orders"):
        lambda_handler.handler({"tables": ["customer", "nope"]}, Context())
    assert api.statements() == []
    with pytest.raises(ConfigError, match='event "tables" must be a non-empty list'):
        lambda_handler.handler({"tables": "customer"}, Context())


def test_a_failing_procedure_fails_the_invocation_and_is_not_retried(loaded, api):
    wh, pipeline, ingested = loaded
    wh.execute(
        "CREATE OR REPLACE PROCEDURE cdc.incremental_sync_orders(p_max_records bigint) AS $$ "
        "BEGIN RAISE EXCEPTION 'orders source is broken'; END; $$ LANGUAGE plpgsql"
    )
    with pytest.raises(lambda_handler.SyncFailed, match="1 of 2 table.*orders failed: ERROR: orders source is broken") as info:
        lambda_handler.handler({}, Context())

    runs = {t["table"]: t for t in info.value.summary["tables"]}
    assert runs["customer"]["status"] == "ok" and runs["customer"]["events_read"] == ingested["customer"]
    assert runs["orders"]["status"] == "failed" and runs["orders"]["attempts"] == 1
    assert "orders source is broken" in runs["orders"]["error"]
    assert pending(wh, pipeline) == {"customer": 0, "orders": ingested["orders"]}


def test_a_call_outliving_the_deadline_is_cancelled_and_reported(loaded, api, database_dsn):
    wh, pipeline, ingested = loaded
    with psycopg.connect(database_dsn) as blocker:  # holds the watermark lock the CALL needs
        blocker.execute("LOCK TABLE cdc.customer__watermark IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(lambda_handler.SyncFailed, match="customer cancelled") as info:
            lambda_handler.handler({"tables": ["customer"]}, Context(seconds=3.5))
        (run,) = info.value.summary["tables"]
        assert run["status"] == "cancelled" and "ms of Lambda time" in run["error"]
        # The PostgreSQL statement really was cancelled, while the lock was still held.
        assert api.wait(run["statement_id"]) == "ABORTED"
        assert wh.scalar("SELECT COUNT(*) FROM pg_stat_activity WHERE query LIKE 'CALL %' AND state = 'active'") == 0
        blocker.rollback()

    assert pending(wh, pipeline)["customer"] == ingested["customer"]  # nothing applied
    again = lambda_handler.handler({"tables": ["customer"]}, Context())
    assert again["tables"][0]["events_read"] == ingested["customer"]


def test_a_serialization_conflict_is_retried(loaded, api):
    wh, pipeline, ingested = loaded
    api.inject_failure("incremental_sync_customer")
    summary = lambda_handler.handler({}, Context())

    runs = {t["table"]: t for t in summary["tables"]}
    assert runs["customer"]["attempts"] == 2 and runs["orders"]["attempts"] == 1
    assert runs["customer"]["events_read"] == ingested["customer"]
    customer_calls = [c for c in data_api_calls(api) if "customer" in c["QueryString"]]
    assert [c["Status"] for c in customer_calls] == ["FAILED", "FINISHED"]
    assert customer_calls[0]["Error"].startswith("ERROR: 1023")


def test_retries_are_bounded(loaded, api, env):
    env.setenv("REDSHIFT_SYNC_MAX_ATTEMPTS", "3")
    api.inject_failure("incremental_sync_orders", times=10)
    with pytest.raises(lambda_handler.SyncFailed, match="orders failed: ERROR: 1023") as info:
        lambda_handler.handler({"tables": ["orders"]}, Context())
    assert info.value.summary["tables"][0]["attempts"] == 3
    assert len(data_api_calls(api)) == 3


def test_overlapping_invocations_apply_every_event_once(loaded, api):
    wh, pipeline, ingested = loaded
    results: list[dict] = []

    def invoke() -> None:
        results.append(lambda_handler.handler({}, Context()))

    threads = [threading.Thread(target=invoke) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert len(results) == 2 and all(r["ok"] for r in results)
    for table, n in ingested.items():
        reads = sorted(run["events_read"] for r in results for run in r["tables"] if run["table"] == table)
        assert reads == [0, n], table
    assert wh.scalar("SELECT COUNT(*) FROM cdc.sync_run_log") == 4
    assert pending(wh, pipeline) == {"customer": 0, "orders": 0}


def test_connector_mode_calls_on_one_autocommit_connection(loaded, env, database_dsn):
    wh, pipeline, ingested = loaded
    env.delenv("REDSHIFT_SYNC_WORKGROUP")
    env.setenv("REDSHIFT_SYNC_DSN", database_dsn)
    summary = lambda_handler.handler({"tables": ["orders"]}, Context())
    assert summary["mode"] == "redshift_connector"
    assert summary["tables"][0]["events_read"] == ingested["orders"] == latest_run_log(wh, "orders")["events_read"]


@pytest.mark.parametrize(
    "settings, message",
    [
        ({}, "no connection configured"),
        ({"REDSHIFT_SYNC_WORKGROUP": "wg", "REDSHIFT_SYNC_CLUSTER": "c"}, "exactly one of a workgroup"),
        ({"REDSHIFT_SYNC_WORKGROUP": "wg", "REDSHIFT_SYNC_DB_USER": "u"}, "provisioned cluster only"),
        ({"REDSHIFT_SYNC_CLUSTER": "c", "REDSHIFT_SYNC_DB_USER": "u", "REDSHIFT_SYNC_SECRET_ARN": "s"}, "not both"),
        ({"REDSHIFT_SYNC_CLUSTER": "c", "REDSHIFT_SYNC_DSN": "postgresql://x/y"}, "not both"),
        ({"REDSHIFT_SYNC_CLUSTER": "c", "REDSHIFT_SYNC_MAX_ATTEMPTS": "0"}, "max_attempts must be at least 1"),
        (
            {"REDSHIFT_SYNC_CLUSTER": "c", "REDSHIFT_SYNC_POLL_SECONDS": "soon"},
            "REDSHIFT_SYNC_POLL_SECONDS='soon' is not a number",
        ),
    ],
)
def test_bad_settings_name_the_variable(settings, message):
    with pytest.raises(ConfigError, match=message):
        lambda_handler.Settings.from_env(settings)


def test_metric_line_leaves_out_missing_values():
    run = {
        "table": "t",
        "status": "failed",
        "events_read": 0,
        "upserted": 0,
        "deleted": 0,
        "quarantined": 0,
        "attempts": 2,
        "duration_seconds": 1.23456,
        "lag_seconds": None,
        "error": "boom",
        "statement_id": "id-1",
        "watermark_after": None,
    }
    line = lambda_handler.metric_line(run, "NS", 1700000000000)
    names = [m["Name"] for m in line["_aws"]["CloudWatchMetrics"][0]["Metrics"]]
    assert "LagSeconds" not in names and "LagSeconds" not in line
    assert (line["Failed"], line["Attempts"], line["DurationSeconds"], line["error"]) == (1, 2, 1.235, "boom")
    assert line["_aws"]["Timestamp"] == 1700000000000 and line["Table"] == "t"


def fail_first_calls(wh, table: str, times: int) -> None:
    """Wrap a table's procedure so its first `times` calls fail with a real serialization
    failure (SQLSTATE 40001) raised by PostgreSQL; later calls run the generated procedure."""
    wh.execute(f"ALTER PROCEDURE cdc.incremental_sync_{table}() RENAME TO incremental_sync_{table}_generated")
    wh.execute("CREATE SEQUENCE cdc.calls_seen")  # nextval survives the rollback of a failed call
    wh.execute(
        f"CREATE PROCEDURE cdc.incremental_sync_{table}() AS $$ BEGIN "
        f"IF nextval('cdc.calls_seen') <= {times} THEN "
        "RAISE EXCEPTION 'could not serialize access due to concurrent update' USING ERRCODE = 'serialization_failure'; "
        f"END IF; CALL cdc.incremental_sync_{table}_generated(); END; $$ LANGUAGE plpgsql"
    )


def test_connector_mode_retries_a_real_serialization_failure(loaded, env, database_dsn):
    wh, pipeline, ingested = loaded
    fail_first_calls(wh, "orders", times=2)
    env.delenv("REDSHIFT_SYNC_WORKGROUP")
    env.setenv("REDSHIFT_SYNC_DSN", database_dsn)
    (run,) = lambda_handler.handler({"tables": ["orders"]}, Context())["tables"]
    assert (run["status"], run["attempts"], run["events_read"]) == ("ok", 3, ingested["orders"])
    assert pending(wh, pipeline)["orders"] == 0


def test_data_api_mode_retries_a_real_serialization_failure(loaded, api):
    wh, pipeline, ingested = loaded
    fail_first_calls(wh, "customer", times=1)
    summary = lambda_handler.handler({"tables": ["customer"]}, Context())
    (run,) = summary["tables"]
    assert (run["status"], run["attempts"], run["events_read"]) == ("ok", 2, ingested["customer"])
    assert "could not serialize access" in data_api_calls(api)[0]["Error"]


def test_a_throttled_describe_never_cancels_a_running_call(loaded, api):
    """DescribeStatement refused for load (ThrottlingException, past the SDK's own retries)
    says nothing about the CALL: it is asked again later, never cancelled."""
    wh, pipeline, ingested = loaded
    api.throttle("DescribeStatement", 0.7)
    api.inject_delay("incremental_sync_customer", 0.5)
    summary = lambda_handler.handler({}, Context())

    assert [(t["table"], t["status"]) for t in summary["tables"]] == [("customer", "ok"), ("orders", "ok")]
    assert api.refused["DescribeStatement:ThrottlingException"] > 0
    assert [c["Status"] for c in data_api_calls(api)] == ["FINISHED", "FINISHED"]
    assert pending(wh, pipeline) == {"customer": 0, "orders": 0}


class PidZero:
    """The local Data API, reporting RedshiftPid 0 as the service has been seen to
    (awslabs/amazon-redshift-utils#515)."""

    def __init__(self, api: LocalDataApi):
        self.api = api

    def __getattr__(self, name):
        return getattr(self.api, name)

    def describe_statement(self, **kwargs):
        desc = self.api.describe_statement(**kwargs)
        return {**desc, "RedshiftPid": 0} if "RedshiftPid" in desc else desc


def test_a_redshift_pid_of_0_is_unknown_and_the_run_log_row_is_still_found(loaded, api, monkeypatch):
    wh, pipeline, ingested = loaded
    lambda_handler.handler({}, Context())  # an earlier run: its rows must not be taken for the next one's
    second = ingest_file(wh, pipeline, "customer", EVENTS / "customer-2.jsonl").records
    monkeypatch.setattr(lambda_handler, "client_factory", lambda *_: PidZero(api))
    summary = lambda_handler.handler({}, Context())

    runs = {t["table"]: t for t in summary["tables"]}
    assert (runs["customer"]["status"], runs["customer"]["events_read"]) == ("ok", second)
    assert (runs["orders"]["status"], runs["orders"]["events_read"]) == ("ok", 0)
    assert runs["customer"]["watermark_after"] == latest_run_log(wh, "customer")["watermark_after"]


def test_the_boto3_client_has_short_timeouts_and_standard_retries(monkeypatch):
    """botocore's defaults are 60 s connect and read timeouts; the handler's client uses the
    settings', in the standard retry mode."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    settings = lambda_handler.Settings.from_env({"REDSHIFT_SYNC_CLUSTER": "c"})
    client = lambda_handler._boto3_client(settings.timeouts)
    config = client.meta.config
    assert (config.connect_timeout, config.read_timeout) == (2.0, 5.0)
    assert config.retries == {"mode": "standard", "total_max_attempts": 2}
    # 2 attempts of 2 + 5 s, 1 s of backoff between them: 15 s, inside the default 30 s margin.
    assert settings.timeouts.worst_case_ms() == 15_000 <= settings.polling.margin_ms - 1_000


def test_a_margin_that_does_not_cover_a_request_is_refused():
    with pytest.raises(ConfigError, match=r"DEADLINE_MARGIN_SECONDS=10 does not cover .* raise it to at least 16"):
        lambda_handler.Settings.from_env({"REDSHIFT_SYNC_CLUSTER": "c", "REDSHIFT_SYNC_DEADLINE_MARGIN_SECONDS": "10"})
    settings = lambda_handler.Settings.from_env(
        {"REDSHIFT_SYNC_CLUSTER": "c", "REDSHIFT_SYNC_DEADLINE_MARGIN_SECONDS": "10", "REDSHIFT_SYNC_READ_TIMEOUT_SECONDS": "2"}
    )
    assert settings.timeouts.worst_case_ms() == 9_000


def test_a_poisoned_record_is_isolated_and_the_rest_syncs_through_the_data_api(loaded, api):
    """The engine refuses one record (a CHECK the pipeline file knows nothing about): the
    handler bisects with bounded CALLs through the Data API, quarantines that record with
    the engine's error and applies the rest in the same invocation."""
    wh, pipeline, ingested = loaded
    wh.execute('ALTER TABLE cdc."customer" ADD CONSTRAINT no_globex CHECK ("name" <> \'Globex\')')
    summary = lambda_handler.handler({"tables": ["customer"]}, Context())
    (run,) = summary["tables"]
    assert run["status"] == "ok" and len(run["isolated"]) == 1 and "no_globex" in run["isolated"][0]
    assert run["events_read"] == ingested["customer"] and run["quarantined"] == 1
    assert wh.scalar("SELECT COUNT(*) FROM cdc.\"customer\" WHERE customer_id = 'C002'") == 0
    assert wh.scalar('SELECT COUNT(*) FROM cdc."customer"') == ingested["customer"] - 1
    reason = wh.scalar("SELECT reason FROM cdc.sync_quarantine WHERE kafka_offset = 1")
    assert "could not apply this record" in reason and "no_globex" in reason
    assert pending(wh, pipeline)["customer"] == 0
    # every bounded CALL went through the Data API, one at a time
    sqls = [c["QueryString"] for c in data_api_calls(api)]
    assert any('"incremental_sync_customer"(0)' in s for s in sqls)
    assert any('"isolate_record_customer"(' in s for s in sqls)


@pytest.mark.parametrize("mode", ["data-api", "redshift_connector"])
def test_conflict_retries_are_counted_in_the_summary_and_the_emf_metrics(loaded, api, env, database_dsn, capsys, mode):
    """A CALL stopped by a serialization failure the engine raised (SQLSTATE 40001) rolled
    back whole and runs again; the retry shows in the table's summary, as the
    ConflictRetries metric, and in the invocation's log line."""
    wh, pipeline, ingested = loaded
    if mode == "redshift_connector":
        env.delenv("REDSHIFT_SYNC_WORKGROUP")
        env.setenv("REDSHIFT_SYNC_DSN", database_dsn)
    fail_first_writes(wh, "cdc.sync_run_log", times=1)  # the CALL's last write
    (run,) = lambda_handler.handler({"tables": ["customer"]}, Context())["tables"]

    assert (run["status"], run["attempts"], run["retries"], run["events_read"]) == ("ok", 2, 1, ingested["customer"])
    metric, run_line = [json.loads(line) for line in capsys.readouterr().out.splitlines()[-2:]]
    assert "ConflictRetries" in [m["Name"] for m in metric["_aws"]["CloudWatchMetrics"][0]["Metrics"]]
    assert (metric["ConflictRetries"], metric["Attempts"]) == (1, 2)
    assert run_line["run"]["conflict_retries"] == 1
    assert pending(wh, pipeline)["customer"] == 0


def test_record_isolation_through_the_data_api_runs_a_stopped_call_again(loaded, api):
    """A bounded CALL of record isolation stopped by a serialization failure is run again,
    not taken for the end of the isolation."""
    wh, pipeline, ingested = loaded
    wh.execute('ALTER TABLE cdc."customer" ADD CONSTRAINT no_globex CHECK ("name" <> \'Globex\')')
    fail_first_writes(wh, "cdc.sync_run_log", times=1)  # the first bounded CALL that applies
    (run,) = lambda_handler.handler({"tables": ["customer"]}, Context())["tables"]
    assert run["status"] == "ok", run["error"]
    assert run["retries"] == 1 and len(run["isolated"]) == 1 and "no_globex" in run["isolated"][0]
    assert wh.scalar('SELECT COUNT(*) FROM cdc."customer"') == ingested["customer"] - 1
    assert pending(wh, pipeline)["customer"] == 0


@pytest.mark.parametrize("level", ["serializable", "repeatable read"])
def test_a_data_api_call_takes_the_table_lock_before_its_snapshot(loaded, api, env, database_dsn, level, request):
    """BatchExecuteStatement: "The SQL statements are run as a single transaction"
    (botocore's redshift-data model). The CALL's batch starts with the procedure's own lock,
    so a CALL that waited for a sync of the same table takes its snapshot after that sync
    committed ("A database snapshot is created within a transaction on the first occurrence
    of most SELECT statements, DML commands ...", c_serial_isolation); a CALL sent alone
    takes it before the procedure's LOCK, reads the watermark as it was, and is stopped by a
    serialization conflict. At both of Redshift's levels, with retrying turned off."""
    from sync.operations.runner import call_sql, sync_table
    from sync.sql.recovery import lock_sql
    from sync.warehouse import connect
    from tests.helpers import at_isolation_level

    wh, pipeline, _ = loaded
    sync_table(wh, pipeline, "customer")  # the watermark rows exist: the next sync updates them
    ingested = ingest_file(wh, pipeline, "customer", EVENTS / "customer-2.jsonl").records
    request.getfixturevalue("whole_relation_predicate_locks")
    at_isolation_level(database_dsn, level)
    env.setenv("REDSHIFT_SYNC_MAX_ATTEMPTS", "1")
    holder = connect(database_dsn)
    summary: list[dict] = []

    def invoke() -> None:
        try:
            summary.append(lambda_handler.handler({"tables": ["customer"]}, Context()))
        except lambda_handler.SyncFailed as exc:
            summary.append(exc.summary)

    lambda_run = threading.Thread(target=invoke)
    with holder.transaction():  # another sync of the table, holding its lock
        holder.execute(lock_sql(holder.dialect.bind_schema(pipeline.schema), pipeline, pipeline.table("customer")))
        holder.execute(call_sql(pipeline, "customer"))
        lambda_run.start()
        deadline = time.monotonic() + 30
        while not any(c["Status"] == "STARTED" for c in data_api_calls(api)) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)  # the Lambda's CALL is waiting for the lock
    lambda_run.join(60)
    holder.close()

    (run,) = summary[0]["tables"]
    assert (run["status"], run["attempts"], run["events_read"]) == ("ok", 1, 0), run.get("error")
    assert ingested > 0 and pending(wh, pipeline)["customer"] == 0

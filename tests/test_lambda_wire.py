"""The handler against a real boto3 `redshift-data` client with botocore's Stubber: every
request must carry exactly the parameters AWS expects, and the canned responses are
validated against the service model, so the wire shapes are the real service's."""

from __future__ import annotations

import datetime as dt
import json

import boto3
import pytest
import sqlglot
from botocore.stub import ANY, Stubber

from sync.aws import lambda_handler
from sync.config import load_pipeline
from sync.operations.runner import prune_sql
from sync.sql.dialect import dialect_for
from tests.helpers import EXAMPLES

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:redshift-sync-AbCdEf"
CALL_ORDERS = 'CALL "cdc"."incremental_sync_orders"()'
SUMMARY = (
    "events_read, upserted, deleted, quarantined, tombstones, stale, superseded, truncates, "
    "watermark_before, watermark_after, lag_seconds, status"
)


def call_batch(table: str) -> list[str]:
    """A table's CALL as one BatchExecuteStatement ("The SQL statements are run as a single
    transaction"): the procedure's lock first, the CALL, and the run-log row the call left in
    the session's temporary table."""
    return [
        f'LOCK TABLE "cdc"."{table}__watermark"',
        f'CALL "cdc"."incremental_sync_{table}"()',
        f"SELECT {SUMMARY} FROM \"sync_call_result\" WHERE table_name = '{table}'",
    ]


def run_log_sql(matches: str) -> str:
    return (
        "SELECT table_name, events_read, upserted, deleted, quarantined, tombstones, stale, superseded, truncates, "
        "watermark_before, watermark_after, lag_seconds, status\n"
        "FROM (\n"
        "  SELECT r.*, ROW_NUMBER() OVER (PARTITION BY r.table_name ORDER BY r.started_at DESC, r.run_id DESC) AS rn\n"
        '  FROM "cdc"."sync_run_log" r\n'
        f"  WHERE {matches}\n"
        ") x\n"
        "WHERE rn = 1"
    )


def last_runs_sql(tables: str) -> str:
    return (
        "SELECT table_name, MAX(started_at) AS last_started_at\n"
        'FROM "cdc"."sync_run_log"\n'
        f"WHERE table_name IN ({tables})\n"
        "GROUP BY table_name"
    )


def record(table: str, read: int, upserted: int, lag: float | None) -> list[dict]:
    """A run-log row as GetStatementResult returns it: its table, then the summary's columns."""
    longs = [{"longValue": v} for v in (read, upserted, 0, 0, 0, 0, 0, 0)]
    return [
        {"stringValue": table},
        *longs,
        {"isNull": True},
        {"stringValue": f"0:{read - 1}"},
        {"doubleValue": lag} if lag is not None else {"isNull": True},
        {"stringValue": "ok"},
    ]


class Context:
    def __init__(self, *remaining_ms: int):
        self.values = list(remaining_ms)

    def get_remaining_time_in_millis(self) -> int:
        return self.values.pop(0) if len(self.values) > 1 else self.values[0]


@pytest.fixture
def client(monkeypatch):
    monkeypatch.setenv("REDSHIFT_SYNC_CONFIG", str(EXAMPLES / "salesdb" / "pipeline.toml"))
    monkeypatch.setenv("REDSHIFT_SYNC_POLL_SECONDS", "0.01")
    monkeypatch.setenv("REDSHIFT_SYNC_RETRY_BASE_SECONDS", "0.01")
    monkeypatch.setenv("REDSHIFT_SYNC_API_BACKOFF_SECONDS", "0.01")
    monkeypatch.setenv("REDSHIFT_SYNC_MIN_CALL_SECONDS", "0")
    monkeypatch.setenv("REDSHIFT_SYNC_DEADLINE_MARGIN_SECONDS", "20")
    for name in (
        "REDSHIFT_SYNC_DSN",
        "REDSHIFT_SYNC_WORKGROUP",
        "REDSHIFT_SYNC_CLUSTER",
        "REDSHIFT_SYNC_SECRET_ARN",
        "REDSHIFT_SYNC_DB_USER",
    ):
        monkeypatch.delenv(name, raising=False)
    real = boto3.client("redshift-data", region_name="us-east-1", aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret")
    monkeypatch.setattr(lambda_handler, "client_factory", lambda *_: real)
    with Stubber(real) as stub:
        yield real, stub
        stub.assert_no_pending_responses()


def finished(statement_id: str, pid: int, has_result: bool = False) -> dict:
    return {
        "Id": statement_id,
        "Status": "FINISHED",
        "RedshiftPid": pid,
        "HasResultSet": has_result,
        "CreatedAt": NOW,
        "UpdatedAt": NOW,
        "Duration": 1_000_000,
        "ResultRows": 1 if has_result else 0,
    }


def serialization_conflict(statement_id: str) -> dict:
    """A statement Redshift failed with error 1023 (a serializable isolation violation)."""
    return {
        "Id": statement_id,
        "Status": "FAILED",
        "Error": "ERROR: 1023 DETAIL: Serializable isolation violation on table - 100167, transactions forming the cycle are: 1, 2",
    }


def expect_query(stub, where: dict, sql: str, name: str, sid: str, *pages: list) -> None:
    """A SELECT of the handler: submitted (with a ClientToken), described once, read page by page."""
    stub.add_response("execute_statement", {"Id": sid}, {**where, "Sql": sql, "StatementName": name, "ClientToken": ANY})
    stub.add_response("describe_statement", finished(sid, 900, has_result=True), {"Id": sid})
    for n, records in enumerate(pages):
        page = {"Records": records, **({"NextToken": f"p{n + 2}"} if n + 1 < len(pages) else {})}
        stub.add_response("get_statement_result", page, {"Id": sid, **({"NextToken": f"p{n + 1}"} if n else {})})


def expect_last_runs(stub, where: dict, tables: str, *rows: list) -> None:
    expect_query(stub, where, last_runs_sql(tables), "redshift-sync.cdc.last-runs", "s-0", list(rows))


def expect_call(stub, where: dict, table: str, sid: str) -> None:
    stub.add_response(
        "batch_execute_statement",
        {"Id": sid, "CreatedAt": NOW},
        {**where, "Sqls": call_batch(table), "StatementName": f"redshift-sync.cdc.{table}", "ClientToken": ANY},
    )


def expect_result(stub, sid: str, row: list[dict]) -> None:
    """The row of the batch's third statement: "A suffix indicates the number of the SQL
    statement. For example, d9b6c0c9-0747-4bf4-b142-e8883122f766:2 ... the second SQL
    statement of a batch query" (GetStatementResult, Id)."""
    stub.add_response("get_statement_result", {"Records": [row[1:]]}, {"Id": f"{sid}:3"})


def test_serverless_with_a_secret(client, monkeypatch):
    _, stub = client
    monkeypatch.setenv("REDSHIFT_SYNC_WORKGROUP", "analytics")
    monkeypatch.setenv("REDSHIFT_SYNC_DATABASE", "warehouse")
    monkeypatch.setenv("REDSHIFT_SYNC_SECRET_ARN", SECRET)
    where = {"WorkgroupName": "analytics", "Database": "warehouse", "SecretArn": SECRET}
    # orders ran last at 10:00, customer at 11:00: orders goes first.
    expect_last_runs(
        stub,
        where,
        "'customer', 'orders'",
        [{"stringValue": "customer"}, {"stringValue": "2026-01-01 11:00:00"}],
        [{"stringValue": "orders"}, {"stringValue": "2026-01-01 10:00:00"}],
    )
    expect_call(stub, where, "orders", "s-2")
    expect_call(stub, where, "customer", "s-1")
    stub.add_response("describe_statement", finished("s-2", 102), {"Id": "s-2"})
    expect_result(stub, "s-2", record("orders", 11, 7, None))
    stub.add_response("describe_statement", finished("s-1", 101), {"Id": "s-1"})
    # customer's result cannot be read: its run-log row is looked up instead, by session and
    # newer than its last run.
    stub.add_client_error("get_statement_result", "ResourceNotFoundException", "gone", expected_params={"Id": "s-1:3"})
    matches = "(r.table_name = 'customer' AND r.backend_pid = 101 AND r.started_at > CAST('2026-01-01 11:00:00' AS timestamp))"
    expect_query(stub, where, run_log_sql(matches), "redshift-sync.cdc.run-log", "s-3", [record("customer", 5, 4, 2.5)])

    summary = lambda_handler.handler({}, Context(60_000))

    runs = {t["table"]: t for t in summary["tables"]}
    assert [t["table"] for t in summary["tables"]] == ["customer", "orders"]  # reported in the pipeline file's order
    assert (runs["customer"]["events_read"], runs["customer"]["upserted"], runs["customer"]["lag_seconds"]) == (5, 4, 2.5)
    assert (runs["orders"]["events_read"], runs["orders"]["lag_seconds"], runs["orders"]["watermark_after"]) == (11, None, "0:10")
    assert [runs[t]["statement_id"] for t in ("customer", "orders")] == ["s-1", "s-2"]


def test_cluster_with_a_database_user_retries_a_conflict(client, monkeypatch):
    _, stub = client
    monkeypatch.setenv("REDSHIFT_SYNC_CLUSTER", "prod-cluster")
    monkeypatch.setenv("REDSHIFT_SYNC_DB_USER", "sync_user")
    where = {"ClusterIdentifier": "prod-cluster", "Database": "dev", "DbUser": "sync_user"}
    expect_last_runs(stub, where, "'orders'")
    expect_call(stub, where, "orders", "s-1")
    stub.add_response("describe_statement", serialization_conflict("s-1"), {"Id": "s-1"})
    expect_call(stub, where, "orders", "s-2")
    stub.add_response("describe_statement", {"Id": "s-2", "Status": "STARTED", "RedshiftPid": 7}, {"Id": "s-2"})
    stub.add_response("describe_statement", finished("s-2", 7), {"Id": "s-2"})
    expect_result(stub, "s-2", record("orders", 3, 3, 0.5))

    (run,) = lambda_handler.handler({"tables": ["orders"]}, Context(60_000))["tables"]
    assert (run["status"], run["attempts"], run["statement_id"], run["events_read"]) == ("ok", 2, "s-2", 3)


def customer_started_then_deadline(client, monkeypatch) -> tuple[Stubber, Context]:
    """customer's CALL is submitted and described STARTED with 60 s left; after that 19 s are
    left, under the 20 s margin."""
    real, stub = client
    monkeypatch.setenv("REDSHIFT_SYNC_CLUSTER", "prod-cluster")
    monkeypatch.setenv("REDSHIFT_SYNC_SECRET_ARN", SECRET)
    where = {"ClusterIdentifier": "prod-cluster", "Database": "dev", "SecretArn": SECRET}
    expect_last_runs(stub, where, "'customer'")
    expect_call(stub, where, "customer", "s-1")
    stub.add_response("describe_statement", {"Id": "s-1", "Status": "STARTED"}, {"Id": "s-1"})
    context = Context(60_000)
    real.meta.events.register(
        "after-call.redshift-data.DescribeStatement",
        lambda parsed, **_: context.values.__setitem__(0, 19_000) if parsed.get("Status") == "STARTED" else None,
    )
    return stub, context


def test_running_out_of_time_cancels_the_statement(client, monkeypatch):
    stub, context = customer_started_then_deadline(client, monkeypatch)
    stub.add_response("cancel_statement", {"Status": True}, {"Id": "s-1"})
    stub.add_response("describe_statement", {"Id": "s-1", "Status": "ABORTED"}, {"Id": "s-1"})

    with pytest.raises(lambda_handler.SyncFailed, match="customer cancelled") as info:
        lambda_handler.handler({"tables": ["customer"]}, context)
    (run,) = info.value.summary["tables"]
    assert (run["status"], run["statement_id"], run["events_read"]) == ("cancelled", "s-1", 0)
    assert "status ABORTED" in run["error"]


def test_the_run_log_query_is_redshift_sql():
    import sqlglot

    sql = run_log_sql(
        "(r.table_name = 'customer' AND r.backend_pid = 101)\n"
        "     OR (r.table_name = 'orders' AND r.started_at > CAST('2026-01-01 10:00:00.5' AS timestamp))"
    )
    tree = sqlglot.parse_one(sql, read="redshift")
    assert tree.find(sqlglot.exp.Window) is not None and tree.find(sqlglot.exp.Table).name == "sync_run_log"
    tree = sqlglot.parse_one(last_runs_sql("'customer', 'orders'"), read="redshift")
    assert tree.find(sqlglot.exp.Max) is not None


def test_a_refused_statement_fails_its_table_and_the_others_go_on(client, monkeypatch):
    _, stub = client
    monkeypatch.setenv("REDSHIFT_SYNC_CLUSTER", "prod-cluster")
    monkeypatch.setenv("REDSHIFT_SYNC_SECRET_ARN", SECRET)
    where = {"ClusterIdentifier": "prod-cluster", "Database": "dev", "SecretArn": SECRET}
    expect_last_runs(stub, where, "'customer', 'orders'")
    stub.add_client_error(
        "batch_execute_statement",
        "ValidationException",
        "Database dev does not exist.",
        expected_params={
            **where,
            "Sqls": call_batch("customer"),
            "StatementName": "redshift-sync.cdc.customer",
            "ClientToken": ANY,
        },
    )
    expect_call(stub, where, "orders", "s-2")
    stub.add_response("describe_statement", finished("s-2", 9), {"Id": "s-2"})
    expect_result(stub, "s-2", record("orders", 2, 2, 1.0))

    with pytest.raises(
        lambda_handler.SyncFailed, match="customer failed: BatchExecuteStatement refused.*ValidationException"
    ) as info:
        lambda_handler.handler({}, Context(60_000))
    runs = {t["table"]: t for t in info.value.summary["tables"]}
    assert (runs["customer"]["status"], runs["customer"]["attempts"]) == ("failed", 1)
    assert (runs["orders"]["status"], runs["orders"]["events_read"]) == ("ok", 2)


def test_a_throttled_execute_is_sent_again_with_the_same_client_token(client, monkeypatch):
    """ExecuteStatement's ClientToken is an idempotency token in botocore's service model
    ("A unique, case-sensitive identifier that you provide to ensure the idempotency of the
    request"): a request re-sent after ThrottlingException or ActiveStatementsExceededException
    carries the token of the first, so it can never start a second CALL of the table."""
    real, stub = client
    monkeypatch.setenv("REDSHIFT_SYNC_CLUSTER", "prod-cluster")
    monkeypatch.setenv("REDSHIFT_SYNC_SECRET_ARN", SECRET)
    where = {"ClusterIdentifier": "prod-cluster", "Database": "dev", "SecretArn": SECRET}
    tokens: list[str] = []
    real.meta.events.register(
        "before-parameter-build.redshift-data.BatchExecuteStatement",
        lambda params, **_: tokens.append(params.get("ClientToken")) if CALL_ORDERS in params["Sqls"] else None,
    )
    expect_last_runs(stub, where, "'orders'")
    call = {**where, "Sqls": call_batch("orders"), "StatementName": "redshift-sync.cdc.orders", "ClientToken": ANY}
    stub.add_client_error("batch_execute_statement", "ThrottlingException", "Rate exceeded", expected_params=call)
    stub.add_client_error(
        "batch_execute_statement",
        "ActiveStatementsExceededException",
        "Active statements exceeded the allowed quota.",
        expected_params=call,
    )
    expect_call(stub, where, "orders", "s-1")
    stub.add_client_error("describe_statement", "ThrottlingException", "Rate exceeded", expected_params={"Id": "s-1"})
    stub.add_response("describe_statement", finished("s-1", 0), {"Id": "s-1"})  # RedshiftPid 0: unknown
    expect_result(stub, "s-1", record("orders", 2, 2, 1.0))

    (run,) = lambda_handler.handler({"tables": ["orders"]}, Context(60_000))["tables"]
    assert (run["status"], run["attempts"], run["api_retries"], run["events_read"]) == ("ok", 1, 3, 2)
    assert len(tokens) == 3 and len(set(tokens)) == 1 and tokens[0]


def test_a_run_log_read_past_the_deadline_is_cancelled_and_every_table_still_reported(client):
    from sync.aws import data_api
    from sync.config import load_pipeline

    real, stub = client
    pipeline, _ = load_pipeline(EXAMPLES / "salesdb" / "pipeline.toml")
    where = {"ClusterIdentifier": "prod-cluster", "Database": "dev", "SecretArn": SECRET}
    target = data_api.DataApiTarget(database="dev", cluster="prod-cluster", secret_arn=SECRET)
    calls = [
        data_api.Call("customer", call_batch("customer"), state="finished", statement_id="s-1", pid=101, first_submitted=0.0),
        data_api.Call("orders", call_batch("orders"), state="failed", error="ERROR: boom", first_submitted=0.0),
    ]
    stub.add_response(
        "execute_statement",
        {"Id": "s-3"},
        {
            **where,
            "Sql": run_log_sql("(r.table_name = 'customer' AND r.backend_pid = 101)"),
            "StatementName": "redshift-sync.cdc.run-log",
            "ClientToken": ANY,
        },
    )
    stub.add_response("describe_statement", {"Id": "s-3", "Status": "SUBMITTED"}, {"Id": "s-3"})
    stub.add_response("cancel_statement", {"Status": True}, {"Id": "s-3"})

    # ExecuteStatement and one DescribeStatement fit, the next DescribeStatement does not (1.4 s
    # left, a request takes up to 0.5 s, 1 s is kept to report), then a cancel still fits.
    left = iter([20_000, 20_000, 1_400])
    deadline = data_api.Deadline(lambda: next(left, 1_500), request_ms=500)
    runs = data_api.summaries(data_api.Session(real, target, deadline, sleep=lambda _: None), pipeline, calls, {})
    assert [(r.table, r.status) for r in runs] == [("customer", "unknown"), ("orders", "failed")]
    assert "run-log row could not be read" in runs[0].error and "cancelled" in runs[0].error
    assert runs[1].error == "ERROR: boom"


def test_a_conflict_seen_at_the_deadline_leaves_the_table_for_the_next_run(client, monkeypatch):
    stub, context = customer_started_then_deadline(client, monkeypatch)
    stub.add_client_error(
        "cancel_statement",
        "ValidationException",
        "Could not cancel a query that is already in FAILED state",
        expected_params={"Id": "s-1"},
    )
    stub.add_response("describe_statement", serialization_conflict("s-1"), {"Id": "s-1"})

    summary = lambda_handler.handler({"tables": ["customer"]}, context)  # not started: the invocation does not fail
    (run,) = summary["tables"]
    assert (run["status"], run["attempts"]) == ("not started", 1) and summary["not_started"] == ["customer"]
    assert "after a serialization conflict (ERROR: 1023" in run["error"]


def batch_finished(statement_id: str, sqls: list[str], rows: list[int]) -> dict:
    return {
        "Id": statement_id,
        "Status": "FINISHED",
        "CreatedAt": NOW,
        "UpdatedAt": NOW,
        "SubStatements": [
            {"Id": f"{statement_id}:{n}", "Status": "FINISHED", "QueryString": sql, "ResultRows": count}
            for n, (sql, count) in enumerate(zip(sqls, rows), 1)
        ],
    }


def test_the_maintenance_run_prunes_in_batches_and_skips_a_vacuum_refused_for_another(client, monkeypatch, capsys):
    # BatchExecuteStatement "runs the SQL statements as a single transaction"; its
    # DescribeStatement lists each statement's ResultRows in SubStatements. VACUUM, not
    # allowed in a transaction block, goes alone through ExecuteStatement (r_VACUUM_command).
    _, stub = client
    monkeypatch.setenv("REDSHIFT_SYNC_CLUSTER", "prod")
    monkeypatch.setenv("REDSHIFT_SYNC_DB_USER", "sync_user")
    where = {"ClusterIdentifier": "prod", "Database": "dev", "DbUser": "sync_user"}
    pipeline, _ = load_pipeline(EXAMPLES / "salesdb" / "pipeline.toml")
    prune = prune_sql(dialect_for("redshift", "cdc"), pipeline, pipeline.operations.retention_days)
    name = "redshift-sync.cdc.maintenance"
    for n, (sqls, rows) in enumerate([(prune.run_log, [-1, 3]), *((s, [-1, 1, 2]) for s in prune.tables.values())]):
        assert sqls[0].startswith("LOCK TABLE")  # the lock first, in the same transaction
        stub.add_response(
            "batch_execute_statement",
            {"Id": f"b-{n}", "CreatedAt": NOW},
            {**where, "Sqls": sqls, "StatementName": f"{name}.prune", "ClientToken": ANY},
        )
        stub.add_response("describe_statement", batch_finished(f"b-{n}", sqls, rows), {"Id": f"b-{n}"})
    # SVV_TABLE_INFO: tbl_rows "includes rows marked for deletion, but not yet vacuumed".
    dead_rows = (
        'SELECT TRIM("table"), tbl_rows - estimated_visible_rows FROM svv_table_info '
        "WHERE TRIM(\"schema\") = 'cdc' AND TRIM(\"table\") IN ('customer__stage', 'orders__stage')"
    )
    sqlglot.parse_one(dead_rows, read="redshift")
    expect_query(
        stub,
        where,
        dead_rows,
        f"{name}.check",
        "s-1",
        [
            [{"stringValue": "orders__stage"}, {"stringValue": "12"}],
            [{"stringValue": "customer__stage"}, {"stringValue": "250000"}],
        ],
    )
    vacuum = 'VACUUM DELETE ONLY "cdc"."customer__stage"'
    stub.add_response(
        "execute_statement", {"Id": "v-1"}, {**where, "Sql": vacuum, "StatementName": f"{name}.vacuum", "ClientToken": ANY}
    )
    busy = "ERROR: VACUUM is running HINT: re-execute after other vacuum finished"
    stub.add_response("describe_statement", {"Id": "v-1", "Status": "FAILED", "Error": busy}, {"Id": "v-1"})

    summary = lambda_handler.handler({"maintenance": True}, Context(60_000))

    m = summary["maintenance"]
    assert summary["ok"] and m["pruned_rows"] == 3 + 2 * (1 + 2)
    assert m["vacuums"] == [{"table": "customer", "dead_rows": 250000, "outcome": "skipped", "error": busy}]
    metrics = json.loads(capsys.readouterr().out.splitlines()[0])
    assert (metrics["PrunedRows"], metrics["StagesVacuumed"], metrics["VacuumsSkipped"]) == (9, 0, 1)

"""The handler against a real boto3 `redshift-data` client with botocore's Stubber: every
request must carry exactly the parameters AWS expects, and the canned responses are
validated against the service model, so the wire shapes are the real service's."""

from __future__ import annotations

import datetime as dt

import boto3
import pytest
from botocore.stub import Stubber

from sync import lambda_handler
from tests.conftest import EXAMPLES

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:redshift-sync-AbCdEf"
CALL_CUSTOMER = 'CALL "cdc"."incremental_sync_customer"()'
CALL_ORDERS = 'CALL "cdc"."incremental_sync_orders"()'


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


def record(table: str, read: int, upserted: int, lag: float | None) -> list[dict]:
    longs = [{"longValue": v} for v in (read, upserted, 0, 0, 0, 0, 0, 0)]
    return [
        {"stringValue": table}, *longs, {"isNull": True}, {"stringValue": f"0:{read - 1}"},
        {"doubleValue": lag} if lag is not None else {"isNull": True}, {"stringValue": "ok"},
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
    monkeypatch.setenv("REDSHIFT_SYNC_DEADLINE_MARGIN_SECONDS", "5")
    for name in ("REDSHIFT_SYNC_DSN", "REDSHIFT_SYNC_WORKGROUP", "REDSHIFT_SYNC_CLUSTER", "REDSHIFT_SYNC_SECRET_ARN", "REDSHIFT_SYNC_DB_USER"):
        monkeypatch.delenv(name, raising=False)
    real = boto3.client("redshift-data", region_name="us-east-1", aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret")
    monkeypatch.setattr(lambda_handler, "client_factory", lambda: real)
    with Stubber(real) as stub:
        yield real, stub
        stub.assert_no_pending_responses()


def finished(statement_id: str, pid: int, has_result: bool = False) -> dict:
    return {"Id": statement_id, "Status": "FINISHED", "RedshiftPid": pid, "HasResultSet": has_result,
            "CreatedAt": NOW, "UpdatedAt": NOW, "Duration": 1_000_000, "ResultRows": 1 if has_result else 0}


def test_serverless_with_a_secret(client, monkeypatch):
    _, stub = client
    monkeypatch.setenv("REDSHIFT_SYNC_WORKGROUP", "analytics")
    monkeypatch.setenv("REDSHIFT_SYNC_DATABASE", "warehouse")
    monkeypatch.setenv("REDSHIFT_SYNC_SECRET_ARN", SECRET)
    where = {"WorkgroupName": "analytics", "Database": "warehouse", "SecretArn": SECRET}
    for sql, table, sid in ((CALL_CUSTOMER, "customer", "s-1"), (CALL_ORDERS, "orders", "s-2")):
        stub.add_response("execute_statement", {"Id": sid, "CreatedAt": NOW, **where},
                          {**where, "Sql": sql, "StatementName": f"redshift-sync.cdc.{table}"})
    stub.add_response("describe_statement", finished("s-1", 101), {"Id": "s-1"})
    stub.add_response("describe_statement", finished("s-2", 102), {"Id": "s-2"})
    matches = "(r.table_name = 'customer' AND r.backend_pid = 101)\n     OR (r.table_name = 'orders' AND r.backend_pid = 102)"
    stub.add_response("execute_statement", {"Id": "s-3"},
                      {**where, "Sql": run_log_sql(matches), "StatementName": "redshift-sync.cdc.run-log"})
    stub.add_response("describe_statement", finished("s-3", 103, has_result=True), {"Id": "s-3"})
    stub.add_response("get_statement_result", {"Records": [record("customer", 5, 4, 2.5)], "TotalNumRows": 2, "NextToken": "p2"}, {"Id": "s-3"})
    stub.add_response("get_statement_result", {"Records": [record("orders", 11, 7, None)], "TotalNumRows": 2}, {"Id": "s-3", "NextToken": "p2"})

    summary = lambda_handler.handler({}, Context(60_000))

    runs = {t["table"]: t for t in summary["tables"]}
    assert (runs["customer"]["events_read"], runs["customer"]["upserted"], runs["customer"]["lag_seconds"]) == (5, 4, 2.5)
    assert (runs["orders"]["events_read"], runs["orders"]["lag_seconds"], runs["orders"]["watermark_after"]) == (11, None, "0:10")
    assert [runs[t]["statement_id"] for t in ("customer", "orders")] == ["s-1", "s-2"]


def test_cluster_with_a_database_user_retries_a_conflict(client, monkeypatch):
    _, stub = client
    monkeypatch.setenv("REDSHIFT_SYNC_CLUSTER", "prod-cluster")
    monkeypatch.setenv("REDSHIFT_SYNC_DB_USER", "sync_user")
    where = {"ClusterIdentifier": "prod-cluster", "Database": "dev", "DbUser": "sync_user"}
    call = {**where, "Sql": CALL_ORDERS, "StatementName": "redshift-sync.cdc.orders"}
    stub.add_response("execute_statement", {"Id": "s-1"}, call)
    stub.add_response("describe_statement", {"Id": "s-1", "Status": "FAILED", "Error": (
        "ERROR: 1023 DETAIL: Serializable isolation violation on table - 100167, transactions forming the cycle are: 1, 2")}, {"Id": "s-1"})
    stub.add_response("execute_statement", {"Id": "s-2"}, call)
    stub.add_response("describe_statement", {"Id": "s-2", "Status": "STARTED", "RedshiftPid": 7}, {"Id": "s-2"})
    stub.add_response("describe_statement", finished("s-2", 7), {"Id": "s-2"})
    stub.add_response("execute_statement", {"Id": "s-3"}, {
        **where, "Sql": run_log_sql("(r.table_name = 'orders' AND r.backend_pid = 7)"), "StatementName": "redshift-sync.cdc.run-log"})
    stub.add_response("describe_statement", finished("s-3", 7, has_result=True), {"Id": "s-3"})
    stub.add_response("get_statement_result", {"Records": [record("orders", 3, 3, 0.5)]}, {"Id": "s-3"})

    (run,) = lambda_handler.handler({"tables": ["orders"]}, Context(60_000))["tables"]
    assert (run["status"], run["attempts"], run["statement_id"], run["events_read"]) == ("ok", 2, "s-2", 3)


def test_running_out_of_time_cancels_the_statement(client, monkeypatch):
    _, stub = client
    monkeypatch.setenv("REDSHIFT_SYNC_CLUSTER", "prod-cluster")
    monkeypatch.setenv("REDSHIFT_SYNC_SECRET_ARN", SECRET)
    where = {"ClusterIdentifier": "prod-cluster", "Database": "dev", "SecretArn": SECRET}
    stub.add_response("execute_statement", {"Id": "s-1"}, {**where, "Sql": CALL_CUSTOMER, "StatementName": "redshift-sync.cdc.customer"})
    stub.add_response("describe_statement", {"Id": "s-1", "Status": "STARTED"}, {"Id": "s-1"})
    stub.add_response("cancel_statement", {"Status": True}, {"Id": "s-1"})
    stub.add_response("describe_statement", {"Id": "s-1", "Status": "ABORTED"}, {"Id": "s-1"})

    with pytest.raises(lambda_handler.SyncFailed, match="customer cancelled") as info:
        lambda_handler.handler({"tables": ["customer"]}, Context(60_000, 4_000))
    (run,) = info.value.summary["tables"]
    assert (run["status"], run["statement_id"], run["events_read"]) == ("cancelled", "s-1", 0)
    assert "status ABORTED" in run["error"]


def test_the_run_log_query_is_redshift_sql():
    import sqlglot

    sql = run_log_sql("(r.table_name = 'customer' AND r.backend_pid = 101)\n     OR (r.table_name = 'orders' AND r.backend_pid = 102)")
    tree = sqlglot.parse_one(sql, read="redshift")
    assert tree.find(sqlglot.exp.Window) is not None and tree.find(sqlglot.exp.Table).name == "sync_run_log"


def test_a_refused_statement_fails_its_table_and_the_others_go_on(client, monkeypatch):
    _, stub = client
    monkeypatch.setenv("REDSHIFT_SYNC_CLUSTER", "prod-cluster")
    monkeypatch.setenv("REDSHIFT_SYNC_SECRET_ARN", SECRET)
    where = {"ClusterIdentifier": "prod-cluster", "Database": "dev", "SecretArn": SECRET}
    stub.add_client_error("execute_statement", "ActiveStatementsExceededException", "Active statements exceeded the allowed quota.",
                          expected_params={**where, "Sql": CALL_CUSTOMER, "StatementName": "redshift-sync.cdc.customer"})
    stub.add_response("execute_statement", {"Id": "s-2"}, {**where, "Sql": CALL_ORDERS, "StatementName": "redshift-sync.cdc.orders"})
    stub.add_response("describe_statement", finished("s-2", 9), {"Id": "s-2"})
    stub.add_response("execute_statement", {"Id": "s-3"}, {
        **where, "Sql": run_log_sql("(r.table_name = 'orders' AND r.backend_pid = 9)"), "StatementName": "redshift-sync.cdc.run-log"})
    stub.add_response("describe_statement", finished("s-3", 9, has_result=True), {"Id": "s-3"})
    stub.add_response("get_statement_result", {"Records": [record("orders", 2, 2, 1.0)]}, {"Id": "s-3"})

    with pytest.raises(lambda_handler.SyncFailed, match="customer failed: ExecuteStatement refused.*ActiveStatementsExceeded") as info:
        lambda_handler.handler({}, Context(60_000))
    runs = {t["table"]: t for t in info.value.summary["tables"]}
    assert (runs["customer"]["status"], runs["customer"]["attempts"]) == ("failed", 1)
    assert (runs["orders"]["status"], runs["orders"]["events_read"]) == ("ok", 2)


def test_a_run_log_read_past_the_deadline_is_cancelled_and_every_table_still_reported(client):
    from sync import data_api
    from sync.config import load_pipeline

    real, stub = client
    pipeline, _ = load_pipeline(EXAMPLES / "salesdb" / "pipeline.toml")
    where = {"ClusterIdentifier": "prod-cluster", "Database": "dev", "SecretArn": SECRET}
    target = data_api.DataApiTarget(database="dev", cluster="prod-cluster", secret_arn=SECRET)
    calls = [
        data_api.Call("customer", CALL_CUSTOMER, state="finished", statement_id="s-1", pid=101, first_submitted=0.0),
        data_api.Call("orders", CALL_ORDERS, state="failed", error="ERROR: boom", first_submitted=0.0),
    ]
    stub.add_response("execute_statement", {"Id": "s-3"}, {
        **where, "Sql": run_log_sql("(r.table_name = 'customer' AND r.backend_pid = 101)"), "StatementName": "redshift-sync.cdc.run-log"})
    stub.add_response("describe_statement", {"Id": "s-3", "Status": "SUBMITTED"}, {"Id": "s-3"})
    stub.add_response("cancel_statement", {"Status": True}, {"Id": "s-3"})

    runs = data_api.summaries(real, target, pipeline, calls, sleep=lambda _: None, remaining_ms=lambda: 400)
    assert [(r.table, r.status) for r in runs] == [("customer", "unknown"), ("orders", "failed")]
    assert "run-log row could not be read" in runs[0].error and "cancelled" in runs[0].error
    assert runs[1].error == "ERROR: boom"

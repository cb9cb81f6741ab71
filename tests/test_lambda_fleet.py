"""The scheduled sync at fleet scale: the real handler, through the local Data API on the
embedded PostgreSQL, over 200 tables while the Data API refuses requests as it does under
load.

The Data API limits each operation's request rate and the number of active statements
("Quotas for Amazon Redshift Data API",
https://docs.aws.amazon.com/redshift/latest/mgmt/amazon-redshift-limits.html); past them it
answers `ThrottlingException` or, for (Batch)ExecuteStatement, `ActiveStatementsExceededException`
("The number of active statements exceeds the limit", botocore's redshift-data service
model). Neither may fail a table, start a second CALL of a table, or lose a batch."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path

import pytest

from sync.aws import lambda_handler
from sync.config import load_pipeline
from sync.local.data_api import LocalDataApi
from sync.local.stream import KafkaRecord, ingest_records
from sync.operations.runner import deploy
from tests.helpers import data_api_calls, pipeline_toml

TABLES = 200


class Context:
    """The part of the Lambda context the handler reads: the time left before the timeout."""

    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds

    def get_remaining_time_in_millis(self) -> int:
        return int((self.deadline - time.monotonic()) * 1000)


def fleet_toml(n: int) -> str:
    blocks = [
        f'[[tables]]\nname = "t{i:03d}"\ntopic = "shop.shop.T{i:03d}"\nprimary_key = ["ID"]\n'
        'columns = [{ name = "ID", type = "bigint" }, { name = "V", type = "varchar(32)" }]\n'
        for i in range(n)
    ]
    return pipeline_toml("\n".join(blocks), schema="fleet")


def event(i: int, key: int, ts: int) -> tuple[KafkaRecord, bool]:
    value = {
        "before": None,
        "after": {"ID": key, "V": f"v{key}"},
        "op": "c",
        "ts_ms": ts,
        "source": {"connector": "postgresql", "name": "shop", "ts_ms": ts, "db": "shop", "table": f"T{i:03d}"},
    }
    return KafkaRecord(0, None, ts, json.dumps({"ID": key}).encode(), json.dumps(value).encode()), True


@pytest.fixture
def make_fleet(wh, tmp_path: Path, monkeypatch):
    """A deployed pipeline of `n` small tables, each with 1-3 pending events, and the handler's
    environment for it."""
    return lambda n: _fleet(wh, tmp_path, monkeypatch, n)


def _fleet(wh, tmp_path: Path, monkeypatch, n: int):
    path = tmp_path / "pipeline.toml"
    path.write_text(fleet_toml(n))
    pipeline, _ = load_pipeline(path)
    deploy(wh, pipeline, str(path))
    batches = {}
    for i, table in enumerate(pipeline.tables):
        batches[table.name] = 1 + i % 3
        ingest_records(wh, pipeline, table.name, [event(i, k, 1_700_000_000_000 + k) for k in range(batches[table.name])])
    monkeypatch.setenv("REDSHIFT_SYNC_CONFIG", str(path))
    monkeypatch.setenv("REDSHIFT_SYNC_WORKGROUP", "local")
    for name in ("REDSHIFT_SYNC_DSN", "REDSHIFT_SYNC_CLUSTER"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {
        "POLL_SECONDS": "0.05",
        "POLL_MAX_SECONDS": "0.2",
        "RETRY_BASE_SECONDS": "0.05",
        "API_BACKOFF_SECONDS": "0.02",
        "API_BACKOFF_CAP_SECONDS": "0.2",
        "DEADLINE_MARGIN_SECONDS": "2",
        "CONNECT_TIMEOUT_SECONDS": "0.2",
        "READ_TIMEOUT_SECONDS": "0.5",
        "SDK_ATTEMPTS": "1",
        "MIN_CALL_SECONDS": "0.5",
        "MAX_CONCURRENT_CALLS": "16",
        "EXECUTE_PER_SECOND": "200",
        "DESCRIBE_PER_SECOND": "400",
    }.items():
        monkeypatch.setenv(f"REDSHIFT_SYNC_{name}", value)
    return wh, pipeline, batches


def use(api: LocalDataApi, monkeypatch) -> LocalDataApi:
    monkeypatch.setattr(lambda_handler, "client_factory", lambda *_: api)
    return api


def call_intervals(api: LocalDataApi) -> dict[str, list[tuple]]:
    """Each table's CALL statements as (submitted, ended), from DescribeStatement's CreatedAt
    and the UpdatedAt of the statement's final status."""
    out = defaultdict(list)
    for st in data_api_calls(api):
        out[st["QueryString"]].append((st["CreatedAt"], st["UpdatedAt"], st["Status"]))
    return out


def applied(wh) -> dict[str, int]:
    return dict(wh.query("SELECT table_name, events_read FROM fleet.sync_run_log"))


def test_200_tables_under_throttling_end_ok_or_not_started_and_nothing_is_lost(make_fleet, database_dsn, monkeypatch):
    wh, pipeline, batches = make_fleet(TABLES)
    api = use(LocalDataApi(database_dsn, max_active_statements=12, seed=16), monkeypatch)
    with api:
        api.throttle("ExecuteStatement", 0.25)
        api.throttle("BatchExecuteStatement", 0.25)  # the CALLs
        api.throttle("DescribeStatement", 0.3)
        api.throttle("GetStatementResult", 0.3)
        for slow in ("t007", "t100", "t150"):
            api.inject_delay(f'"incremental_sync_{slow}"', 1.0)
        # The first CALLs last long enough that the handler's 16 concurrent calls meet the
        # service's limit of 12 active statements on any machine, fast or slow.
        api.inject_delay('"incremental_sync_t', 0.5, times=24)
        context = Context(seconds=45)
        summary = lambda_handler.handler({}, context)
        left_ms = context.get_remaining_time_in_millis()
        intervals = call_intervals(api)

    runs = {t["table"]: t for t in summary["tables"]}
    assert len(runs) == TABLES
    assert {t["status"] for t in runs.values()} <= {"ok", "not started"}, [
        t for t in runs.values() if t["status"] not in ("ok", "not started")
    ]
    assert left_ms > 0  # returned before its deadline
    # The service really refused requests, for both reasons, and the handler retried them.
    assert api.refused["BatchExecuteStatement:ThrottlingException"] > 0
    assert api.refused["BatchExecuteStatement:ActiveStatementsExceededException"] > 0
    assert api.refused["DescribeStatement:ThrottlingException"] > 0
    assert sum(t["api_retries"] for t in runs.values()) > 0
    # No CALL of a table ran twice at once: each one ended before the next was submitted.
    for sql, spans in intervals.items():
        spans.sort()
        for (_, ended, status), (created, _, _) in zip(spans, spans[1:]):
            assert status in ("FAILED", "ABORTED") and ended <= created, sql
    # Every batch applied is reported, with the counts of the run log, and nothing else is.
    logged = applied(wh)
    assert logged == {t: r["events_read"] for t, r in runs.items() if r["status"] == "ok"}
    assert all(logged[t] == batches[t] for t in logged)
    assert summary["not_started"] == [t for t, r in runs.items() if r["status"] == "not started"]


def test_tables_not_started_in_time_go_first_next_time(make_fleet, database_dsn, monkeypatch):
    wh, pipeline, batches = make_fleet(60)
    monkeypatch.setenv("REDSHIFT_SYNC_EXECUTE_PER_SECOND", "12")  # 60 tables take 5 s to submit
    api = use(LocalDataApi(database_dsn), monkeypatch)
    with api:
        first = lambda_handler.handler({}, Context(seconds=4.5))  # not started: no failure, no exception
        skipped = first["not_started"]
        assert skipped and len(skipped) < len(batches) and not first["ok"]
        for t in first["tables"]:
            assert t["status"] in ("ok", "not started") and (t["status"] == "ok") == (t["table"] not in skipped)
        before = len(data_api_calls(api))
        lambda_handler.handler({}, Context(seconds=60))
        order = [st["QueryString"] for st in data_api_calls(api)[before:]]

    took_first = {sql.split('"incremental_sync_')[1].rstrip('"()') for sql in order[: len(skipped)]}
    assert took_first == set(skipped)
    assert applied(wh).keys() == batches.keys()


def test_calls_are_capped_by_the_concurrency_setting(make_fleet, database_dsn, monkeypatch):
    wh, pipeline, batches = make_fleet(30)
    monkeypatch.setenv("REDSHIFT_SYNC_MAX_CONCURRENT_CALLS", "3")
    api = use(LocalDataApi(database_dsn), monkeypatch)
    with api:
        summary = lambda_handler.handler({}, Context(seconds=60))
        spans = [s for spans in call_intervals(api).values() for s in spans]

    assert summary["ok"] and len(spans) == 30
    edges = sorted([(created, 1) for created, _, _ in spans] + [(ended, -1) for _, ended, _ in spans])
    active, most = 0, 0
    for _, step in edges:  # an end and a start at the same instant: the end counts first
        active += step
        most = max(most, active)
    assert 1 < most <= 3

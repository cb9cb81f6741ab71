"""Call the procedures through the Redshift Data API (boto3 `redshift-data`).

One `ExecuteStatement` per `CALL` (never a batch: a batch is one transaction, and a
procedure called inside a transaction block may not COMMIT or TRUNCATE). Every table is
submitted at once, then polled with `DescribeStatement`, waiting longer between rounds.
A statement that fails with a serialization conflict is submitted again after a jittered
backoff; any other failure is final. When the time left drops under a margin, every
statement still running is cancelled (`CancelStatement`) and reported, so nothing keeps
running after the invocation has given up on it.

The counts come from the run log the procedure writes: one SELECT for all finished
tables, matched on the session (`backend_pid` = `RedshiftPid` of the CALL).

The client is any object with the four methods boto3's client has (`execute_statement`,
`describe_statement`, `cancel_statement`, `get_statement_result`) and the same request
and response shapes: `sync.data_api_local.LocalDataApi` runs them on PostgreSQL.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sync.config import Pipeline
from sync.retry import RetryPolicy
from sync.runner import RUN_LOG_COLUMNS, RunSummary, call_sql, summary_from_row, unfinished_summary
from sync.sql.dialects import quote_ident, quote_literal
from sync.sql.names import RUN_LOG

TERMINAL = ("FINISHED", "FAILED", "ABORTED")
REPORT_MS = 1_000  # Lambda time kept, at the least, to print the summary and metrics


class DataApiError(RuntimeError):
    """A statement the handler needs (not a CALL) failed or could not be read."""


@dataclass(frozen=True)
class DataApiTarget:
    """Where statements run and how they authenticate (the Data API's combinations):
    Serverless: WorkgroupName [+ SecretArn]; cluster: ClusterIdentifier + SecretArn,
    + DbUser (GetClusterCredentials) or neither (GetClusterCredentialsWithIAM)."""

    database: str
    workgroup: str | None = None
    cluster: str | None = None
    secret_arn: str | None = None
    db_user: str | None = None

    def __post_init__(self) -> None:
        if bool(self.workgroup) == bool(self.cluster):
            raise ValueError("give exactly one of a workgroup (Serverless) or a cluster identifier (provisioned)")
        if self.secret_arn and self.db_user:
            raise ValueError("give a secret ARN or a database user, not both")
        if self.workgroup and self.db_user:
            raise ValueError("a database user works with a provisioned cluster only; Serverless derives it from IAM")
        if not self.database:
            raise ValueError("the database name is empty")

    def request(self, sql: str, statement_name: str) -> dict[str, str]:
        params = {"Database": self.database, "Sql": sql, "StatementName": statement_name}
        if self.workgroup:
            params["WorkgroupName"] = self.workgroup
        else:
            params["ClusterIdentifier"] = self.cluster or ""
        if self.secret_arn:
            params["SecretArn"] = self.secret_arn
        if self.db_user:
            params["DbUser"] = self.db_user
        return params


@dataclass(frozen=True)
class Polling:
    """How often to poll, and how much time to keep for cancelling and reading the run log."""

    initial_seconds: float = 0.5
    max_seconds: float = 5.0
    margin_ms: int = 15_000


@dataclass
class Call:
    """One table's CALL across its attempts."""

    table: str
    sql: str
    attempts: int = 0
    state: str = "waiting"  # waiting (to be submitted) | running | finished | failed | cancelled
    statement_id: str | None = None
    pid: int | None = None
    error: str | None = None
    submit_at: float = 0.0
    first_submitted: float | None = None
    ended: float | None = None
    history: list[str] = field(default_factory=list)  # the errors of earlier attempts

    def duration(self, now: float) -> float:
        if self.first_submitted is None:
            return 0.0
        return (self.ended if self.ended is not None else now) - self.first_submitted


def statement_name(pipeline: Pipeline, table: str) -> str:
    return f"redshift-sync.{pipeline.schema}.{table}"


def run_calls(
    client: Any,
    target: DataApiTarget,
    pipeline: Pipeline,
    tables: Sequence[str],
    remaining_ms: Callable[[], int],
    policy: RetryPolicy = RetryPolicy(),
    polling: Polling = Polling(),
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    rng: random.Random | None = None,
) -> list[Call]:
    """Submit every table's CALL, poll them to the end, retry conflicts, cancel at the deadline."""
    calls = [Call(t, call_sql(pipeline, t)) for t in tables]
    interval = polling.initial_seconds
    while True:
        now = clock()
        for call in calls:
            if call.state == "waiting" and call.submit_at <= now:
                _submit(client, target, pipeline, call, now)
        if all(c.state not in ("waiting", "running") for c in calls):
            return calls
        left_ms = remaining_ms() - polling.margin_ms
        if left_ms <= 0:
            _cancel_unfinished(client, calls, remaining_ms(), clock())
            return calls
        waits = [interval, left_ms / 1000]
        waits += [c.submit_at - now for c in calls if c.state == "waiting"]
        sleep(max(0.0, min(waits)))
        interval = min(interval * 1.5, polling.max_seconds)
        now = clock()
        for call in calls:
            if call.state == "running":
                try:
                    desc = client.describe_statement(Id=call.statement_id)
                except Exception as exc:  # the SDK already retried transient errors: this one stays
                    desc = {"Status": "FAILED", "Error": f"DescribeStatement failed, statement cancelled: {exc}"}
                    _try_cancel(client, call.statement_id)
                _observe(desc, call, policy, now, rng)


def _submit(client: Any, target: DataApiTarget, pipeline: Pipeline, call: Call, now: float) -> None:
    call.attempts += 1
    try:
        response = client.execute_statement(**target.request(call.sql, statement_name(pipeline, call.table)))
    except Exception as exc:  # refused (quota, permissions, validation): this table fails, the others go on
        call.state, call.error, call.ended = "failed", f"ExecuteStatement refused: {exc}", now
        return
    call.statement_id = response["Id"]
    call.state = "running"
    if call.first_submitted is None:
        call.first_submitted = now


def _observe(desc: dict, call: Call, policy: RetryPolicy, now: float, rng: random.Random | None) -> None:
    status = desc["Status"]
    if status == "FINISHED":
        call.state, call.pid, call.ended = "finished", desc.get("RedshiftPid"), now
    elif status == "FAILED":
        error = desc.get("Error") or "the statement failed without an error message"
        if policy.should_retry(call.attempts, error):
            call.history.append(error)
            call.state, call.submit_at = "waiting", now + policy.delay(call.attempts, rng)
        else:
            call.state, call.error, call.ended = "failed", error, now
    elif status == "ABORTED":
        call.state, call.ended = "cancelled", now
        call.error = "the statement was cancelled outside redshift-sync (Data API status ABORTED)"


def _cancel_unfinished(client: Any, calls: list[Call], left_ms: int, now: float) -> None:
    for call in calls:
        if call.state == "waiting":
            call.state, call.ended = "cancelled", now
            call.error = (
                f"not resubmitted: {left_ms} ms of Lambda time left after a serialization conflict "
                f"({call.history[-1] if call.history else 'no error'})"
            )
        elif call.state == "running":
            _try_cancel(client, call.statement_id)
            try:
                desc = client.describe_statement(Id=call.statement_id)
            except Exception as exc:
                desc = {"Status": f"unknown ({exc})"}
            if desc["Status"] == "FINISHED":
                call.state, call.pid, call.ended = "finished", desc.get("RedshiftPid"), now
                continue
            call.state, call.ended = "cancelled", now
            # CancelStatement is asynchronous: only ABORTED says the CALL rolled back.
            outcome = (
                "the CALL rolled back as a whole and the next run picks its records up"
                if desc["Status"] == "ABORTED"
                else "cancel requested, outcome unknown until the run log shows it; a CALL is all or nothing and "
                "the watermark keeps a committed one from being applied twice"
            )
            call.error = (
                f"cancelled (statement {call.statement_id}, status {desc['Status']}): {left_ms} ms of Lambda time "
                f"were left, under the margin kept to report; {outcome}"
            )


def _try_cancel(client: Any, statement_id: str | None) -> None:
    try:
        client.cancel_statement(Id=statement_id)
    except Exception:  # it may have just ended; the caller reports what it knows
        pass


def run_log_sql(pipeline: Pipeline, finished: Sequence[Call]) -> str:
    """The newest run-log row of each finished table, written by the session of its CALL."""
    matches = []
    for call in finished:
        cond = f"r.table_name = {quote_literal(call.table)}"
        if call.pid is not None:
            cond += f" AND r.backend_pid = {int(call.pid)}"
        matches.append(f"({cond})")
    return (
        f"SELECT table_name, {RUN_LOG_COLUMNS}\n"
        "FROM (\n"
        "  SELECT r.*, ROW_NUMBER() OVER (PARTITION BY r.table_name ORDER BY r.started_at DESC, r.run_id DESC) AS rn\n"
        f"  FROM {quote_ident(pipeline.schema)}.{quote_ident(RUN_LOG)} r\n"
        "  WHERE " + "\n     OR ".join(matches) + "\n"
        ") x\n"
        "WHERE rn = 1"
    )


def decode_field(value: dict) -> Any:
    """One Data API field ({"longValue": 1}, {"isNull": true}, ...) as a Python value."""
    if value.get("isNull"):
        return None
    for kind in ("longValue", "doubleValue", "stringValue", "booleanValue", "blobValue"):
        if kind in value:
            return value[kind]
    raise DataApiError(f"unsupported Data API field {value!r}")


def query(
    client: Any,
    target: DataApiTarget,
    sql: str,
    name: str,
    polling: Polling = Polling(),
    sleep: Callable[[float], None] = time.sleep,
    remaining_ms: Callable[[], int] | None = None,
) -> list[tuple]:
    """Run one SELECT to the end and return its rows (all pages). When `remaining_ms`
    falls under REPORT_MS (the time kept to print the summary), the statement is
    cancelled and DataApiError raised."""
    statement_id = client.execute_statement(**target.request(sql, name))["Id"]
    interval = polling.initial_seconds / 2
    while (desc := client.describe_statement(Id=statement_id))["Status"] not in TERMINAL:
        if remaining_ms is not None and remaining_ms() < REPORT_MS:
            _try_cancel(client, statement_id)
            raise DataApiError(f"{name} was still {desc['Status'].lower()} with {remaining_ms()} ms of Lambda time left and was cancelled")
        sleep(interval)
        interval = min(interval * 1.5, polling.max_seconds)
    if desc["Status"] != "FINISHED":
        raise DataApiError(f"{name} {desc['Status'].lower()}: {desc.get('Error') or 'no error message'}")
    rows: list[tuple] = []
    token: str | None = None
    while True:
        page = client.get_statement_result(Id=statement_id, **({"NextToken": token} if token else {}))
        rows.extend(tuple(decode_field(f) for f in record) for record in page["Records"])
        token = page.get("NextToken")
        if not token:
            return rows


def summaries(
    client: Any,
    target: DataApiTarget,
    pipeline: Pipeline,
    calls: Sequence[Call],
    polling: Polling = Polling(),
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    remaining_ms: Callable[[], int] | None = None,
) -> list[RunSummary]:
    """One RunSummary per call, in order: counts from the run log for the finished ones.
    When the run log cannot be read (in time), the finished calls say so: every call
    still gets its summary."""
    finished = [c for c in calls if c.state == "finished"]
    rows: dict[str, tuple] = {}
    unread: str | None = None
    if finished:
        name = f"redshift-sync.{pipeline.schema}.run-log"
        try:
            found = query(client, target, run_log_sql(pipeline, finished), name, polling, sleep, remaining_ms)
            rows = {r[0]: r[1:] for r in found}
        except Exception as exc:  # DataApiError, botocore errors: report, do not lose the other tables
            unread = f"the procedure finished, but its run-log row could not be read: {exc}"
    now = clock()
    out = []
    for call in calls:
        if call.state == "finished" and call.table in rows:
            out.append(summary_from_row(call.table, rows[call.table], call.duration(now)))
        elif call.state == "finished" and unread:
            out.append(unfinished_summary(call.table, "unknown", call.duration(now), unread))
        elif call.state == "finished":
            out.append(unfinished_summary(call.table, "failed", call.duration(now), "the procedure finished but wrote no run-log row"))
        else:
            out.append(unfinished_summary(call.table, call.state, call.duration(now), call.error or call.state))
    return out

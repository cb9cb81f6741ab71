"""Call the procedures through the Redshift Data API (boto3 `redshift-data`), for a fleet.

One `BatchExecuteStatement` per `CALL` (`call_statements`), one transaction ("The SQL
statements are run as a single transaction", BatchExecuteStatement): the procedure's own
lock first, the CALL, and the read of the run-log row the call left in the session's
temporary result table, so the call is lock-ordered like every other operation on the
table and its counts are read without reading the shared run log (docs/redshift.md,
"Concurrency and isolation"). The procedure never COMMITs or TRUNCATEs, so it may run
inside a transaction block. The Data API has
per-operation request-rate quotas and a limit on active statements ("Quotas for Amazon
Redshift Data API", https://docs.aws.amazon.com/redshift/latest/mgmt/amazon-redshift-limits.html),
so the handler never submits the fleet in one burst:

- at most `Pacing.max_concurrent_calls` CALLs run at once, and ExecuteStatement and
  DescribeStatement requests each go through a token bucket (`*_per_second`);
- a request the service refuses for load (`ThrottlingException`,
  `ActiveStatementsExceededException`) or does not answer is sent again after a jittered
  backoff, and the whole operation pauses for that time. ExecuteStatement is re-sent with
  the same `ClientToken` (botocore's service model marks it `idempotencyToken`: "to ensure
  the idempotency of the request"), so a request that did reach the service returns the
  statement it already started instead of starting a second CALL of the table;
- a DescribeStatement that fails never cancels anything: the CALL is asked about again
  later, and a CALL whose state stays unknown is settled by the run log;
- a new CALL of a table starts only after its previous one ended (a serialization conflict,
  error 1023, is retried with a new statement; nothing else is).

Deadlines: `Deadline.request_ms` is the longest one Data API request can take (connect and
read timeouts times the SDK's attempts, plus its backoff). No request starts unless that,
plus the time to report, is left. The loop stops submitting `Pacing.min_call_seconds`
before the deadline margin; tables not started by then are reported `not started`, and
`last_runs` orders the next invocation oldest-run first, so they go first.

The counts come from the batch's last statement (GetStatementResult of `<Id>:3`: "A suffix
indicates the number of the SQL statement"). Only a call whose outcome was not told (its
result unread in time, a cancel without ABORTED, a request never answered) is looked up
in the run log the procedure writes: one SELECT for all of them, matched on the session
(`backend_pid` = `RedshiftPid` of the CALL) when the Data API reports one, and always on
rows newer than the table's last run before this invocation. `RedshiftPid` can be 0
(awslabs/amazon-redshift-utils#515): 0 means unknown.

The client is any object with boto3's five methods (`execute_statement`,
`batch_execute_statement`, `describe_statement`, `cancel_statement`,
`get_statement_result`) and the same request and response shapes: `sync.local.data_api.LocalDataApi` runs them on PostgreSQL.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sync.aws.retry import is_throttled, is_transient
from sync.config import Pipeline
from sync.operations.conflicts import RetryPolicy, jittered_delay, retry_conflicts
from sync.operations.isolation import CallFailed, is_data_error, isolate
from sync.operations.runner import (
    SUMMARY_COLUMNS,
    RunSummary,
    call_result_sql,
    call_sql,
    combined_summary,
    isolate_sql,
    pending_sql,
    summary_columns,
    summary_from_row,
    unfinished_summary,
)
from sync.sql import schemas
from sync.sql.dialect import PostgresDialect, dialect_for, quote_ident, quote_literal
from sync.sql.names import RUN_LOG
from sync.sql.recovery import lock_sql

T = TypeVar("T")
TERMINAL = ("FINISHED", "FAILED", "ABORTED")
REPORT_MS = 1_000  # Lambda time kept, at the least, to print the summary and metrics
NOT_STARTED = "not started"


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

    def request(self, sql: str, statement_name: str, client_token: str | None = None) -> dict[str, str]:
        params = {"Database": self.database, "Sql": sql, "StatementName": statement_name}
        if self.workgroup:
            params["WorkgroupName"] = self.workgroup
        else:
            params["ClusterIdentifier"] = self.cluster or ""
        if self.secret_arn:
            params["SecretArn"] = self.secret_arn
        if self.db_user:
            params["DbUser"] = self.db_user
        if client_token:
            params["ClientToken"] = client_token
        return params

    def batch_request(self, sqls: list[str], statement_name: str, client_token: str | None = None) -> dict[str, Any]:
        """BatchExecuteStatement's parameters: `request`'s, with `Sqls` for `Sql`."""
        params: dict[str, Any] = self.request("", statement_name, client_token)
        del params["Sql"]
        params["Sqls"] = sqls
        return params


@dataclass(frozen=True)
class Polling:
    """How often to poll one statement, and how much time to keep for cancelling and
    reading the run log."""

    initial_seconds: float = 0.5
    max_seconds: float = 5.0
    margin_ms: int = 30_000


@dataclass(frozen=True)
class Pacing:
    """How hard the handler drives the Data API."""

    max_concurrent_calls: int = 10
    execute_per_second: float = 5.0
    describe_per_second: float = 10.0
    min_call_seconds: float = 10.0  # no CALL starts with less than margin + this left
    backoff_base_seconds: float = 0.5  # after a refused request: jittered, doubling
    backoff_cap_seconds: float = 8.0

    def __post_init__(self) -> None:
        if self.max_concurrent_calls < 1:
            raise ValueError(f"max_concurrent_calls must be at least 1, got {self.max_concurrent_calls}")
        if self.execute_per_second <= 0 or self.describe_per_second <= 0:
            raise ValueError("request rates must be positive")
        if self.min_call_seconds < 0 or self.backoff_base_seconds < 0 or self.backoff_cap_seconds < 0:
            raise ValueError("times must not be negative")

    def backoff(self, failures: int, rng: random.Random | None) -> float:
        return jittered_delay(failures, self.backoff_base_seconds, self.backoff_cap_seconds, rng)


@dataclass(frozen=True)
class ApiTimeouts:
    """The SDK's timeouts and retries (botocore `Config`): short, so that one request that
    hangs cannot outlast the deadline margin."""

    connect_seconds: float = 2.0
    read_seconds: float = 5.0
    attempts: int = 2  # total attempts in botocore's standard retry mode

    def __post_init__(self) -> None:
        if self.connect_seconds <= 0 or self.read_seconds <= 0:
            raise ValueError("timeouts must be positive")
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {self.attempts}")

    def worst_case_ms(self) -> int:
        """The longest one request can take: every attempt times out on connect and read, with
        the standard mode's backoff between attempts (random * 2**(n-1), at most 20 s)."""
        backoff = sum(min(20.0, 2.0**i) for i in range(self.attempts - 1))
        return int((self.attempts * (self.connect_seconds + self.read_seconds) + backoff) * 1000)

    def config(self) -> Any:
        from botocore.config import Config

        return Config(
            connect_timeout=self.connect_seconds,
            read_timeout=self.read_seconds,
            retries={"mode": "standard", "total_max_attempts": self.attempts},
        )


@dataclass(frozen=True)
class Deadline:
    """The time left, and the rule that no request starts unless it can finish in time."""

    remaining_ms: Callable[[], int]
    request_ms: int  # ApiTimeouts.worst_case_ms()

    def allows_request(self) -> bool:
        return self.remaining_ms() >= self.request_ms + REPORT_MS


class RateLimit:
    """A token bucket: `per_second` requests a second on average, bursts of up to one
    second's worth; `pause` stops it until a time (after the service refused a request)."""

    def __init__(self, per_second: float, now: float):
        self.rate, self.capacity = per_second, max(1.0, per_second)
        self.tokens, self.at, self.paused_until = self.capacity, now, now

    def _refill(self, now: float) -> None:
        self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
        self.at = now

    def ready_at(self, now: float) -> float:
        self._refill(now)
        return max(self.paused_until, now + max(0.0, 1.0 - self.tokens) / self.rate)

    def take(self, now: float) -> bool:
        if self.ready_at(now) > now:
            return False
        self.tokens -= 1.0
        return True

    def pause(self, until: float) -> None:
        self.paused_until = max(self.paused_until, until)


@dataclass(frozen=True)
class Session:
    """What every Data API exchange of one invocation shares: the client, where statements
    run, the deadline, and how hard to drive the API."""

    client: Any
    target: DataApiTarget
    deadline: Deadline
    polling: Polling = Polling()
    pacing: Pacing = Pacing()
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    rng: random.Random | None = None


@dataclass
class Call:
    """One table's CALL across its attempts."""

    table: str
    sqls: list[str]  # one transaction (`call_statements`)
    attempts: int = 0  # statements submitted (each conflict retry is a new statement)
    # waiting (to be submitted) | running | finished | failed | cancelled | not started | unknown
    state: str = "waiting"
    statement_id: str | None = None
    pid: int | None = None
    error: str | None = None
    client_token: str | None = None  # of the submission the service has not answered yet
    maybe_submitted: bool = False  # a request with that token may have reached the service
    submit_at: float = 0.0
    poll_at: float = 0.0
    poll_interval: float = 0.0
    refused: int = 0  # Data API requests of this call refused or unanswered, in a row
    api_retries: int = 0  # all of them, for the summary
    last_status: str | None = None
    first_submitted: float | None = None
    ended: float | None = None
    history: list[str] = field(default_factory=list)  # the errors of earlier attempts
    result: dict[str, Any] | None = None  # the run-log row the finished CALL left, by column
    columns: tuple[schemas.Column, ...] = SUMMARY_COLUMNS  # of that row (`summary_columns`)

    def duration(self, now: float) -> float:
        if self.first_submitted is None:
            return 0.0
        return (self.ended if self.ended is not None else now) - self.first_submitted


def statement_name(pipeline: Pipeline, table: str) -> str:
    return f"redshift-sync.{pipeline.schema}.{table}"


def engine_dialect(session: Session, pipeline: Pipeline) -> PostgresDialect:
    """The dialect of the engine behind the client: Redshift's, or the local Data API's."""
    return dialect_for(getattr(session.client, "engine_dialect", "redshift"), pipeline.schema)


def call_statements(d: PostgresDialect, pipeline: Pipeline, table: str, max_records: int | None = None) -> list[str]:
    """One table's CALL as one transaction: the procedure's lock first (the order every
    operation on the table takes), the CALL, and the run-log row it left for this session
    (`call_result_sql`), the last statement's result."""
    lock = lock_sql(d, pipeline, pipeline.table(table)).removesuffix(";")
    return [lock, call_sql(pipeline, table, max_records), call_result_sql(pipeline, table)]


def settle(call: Call, desc: dict, policy: RetryPolicy, now: float, rng: random.Random | None) -> None:
    """A table's next step once its CALL's statement has ended (`desc` is its
    DescribeStatement): finished, another attempt, or failed. Every per-table retry rule
    belongs here."""
    status = desc["Status"]
    call.last_status = status
    if status == "FINISHED":
        call.state, call.pid, call.ended = "finished", desc.get("RedshiftPid") or None, now
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


def run_calls(session: Session, pipeline: Pipeline, tables: Sequence[str], policy: RetryPolicy | None = None) -> list[Call]:
    """Run every table's CALL, in the order given, paced and capped; poll them to the end,
    retry conflicts, and at the deadline margin cancel what runs and report what never started."""
    policy = policy or RetryPolicy()
    deadline, polling, pacing, clock = session.deadline, session.polling, session.pacing, session.clock
    d = engine_dialect(session, pipeline)
    calls = [Call(t, call_statements(d, pipeline, t), columns=summary_columns(pipeline, t)) for t in tables]
    start = clock()
    execute, describe = RateLimit(pacing.execute_per_second, start), RateLimit(pacing.describe_per_second, start)
    while True:
        now = clock()
        left_ms = deadline.remaining_ms() - polling.margin_ms
        if left_ms <= 0:
            _at_deadline(session, calls, policy, clock())
            return calls
        may_start = left_ms > pacing.min_call_seconds * 1000
        running = [c for c in calls if c.state == "running"]
        for call in calls:
            if len(running) >= pacing.max_concurrent_calls:
                break
            if call.state != "waiting" or call.submit_at > now or not (may_start or call.maybe_submitted):
                continue
            if not execute.take(now):
                break
            _submit(session, pipeline, call, now, execute)
            if call.state == "running":
                running.append(call)
        for call in sorted(running, key=lambda c: c.poll_at):
            if call.poll_at > now or not describe.take(now):
                break
            _poll(session, call, policy, now, describe)
        waiting = [c for c in calls if c.state == "waiting"]
        running = [c for c in calls if c.state == "running"]
        if not running and not any(may_start or c.maybe_submitted for c in waiting):
            _not_started(waiting, deadline.remaining_ms(), clock())
            return calls
        wake = [now + left_ms / 1000]
        if len(running) < pacing.max_concurrent_calls:
            startable = [c.submit_at for c in waiting if may_start or c.maybe_submitted]
            if startable:
                wake.append(max(min(startable), execute.ready_at(now)))
        if running:
            wake.append(max(min(c.poll_at for c in running), describe.ready_at(now)))
        session.sleep(max(0.001, min(wake) - clock()))


def _submit(session: Session, pipeline: Pipeline, call: Call, now: float, execute: RateLimit) -> None:
    if call.client_token is None:  # a new statement; a refused one is sent again with its token
        call.client_token, call.attempts = str(uuid.uuid4()), call.attempts + 1
    try:
        response = session.client.batch_execute_statement(
            **session.target.batch_request(call.sqls, statement_name(pipeline, call.table), call.client_token)
        )
    except Exception as exc:
        if not is_transient(exc):  # permissions, validation: this table fails, the others go on
            call.state, call.error, call.ended = "failed", f"BatchExecuteStatement refused: {exc}", now
            call.client_token = None
            return
        call.refused, call.api_retries = call.refused + 1, call.api_retries + 1
        call.maybe_submitted = call.maybe_submitted or not is_throttled(exc)
        call.submit_at = now + session.pacing.backoff(call.refused, session.rng)
        call.error = f"BatchExecuteStatement not accepted yet: {exc}"
        if is_throttled(exc):
            execute.pause(call.submit_at)
        return
    call.client_token, call.maybe_submitted, call.refused, call.error = None, False, 0, None
    call.statement_id, call.state, call.last_status = response["Id"], "running", "SUBMITTED"
    call.poll_interval = session.polling.initial_seconds
    call.poll_at = now + call.poll_interval
    if call.first_submitted is None:
        call.first_submitted = now


def _poll(session: Session, call: Call, policy: RetryPolicy, now: float, describe: RateLimit) -> None:
    try:
        desc = session.client.describe_statement(Id=call.statement_id)
    except Exception as exc:
        call.api_retries += 1
        if not is_transient(exc):  # not answerable (permissions, an unknown id): the run log settles it
            call.state, call.ended = "unknown", now
            call.error = f"DescribeStatement failed, the CALL was left to run and the run log tells its outcome: {exc}"
            return
        call.refused += 1
        call.poll_at = now + session.pacing.backoff(call.refused, session.rng)
        if is_throttled(exc):
            describe.pause(call.poll_at)
        return
    call.refused = 0
    if desc["Status"] in TERMINAL:
        settle(call, desc, policy, now, session.rng)
        if call.state == "finished":
            call.result = _call_result(session, call)
        return
    call.last_status = desc["Status"]
    call.poll_interval = min(call.poll_interval * 1.5, session.polling.max_seconds)
    call.poll_at = now + call.poll_interval


def _call_result(session: Session, call: Call) -> dict[str, Any] | None:
    """The run-log row a finished CALL left (its batch's last statement), by column; None
    when it cannot be read in time: the run log settles it (`summaries`)."""
    try:
        rows = last_rows(session, call.statement_id or "", len(call.sqls), call.table)
    except Exception:  # DataApiError, botocore errors
        return None
    return schemas.as_row(call.columns, rows[0]) if rows else None


def _not_started(waiting: Sequence[Call], left_ms: int, now: float) -> None:
    for call in waiting:
        call.state, call.ended = NOT_STARTED, now
        after = f" after a serialization conflict ({call.history[-1]})" if call.history else ""
        refused = f"; {call.error}" if call.error else ""
        call.error = (
            f"not started{after}: {left_ms} ms of Lambda time left, under the deadline margin and the time a CALL "
            f"needs{refused}; the next run takes the tables with the oldest last run first"
        )


def _at_deadline(session: Session, calls: list[Call], policy: RetryPolicy, now: float) -> None:
    client, deadline = session.client, session.deadline
    left_ms = deadline.remaining_ms()
    unanswered = [c for c in calls if c.state == "waiting" and c.maybe_submitted]
    _not_started([c for c in calls if c.state == "waiting" and not c.maybe_submitted], left_ms, now)
    for call in unanswered:  # the service may have started it: only the run log can tell
        call.state, call.ended = "unknown", now
        call.error = (
            f"BatchExecuteStatement was not answered before the deadline ({call.error}); the run log tells whether it ran"
        )
    for call in (c for c in calls if c.state == "running"):
        if not deadline.allows_request():
            call.state, call.ended = "unknown", now
            call.error = (
                f"still {(call.last_status or 'running').lower()} (statement {call.statement_id}) with {deadline.remaining_ms()} ms "
                "of Lambda time left, too little to cancel it safely; the run log tells whether it committed"
            )
            continue
        _try_cancel(client, call.statement_id)
        status = "unknown"
        if deadline.allows_request():
            try:
                desc = client.describe_statement(Id=call.statement_id)
                status = desc["Status"]
            except Exception as exc:
                status = f"unknown ({exc})"
        if status in ("FINISHED", "FAILED"):  # it ended before the cancel reached it
            settle(call, desc, policy, now, session.rng)
            if call.state == "waiting":  # a conflict: its next attempt waits for the next run
                _not_started([call], left_ms, now)
            continue
        call.last_status = status
        call.state, call.ended = "cancelled", now
        # CancelStatement is asynchronous: only ABORTED says the CALL rolled back.
        outcome = (
            "the CALL rolled back as a whole and the next run picks its records up"
            if status == "ABORTED"
            else "cancel requested, outcome unknown until the run log shows it; a CALL is all or nothing and "
            "the watermark keeps a committed one from being applied twice"
        )
        call.error = (
            f"cancelled (statement {call.statement_id}, status {status}): {left_ms} ms of Lambda time "
            f"were left, under the deadline margin; {outcome}"
        )


def _try_cancel(client: Any, statement_id: str | None) -> None:
    try:
        client.cancel_statement(Id=statement_id)
    except Exception:  # it may have just ended; the caller reports what it knows
        pass


def decode_field(value: dict) -> Any:
    """One Data API field ({"longValue": 1}, {"isNull": true}, ...) as a Python value."""
    if value.get("isNull"):
        return None
    for kind in ("longValue", "doubleValue", "stringValue", "booleanValue", "blobValue"):
        if kind in value:
            return value[kind]
    raise DataApiError(f"unsupported Data API field {value!r}")


def _request(session: Session, send: Callable[[], Any], what: str) -> Any:
    """One request of a query, sent again (the same request, so the same ClientToken) while
    the service refuses it for load and time allows."""
    deadline = session.deadline
    failures = 0
    while True:
        if not deadline.allows_request():
            raise DataApiError(f"{what} not sent: {deadline.remaining_ms()} ms of Lambda time left")
        try:
            return send()
        except Exception as exc:
            if not is_transient(exc):
                raise
            failures += 1
            wait = session.pacing.backoff(failures, session.rng)
            if deadline.remaining_ms() - wait * 1000 < deadline.request_ms + REPORT_MS:
                raise DataApiError(f"{what} refused ({exc}) and no time is left to try again") from exc
            session.sleep(wait)


class StatementFailed(DataApiError):
    """The statement ran and failed; the message is the engine's error."""


def query(session: Session, sql: str, name: str) -> list[tuple]:
    """Run one SELECT to the end and return its rows (all pages). When no request can finish
    in time any more, the statement is cancelled (if it was started) and DataApiError raised."""
    client = session.client
    statement_id = run_to_end(session, sql, name)
    rows: list[tuple] = []
    token: str | None = None
    while True:
        page = _request(
            session,
            lambda token=token: client.get_statement_result(Id=statement_id, **({"NextToken": token} if token else {})),
            f"{name} GetStatementResult",
        )
        rows.extend(tuple(decode_field(f) for f in record) for record in page["Records"])
        token = page.get("NextToken")
        if not token:
            return rows


def run_to_end(session: Session, sql: str, name: str) -> str:
    """Run one statement to the end; its id. StatementFailed when it failed (the engine's
    error), DataApiError when it could not finish in time (then it is cancelled)."""
    params = session.target.request(sql, name, str(uuid.uuid4()))
    return _finish(session, lambda: session.client.execute_statement(**params)["Id"], name)["Id"]


def run_batch(session: Session, statements: list[str], name: str) -> list[int]:
    """Run statements as one transaction (BatchExecuteStatement: "The SQL statements are run
    as a single transaction"); each one's row count (ResultRows, -1 where none). Fails and
    is cancelled as `run_to_end`."""
    return [int(sub.get("ResultRows", -1)) for sub in _run_batch(session, statements, name)["SubStatements"]]


def _run_batch(session: Session, statements: list[str], name: str) -> dict:
    params = session.target.batch_request(statements, name, str(uuid.uuid4()))
    return _finish(session, lambda: session.client.batch_execute_statement(**params)["Id"], name)


def batch_result(session: Session, statements: list[str], name: str) -> list[tuple]:
    """Run statements as one transaction, as `run_batch`; the rows of the last one."""
    return last_rows(session, _run_batch(session, statements, name)["Id"], len(statements), name)


def last_rows(session: Session, batch_id: str, statements: int, name: str) -> list[tuple]:
    """The rows (one page) of a finished batch's last statement: GetStatementResult of
    `<Id>:<n>`, "A suffix indicates the number of the SQL statement"."""
    last = f"{batch_id}:{statements}"
    page = _request(session, lambda: session.client.get_statement_result(Id=last), f"{name} GetStatementResult")
    return [tuple(decode_field(f) for f in record) for record in page["Records"]]


def _finish(session: Session, submit: Callable[[], str], name: str) -> dict:
    """Submit a statement and poll it to the end; its last DescribeStatement."""
    client, deadline = session.client, session.deadline
    statement_id = _request(session, submit, f"{name} ExecuteStatement")
    interval = session.polling.initial_seconds / 2
    try:
        while True:
            desc = _request(session, lambda: client.describe_statement(Id=statement_id), f"{name} DescribeStatement")
            if desc["Status"] in TERMINAL:
                break
            session.sleep(interval)
            interval = min(interval * 1.5, session.polling.max_seconds)
    except DataApiError:
        left_ms = deadline.remaining_ms()
        if not deadline.allows_request():  # a SELECT left to finish on its own harms nothing
            raise DataApiError(f"{name} was not finished with {left_ms} ms of Lambda time left") from None
        _try_cancel(client, statement_id)
        raise DataApiError(f"{name} was not finished with {left_ms} ms of Lambda time left and was cancelled") from None
    if desc["Status"] == "FAILED":
        raise StatementFailed(desc.get("Error") or "no error message")
    if desc["Status"] != "FINISHED":
        raise DataApiError(f"{name} {desc['Status'].lower()}: {desc.get('Error') or 'no error message'}")
    return desc


def isolate_table(
    session: Session, pipeline: Pipeline, table: str, failed: RunSummary, policy: RetryPolicy | None = None
) -> RunSummary:
    """Record isolation (sync/operations/isolation.py) for a table whose CALL failed on a record's
    data: bounded CALLs, one at a time, within the deadline, each a batch with the table's
    lock first (`call_statements`); the failing records are quarantined with the engine's
    error and the rest applied. A statement stopped by a serialization conflict is run
    again (`policy`). The summary adds up the run-log rows the bounded CALLs left."""
    name = f"{statement_name(pipeline, table)}.isolate"
    policy = policy or RetryPolicy()
    d = engine_dialect(session, pipeline)
    retried = [0]
    applied: list[RunSummary] = []

    def retrying(attempt: Callable[[], T]) -> T:
        value, n = retry_conflicts(policy, attempt, session.sleep, session.deadline.allows_request)
        retried[0] += n
        return value

    def call(limit: int) -> None:
        try:
            rows = retrying(lambda: batch_result(session, call_statements(d, pipeline, table, limit), name))
        except StatementFailed as exc:
            if is_data_error(str(exc)):
                raise CallFailed(str(exc)) from None
            raise
        applied.extend(summary_from_row(table, schemas.as_row(summary_columns(pipeline, table), r), 0.0) for r in rows)

    def pending() -> int:
        return int(query(session, pending_sql(pipeline, table), f"{name}.pending")[0][0])

    def quarantine_first(error: str) -> None:
        # The Data API's parameters are not used (the local one has none): a literal, with
        # the reason cut to what the quarantine keeps and backslashes left out.
        reason = quote_literal(error.replace("\\", "/")[:1000])
        lock = call_statements(d, pipeline, table)[0]
        quarantined = [lock, isolate_sql(pipeline, table).replace("%s", reason)]
        retrying(lambda: run_batch(session, quarantined, f"{name}.quarantine"))

    started = session.clock()
    try:
        result = isolate(call, pending, quarantine_first)
    except DataApiError as exc:
        failed.error = f"{failed.error}\nrecord isolation stopped: {exc}"
        failed.retries += retried[0]
        return failed
    summary = combined_summary(table, failed, applied, result)
    summary.duration_seconds += session.clock() - started
    summary.retries = retried[0]
    return summary


def last_runs_sql(pipeline: Pipeline, tables: Sequence[str]) -> str:
    """The start of each table's newest run-log row."""
    names = ", ".join(quote_literal(t) for t in tables)
    return (
        "SELECT table_name, MAX(started_at) AS last_started_at\n"
        f"FROM {quote_ident(pipeline.schema)}.{quote_ident(RUN_LOG)}\n"
        f"WHERE table_name IN ({names})\n"
        "GROUP BY table_name"
    )


def last_runs(
    session: Session, pipeline: Pipeline, tables: Sequence[str]
) -> tuple[list[str], dict[str, str | None] | None, str | None]:
    """The tables in the order to run them, oldest last run first (never run first; ties keep
    the given order), and each table's last run, the baseline that tells this invocation's
    run-log rows apart. When the run log cannot be read: the given order, no baseline, and why."""
    try:
        rows = query(session, last_runs_sql(pipeline, tables), f"redshift-sync.{pipeline.schema}.last-runs")
    except Exception as exc:  # DataApiError, botocore errors: run in the given order
        return list(tables), None, f"the last runs could not be read, tables run in the pipeline file's order: {exc}"
    last: dict[str, str | None] = {t: None for t in tables}
    last.update({r[0]: None if r[1] is None else str(r[1]) for r in rows})
    order = sorted(tables, key=lambda t: (last[t] is not None, last[t] or ""))
    return order, last, None


# A run-log row of one of this invocation's calls: its table, and what its summary shows.
CALL_RUN_COLUMNS = (schemas.column(schemas.RUN_LOG, "table_name"), *SUMMARY_COLUMNS)


def run_log_sql(pipeline: Pipeline, calls: Sequence[Call], baseline: dict[str, str | None] | None) -> str:
    """The newest run-log row of each table written by its CALL: by the CALL's session when
    the Data API reported one, and newer than the table's last run before this invocation."""
    matches = []
    for call in calls:
        cond = f"r.table_name = {quote_literal(call.table)}"
        if call.pid is not None:
            cond += f" AND r.backend_pid = {int(call.pid)}"
        if baseline is not None and baseline.get(call.table) is not None:
            cond += f" AND r.started_at > CAST({quote_literal(baseline[call.table])} AS timestamp)"
        matches.append(f"({cond})")
    return (
        f"SELECT {', '.join(schemas.names(CALL_RUN_COLUMNS))}\n"
        "FROM (\n"
        "  SELECT r.*, ROW_NUMBER() OVER (PARTITION BY r.table_name ORDER BY r.started_at DESC, r.run_id DESC) AS rn\n"
        f"  FROM {quote_ident(pipeline.schema)}.{quote_ident(RUN_LOG)} r\n"
        "  WHERE " + "\n     OR ".join(matches) + "\n"
        ") x\n"
        "WHERE rn = 1"
    )


def _may_have_committed(call: Call, baseline: dict[str, str | None] | None) -> bool:
    """Whether to look for this call's run-log row: it finished, or its outcome is unknown
    (cancelled without ABORTED, never answered), and its row can be told apart from older
    ones (by its session, or by the table's last run before this invocation)."""
    if call.state == "finished":
        return call.pid is not None or baseline is not None
    return call.state in ("cancelled", "unknown") and call.last_status != "ABORTED" and baseline is not None


def summaries(
    session: Session, pipeline: Pipeline, calls: Sequence[Call], baseline: dict[str, str | None] | None
) -> list[RunSummary]:
    """One RunSummary per call, in order: counts from the run log for every call that may
    have committed (finished, or cancelled or unknown when describes did not tell). When the
    run log cannot be read (in time), the finished calls say so: every call gets its summary."""
    asked = [c for c in calls if c.result is None and _may_have_committed(c, baseline)]
    rows: dict[str, dict] = {}
    unread: str | None = None
    if asked:
        name = f"redshift-sync.{pipeline.schema}.run-log"
        try:
            found = query(session, run_log_sql(pipeline, asked, baseline), name)
            rows = {row["table_name"]: row for row in (schemas.as_row(CALL_RUN_COLUMNS, r) for r in found)}
        except Exception as exc:  # DataApiError, botocore errors: report, do not lose the other tables
            unread = f"the run-log row could not be read: {exc}"
    now = session.clock()
    out = []
    for call in calls:
        if call.result is not None:
            out.append(summary_from_row(call.table, call.result, call.duration(now)))
        elif call in asked and call.table in rows:
            out.append(summary_from_row(call.table, rows[call.table], call.duration(now)))
        elif call.state == "finished" and unread:
            out.append(unfinished_summary(call.table, "unknown", call.duration(now), f"the procedure finished, but {unread}"))
        elif call.state == "finished" and call.pid is None and baseline is None:
            out.append(
                unfinished_summary(
                    call.table,
                    "unknown",
                    call.duration(now),
                    "the procedure finished; with no session id and no last run its run-log row cannot be told apart",
                )
            )
        elif call.state == "finished":
            out.append(
                unfinished_summary(call.table, "failed", call.duration(now), "the procedure finished but wrote no run-log row")
            )
        else:
            out.append(unfinished_summary(call.table, call.state, call.duration(now), call.error or call.state))
    return out

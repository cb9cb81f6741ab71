"""A local Redshift Data API: the calls the Lambda handler makes, run on PostgreSQL.

`LocalDataApi(dsn)` answers `execute_statement`, `batch_execute_statement` (its statements
in one transaction, each one's row count in `SubStatements`), `describe_statement`,
`cancel_statement` and `get_statement_result` with the request parameters and response shapes of boto3's
`redshift-data` client. Each statement runs on its own connection in its own thread, so it
is asynchronous like the service: it goes SUBMITTED -> PICKED -> STARTED -> FINISHED |
FAILED | ABORTED while the caller polls. Cancelling sends PostgreSQL a real cancel request
for the running query. Errors are botocore `ClientError`s with the service's codes.

Like the service, it honours `ClientToken` (the same token returns the statement it already
started) and can limit active statements (`max_active_statements`: more are refused with
`ActiveStatementsExceededException`). Test controls: `inject_failure` makes chosen
statements fail with a given error (a Redshift 1023 serialization conflict by default),
`inject_delay` makes them slow, and `throttle` makes a share of an operation's requests
fail with a given error code, as the service does under load.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from botocore.exceptions import ClientError

from sync.aws.data_api import TERMINAL

CONFLICT_ERROR = (
    "ERROR: 1023 DETAIL: Serializable isolation violation on table - 100167, "
    "transactions forming the cycle are: 100168, 100169 (pid:1073)"
)
EXECUTE_PARAMETERS = {
    "Sql",
    "Database",
    "ClusterIdentifier",
    "WorkgroupName",
    "SecretArn",
    "DbUser",
    "Parameters",
    "WithEvent",
    "StatementName",
    "ClientToken",
    "SessionKeepAliveSeconds",
    "SessionId",
    "ResultFormat",
}
# PostgreSQL type OIDs -> the typeName the Data API reports.
TYPE_NAMES = {
    16: "bool",
    17: "bytea",
    20: "int8",
    21: "int2",
    23: "int4",
    25: "text",
    700: "float4",
    701: "float8",
    1043: "varchar",
    1082: "date",
    1114: "timestamp",
    1184: "timestamptz",
    1700: "numeric",
    3802: "super",
}


class LocalDataApiError(ClientError):
    """A botocore ClientError, as boto3's client raises it: `response["Error"]` has Code and Message."""

    def __init__(self, code: str, message: str, operation: str):
        super().__init__({"Error": {"Code": code, "Message": message}}, operation)


@dataclass
class _Result:
    """What one statement returned: its columns (None: no result set), rows and row count."""

    columns: list[dict] | None
    rows: list[tuple]
    count: int


@dataclass
class _Statement:
    id: str
    params: dict[str, Any]
    created_at: dt.datetime
    updated_at: dt.datetime
    status: str = "SUBMITTED"
    error: str | None = None
    pid: int | None = None
    started: float | None = None
    duration_ns: int = -1
    columns: list[dict] | None = None
    rows: list[tuple] = field(default_factory=list)
    result_rows: int = -1
    subs: list[_Result] | None = None  # a batch's statements' results, in order
    cancel_requested: bool = False
    conn: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: threading.Event = field(default_factory=threading.Event)

    def move(self, status: str, error: str | None = None) -> None:
        self.status, self.updated_at = status, dt.datetime.now(dt.timezone.utc)
        if error is not None:
            self.error = error
        if status in TERMINAL and self.started is not None:
            self.duration_ns = int((time.perf_counter() - self.started) * 1e9)


@dataclass
class _Injection:
    match: str
    error: str | None  # None: only slow
    remaining: int
    delay: float = 0.0


@dataclass
class _Throttle:
    code: str
    message: str
    share: float


def _field(value: Any) -> dict:
    """A Python value as a Data API field (decimals, dates and text as stringValue)."""
    if value is None:
        return {"isNull": True}
    if isinstance(value, bool):
        return {"booleanValue": value}
    if isinstance(value, int):
        return {"longValue": value}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"blobValue": bytes(value)}
    if isinstance(value, (decimal.Decimal, dt.date, dt.datetime, dt.time)):
        return {"stringValue": str(value)}
    return {"stringValue": value if isinstance(value, str) else str(value)}


def _error_text(exc: psycopg.Error) -> str:
    diag = exc.diag
    text = f"ERROR: {diag.message_primary or str(exc).strip()}"
    return text + (f" DETAIL: {diag.message_detail}" if diag.message_detail else "")


def _end_with_error(st: _Statement, exc: psycopg.Error) -> None:
    """A statement stopped by the engine: ABORTED when its cancel did it, else FAILED."""
    with st.lock:
        cancelled = st.cancel_requested and isinstance(exc, psycopg.errors.QueryCanceled)
        st.move("ABORTED" if cancelled else "FAILED", _error_text(exc))


def _run_sql(cur: Any, sql: str) -> _Result:
    cur.execute(sql)
    if cur.description is None:
        return _Result(None, [], cur.rowcount)
    rows = cur.fetchall()
    columns = [
        {
            "name": c.name,
            "label": c.name,
            "typeName": TYPE_NAMES.get(c.type_code, str(c.type_code)),
            "nullable": 1,
            "isSigned": False,
            "isCaseSensitive": False,
            "isCurrency": False,
            "length": 0,
            "precision": c.precision or 0,
            "scale": c.scale or 0,
        }
        for c in cur.description
    ]
    return _Result(columns, rows, len(rows))


class LocalDataApi:
    """The Data API client calls, run on the PostgreSQL at `dsn`."""

    # The SQL dialect of the engine behind the client (the service's is Redshift's): the
    # few statements that differ between engines are rendered for it.
    engine_dialect = "postgres"

    def __init__(
        self,
        dsn: str,
        page_size: int = 1000,
        connect: Callable[[str], Any] | None = None,
        max_active_statements: int | None = None,
        seed: int = 0,
    ):
        self.dsn = dsn
        self.page_size = page_size
        self.max_active_statements = max_active_statements
        self._connect = connect or (lambda d: psycopg.connect(d, autocommit=True))
        self._statements: dict[str, _Statement] = {}
        self._tokens: dict[str, str] = {}
        self._injections: list[_Injection] = []
        self._throttles: dict[str, _Throttle] = {}
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.refused: dict[str, int] = {}  # "Operation:ErrorCode" -> requests refused (`throttle`, the active-statement limit)

    # -- test controls -------------------------------------------------------------
    def inject_failure(self, match: str, error: str = CONFLICT_ERROR, times: int = 1) -> None:
        """The next `times` statements whose SQL contains `match` fail with `error` instead of running."""
        with self._lock:
            self._injections.append(_Injection(match, error, times))

    def inject_delay(self, match: str, seconds: float, times: int = 1) -> None:
        """The next `times` statements whose SQL contains `match` first sleep `seconds` on
        the server (pg_sleep, cancellable), then run."""
        with self._lock:
            self._injections.append(_Injection(match, None, times, seconds))

    def throttle(self, operation: str, share: float, code: str = "ThrottlingException", message: str = "Rate exceeded") -> None:
        """A `share` (0-1) of the requests of `operation` (e.g. "DescribeStatement") fail
        with a ClientError `code` before doing anything, as the service refuses requests
        over its rate quota."""
        with self._lock:
            self._throttles[operation] = _Throttle(code, message, share)

    def _refuse(self, operation: str) -> None:
        with self._lock:
            throttle = self._throttles.get(operation)
            if throttle is None or self._rng.random() >= throttle.share:
                return
            key = f"{operation}:{throttle.code}"
            self.refused[key] = self.refused.get(key, 0) + 1
        raise LocalDataApiError(throttle.code, throttle.message, operation)

    def wait(self, statement_id: str, timeout: float = 60.0) -> str:
        """Block until the statement ends (or `timeout` passes); returns its status."""
        st = self._get(statement_id, "DescribeStatement")
        st.done.wait(timeout)
        return st.status

    def statements(self) -> list[dict]:
        """Every statement submitted so far, oldest first, as DescribeStatement shows it."""
        with self._lock:
            ids = list(self._statements)
        return [self._describe(i) for i in ids]

    def close(self, timeout: float = 30.0) -> None:
        """Cancel what still runs and wait for every statement thread to end."""
        with self._lock:
            pending = [s for s in self._statements.values() if not s.done.is_set()]
        for st in pending:
            try:
                self.cancel_statement(Id=st.id)
            except LocalDataApiError:
                pass  # it ended meanwhile
        for st in pending:
            st.done.wait(timeout)

    def __enter__(self) -> LocalDataApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the Data API ----------------------------------------------------------------
    def execute_statement(self, **params: Any) -> dict:
        op = "ExecuteStatement"
        unknown = sorted(set(params) - EXECUTE_PARAMETERS)
        if unknown:
            raise LocalDataApiError("ValidationException", f"unknown parameter(s) {', '.join(unknown)}", op)
        if not isinstance(params.get("Sql"), str) or not params["Sql"].strip():
            raise LocalDataApiError("ValidationException", "Sql is required", op)
        return self._submit(op, params)

    def batch_execute_statement(self, **params: Any) -> dict:
        op = "BatchExecuteStatement"
        unknown = sorted(set(params) - (EXECUTE_PARAMETERS - {"Sql", "Parameters"} | {"Sqls"}))
        if unknown:
            raise LocalDataApiError("ValidationException", f"unknown parameter(s) {', '.join(unknown)}", op)
        sqls = params.get("Sqls")
        if not isinstance(sqls, list) or not sqls or not all(isinstance(q, str) and q.strip() for q in sqls):
            raise LocalDataApiError("ValidationException", "Sqls is required: a list of SQL statements", op)
        return self._submit(op, params)

    def _submit(self, op: str, params: dict[str, Any]) -> dict:
        if "SessionId" not in params:
            if not params.get("Database"):
                raise LocalDataApiError("ValidationException", "Database is required", op)
            if bool(params.get("ClusterIdentifier")) == bool(params.get("WorkgroupName")):
                raise LocalDataApiError("ValidationException", "Specify exactly one of ClusterIdentifier or WorkgroupName", op)
        if params.get("Parameters"):
            raise LocalDataApiError("ValidationException", "the local Data API does not support Parameters", op)
        self._refuse(op)
        now = dt.datetime.now(dt.timezone.utc)
        st = _Statement(str(uuid.uuid4()), dict(params), now, now)
        token = params.get("ClientToken")
        with self._lock:
            if token in self._tokens:  # the request was already accepted: the same statement
                known = self._statements[self._tokens[token]]
                if known.params != params:
                    raise LocalDataApiError("ValidationException", "ClientToken reused with different parameters", op)
                return self._accepted(known)
            if self.max_active_statements is not None:
                active = sum(1 for s in self._statements.values() if s.status not in TERMINAL)
                if active >= self.max_active_statements:
                    key = f"{op}:ActiveStatementsExceededException"
                    self.refused[key] = self.refused.get(key, 0) + 1
                    raise LocalDataApiError(
                        "ActiveStatementsExceededException",
                        f"Active statements exceeded the allowed quota ({self.max_active_statements}).",
                        op,
                    )
            self._statements[st.id] = st
            if token:
                self._tokens[token] = st.id
        threading.Thread(target=self._run, args=(st,), name=f"data-api-{st.id[:8]}", daemon=True).start()
        return self._accepted(st)

    @staticmethod
    def _accepted(st: _Statement) -> dict:
        response = {"Id": st.id, "CreatedAt": st.created_at}
        for key in ("ClusterIdentifier", "WorkgroupName", "Database", "DbUser", "SecretArn"):
            if key in st.params:
                response[key] = st.params[key]
        return response

    def describe_statement(self, *, Id: str) -> dict:
        self._refuse("DescribeStatement")
        return self._describe(Id)

    def _describe(self, Id: str) -> dict:
        st = self._get(Id, "DescribeStatement")
        with st.lock:
            out = {
                "Id": st.id,
                "Status": st.status,
                "CreatedAt": st.created_at,
                "UpdatedAt": st.updated_at,
                "Duration": st.duration_ns,
                "HasResultSet": st.columns is not None,
                "QueryString": st.params["Sql"] if "Sql" in st.params else ";\n".join(st.params["Sqls"]),
                "ResultRows": st.result_rows,
                "ResultSize": sum(len(str(v)) for row in st.rows for v in row) if st.status == "FINISHED" else -1,
                "RedshiftQueryId": 0,
            }
            if "Sqls" in st.params:  # a batch's statements share its status (one transaction)
                subs = st.subs or [_Result(None, [], -1)] * len(st.params["Sqls"])
                out["SubStatements"] = [
                    {
                        "Id": f"{st.id}:{n}",
                        "Status": st.status,
                        "ResultRows": sub.count,
                        "HasResultSet": sub.columns is not None,
                        "QueryString": sql,
                    }
                    for n, (sql, sub) in enumerate(zip(st.params["Sqls"], subs), 1)
                ]
            if st.pid is not None:
                out["RedshiftPid"] = st.pid
            if st.error is not None:
                out["Error"] = st.error
            for key in ("ClusterIdentifier", "WorkgroupName", "Database", "DbUser", "SecretArn"):
                if key in st.params:
                    out[key] = st.params[key]
        return out

    def cancel_statement(self, *, Id: str) -> dict:
        self._refuse("CancelStatement")
        st = self._get(Id, "CancelStatement")
        with st.lock:
            if st.status in TERMINAL:
                raise LocalDataApiError(
                    "ValidationException", f"Could not cancel a query that is already in {st.status} state", "CancelStatement"
                )
            st.cancel_requested = True
        # A cancel request that reaches the server between two statements is a no-op, so keep
        # asking until the statement's thread has ended.
        threading.Thread(target=self._keep_cancelling, args=(st,), name=f"cancel-{st.id[:8]}", daemon=True).start()
        return {"Status": True}

    def get_statement_result(self, *, Id: str, NextToken: str | None = None) -> dict:
        op = "GetStatementResult"
        self._refuse(op)
        # A batch's statement is the batch's Id with a suffix: "d9b6...:2 has a suffix of :2
        # that indicates the second SQL statement of a batch query" (GetStatementResult, Id).
        statement_id, _, number = Id.partition(":")
        st = self._get(statement_id, op)
        with st.lock:
            if st.status != "FINISHED":
                raise LocalDataApiError("ValidationException", f"Query is in {st.status} state, not FINISHED", op)
            if (st.subs is None) != (not number) or (number and not 1 <= int(number) <= len(st.subs or [])):
                raise LocalDataApiError("ResourceNotFoundException", f"Query does not exist: {Id}", op)
            result = st.subs[int(number) - 1] if st.subs is not None else _Result(st.columns, st.rows, st.result_rows)
            if result.columns is None:
                raise LocalDataApiError(
                    "ValidationException", "Query does not have result. Please check query status with DescribeStatement.", op
                )
            start = int(NextToken or 0)
            page = result.rows[start : start + self.page_size]
            out = {
                "Records": [[_field(v) for v in row] for row in page],
                "ColumnMetadata": result.columns,
                "TotalNumRows": len(result.rows),
            }
            if start + self.page_size < len(result.rows):
                out["NextToken"] = str(start + self.page_size)
        return out

    # -- execution ---------------------------------------------------------------------
    def _get(self, statement_id: str, op: str) -> _Statement:
        with self._lock:
            st = self._statements.get(statement_id)
        if st is None:
            raise LocalDataApiError("ResourceNotFoundException", f"Query does not exist: {statement_id}", op)
        return st

    def _take_injection(self, sql: str) -> _Injection | None:
        with self._lock:
            for inj in self._injections:
                if inj.remaining > 0 and inj.match in sql:
                    inj.remaining -= 1
                    return inj
        return None

    def _run(self, st: _Statement) -> None:
        try:
            with st.lock:
                if st.cancel_requested:
                    st.move("ABORTED")
                    return
                st.move("PICKED")
            conn = self._connect(self.dsn)
            try:
                with st.lock:
                    if st.cancel_requested:
                        st.move("ABORTED")
                        return
                    st.conn, st.pid, st.started = conn, conn.info.backend_pid, time.perf_counter()
                    st.move("STARTED")
                self._execute(st, conn)
            finally:
                conn.close()
        except psycopg.Error as exc:  # the connection itself failed
            with st.lock:
                st.move("FAILED", _error_text(exc))
        finally:
            st.done.set()

    def _execute(self, st: _Statement, conn: Any) -> None:
        sqls = st.params["Sqls"] if "Sqls" in st.params else [st.params["Sql"]]
        injected = self._take_injection(";\n".join(sqls))
        if injected is not None and injected.error is not None:
            with st.lock:
                st.move("FAILED", injected.error)
            return
        try:
            # A batch is one transaction: "The SQL statements are run as a single
            # transaction" (BatchExecuteStatement).
            with conn.transaction() if "Sqls" in st.params else contextlib.nullcontext(), conn.cursor() as cur:
                if injected is not None:
                    cur.execute("SELECT pg_sleep(%s)", (injected.delay,))
                results = [_run_sql(cur, sql) for sql in sqls]
        except psycopg.Error as exc:
            _end_with_error(st, exc)
            return
        with st.lock:
            if "Sqls" in st.params:
                st.subs = results
            else:
                st.columns, st.rows, st.result_rows = results[0].columns, results[0].rows, max(results[0].count, 0)
            st.move("FINISHED")

    def _keep_cancelling(self, st: _Statement) -> None:
        while not st.done.is_set():
            with st.lock:
                conn = st.conn if st.status == "STARTED" else None
            if conn is not None:
                try:
                    conn.cancel_safe()
                except psycopg.Error:
                    pass  # the connection is closing: the statement is ending anyway
            st.done.wait(0.05)

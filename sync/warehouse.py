"""Connections to the warehouse: PostgreSQL (psycopg) or Redshift (redshift_connector).

A DSN picks the engine: `postgresql://...` (unix-socket URLs included) or
`redshift+redshift_connector://user:password@host:5439/db`. No DSN means the embedded
PostgreSQL. Both connections run in autocommit, so a CALL is its own transaction.
Connecting gives up after `connect_timeout` seconds (a DSN parameter of both, else
$REDSHIFT_SYNC_CONNECT_TIMEOUT, else 20): a server that accepts and never answers must
not hang a command.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, parse_qsl, unquote, urlencode, urlsplit

from sync.sql.dialect import PostgresDialect, dialect_for

log = logging.getLogger("redshift_sync.sql")  # each statement and its time (`--verbose`)


@contextmanager
def _logged(sql: str) -> Iterator[None]:
    if not log.isEnabledFor(logging.DEBUG):
        yield
        return
    started = time.perf_counter()
    try:
        yield
    finally:
        first = " ".join(sql.split())
        log.debug("%.3f s  %s", time.perf_counter() - started, first if len(first) <= 160 else first[:157] + "...")


DSN_ENV_VAR = "REDSHIFT_SYNC_DSN"
CONNECT_TIMEOUT_ENV = "REDSHIFT_SYNC_CONNECT_TIMEOUT"
DEFAULT_CONNECT_TIMEOUT = 20  # seconds; libpq and redshift_connector wait forever by default
SLOW_CONNECT_SECONDS = 1.0


class WarehouseError(RuntimeError):
    """A statement failed; the message carries the database's own words, `sqlstate` its
    SQLSTATE code when the driver gives one."""

    def __init__(self, message: str, sqlstate: str | None = None):
        super().__init__(message)
        self.sqlstate = sqlstate


@dataclass
class Warehouse:
    """One connection, and the dialect of the engine behind it. The only code that holds
    the driver's connection: everything else runs SQL through the methods here."""

    dialect: PostgresDialect  # the SQL the engine speaks (sync.sql.dialect)
    dsn: str
    _conn: Any  # psycopg's connection, or redshift_connector's
    driver: str = "psycopg"  # "psycopg" | "redshift_connector"
    where: str = ""  # for people: "the embedded PostgreSQL in <folder>", "Redshift at host:port/db"

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> int:
        """Runs one statement; returns the rows it changed (INSERT/UPDATE/DELETE), else -1."""
        with self._cursor() as cur, _logged(sql):
            cur.execute(sql, params) if params is not None else cur.execute(sql)
            return cur.rowcount

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple]:
        with self._cursor() as cur, _logged(sql):
            cur.execute(sql, params) if params is not None else cur.execute(sql)
            return list(cur.fetchall())

    def run(self, sql: str) -> tuple[list[str] | None, list[tuple], int]:
        """Any one statement: (column names, rows) when it returns rows, (None, [], rows
        changed) when it does not."""
        with self._cursor() as cur, _logged(sql):
            cur.execute(sql)
            if cur.description is None:
                return None, [], cur.rowcount
            return [c[0] for c in cur.description], list(cur.fetchall()), cur.rowcount

    def scalar(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        rows = self.query(sql, params)
        return rows[0][0] if rows else None

    def execute_batches(self, batches: Sequence[tuple[str, Sequence[Sequence[Any]]]]) -> None:
        """Each (statement, parameter rows) of `batches`, run once per row, all of them
        sent in one round trip (psycopg's pipeline mode)."""
        with self._cursor() as cur, self._conn.pipeline():
            for sql, rows in batches:
                cur.executemany(sql, rows)

    @contextmanager
    def copy_from(self, sql: str, queued: bool = False) -> Iterator[Any]:
        """`COPY ... FROM STDIN` (PostgreSQL): yields psycopg's Copy, to `write(bytes)` or
        `write_row(values)`; the COPY ends with the block. The server's errors become a
        WarehouseError; the block's own errors pass unchanged. `queued`: the data is sent
        by a worker thread (psycopg's QueuedLibpqWriter), so a producer busy building it
        does not wait for the server to take each block."""
        from psycopg.copy import QueuedLibpqWriter

        with self._driver_errors(), self._conn.cursor() as cur:
            with cur.copy(sql, writer=QueuedLibpqWriter(cur) if queued else None) as copy:
                yield copy

    def copy_out(self, sql: str) -> bytes:
        """All the data of a `COPY ... TO STDOUT` (PostgreSQL)."""
        data = bytearray()
        with self._driver_errors(), self._conn.cursor() as cur, cur.copy(sql) as copy:
            for chunk in copy:
                data += chunk
        return bytes(data)

    @contextmanager
    def notices(self, handler: Callable[[Any], None]) -> Iterator[None]:
        """Calls `handler` with each notice (RAISE NOTICE) the server sends during the block:
        psycopg's Diagnostic, with `message_primary`."""
        self._conn.add_notice_handler(handler)
        try:
            yield
        finally:
            self._conn.remove_notice_handler(handler)

    @contextmanager
    def _cursor(self) -> Iterator[Any]:
        try:
            cur = self._conn.cursor()  # fails on a connection the server closed
        except Exception as exc:
            raise WarehouseError(_describe(exc), _sqlstate(exc)) from exc
        try:
            yield cur
        except Exception as exc:
            if isinstance(exc, WarehouseError):
                raise
            raise WarehouseError(_describe(exc), _sqlstate(exc)) from exc
        finally:
            cur.close()

    @contextmanager
    def _driver_errors(self) -> Iterator[None]:
        import psycopg

        try:
            yield
        except psycopg.Error as exc:
            raise WarehouseError(_describe(exc), _sqlstate(exc)) from exc

    @contextmanager
    def transaction(self) -> Iterator[Warehouse]:
        """An explicit transaction on this connection: committed when the block ends,
        rolled back when it raises (the block's error is the one that propagates). A
        commit the server refuses (a serialization failure found at commit, a connection
        lost) is a WarehouseError too."""
        if self.driver == "psycopg":
            with self._driver_errors(), self._conn.transaction():
                yield self
            return
        self.execute("BEGIN")
        try:
            yield self
        except BaseException:
            try:
                self.execute("ROLLBACK")
            except Exception:  # a broken connection: the original error says more
                pass
            raise
        self.execute("COMMIT")

    @contextmanager
    def rolled_back(self) -> Iterator[Warehouse]:
        """An explicit transaction on this connection that is always rolled back: what the
        block writes (temporary tables, a temporary procedure) is gone when it ends."""
        if self.driver == "psycopg":
            import psycopg

            with self._driver_errors(), self._conn.transaction() as tx:
                yield self
                raise psycopg.Rollback(tx)
            return
        self.execute("BEGIN")
        try:
            yield self
        finally:
            try:
                self.execute("ROLLBACK")
            except Exception:  # a broken connection: the block's error says more
                pass

    def relation_exists(self, schema: str, name: str) -> bool:
        return bool(
            self.scalar(
                "SELECT COUNT(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relname = %s",
                (schema, name),
            )
        )

    def close(self) -> None:
        try:
            self._conn.close()
        except Exception:  # closing a broken connection must not hide the original error
            pass


def _sqlstate(exc: BaseException) -> str | None:
    """psycopg's `sqlstate`; redshift_connector puts the server's fields in args[0] ('C')."""
    code = getattr(exc, "sqlstate", None)
    if code:
        return str(code)
    fields = exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {}
    return fields.get("C")


def _describe(exc: BaseException) -> str:
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag else None
    if primary:
        detail = getattr(diag, "message_detail", None)
        context = getattr(diag, "context", None)
        parts = [primary]
        if detail:
            parts.append(f"DETAIL: {detail}")
        if context:
            parts.append(f"CONTEXT: {context.splitlines()[0]}")
        return "\n".join(parts)
    return str(exc).strip() or type(exc).__name__


def dialect_of(dsn: str) -> str:
    scheme = dsn.split("://", 1)[0] if "://" in dsn else ""
    if scheme.startswith("redshift"):
        return "redshift"
    if scheme in ("postgresql", "postgres", "postgresql+psycopg", "postgresql+psycopg2"):
        return "postgres"
    raise WarehouseError(f"unsupported DSN scheme {scheme!r}: use postgresql://... or redshift+redshift_connector://...")


def resolve_dsn(dsn: str | None) -> str | None:
    return dsn or os.environ.get(DSN_ENV_VAR) or None


def connect_timeout(given: str | None) -> int | None:
    """Seconds to wait for a connection: the DSN's `connect_timeout`, else
    $REDSHIFT_SYNC_CONNECT_TIMEOUT, else the default; 0 leaves it to the driver (psycopg:
    130 s; redshift_connector: no limit)."""
    text = given or os.environ.get(CONNECT_TIMEOUT_ENV)
    if not text:
        return DEFAULT_CONNECT_TIMEOUT
    try:
        seconds = int(text)
    except ValueError:
        raise WarehouseError(f"connect_timeout {text!r} is not a whole number of seconds") from None
    return seconds if seconds > 0 else None


@contextmanager
def _opening(engine: str, where: str, timeout: int | None, on_slow: Callable[[str], None] | None) -> Iterator[None]:
    """Around a driver's connect: `on_slow` hears "connecting to host:port ..." once a second
    has passed; a failure becomes a WarehouseError naming the engine and the endpoint."""
    timer = threading.Timer(SLOW_CONNECT_SECONDS, on_slow, [f"connecting to {where} ..."]) if on_slow else None
    if timer:
        timer.daemon = True
        timer.start()
    started = time.monotonic()
    try:
        yield
    except Exception as exc:
        waited = time.monotonic() - started
        reason = _describe(exc)
        if timeout is not None and waited >= timeout:
            reason = f"no answer within {timeout} s (set connect_timeout=SECONDS in the DSN, or ${CONNECT_TIMEOUT_ENV})"
        raise WarehouseError(f"cannot connect to {engine} at {where}: {reason}") from exc
    finally:
        if timer:
            timer.cancel()


def _connect_postgres(dsn: str, on_slow: Callable[[str], None] | None) -> Any:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    url = dsn.replace("postgresql+psycopg2://", "postgresql://").replace("postgresql+psycopg://", "postgresql://")
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise WarehouseError(f"cannot read the PostgreSQL DSN: {_describe(exc)}") from exc
    timeout = connect_timeout(params.get("connect_timeout"))
    where = f"{params.get('host') or 'localhost'}:{params.get('port') or 5432}"
    with _opening("PostgreSQL", where, timeout, on_slow):
        conn = psycopg.connect(url, autocommit=True, connect_timeout=timeout or 0)
    return conn, f"PostgreSQL at {where}/{params.get('dbname') or params.get('user') or ''}"


def _redshift_parts(dsn: str) -> tuple[SplitResult, str | None]:
    """The DSN's parts, and its connect_timeout (a setting of this tool, not of the driver)."""
    # urlsplit() does not take '_' in a scheme (redshift+redshift_connector): split the rest.
    parts = urlsplit("redshift://" + dsn.split("://", 1)[1])
    query = parse_qsl(parts.query, keep_blank_values=True)
    timeout = next((v for k, v in query if k == "connect_timeout"), None)
    return parts._replace(query=urlencode([(k, v) for k, v in query if k != "connect_timeout"])), timeout


def _connect_redshift(dsn: str, on_slow: Callable[[str], None] | None) -> Any:
    import redshift_connector

    parts, given = _redshift_parts(dsn)
    timeout = connect_timeout(given)
    where = f"{parts.hostname}:{parts.port or 5439}"
    with _opening("Redshift", where, timeout, on_slow):
        conn = redshift_connector.connect(
            host=parts.hostname,
            port=parts.port or 5439,
            database=(parts.path or "/dev").lstrip("/") or "dev",
            user=unquote(parts.username or ""),
            password=unquote(parts.password or ""),
            timeout=timeout,
        )
    # redshift_connector keeps `timeout` as the socket's timeout for every later read: a
    # CALL or a COPY may run for minutes, so only the connect is bounded.
    conn._usock.settimeout(None)
    conn.autocommit = True
    return conn, f"Redshift at {where}{parts.path or '/dev'}"


def connect(dsn: str | None = None, on_slow: Callable[[str], None] | None = None, pipeline_file: Path | None = None) -> Warehouse:
    """Connect to the DSN given, else REDSHIFT_SYNC_DSN, else the embedded PostgreSQL of
    `pipeline_file` (sync.local.embedded.data_dir). `on_slow` hears "connecting to
    host:port ..." when connecting takes over a second."""
    resolved = resolve_dsn(dsn)
    embedded_dir = None
    if resolved is None:
        from sync.local import embedded

        embedded_dir = embedded.data_dir(pipeline_file)
        resolved = embedded.start(embedded_dir)
    name = dialect_of(resolved)
    if name == "redshift":
        conn, where = _connect_redshift(resolved, on_slow)
        return Warehouse(dialect_for(name), resolved, conn, "redshift_connector", where)
    conn, where = _connect_postgres(resolved, on_slow)
    if embedded_dir is not None:
        from sync.resources import relative_to_cwd

        where = f"the embedded PostgreSQL in {relative_to_cwd(embedded_dir)}"
    return Warehouse(dialect_for(name), resolved, conn, where=where)


def sqlalchemy_url(dsn: str) -> str:
    """The same DSN spelled for SQLAlchemy (alembic)."""
    if dialect_of(dsn) == "postgres":
        return "postgresql+psycopg://" + dsn.split("://", 1)[1]
    return dsn.split("://", 1)[0] + "://" + _redshift_parts(dsn)[0].geturl().split("://", 1)[1]

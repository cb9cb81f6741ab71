"""Connections to the warehouse: PostgreSQL (psycopg) or Redshift (redshift_connector).

A DSN picks the engine: `postgresql://...` (unix-socket URLs included) or
`redshift+redshift_connector://user:password@host:5439/db`. No DSN means the embedded
PostgreSQL. Both connections run in autocommit, so a CALL is its own transaction.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from sync.sql.dialect import PostgresDialect, dialect_for

DSN_ENV_VAR = "REDSHIFT_SYNC_DSN"


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

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> int:
        """Runs one statement; returns the rows it changed (INSERT/UPDATE/DELETE), else -1."""
        with self._cursor() as cur:
            cur.execute(sql, params) if params is not None else cur.execute(sql)
            return cur.rowcount

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple]:
        with self._cursor() as cur:
            cur.execute(sql, params) if params is not None else cur.execute(sql)
            return list(cur.fetchall())

    def run(self, sql: str) -> tuple[list[str] | None, list[tuple], int]:
        """Any one statement: (column names, rows) when it returns rows, (None, [], rows
        changed) when it does not."""
        with self._cursor() as cur:
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
    def copy_from(self, sql: str) -> Iterator[Any]:
        """`COPY ... FROM STDIN` (PostgreSQL): yields psycopg's Copy, to `write(bytes)` or
        `write_row(values)`; the COPY ends with the block. The server's errors become a
        WarehouseError; the block's own errors pass unchanged."""
        with self._driver_errors(), self._conn.cursor() as cur, cur.copy(sql) as copy:
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
        cur = self._conn.cursor()
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


def _connect_postgres(dsn: str) -> Any:
    import psycopg

    url = dsn.replace("postgresql+psycopg2://", "postgresql://").replace("postgresql+psycopg://", "postgresql://")
    try:
        return psycopg.connect(url, autocommit=True)
    except psycopg.Error as exc:
        raise WarehouseError(f"cannot connect to PostgreSQL: {_describe(exc)}") from exc


def _connect_redshift(dsn: str) -> Any:
    import redshift_connector

    # urlsplit() does not take '_' in a scheme (redshift+redshift_connector): split the rest.
    parts = urlsplit("redshift://" + dsn.split("://", 1)[1])
    try:
        conn = redshift_connector.connect(
            host=parts.hostname,
            port=parts.port or 5439,
            database=(parts.path or "/dev").lstrip("/") or "dev",
            user=unquote(parts.username or ""),
            password=unquote(parts.password or ""),
        )
    except Exception as exc:
        raise WarehouseError(f"cannot connect to Redshift: {exc}") from exc
    conn.autocommit = True
    return conn


def connect(dsn: str | None = None) -> Warehouse:
    """Connect to the DSN given, else REDSHIFT_SYNC_DSN, else the embedded PostgreSQL."""
    resolved = resolve_dsn(dsn)
    if resolved is None:
        from sync.local import embedded

        resolved = embedded.start()
    name = dialect_of(resolved)
    if name == "redshift":
        return Warehouse(dialect_for(name), resolved, _connect_redshift(resolved), "redshift_connector")
    return Warehouse(dialect_for(name), resolved, _connect_postgres(resolved))


def sqlalchemy_url(dsn: str) -> str:
    """The same DSN spelled for SQLAlchemy (alembic)."""
    if dialect_of(dsn) == "postgres":
        return "postgresql+psycopg://" + dsn.split("://", 1)[1]
    return dsn

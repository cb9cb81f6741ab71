"""What tests share besides fixtures: the repository's paths, pipelines built from a
[[tables]] block, and small steps of scenario tests (ingest, sync, feed)."""

from __future__ import annotations

import json
import shutil
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sync.aws import lambda_handler
from sync.config import Pipeline, parse_pipeline
from sync.local.data_api import LocalDataApi
from sync.local.stream import IngestResult, ingest_records, parse_line
from sync.operations.runner import RunSummary, sync
from sync.sql.dialect import dialect_for
from sync.sql.procedure import TableSql
from sync.warehouse import Warehouse, connect

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


def pipeline_toml(tables_toml: str, schema: str = "cdc") -> str:
    """A pipeline file's text from just its [[tables]] TOML (an MSK source filled in)."""
    return (
        f'[pipeline]\nschema = "{schema}"\n'
        '[source]\nkind = "msk"\ncluster_arn = "arn:aws:kafka:us-east-1:123456789012:cluster/t/abc"\n'
        'iam_role = "arn:aws:iam::123456789012:role/r"\n' + tables_toml
    )


def make_pipeline(tables_toml: str, schema: str = "cdc") -> Pipeline:
    """A pipeline from just its [[tables]] TOML (an MSK source filled in)."""
    return parse_pipeline(tomllib.loads(pipeline_toml(tables_toml, schema)))


def dsn_for_database(server_dsn: str, name: str) -> str:
    """The DSN of database `name` on the server `server_dsn` connects to."""
    prefix, _, query = server_dsn.partition("?")
    return prefix.rsplit("/", 1)[0] + "/" + name + (("?" + query) if query else "")


@contextmanager
def fresh_database(server_dsn: str, name: str) -> Iterator[str]:
    """The DSN of a new, empty database `name` on the server (one a previous run left is
    dropped first), dropped again after use."""

    def run(*statements: str) -> None:
        admin = connect(server_dsn)
        try:
            for sql in statements:
                admin.execute(sql)
        finally:
            admin.close()

    run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"')
    try:
        yield dsn_for_database(server_dsn, name)
    finally:
        run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def at_isolation_level(dsn: str, level: str) -> None:
    """Make `level` the default of every transaction on the DSN's database, as Redshift
    sets one isolation level per database (`ALTER DATABASE ... ISOLATION LEVEL`)."""
    from urllib.parse import urlsplit

    if level not in ("serializable", "repeatable read", "read committed"):
        raise ValueError(level)
    admin = connect(dsn)
    try:
        admin.execute(f"ALTER DATABASE \"{urlsplit(dsn).path.lstrip('/')}\" SET default_transaction_isolation = '{level}'")
    finally:
        admin.close()


def cli_project(tmp_path: Path, example: Path, dsn: str, monkeypatch: Any) -> Path:
    """A copy of an example pipeline in `tmp_path`, which the CLI's commands use (its
    revisions in `versions/`, the warehouse at `dsn`)."""
    shutil.copy(example, tmp_path / "pipeline.toml")
    monkeypatch.setenv("REDSHIFT_SYNC_CONFIG", str(tmp_path / "pipeline.toml"))
    monkeypatch.setenv("REDSHIFT_SYNC_DSN", dsn)
    monkeypatch.setenv("REDSHIFT_SYNC_VERSIONS", str(tmp_path / "versions"))
    return tmp_path


def ingest(wh: Warehouse, pipeline: Pipeline, table: str, records: list[dict[str, Any]]) -> IngestResult:
    """Ingest record dicts as if they were lines of an events file."""
    lines = [parse_line(json.dumps(r).encode(), i + 1) for i, r in enumerate(records)]
    return ingest_records(wh, pipeline, table, lines)


def sync_one(wh: Warehouse, pipeline: Pipeline, table: str) -> RunSummary:
    (run,) = sync(wh, pipeline, [table])
    assert run.status == "ok", run.error
    return run


def rows(wh: Warehouse, sql: str) -> list[tuple]:
    return wh.query(sql)


def feed(wh: Warehouse, pipeline: Pipeline, table: str, records: list[dict[str, Any]]) -> RunSummary:
    """Ingest the records as one refresh of the stream, then sync the table once."""
    ingest(wh, pipeline, table, records)
    return sync_one(wh, pipeline, table)


# The two tables the procedure modules' SQL is pinned for: one column (the key alone),
# and a composite key with a TOAST-able value, soft deletes and truncates.
ONE_COLUMN = """
[[tables]]
name = "tag"
topic = "shop.tag"
primary_key = ["id"]
order_by = "postgres-lsn"
columns = [{ name = "id", type = "integer" }]
"""
COMPOSITE_KEY = """
[[tables]]
name = "line"
topic = "shop.line"
primary_key = ["order_id", "line_no"]
order_by = "mysql-binlog"
delete_mode = "soft"
on_truncate = "delete"
columns = [
  { name = "order_id", type = "integer" },
  { name = "line_no", type = "smallint" },
  { name = "note", type = "varchar(100)" },
]
"""


def table_sql(tables_toml: str, dialect: str = "redshift", **changes: Any) -> TableSql:
    """The procedure context of the pipeline's one table (its settings changed by `changes`)."""
    pipeline = make_pipeline(tables_toml)
    (table,) = pipeline.tables
    return TableSql(dialect_for(dialect, pipeline.schema), pipeline, table.model_copy(update=changes))


def assert_lines(sql: str, *expected: str) -> None:
    """Each expected line is a line of `sql` (indentation aside): one behaviour per line."""
    present = {line.strip() for line in sql.splitlines()}
    missing = [line for line in expected if line not in present]
    assert not missing, "lines not in the SQL:\n" + "\n".join(missing) + "\n--- SQL:\n" + sql


def fail_first_writes(wh: Warehouse, relation: str, times: int) -> None:
    """The first `times` statements that write `relation` (schema-qualified) fail with a
    serialization failure the engine raises (SQLSTATE 40001, "could not serialize access"),
    as when a concurrent transaction closed a cycle; the transaction rolls back whole. The
    count is a sequence, which a rollback does not undo."""
    wh.execute("CREATE SEQUENCE public.injected_conflicts")
    wh.execute(
        "CREATE FUNCTION public.inject_conflict() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"IF nextval('public.injected_conflicts') <= {int(times)} THEN "
        "RAISE EXCEPTION 'could not serialize access due to read/write dependencies among transactions' "
        "USING ERRCODE = 'serialization_failure'; END IF; RETURN NULL; END $$"
    )
    wh.execute(
        f"CREATE TRIGGER inject_conflict BEFORE INSERT OR UPDATE OR DELETE ON {relation} "
        "FOR EACH STATEMENT EXECUTE FUNCTION public.inject_conflict()"
    )


def local_lambda(monkeypatch: Any, config: Path, dsn: str) -> None:
    """The Lambda handler set to run `config` through the local Data API on `dsn`: short
    polls and timeouts, one attempt per table."""
    settings = {
        "REDSHIFT_SYNC_CONFIG": str(config),
        "REDSHIFT_SYNC_WORKGROUP": "local",
        "REDSHIFT_SYNC_POLL_SECONDS": "0.05",
        "REDSHIFT_SYNC_DEADLINE_MARGIN_SECONDS": "2",
        "REDSHIFT_SYNC_CONNECT_TIMEOUT_SECONDS": "0.2",
        "REDSHIFT_SYNC_READ_TIMEOUT_SECONDS": "0.5",
        "REDSHIFT_SYNC_SDK_ATTEMPTS": "1",
        "REDSHIFT_SYNC_MIN_CALL_SECONDS": "0",
        "REDSHIFT_SYNC_MAX_ATTEMPTS": "1",
    }
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("REDSHIFT_SYNC_DSN", raising=False)
    monkeypatch.setattr(lambda_handler, "client_factory", lambda timeouts: LocalDataApi(dsn))


def metric_lines(out: str) -> dict[str, dict]:
    """The handler's Embedded Metric Format lines in `out`, by table."""
    return {line["Table"]: line for line in map(json.loads, out.splitlines()) if "_aws" in line}


def data_api_calls(api: Any) -> list[dict]:
    """The statements of a (local) Data API that CALL a procedure, as DescribeStatement
    shows them, each with its CALL as QueryString (a batch lists its statements in
    SubStatements)."""
    out = []
    for st in api.statements():
        text = next((s["QueryString"] for s in st.get("SubStatements", [st]) if s["QueryString"].startswith("CALL")), None)
        if text is not None:
            out.append({**st, "QueryString": text})
    return out

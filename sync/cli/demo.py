"""`redshift-sync demo`: the whole flow on the embedded warehouse, with a readable summary."""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sync.cli.report import print_status
from sync.config import load_pipeline
from sync.extras import SPARK_INSTALL, installed
from sync.local.stream import ingest_file
from sync.operations.runner import deploy, status, sync
from sync.resources import bundled
from sync.sql.dialect import quote_ident
from sync.warehouse import Warehouse, connect

EXAMPLE_DIR = bundled("examples") / "salesdb"
DEMO_DATABASE = "redshift_sync_demo"

BATCHES = [
    ("customer", "customer-1.jsonl", "initial snapshot of 5 customers"),
    ("customer", "customer-2.jsonl", "inserts, updates, a delete and re-insert, a key change, 2 bad records"),
    ("orders", "orders-1.jsonl", "8 orders, one shipped, one deleted (soft)"),
    ("customer", "customer-3.jsonl", "a connector restart re-delivers 2 applied events, plus 2 new changes"),
]


def _fresh_database(console: Console, dsn: str | None) -> Warehouse:
    """The demo runs in its own database of the embedded server (recreated each time), or
    in the database a --dsn names (only if the pipeline schema does not exist there yet)."""
    if dsn is not None:
        return connect(dsn)
    admin = connect(None)
    try:
        admin.execute(f"DROP DATABASE IF EXISTS {quote_ident(DEMO_DATABASE)} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {quote_ident(DEMO_DATABASE)}")
        base = admin.dsn
    finally:
        admin.close()
    prefix, _, query = base.partition("?")
    demo_dsn = prefix.rsplit("/", 1)[0] + "/" + DEMO_DATABASE + (("?" + query) if query else "")
    console.print(f"embedded PostgreSQL, database {DEMO_DATABASE}", style="dim")
    return connect(demo_dsn)


def _rows(wh: Warehouse, sql: str) -> list[tuple]:
    return wh.query(sql)


def run_demo(console: Console, dsn: str | None = None, config: Path | None = None, skip_spark: bool = False) -> None:
    started = time.perf_counter()
    config_path = config or EXAMPLE_DIR / "pipeline.toml"
    pipeline, path = load_pipeline(config_path)
    wh = _fresh_database(console, dsn)
    try:
        if wh.relation_exists(pipeline.schema, "sync_run_log") and dsn is not None:
            raise ValueError(
                f"schema {pipeline.schema!r} already holds a pipeline in that database; the demo only runs in a "
                "database without it (or drop --dsn to use the embedded warehouse)"
            )
        result = deploy(wh, pipeline, str(path))
        console.rule(Text("1. deploy", style="bold"))
        console.print(f"{len(result.created)} objects created for tables: {', '.join(t.name for t in pipeline.tables)}")

        console.rule(Text("2. ingest and sync, batch by batch", style="bold"))
        events_dir = path.parent / "events"
        for table, file, what in BATCHES:
            ing = ingest_file(wh, pipeline, table, events_dir / file)
            run = sync(wh, pipeline, [table])[0]
            console.print(
                f"{table:<9} {file:<17} {ing.records:>3} records ({what})\n"
                f"          -> read {run.events_read}, upserted {run.upserted}, deleted {run.deleted}, "
                f"quarantined {run.quarantined}, stale {run.stale}, superseded {run.superseded}",
                highlight=False,
            )
        again = sync(wh, pipeline)
        console.print(f"sync again with nothing new: read {sum(r.events_read for r in again)} events, nothing changed")

        console.rule(Text("3. target tables", style="bold"))
        schema = quote_ident(pipeline.schema)
        grid = Table("customer_id", "name", "mktsegment", "_source_pos (binlog file.pos.row)")
        for r in _rows(wh, f'SELECT customer_id, name, mktsegment, _source_pos FROM {schema}."customer" ORDER BY 1'):
            grid.add_row(*(str(v) for v in r))
        console.print(grid)
        grid = Table("order_id", "customer_id", "status", "total", "placed_at", "_deleted")
        for r in _rows(wh, f'SELECT order_id, customer_id, status, total, placed_at, _deleted FROM {schema}."orders" ORDER BY 1'):
            grid.add_row(*(str(v) for v in r))
        console.print(grid)

        console.rule(Text("4. status", style="bold"))
        print_status(status(wh, pipeline), console)

        if not skip_spark:
            _backfill_and_reconcile(console, wh, pipeline)
    finally:
        wh.close()
    console.rule(Text(f"demo finished in {time.perf_counter() - started:.1f} s", style="bold green"))


def _backfill_and_reconcile(console: Console, wh: Warehouse, pipeline) -> None:
    if not installed("pyspark"):
        console.print(f"backfill and reconcile skipped: PySpark is not installed ({SPARK_INSTALL})", style="yellow")
        return
    from sync.cli.demo_backfill import run as run_backfill_demo

    run_backfill_demo(console, wh, pipeline, EXAMPLE_DIR)

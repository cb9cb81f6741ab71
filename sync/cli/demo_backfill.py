"""The demo's last steps: backfill an older snapshot of `customer` behind the stream,
then reconcile the table against it."""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sync.cli.report import print_reconcile
from sync.config import Pipeline
from sync.sql.dialect import quote_ident
from sync.warehouse import Warehouse

SNAPSHOT = Path("snapshots") / "customer-20231114T221321Z.jsonl"
SNAPSHOT_TIME = "2023-11-14T22:13:21.500Z"  # see examples/salesdb/snapshots/make_snapshots.py


def run(console: Console, wh: Warehouse, pipeline: Pipeline, example_dir: Path) -> None:
    from backfill.session import local_session
    from sync.operations.backfill import run_backfill
    from sync.operations.reconcile import run_reconcile
    from sync.times import parse_utc

    snapshot = str(example_dir / SNAPSHOT)
    when = parse_utc(SNAPSHOT_TIME, "--snapshot-time")
    console.rule(Text("5. backfill an older snapshot behind the stream (PySpark)", style="bold"))
    started = time.perf_counter()
    spark = local_session("local[2]", shuffle_partitions=2)
    console.print(f"Spark {spark.version} started in {time.perf_counter() - started:.1f} s", style="dim")
    console.print(f"snapshot {SNAPSHOT} taken at {SNAPSHOT_TIME}: 8 customers, older than most stream events")
    result = run_backfill(
        wh,
        pipeline,
        "customer",
        snapshot,
        "json",
        when,
        spark=spark,
        progress=lambda m: console.print(f"  {m}", style="dim", highlight=False),
    )
    console.print(
        f"loaded {result.loaded} (C001 was older in the stream; C201, C202 the stream never carried), "
        f"kept {result.kept_newer} rows the target had as new or newer, kept {result.kept_deleted} keys the stream deleted later",
        highlight=False,
    )
    schema = quote_ident(pipeline.schema)
    grid = Table("customer_id", "name", "mktsegment", "_source_ts", "_source_pos")
    for r in wh.query(f'SELECT customer_id, name, mktsegment, _source_ts, _source_pos FROM {schema}."customer" ORDER BY 1'):
        grid.add_row(*(str(v) if v is not None else "-" for v in r))
    console.print(grid)

    again = run_backfill(wh, pipeline, "customer", snapshot, "json", when, spark=spark)
    console.print(f"the same backfill again: loaded {again.loaded}, nothing changed")

    console.rule(Text("6. reconcile the table against the snapshot", style="bold"))
    report = run_reconcile(
        wh, pipeline, "customer", snapshot, "json", when, buckets=4, checksum=["name", "mktsegment"], spark=spark
    )
    print_reconcile(report, console)

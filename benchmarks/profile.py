"""Where the generated procedure spends its time: `python -m benchmarks.profile
[--events N] [--target-rows M] [--plans]`.

pgserver ships no auto_explain, so the statements of `incremental_sync_customer()` are
run by hand, in order, with EXPLAIN ANALYZE inside one transaction that is rolled back
(the procedure's variables replaced by what they hold on a first run). Prints each
statement's time, and with --plans its plan.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass

from sync.config import Pipeline
from sync.sql.objects import pipeline_objects
from sync.sql.statements import body_sql_statements, procedure_body
from sync.warehouse import Warehouse

# What the procedure's variables hold on a first run, for statements run outside it.
FIRST_RUN_VALUES = {"v_since": "TIMESTAMP '1900-01-01 00:00:00'", "v_started": "clock_timestamp()::timestamp"}


@dataclass
class StatementTime:
    sql: str
    seconds: float
    plan: list[str]

    @property
    def label(self) -> str:
        return " ".join(self.sql.split())[:90]


def procedure_statements(pipeline: Pipeline, table_name: str) -> list[str]:
    """The data statements of the table's procedure body, in order (control flow, the
    lock, assignments and SELECT ... INTO left out)."""
    (sql,) = [o.sql for o in pipeline_objects(pipeline, "postgres", "profile") if o.kind == "procedure" and o.table == table_name]
    statements = []
    for text in body_sql_statements(procedure_body(sql)):
        if text.startswith(("LOCK ", "ANALYZE ")) or "sync_run_log" in text:
            continue
        for name, value in FIRST_RUN_VALUES.items():
            text = re.sub(rf"\b{name}\b", value, text)
        statements.append(text)
    return statements


def profile(wh: Warehouse, pipeline: Pipeline, table_name: str, timing: bool = False) -> list[StatementTime]:
    """Per-node timing (for plans worth reading) inflates row-heavy statements; without it
    only the statement totals are measured."""
    results = []
    wh.execute("BEGIN")
    try:
        for sql in procedure_statements(pipeline, table_name):
            plan = [row[0] for row in wh.query(f"EXPLAIN (ANALYZE, TIMING {'ON' if timing else 'OFF'}) " + sql)]
            ms = float(re.search(r"Execution Time: ([\d.]+) ms", plan[-1]).group(1))
            results.append(StatementTime(sql, ms / 1000, plan))
    finally:
        wh.execute("ROLLBACK")
    return results


def main(argv: Sequence[str] | None = None) -> list[StatementTime]:
    from benchmarks.__main__ import PIPELINE, embedded_server
    from benchmarks.phases import TABLE
    from benchmarks.workload import load, relations
    from sync.config import load_pipeline
    from sync.runner import deploy
    from sync.warehouse import connect

    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__.split("\n\n")[1])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--target-rows", type=int, default=1_000_000)
    parser.add_argument("--plans", action="store_true", help="print each statement's plan")
    parser.add_argument("--dsn", help="a scratch PostgreSQL database instead of a fresh embedded server")
    args = parser.parse_args(argv)
    pipeline, _ = load_pipeline(PIPELINE)
    with embedded_server(args.dsn) as (dsn, _engine):
        wh = connect(dsn)
        try:
            deploy(wh, pipeline, "examples/salesdb/pipeline.toml")
            load(wh, relations(pipeline, pipeline.table(TABLE)), args.target_rows, args.events)
            results = profile(wh, pipeline, TABLE, timing=args.plans)
        finally:
            wh.close()
    total = sum(r.seconds for r in results)
    print(f"{args.events:,} events into {args.target_rows:,} rows: {total:.3f} s in {len(results)} statements (EXPLAIN ANALYZE, run by hand)")
    for r in results:
        print(f"{r.seconds:8.3f} s {100 * r.seconds / total:5.1f} %  {r.label}")
        if args.plans:
            print("\n".join("           " + line for line in r.plan))
    return results


if __name__ == "__main__":
    main()

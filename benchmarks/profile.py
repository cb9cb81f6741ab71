"""Where the generated procedure spends its time: `python -m benchmarks.profile
[--events N] [--target-rows M] [--explain] [--plans]`.

By default a copy of `incremental_sync_customer()` is called once, with a timestamp
(RAISE NOTICE clock_timestamp()) after each statement of its body, inside a transaction
that is rolled back: the time of each statement as the procedure runs it (its plans,
after its ANALYZE of the stage, its IF guards). pgserver ships no auto_explain, so with
--explain the data statements are instead run by hand, in order, with EXPLAIN ANALYZE
(the procedure's variables replaced by what they hold on a first run, every guarded
statement run); --plans also prints each plan.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from benchmarks.database import deployed
from benchmarks.workload import TABLE, load, relations
from sync.config import Pipeline
from sync.sql.names import CALL_RESULT
from sync.sql.objects import pipeline_objects
from sync.sql.statements import body_sql_statements, procedure_body
from sync.warehouse import Warehouse

# What the procedure's variables hold on a first run, for statements run outside it.
FIRST_RUN_VALUES = {
    "v_since": "TIMESTAMP '1900-01-01 00:00:00'",
    "v_started": "clock_timestamp()::timestamp",
    "v_until_time": "TIMESTAMP '9999-12-31 00:00:00'",
    "v_until_partition": "NULL::bigint",
    "v_until_offset": "NULL::bigint",
    "v_replayed": "0",  # no quarantine replay in the profiled call
}
PROFILED_NAME = "profile_sync"  # the instrumented copy of the procedure
MARK = "redshift-sync-profile"
_CONTROL = re.compile(r"^\s*(IF\b.*\bTHEN|ELSIF\b.*\bTHEN|ELSE|END IF;)\s*$", re.I)


@dataclass
class StatementTime:
    sql: str
    seconds: float
    plan: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return " ".join(self.sql.split())[:90]


def procedure_sql(pipeline: Pipeline, table_name: str) -> str:
    (sql,) = [
        o.sql
        for o in pipeline_objects(pipeline, "postgres", "profile")
        if o.kind == "procedure" and o.table == table_name and o.arguments == "bigint"
    ]
    return sql


def procedure_statements(pipeline: Pipeline, table_name: str) -> list[str]:
    """The data statements of the table's procedure body, in order (control flow, the
    lock, assignments, SELECT ... INTO and the bookkeeping left out)."""
    statements = []
    for text in body_sql_statements(procedure_body(procedure_sql(pipeline, table_name))):
        # The lock, statistics, the session's result table (made by DDL) and the run log
        # are bookkeeping, not the merge.
        if text.startswith(("LOCK ", "ANALYZE ", "CREATE ", "DROP ")) or "sync_run_log" in text or CALL_RESULT in text:
            continue
        for name, value in FIRST_RUN_VALUES.items():
            text = re.sub(rf"\b{name}\b", value, text)
        statements.append(text)
    return statements


def instrumented(create_procedure: str, schema: str) -> tuple[str, list[str]]:
    """A copy of the procedure (named PROFILED_NAME) that raises a notice `MARK <n> <time>`
    after each statement of its body, and the text of statement n (0 = the start)."""
    body = procedure_body(create_procedure)
    lines, out, texts, current = body.splitlines(), [], ["(start)"], []
    in_body = False
    for line in lines:
        code = line.split("--")[0].rstrip()
        out.append(line)
        if not in_body:
            if code.strip() == "BEGIN":
                in_body = True
                out.append(f"RAISE NOTICE '{MARK} 0 %', clock_timestamp();")
            continue
        if not code.strip() or _CONTROL.match(code) or code.strip() == "END;":
            continue
        current.append(code.strip())
        if code.endswith(";"):
            texts.append(" ".join(current))
            current = []
            out.append(f"RAISE NOTICE '{MARK} {len(texts) - 1} %', clock_timestamp();")
    header, _, _ = create_procedure.partition("AS $$")
    name = re.search(r"PROCEDURE\s+(\S+)\(p_max_records bigint\)", header).group(1)
    copy = header.replace(name, f'"{schema}"."{PROFILED_NAME}"') + "AS $$\n" + "\n".join(out) + "\n$$ LANGUAGE plpgsql;"
    return copy, texts


def profile_call(wh: Warehouse, pipeline: Pipeline, table_name: str) -> list[StatementTime]:
    """Each statement's time in one real call of the instrumented copy (rolled back)."""
    copy, texts = instrumented(procedure_sql(pipeline, table_name), pipeline.schema)
    stamps: dict[int, datetime] = {}

    def on_notice(diag) -> None:  # psycopg Diagnostic
        parts = (diag.message_primary or "").split(" ", 2)
        if parts[0] == MARK:
            stamps[int(parts[1])] = datetime.fromisoformat(parts[2])

    with wh.notices(on_notice):
        wh.execute("BEGIN")
        try:
            wh.execute(copy)
            wh.execute(f'CALL "{pipeline.schema}"."{PROFILED_NAME}"(NULL)')
        finally:
            wh.execute("ROLLBACK")
    ran = sorted(stamps)
    return [StatementTime(texts[n], (stamps[n] - stamps[prev]).total_seconds()) for prev, n in zip(ran, ran[1:])]


def profile_explain(wh: Warehouse, pipeline: Pipeline, table_name: str, timing: bool = False) -> list[StatementTime]:
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
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__.split("\n\n")[1])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--target-rows", type=int, default=1_000_000)
    parser.add_argument("--explain", action="store_true", help="run the statements by hand with EXPLAIN ANALYZE")
    parser.add_argument("--plans", action="store_true", help="with --explain: print each statement's plan")
    parser.add_argument("--dsn", help="a scratch PostgreSQL database instead of a fresh embedded server")
    args = parser.parse_args(argv)
    explain = args.explain or args.plans
    with deployed(args.dsn) as (wh, pipeline, _engine):
        load(wh, relations(pipeline, pipeline.table(TABLE)), args.target_rows, args.events)
        if explain:
            results = profile_explain(wh, pipeline, TABLE, timing=args.plans)
        else:
            results = profile_call(wh, pipeline, TABLE)
    total = sum(r.seconds for r in results)
    how = "EXPLAIN ANALYZE, run by hand" if explain else "one call, timestamped after each statement"
    print(f"{args.events:,} events into {args.target_rows:,} rows: {total:.3f} s in {len(results)} statements ({how})")
    for r in results:
        print(f"{r.seconds:8.3f} s {100 * r.seconds / total:5.1f} %  {r.label}")
        if args.plans:
            print("\n".join("           " + line for line in r.plan))
    return results


if __name__ == "__main__":
    main()

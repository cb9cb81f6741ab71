"""Run the generated objects against a warehouse: deploy, sync, status."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from sync.config import Pipeline, TableConfig
from sync.operations.conflicts import (
    SERIALIZATION_FAILURE,
    RetryPolicy,
    conflict_policy,
    is_serialization_conflict,
    retry_conflicts,
)
from sync.operations.isolation import CallFailed, Isolation, is_data_error, isolate
from sync.operations.unknown_values import unknown_values
from sync.sql import schemas
from sync.sql.dialect import PostgresDialect, quote_ident, quote_literal
from sync.sql.names import CALL_RESULT, HEARTBEAT_STREAM, QUARANTINE, REFRESH_HISTORY, RUN_LOG, SCHEMA_DRIFT, table_names
from sync.sql.objects import SqlObject, pipeline_objects
from sync.sql.policy import has_policies
from sync.sql.procedure import pending_condition
from sync.sql.procedure.call_result import result_columns
from sync.sql.recovery import lock_sql
from sync.warehouse import Warehouse, WarehouseError


@dataclass
class DeployResult:
    created: list[str]
    replaced: list[str]
    unchanged: list[str]


def deploy(
    wh: Warehouse, pipeline: Pipeline, origin: str, on_object: Callable[[SqlObject, str], None] | None = None
) -> DeployResult:
    """Create every object that does not exist and replace the replaceable ones.
    Idempotent: a second run creates nothing and leaves every table's data alone."""
    result = DeployResult([], [], [])
    for obj in pipeline_objects(pipeline, wh.dialect.name, origin):
        label = f"{obj.kind} {obj.schema}.{obj.name}" if obj.kind not in ("schema", "setting") else f"{obj.kind} {obj.name}"
        if obj.kind == "setting":
            wh.execute(obj.sql)
            continue
        if obj.kind == "schema":
            existed = bool(wh.scalar("SELECT COUNT(*) FROM pg_namespace WHERE nspname = %s", (obj.name,)))
        else:
            existed = obj.kind in ("table", "stream", "index") and wh.relation_exists(obj.schema, obj.name)
        if obj.check_exists and existed:
            outcome = "unchanged"
        else:
            wh.execute(obj.sql)
            outcome = "replaced" if obj.replaceable else ("unchanged" if existed else "created")
        getattr(result, outcome).append(label)
        if on_object:
            on_object(obj, outcome)
    return result


@dataclass
class RunSummary:
    table: str
    status: str
    events_read: int
    upserted: int
    deleted: int
    quarantined: int
    tombstones: int
    stale: int
    superseded: int
    truncates: int
    watermark_before: str | None
    watermark_after: str | None
    lag_seconds: float | None
    duration_seconds: float
    error: str | None = None
    # Records of a shared topic no table selects (the topic's first table; else None).
    unmatched: int | None = None
    # Records the engine could not apply, isolated and quarantined by this run (their errors).
    isolated: list[str] = field(default_factory=list)
    # A failed call failed on a record's data (record isolation may follow).
    data_error: bool = False
    # A failed call was stopped by a serialization conflict (it rolled back whole).
    conflict: bool = False
    # Transactions of this run stopped by a serialization conflict and run again.
    retries: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


# The run-log columns a RunSummary holds, under the same names, that every call writes;
# COUNTS add up over calls. ADDED: those only some tables' calls write (`summary_columns`).
SUMMARY_COLUMNS = tuple(
    c for c in schemas.RUN_LOG if c.name in {f.name for f in fields(RunSummary)} and c.name not in schemas.RUN_LOG_ADDED
)
COUNTS = tuple(c.name for c in SUMMARY_COLUMNS if c.type == "bigint")
ADDED = tuple(c for c in schemas.RUN_LOG if c.name in schemas.RUN_LOG_ADDED)


def summary_columns(pipeline: Pipeline, table_name: str) -> tuple[schemas.Column, ...]:
    """The columns of a table's call result a summary reads: SUMMARY_COLUMNS, and the added
    ones the table's calls write (`run_log_columns`), so a table without them reads
    what it read before they existed."""
    written = schemas.names(result_columns(pipeline, pipeline.table(table_name)))
    return SUMMARY_COLUMNS + tuple(c for c in ADDED if c.name in written)


def call_sql(pipeline: Pipeline, table_name: str, max_records: int | None = None) -> str:
    """The CALL statement of one table's procedure: every pending record, or (record
    isolation) the first `max_records` of them."""
    names = table_names(pipeline, pipeline.table(table_name))
    bound = "" if max_records is None else str(int(max_records))
    return f"CALL {quote_ident(names.schema)}.{quote_ident(names.procedure)}({bound})"


def isolate_sql(pipeline: Pipeline, table_name: str) -> str:
    """The CALL that quarantines the first pending record; one parameter: the reason."""
    names = table_names(pipeline, pipeline.table(table_name))
    return f"CALL {quote_ident(names.schema)}.{quote_ident(names.isolate_procedure)}(%s)"


def pending_sql(pipeline: Pipeline, table_name: str, select: str = "COUNT(*)") -> str:
    """`select` over the records the table's next sync reads (the stream `s`; how many, by
    default): the procedure's own pending condition."""
    n = table_names(pipeline, pipeline.table(table_name))
    qs = quote_ident(n.schema)
    wm = f"{qs}.{quote_ident(n.watermark)}"
    return (
        f"SELECT {select} FROM {qs}.{quote_ident(n.stream)} s LEFT JOIN {wm} w "
        f"ON w.kafka_partition = s.kafka_partition WHERE {pending_condition(wm)}"
    )


def summary_from_row(table_name: str, row: Mapping[str, Any], duration: float) -> RunSummary:
    """A RunSummary from one run-log row, by column name (`schemas.as_row`); an added
    column the row lacks is None."""
    added = {c.name: row.get(c.name) for c in ADDED}
    return RunSummary(table=table_name, duration_seconds=duration, **{c.name: row[c.name] for c in SUMMARY_COLUMNS}, **added)


def unfinished_summary(table_name: str, status: str, duration: float, error: str) -> RunSummary:
    """A summary with zero counts: a call that applied nothing (failed, cancelled), or one
    that finished but whose run-log row could not be read (unknown)."""
    row = {**{c.name: None for c in SUMMARY_COLUMNS}, **dict.fromkeys(COUNTS, 0), "status": status}
    summary = summary_from_row(table_name, row, duration)
    summary.error = error
    return summary


@contextmanager
def under_table_lock(wh: Warehouse, pipeline: Pipeline, table: TableConfig) -> Iterator[None]:
    """A transaction whose first statement takes the table's procedure lock: every CALL of
    the table's procedures runs in one (`call_procedure` says why; the Lambda's Data API
    batch sends the same LOCK first, sync/aws/data_api.py)."""
    with wh.transaction():
        wh.execute(lock_sql(wh.dialect.bind_schema(pipeline.schema), pipeline, table))
        yield


def call_procedure(wh: Warehouse, pipeline: Pipeline, table_name: str, max_records: int | None = None) -> RunSummary:
    """CALL incremental_sync_<table>() and read back the run-log row it wrote. The CALL runs
    in a transaction that takes the procedure's lock first: at REPEATABLE READ and
    SERIALIZABLE a transaction's snapshot starts at its first statement, and a CALL made on
    its own starts it before the procedure's LOCK, so two overlapping calls of one table
    would conflict on the watermark (PostgreSQL, "LOCK": "the LOCK TABLE command must be
    executed before any SELECT or data modification statement" at those levels). The row
    is read in the same transaction, from the session's result table (`call_result_sql`)."""
    table = pipeline.table(table_name)
    names = table_names(pipeline, table)
    started = time.perf_counter()
    try:
        with under_table_lock(wh, pipeline, table):
            wh.execute(call_sql(pipeline, table.name, max_records))
            row = wh.query(call_result_sql(pipeline, table.name))
    except WarehouseError as exc:
        message = str(exc)
        if "does not exist" in message:
            message += f"\n(has `redshift-sync deploy` run for this pipeline on this database? schema {names.schema!r})"
        summary = unfinished_summary(table.name, "failed", time.perf_counter() - started, message)
        summary.data_error = is_data_error(str(exc), exc.sqlstate)
        summary.conflict = is_serialization_conflict(str(exc), exc.sqlstate)
        return summary
    return call_result(pipeline, table.name, row, time.perf_counter() - started)


def isolate_first_pending(wh: Warehouse, pipeline: Pipeline, table_name: str, error: str) -> None:
    """Quarantine the first pending record with the engine's `error` (record isolation),
    in a transaction that takes the procedure's lock first, as `call_procedure` does: a
    CALL made on its own starts its snapshot before the procedure's LOCK, so it read the
    stream as it was before a prune that held the lock meanwhile, and wrote the
    quarantine that prune had read: a read/write cycle, which SERIALIZABLE stopped."""
    with under_table_lock(wh, pipeline, pipeline.table(table_name)):
        wh.execute(isolate_sql(pipeline, table_name), (error,))


def call_result_sql(pipeline: Pipeline, table_name: str) -> str:
    """The run-log row the session's last sync call of the table left in the session's
    temporary result table (sync/sql/procedure/call_result.py), read in the call's own
    transaction: never the shared run log, which every table's call writes."""
    selected = ", ".join(schemas.names(summary_columns(pipeline, table_name)))
    return f"SELECT {selected} FROM {quote_ident(CALL_RESULT)} WHERE table_name = {quote_literal(table_name)}"


def call_result(pipeline: Pipeline, table_name: str, rows: Sequence[Sequence[Any]], duration: float) -> RunSummary:
    """The summary of a call from `call_result_sql`'s rows."""
    if not rows:
        return unfinished_summary(table_name, "failed", duration, "the procedure finished but left no run-log row")
    return summary_from_row(table_name, schemas.as_row(summary_columns(pipeline, table_name), rows[0]), duration)


def selected_tables(pipeline: Pipeline, tables: Sequence[str] | None = None) -> list[str]:
    """The tables named (all when none are), checked before anything runs: an unknown
    name fails fast with a ConfigError listing the known ones."""
    names = list(tables) if tables else [t.name for t in pipeline.tables]
    for name in names:
        pipeline.table(name)
    return names


def sync(wh: Warehouse, pipeline: Pipeline, tables: Sequence[str] | None = None) -> list[RunSummary]:
    return [sync_table(wh, pipeline, name) for name in selected_tables(pipeline, tables)]


def sync_table(
    wh: Warehouse,
    pipeline: Pipeline,
    table_name: str,
    policy: RetryPolicy | None = None,
    may_retry: Callable[[], bool] = lambda: True,
) -> RunSummary:
    """One table's sync. A CALL stopped by a serialization conflict rolled back whole and is
    run again (`policy`, by default `[operations] conflict_attempts`; `may_retry` can stop
    it). A CALL that fails on a record's data is followed by record isolation
    (sync/operations/isolation.py): the failing records are quarantined with the engine's
    error and everything else is applied in this run; the summary adds up every call."""
    policy = policy or conflict_policy(pipeline)
    attempts = 0
    while True:
        attempts += 1
        first = call_procedure(wh, pipeline, table_name)
        if not (first.conflict and policy.should_retry(attempts, first.error, SERIALIZATION_FAILURE) and may_retry()):
            break
        time.sleep(policy.delay(attempts))
    first.retries = attempts - 1
    if first.status != "failed" or not first.data_error:
        return first
    applied: list[RunSummary] = []
    retried = [first.retries]

    def bounded(limit: int) -> RunSummary:
        run = call_procedure(wh, pipeline, table_name, limit)
        if run.status == "failed":
            if run.data_error:
                raise CallFailed(run.error or "")
            raise WarehouseError(run.error or "the call failed", SERIALIZATION_FAILURE if run.conflict else None)
        return run

    def call(limit: int) -> None:
        run, n = retry_conflicts(policy, lambda: bounded(limit), may_retry=may_retry)
        retried[0] += n
        applied.append(run)

    def quarantine_first(error: str) -> None:
        retried[0] += retry_conflicts(
            policy, lambda: isolate_first_pending(wh, pipeline, table_name, error), may_retry=may_retry
        )[1]

    started = time.perf_counter()
    try:
        result = isolate(call, lambda: int(wh.scalar(pending_sql(pipeline, table_name))), quarantine_first)
    except WarehouseError as exc:
        failed = unfinished_summary(table_name, "failed", first.duration_seconds + time.perf_counter() - started, str(exc))
        failed.retries = retried[0]
        return failed
    total = combined_summary(table_name, first, applied, result)
    total.retries = retried[0]
    return total


def combined_summary(table_name: str, first: RunSummary, applied: list[RunSummary], result: Isolation) -> RunSummary:
    """The summary of a run that isolated records: the counts of every call that applied
    a prefix, the isolated records counted as quarantined."""
    total = unfinished_summary(table_name, "failed" if result.gave_up else "ok", first.duration_seconds, "")
    total.error = f"{first.error}\nrecord isolation stopped: {result.gave_up}" if result.gave_up else None
    for run in applied:
        for name in COUNTS:
            setattr(total, name, getattr(total, name) + getattr(run, name))
        if run.unmatched is not None:
            total.unmatched = (total.unmatched or 0) + run.unmatched
        total.duration_seconds += run.duration_seconds
        total.watermark_before = total.watermark_before or run.watermark_before
        total.watermark_after = run.watermark_after or total.watermark_after
        total.lag_seconds = run.lag_seconds if run.lag_seconds is not None else total.lag_seconds
    total.events_read += len(result.isolated)
    total.quarantined += len(result.isolated)
    total.isolated = list(result.isolated)
    return total


@dataclass
class TableStatus:
    table: str
    deployed: bool
    watermarks: dict[int, int]
    pending: int | None
    target_rows: int | None
    last_run_at: str | None
    last_run: dict | None
    quarantined: int
    quarantine_reasons: list[tuple[str, int]]
    # (kind, field, events): 'unknown' fields the events carry and the pipeline file does
    # not list; 'missing' configured fields the events lacked. Only what is current: since
    # the table's last revision (which clears its drift), and not what the file now handles.
    schema_drift: list[tuple[str, str, int]] = field(default_factory=list)
    # (reason, records) the streaming ingestion skipped without an error (Redshift).
    stream_errors: list[tuple[str, int]] = field(default_factory=list)
    # (column, rows) stored rows whose value is unknown (sync.operations.unknown_values).
    unknown_values: list[tuple[str, int]] = field(default_factory=list)

    def as_dict(self) -> dict:
        out = asdict(self)
        out["quarantine_reasons"] = [{"reason": r, "records": n} for r, n in self.quarantine_reasons]
        out["schema_drift"] = [{"kind": k, "field": f, "events": n} for k, f, n in self.schema_drift]
        out["unknown_values"] = [{"column": c, "rows": n} for c, n in self.unknown_values]
        return out


def current_drift(table: TableConfig, rows: Sequence[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    """Drift the pipeline file has not handled yet: an unknown field it now lists, or a
    missing field it no longer lists, is history."""
    fields = {c.name for c in table.columns}
    return [(k, f, n) for k, f, n in rows if (f in fields) == (k == "missing")]


# What `status` shows of a table's newest run.
LAST_RUN_COLUMNS = (schemas.column(schemas.RUN_LOG, "started_at"), *SUMMARY_COLUMNS, *ADDED)


def status(wh: Warehouse, pipeline: Pipeline) -> list[TableStatus]:
    schema = pipeline.schema
    out: list[TableStatus] = []
    control_ready = wh.relation_exists(schema, RUN_LOG)
    for table in pipeline.tables:
        n = table_names(pipeline, table)
        qs = quote_ident(schema)
        if not (control_ready and wh.relation_exists(schema, n.watermark)):
            out.append(TableStatus(table.name, False, {}, None, None, None, None, 0, []))
            continue
        wms = {
            int(p): int(o)
            for p, o in wh.query(f"SELECT kafka_partition, last_offset FROM {qs}.{quote_ident(n.watermark)} ORDER BY 1")
        }
        pending = wh.scalar(pending_sql(pipeline, table.name))
        target_rows = wh.scalar(f"SELECT COUNT(*) FROM {qs}.{quote_ident(n.target)}")
        last = wh.query(
            f"SELECT {', '.join(schemas.names(LAST_RUN_COLUMNS))} FROM {qs}.{quote_ident(RUN_LOG)} "
            "WHERE table_name = %s ORDER BY run_id DESC LIMIT 1",
            (table.name,),
        )
        last_run = None
        last_at = None
        if last:
            last_run = schemas.as_row(LAST_RUN_COLUMNS, last[0])
            last_at = str(last_run.pop("started_at"))
        reasons = wh.query(
            f"SELECT reason, COUNT(*) FROM {qs}.{quote_ident(QUARANTINE)} WHERE table_name = %s AND handled IS NULL "
            "GROUP BY reason ORDER BY 2 DESC, 1 LIMIT 10",
            (table.name,),
        )
        quarantined = wh.scalar(
            f"SELECT COUNT(*) FROM {qs}.{quote_ident(QUARANTINE)} WHERE table_name = %s AND handled IS NULL", (table.name,)
        )
        drift = []
        if wh.relation_exists(schema, SCHEMA_DRIFT):
            drift = wh.query(
                f"SELECT kind, field, SUM(events) FROM {qs}.{quote_ident(SCHEMA_DRIFT)} WHERE table_name = %s "
                "GROUP BY kind, field ORDER BY kind DESC, field",
                (table.name,),
            )
        skipped_sql = wh.dialect.bind_schema(schema).stream_errors_sql(schema, n.stream)
        skipped = wh.query(skipped_sql) if skipped_sql else []
        drift = current_drift(table, [(str(k), str(f), int(e)) for k, f, e in drift])
        out.append(
            TableStatus(
                table.name,
                True,
                wms,
                int(pending),
                int(target_rows),
                last_at,
                last_run,
                int(quarantined),
                [(str(a), int(b)) for a, b in reasons],
                drift,
                [(str(r), int(c)) for r, c in skipped],
                [(u.column, u.rows) for u in unknown_values(wh, pipeline, table.name)],
            )
        )
    return out


@dataclass
class PruneResult:
    retention_days: int
    run_log: int
    schema_drift: int
    quarantine: int
    stream: dict[str, int] = field(default_factory=dict)  # table -> stream records deleted (prune --stream)
    heartbeat: int | None = None  # heartbeat records deleted (prune --stream with [heartbeat])

    def as_dict(self) -> dict:
        return asdict(self)


def stream_prune_sql(pipeline: Pipeline, table: TableConfig, d: PostgresDialect, cutoff: str) -> str:
    """Records of a table's stream relation that nothing needs any more: at or below the
    watermark of their partition (applied, or quarantined with their value kept), refreshed
    before the cutoff, and not the record that wrote a stored row (which a revision adding
    a column reads again). Redshift's DELETE takes a streaming materialized view; the
    watermark, not the relation, says what was read, so a later refresh is not affected.
    A view several tables share (`Pipeline.sharing`) keeps what any of them still needs:
    below the lowest of their watermarks, and no stored row of any of them."""
    n = table_names(pipeline, table)
    stream = d.qualified(n.schema, n.stream)
    # Redshift's DELETE takes no alias: the stream is named in full in the conditions.
    # Column policies: the records that wrote stored rows go too (they hold the clear
    # values), at the cost of the column fills that would have read them.
    read, stored = [], []
    for t in pipeline.sharing(table):
        m = table_names(pipeline, t)
        wm, target = d.qualified(m.schema, m.watermark), d.qualified(m.schema, m.target)
        read.append(
            f"\n  AND {stream}.kafka_offset <= (SELECT MAX(w.last_offset) FROM {wm} w WHERE w.kafka_partition = {stream}.kafka_partition)"
        )
        if not has_policies(t):
            stored.append(
                f"\n  AND NOT EXISTS (SELECT 1 FROM {target} t\n"
                f"                  WHERE t._kafka_partition = {stream}.kafka_partition AND t._kafka_offset = {stream}.kafka_offset)"
            )
    return f"DELETE FROM {stream}\nWHERE {stream}.refresh_time < {cutoff}" + "".join(read) + "".join(stored)


def heartbeat_prune_sql(pipeline: Pipeline, d: PostgresDialect, cutoff: str) -> list[str]:
    """The heartbeat records refreshed before the cutoff but each partition's newest (its
    age is all freshness reads), and locally the refreshes `ingest` recorded before the
    cutoff but each relation's newest. Nothing without [heartbeat]."""
    if pipeline.heartbeat is None:
        return []
    hb = d.qualified(pipeline.schema, HEARTBEAT_STREAM)
    statements = [
        f"DELETE FROM {hb}\nWHERE {hb}.refresh_time < {cutoff}\n"
        f"  AND {hb}.kafka_offset < (SELECT MAX(h.kafka_offset) FROM {hb} h WHERE h.kafka_partition = {hb}.kafka_partition)"
    ]
    if not d.streaming_ingestion:  # Redshift keeps its own SYS_MV_REFRESH_HISTORY
        rh = d.qualified(pipeline.schema, REFRESH_HISTORY)
        statements.append(
            f"DELETE FROM {rh}\nWHERE {rh}.end_time < {cutoff}\n"
            f"  AND {rh}.end_time < (SELECT MAX(r.end_time) FROM {rh} r WHERE r.mv_name = {rh}.mv_name)"
        )
    return statements


@dataclass(frozen=True)
class PruneSql:
    """A prune's transactions. Each takes its lock first (docs/redshift.md, "Concurrency
    and isolation"): the run log's own, then per table the watermark its procedure locks
    first, so a prune and a CALL of the table never overlap."""

    run_log: list[str]
    tables: dict[str, list[str]]
    heartbeat: list[str]  # prune --stream with [heartbeat]: `heartbeat_prune_sql`


def prune_sql(d: PostgresDialect, pipeline: Pipeline, days: int, stream: bool = False) -> PruneSql:
    """Run-log rows older than `days` (each table keeps its newest, which `status` shows);
    per table, schema-drift rows, quarantined records already replayed or discarded and,
    with `stream`, the stream records nothing needs any more (`stream_prune_sql`)."""
    cutoff = f"{d.now()} - INTERVAL '{int(days)} days'"
    run_log = d.qualified(pipeline.schema, RUN_LOG)
    tables = {}
    for t in pipeline.tables:
        n = table_names(pipeline, t)
        # The stream relation is pruned with the table that owns it: a shared view under
        # the locks of every table reading it, taken in one global order (by name).
        prunes_stream = stream and n.stream_owner == t.name
        locked = sorted(table_names(pipeline, s).watermark for s in pipeline.sharing(t)) if prunes_stream else [n.watermark]
        tables[t.name] = [
            f"LOCK TABLE {', '.join(d.qualified(n.schema, w) for w in locked)}{d.lock_mode}",
            f"DELETE FROM {d.qualified(n.schema, n.schema_drift)} WHERE run_started_at < {cutoff}",
            f"DELETE FROM {d.qualified(n.schema, n.quarantine)} WHERE handled IN ('replayed', 'discarded') AND handled_at < {cutoff}",
            *([stream_prune_sql(pipeline, t, d, cutoff)] if prunes_stream else []),
        ]
    return PruneSql(
        [
            f"LOCK TABLE {run_log}{d.lock_mode}",
            f"DELETE FROM {run_log} WHERE started_at < {cutoff}\n"
            f"  AND run_id NOT IN (SELECT MAX(run_id) FROM {run_log} GROUP BY table_name)",
        ],
        tables,
        heartbeat_prune_sql(pipeline, d, cutoff) if stream else [],
    )


def prune(wh: Warehouse, pipeline: Pipeline, days: int | None = None, stream: bool = False) -> PruneResult:
    """Delete control-table rows older than the retention (`[operations] retention_days`,
    `prune_sql`), one transaction for the run log and one per table. Waiting records are
    never pruned."""
    return prune_with(in_transaction(wh), wh.dialect.bind_schema(pipeline.schema), pipeline, days, stream)


def in_transaction(wh: Warehouse) -> Callable[[list[str]], list[int]]:
    """Runs statements in one transaction of `wh`; each one's row count."""

    def run(statements: list[str]) -> list[int]:
        with wh.transaction():
            return [wh.execute(statement) for statement in statements]

    return run


def prune_with(
    transaction: Callable[[list[str]], list[int]], d: PostgresDialect, pipeline: Pipeline, days: int | None, stream: bool
) -> PruneResult:
    """`prune` over any connection: `transaction` runs its statements in one transaction and
    returns each one's row count (negative where none)."""
    days = days if days is not None else pipeline.operations.retention_days
    sql = prune_sql(d, pipeline, days, stream)

    def run(statements: list[str]) -> list[int]:
        return [max(count, 0) for count in transaction(statements)]

    result = PruneResult(days, run(sql.run_log)[-1], 0, 0)
    for table, statements in sql.tables.items():
        counts = run(statements)[1:]
        result.schema_drift += counts[0]
        result.quarantine += counts[1]
        if len(counts) > 2:
            result.stream[table] = counts[2]
    if sql.heartbeat:
        result.heartbeat = run(sql.heartbeat)[0]
    return result

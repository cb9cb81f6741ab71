"""1./7./8. What surrounds the merge: session settings, the single-flight lock, the
watermark (read, bound, advanced), the batch's counts, the quarantine, the run log, and
the stage emptied for the next call."""

from __future__ import annotations

from sync.sql import schemas
from sync.sql.dialect import quote_literal
from sync.sql.policy import key_check_sql
from sync.sql.procedure.batch import pending_in_order_sql, replaying
from sync.sql.procedure.context import CALL_TIME, NEVER, OUTCOMES, UNBOUNDED, WATERMARK_ITEM, Action, TableSql, positionless
from sync.sql.procedure.fields import has_toast
from sync.sql.procedure.history import history_counts
from sync.sql.procedure.routing import unmatched_outcome
from sync.sql.procedure.text import WIDE, indent, packed, wrapped


def procedure_settings_sql(ctx: TableSql) -> str:
    comment = "-- 10. Settings this procedure needs, for the CALL's transaction only (SET LOCAL)."
    return "\n".join([comment, *ctx.d.procedure_settings])


def single_flight_sql(ctx: TableSql) -> str:
    lock = f"LOCK TABLE {ctx.rel.watermark}{ctx.d.lock_mode};"
    comment = (
        "-- 1. Single flight: a second call (or a backfill) waits here until the first commits,\n"
        "--    then sees its watermark, so no record is applied twice. Only the control table\n"
        "--    is locked: on Redshift every LOCK is exclusive, and the target stays readable.\n"
    )
    return f"{comment}{lock}\n{CALL_TIME} := {ctx.d.now()};"


def policy_key_sql(ctx: TableSql) -> str:
    """Column policies: the newest hash key, read before the stage INSERT hashes with it
    (without one, the call stops here)."""
    return key_check_sql(ctx.d, ctx.pipeline, ctx.table)


def watermark_summary(ctx: TableSql, name: str) -> str:
    """The watermark as the run log writes it (as many partitions as fit its text column),
    as the derived table `w` of one row, the column `name`."""
    value, source = ctx.d.bounded_list_parts(WATERMARK_ITEM, ",", "r.kafka_partition", ctx.rel.watermark)
    return f"(SELECT {indent(value, 6).lstrip()} AS {name}\n{indent(source, 6)}) w"


def bound_sql(ctx: TableSql) -> str:
    first = pending_in_order_sql(
        ctx,
        "x.refresh_time, x.kafka_partition, x.kafka_offset",
        "v_until_time, v_until_partition, v_until_offset",
        "p_max_records",
    )
    return (
        "-- A bounded run (record isolation by the caller) reads the first p_max_records pending\n"
        "-- records in (refresh_time, partition, offset) order: a prefix of every partition\n"
        "-- (0: none, which tells a failure of the procedure itself from one of a record).\n"
        f"v_until_time := {UNBOUNDED};\n"
        "IF p_max_records < 1 THEN\n"
        f"  v_until_time := {NEVER};\n"
        "ELSIF p_max_records IS NOT NULL THEN\n"
        + indent(f"{first};\nv_until_time := COALESCE(v_until_time, {UNBOUNDED});", 2)
        + "\nEND IF;"
    )


def batch_counts_sql(ctx: TableSql) -> str:
    """One pass over a batch with records tells which of the rarely needed steps it needs,
    and where its newest truncate is (truncate events keep their state to the end). The
    quarantined count guards the quarantine step: a later step that quarantines a record
    adds it (`counted_quarantine`). The partitions and the deletes guard the statements only
    they need (a partition seen for the first time; the deleted keys), as no rule makes a
    record a delete that the stage query did not. The same statement counts the quarantined
    records the stage read for replay and reads the watermark as the call found it for the
    run log: only a batch with records moves it, so a call without records needs neither."""
    counted = {
        "v_drift": "COUNT(_drift_img)",
        "v_quarantined": OUTCOMES["quarantined"],
    }
    if not ctx.d.watermark_upsert:  # the guard of the watermark's INSERT (advance_watermark_sql)
        counted["v_partitions"] = "COUNT(DISTINCT _kafka_partition)"
    if not ctx.table.is_keyless:
        counted["v_deletes"] = f"COUNT(CASE WHEN _action = '{Action.DELETE}' THEN 1 END)"
    if ctx.source_order:
        counted["v_positionless"] = f"COUNT(CASE WHEN {positionless()} THEN 1 END)"
    if has_toast(ctx.table):
        counted["v_unavailable"] = "COUNT(CASE WHEN _unavailable IS NOT NULL THEN 1 END)"
    counted.update(history_counts(ctx, " " * 13))  # history = true only
    if ctx.table.on_truncate == "delete":
        truncate = f"_action = '{Action.TRUNCATE}'"
        counted["v_truncates"] = OUTCOMES["truncates"]
        counted["v_truncate_pos"] = f"MAX(CASE WHEN {truncate} THEN _source_pos END)"
        counted["v_truncate_ts"] = f"MAX(CASE WHEN {truncate} THEN _source_ts END)"
    counted["v_replayed"] = f"(SELECT COUNT(*) FROM {ctx.rel.quarantine} WHERE {replaying(ctx)})"
    counts = [f"{count} AS {variable.removeprefix('v_')}" for variable, count in counted.items()]
    return (
        "-- What the batch needs of the rarely needed steps, what it replays, and the watermark it found.\n"
        "SELECT c.*, w.watermark\n"
        f"INTO {packed([*counted, 'v_wm_before'], ' ' * 5, WIDE)}\n"
        f"FROM (SELECT {packed(counts, ' ' * 13, WIDE)}\n"
        f"      FROM {ctx.rel.stage}) c,\n"
        f"     {watermark_summary(ctx, 'watermark')};"
    )


def analyze_stage_sql(ctx: TableSql) -> str:
    columns = ", ".join(["_action", "_rn", *(ctx.q(k) for k in ctx.keys)])
    return (
        "-- Fresh statistics for a large stage, refilled every run: without them the planner\n"
        "-- takes it for empty and joins it to itself row by row (20k events: 13 s, not 1 s).\n"
        "-- The columns the joins and filters use are enough (a quarter of the full cost).\n"
        f"IF v_read > 1000 THEN\n  ANALYZE {ctx.rel.stage} ({columns});\nEND IF;"
    )


def counted_quarantine() -> str:
    """After an UPDATE that quarantines records: they join the count that guards the
    quarantine step (`batch_counts_sql`)."""
    return "GET DIAGNOSTICS v_set_aside := ROW_COUNT;\nv_quarantined := v_quarantined + v_set_aside;"


def quarantined_count_sql(ctx: TableSql) -> str:
    """The records of the batch the rules quarantined, which the quarantine step inserts."""
    return f"SELECT {OUTCOMES['quarantined']}\nINTO v_quarantined\nFROM {ctx.rel.stage};"


def quarantine_insert_sql(ctx: TableSql, values: dict[str, str], record: str, rest: str) -> str:
    """3. A record into the quarantine, with `values` (reason, payload, raw value) and its
    Kafka coordinates from the columns `record` prefixes (`s.`: the stream's, `_`: the
    stage's)."""
    kafka = {name: record + name for name in ("kafka_partition", "kafka_offset", "kafka_timestamp")}
    values = {"table_name": quote_literal(ctx.table.name), **kafka, **values, "run_started_at": CALL_TIME}
    return schemas.insert_select_sql(ctx.d, ctx.rel.quarantine, schemas.QUARANTINE, values, rest)


def quarantine_sql(ctx: TableSql) -> str:
    stage_values = {"reason": "_reason", "payload": "_payload", "raw_value": "_raw_value"}
    rest = f"FROM {ctx.rel.stage}\nWHERE _action = '{Action.QUARANTINE}';"
    return (
        "-- 3. Records that cannot be applied are kept with the raw value and the reason.\n"
        "IF v_quarantined > 0 THEN\n" + indent(quarantine_insert_sql(ctx, stage_values, "_", rest), 2) + "\nEND IF;"
    )


def replayed_sql(ctx: TableSql) -> str:
    return (
        "-- Replayed records are recorded as such; one that failed again was quarantined anew above.\n"
        "IF v_replayed > 0 THEN\n"
        f"  UPDATE {ctx.rel.quarantine} SET handled = 'replayed', handled_at = {CALL_TIME}\n"
        f"  WHERE {replaying(ctx)};\n"
        "END IF;"
    )


def advance_watermark_sql(ctx: TableSql) -> str:
    """7. The per-partition watermark moved to the batch's newest offsets, never back
    (replayed records lie below it), a partition seen for the first time added: one
    statement where the dialect upserts (`watermark_upsert`), else an UPDATE and, when it
    advanced fewer partitions than the batch holds, an INSERT."""
    wm, now = ctx.rel.watermark, CALL_TIME
    batch = (
        "(SELECT _kafka_partition, MAX(_kafka_offset) AS last_offset, MAX(_refresh_time) AS last_refresh_time\n"
        f"      FROM {ctx.rel.stage} GROUP BY _kafka_partition) b"
    )
    first_seen = {
        "kafka_partition": "b._kafka_partition",
        "last_offset": "b.last_offset",
        "last_refresh_time": "b.last_refresh_time",
        "updated_at": now,
    }
    comment = (
        "-- 7. Advance the per-partition watermark in the same transaction (never back: replayed\n--    records lie below it)"
    )
    if ctx.d.watermark_upsert:
        advanced = ", ".join(f"{name} = EXCLUDED.{name}" for name in ("last_offset", "last_refresh_time", "updated_at"))
        upsert = f"ON CONFLICT (kafka_partition) DO UPDATE SET {advanced}\nWHERE EXCLUDED.last_offset > {wm}.last_offset;"
        return (
            comment
            + ", adding the partitions seen for the first time.\n"
            + schemas.insert_select_sql(ctx.d, wm, schemas.WATERMARK, first_seen, f"FROM {batch}\n{upsert}")
        )
    return (
        comment
        + ".\n"
        + f"UPDATE {wm} w SET last_offset = b.last_offset, last_refresh_time = b.last_refresh_time, updated_at = {now}\n"
        f"FROM {batch}\n"
        "WHERE w.kafka_partition = b._kafka_partition AND b.last_offset > w.last_offset;\n"
        "-- Partitions seen for the first time (the UPDATE advanced each partition it holds).\n"
        "GET DIAGNOSTICS v_advanced := ROW_COUNT;\n"
        "IF v_advanced < v_partitions THEN\n"
        + indent(
            schemas.insert_select_sql(
                ctx.d,
                wm,
                schemas.WATERMARK,
                first_seen,
                f"FROM {batch}\nWHERE NOT EXISTS (SELECT 1 FROM {wm} w WHERE w.kafka_partition = b._kafka_partition);",
            ),
            2,
        )
        + "\nEND IF;"
    )


def empty_stage_sql(ctx: TableSql) -> str:
    return (
        "-- The stage is empty between runs (DELETE, not TRUNCATE: TRUNCATE would commit).\n"
        f"IF v_read > 0 THEN\n  DELETE FROM {ctx.rel.stage};\nEND IF;"
    )


def run_log_insert_sql(
    ctx: TableSql, values: dict[str, str], breaks: tuple[int, ...] = (7,), rest: str = "", into: str = ""
) -> str:
    """8. The run-log row of a call: `values` by column name (counts, watermarks, lag,
    status), with the call's identity and times; SELECTed over `rest` (a FROM clause) when
    given, else one row of VALUES; into the run log, or the relation `into`."""
    values = {
        "table_name": quote_literal(ctx.table.name),
        "backend_pid": "PG_BACKEND_PID()",
        "started_at": CALL_TIME,
        "finished_at": ctx.d.now(),
        **values,
    }
    columns, selected = schemas.ordered(ctx.d, schemas.RUN_LOG, values)
    insert = f"INSERT INTO {into or ctx.rel.run_log} ({wrapped(columns, (7,))})\n"
    if rest:
        return insert + f"SELECT {wrapped(selected, breaks)}\n{rest};"
    return insert + f"VALUES ({wrapped(selected, breaks)});"


def run_log_row_sql(ctx: TableSql, into: str = "") -> str:
    """8. One run-log row per call, also when nothing was new (9.): what the batch came to,
    counted over the stage as the rules left it (`c`), and the watermark as the call leaves
    it (`w`), each read once in the same statement (into the run log, or `into`)."""
    outcomes_counted = {**OUTCOMES, **unmatched_outcome(ctx)}  # routing: the topic's first table counts unmatched
    counts = [f"{count} AS {name}" for name, count in outcomes_counted.items()]
    counts.append(f"{ctx.d.seconds_between(CALL_TIME, 'MAX(_kafka_timestamp)')} AS lag_seconds")
    outcomes = f"(SELECT {packed(counts, ' ' * 13, WIDE)}\n      FROM {ctx.rel.stage}) c"
    values = {
        "events_read": "v_read",
        **{name: f"c.{name}" for name in outcomes_counted},
        # A call without records leaves the watermark as it found it (batch_counts_sql).
        "watermark_before": "CASE WHEN v_read > 0 THEN v_wm_before ELSE w.watermark_after END",
        "watermark_after": "w.watermark_after",
        "lag_seconds": "c.lag_seconds",
        "status": "'ok'",
    }
    rest = f"FROM {outcomes},\n     {watermark_summary(ctx, 'watermark_after')}"
    return run_log_insert_sql(ctx, values, breaks=(7, 13), rest=rest, into=into)

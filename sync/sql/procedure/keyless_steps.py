"""The steps of a keyless table's procedure (sync/sql/procedure/keyless.py), in output
order: the keyed table's steps where the rule is the same (lock, watermark, bound, stage,
counts, quarantine, run log), the keyless rules in place of the key's."""

from __future__ import annotations

from sync.sql.procedure.apply import UPSERTS, load_sql
from sync.sql.procedure.bookkeeping import (
    advance_watermark_sql,
    analyze_stage_sql,
    batch_counts_sql,
    bound_sql,
    empty_stage_sql,
    policy_key_sql,
    procedure_settings_sql,
    quarantine_sql,
    quarantined_count_sql,
    replayed_sql,
    single_flight_sql,
)
from sync.sql.procedure.call_result import call_result_sql
from sync.sql.procedure.context import CALL_TIME, Action, TableSql
from sync.sql.procedure.drift import drift_sql
from sync.sql.procedure.keyless import (
    applied_positions_sql,
    before_images_sql,
    cancel_sql,
    delete_rows_sql,
    keyless_order_sql,
    pair_sql,
    snapshot_start_sql,
)
from sync.sql.procedure.keyless_pending import pay_pending_sql
from sync.sql.procedure.steps import APPLY_STEPS, KAFKA, STAGE, SYNC_STEPS, Step, facts, stage_sql, steps_sql
from sync.sql.procedure.text import indent


def _shared(steps: tuple[Step, ...], *functions) -> tuple[Step, ...]:
    """The steps of `steps` (a keyed table's) whose SQL is one of `functions`, in their order."""
    return tuple(step for step in steps if step.sql in functions)


KEYLESS_RANKED = facts("_rn _action _op _source_pos values", Action.UPSERT, Action.DELETE)


def insert_rows_sql(ctx: TableSql) -> str:
    return "-- 6. Each remaining insert adds a row.\n" + load_sql(ctx, "false", UPSERTS)


def keyless_apply_batch_sql(ctx: TableSql) -> str:
    """Steps 3 to 7 over the stage, when the batch has records (KEYLESS_APPLY_STEPS)."""
    return "IF v_read > 0 THEN\n" + indent(steps_sql(ctx, KEYLESS_APPLY_STEPS), 2) + "\nEND IF;"


KEYLESS_APPLY_STEPS = (
    Step(
        batch_counts_sql,
        ("v_drift", "v_quarantined", "v_partitions", "v_positionless", "v_unavailable", "v_replayed", "v_wm_before"),
        reads=facts(
            "_kafka_partition _drift_img _source_pos _action _unavailable", Action.UPSERT, Action.DELETE, Action.QUARANTINE
        ),
    ),
    Step(
        pair_sql,
        (),
        reads=facts(KAFKA, "_op _action _payload _unavailable", Action.UPSERT, Action.DELETE, Action.QUARANTINE),
        writes=facts("_action _reason _payload", Action.QUARANTINE),
    ),
    Step(
        keyless_order_sql,
        (),
        reads=facts(KAFKA, "_kafka_timestamp _kafka_time _op _action _source_pos", Action.UPSERT, Action.DELETE),
        writes=facts("_action _reason _rn", Action.QUARANTINE, Action.STALE),
    ),
    Step(
        snapshot_start_sql,
        ("v_rows", CALL_TIME),
        reads=facts(KAFKA, "_kafka_timestamp _refresh_time _op _action _reason _source_pos", Action.UPSERT, Action.DELETE),
        writes=facts("_action _reason", Action.STALE),
    ),
    Step(cancel_sql, ("v_rows",), reads=KEYLESS_RANKED | facts(KAFKA), writes=facts("_rn")),
    Step(pay_pending_sql, (), reads=KEYLESS_RANKED | facts(KAFKA), writes=facts("_rn _reason")),
    Step(delete_rows_sql, ("v_rows", CALL_TIME), reads=KEYLESS_RANKED | facts(KAFKA)),
    Step(insert_rows_sql, (CALL_TIME,), reads=KEYLESS_RANKED | facts(KAFKA, "_source_ts")),
    Step(
        applied_positions_sql,
        (CALL_TIME,),
        reads=facts("_action _source_pos _op", Action.UPSERT, Action.DELETE),
        writes=facts("_op"),
    ),
    Step(quarantined_count_sql, ("v_quarantined",), reads=facts("_action", Action.QUARANTINE)),
    *_shared(APPLY_STEPS, drift_sql, quarantine_sql, replayed_sql, advance_watermark_sql),
)


STAGE_INPUTS = ("v_until_time", "v_until_partition", "v_until_offset")
KEYLESS_SYNC_STEPS = (
    *_shared(SYNC_STEPS, procedure_settings_sql, single_flight_sql, policy_key_sql, bound_sql),
    Step(before_images_sql, STAGE_INPUTS, writes=STAGE),
    *_shared(SYNC_STEPS, stage_sql, analyze_stage_sql),
    Step(keyless_apply_batch_sql, ("v_read",)),
    *_shared(SYNC_STEPS, call_result_sql, empty_stage_sql),
)

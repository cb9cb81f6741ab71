"""The procedure as named steps: each returns the SQL of one step for a table, with the
variables it uses (DECLARE lists those of every step), the tables it is for, and its
contract with the stage: the stage columns and record states (`Action`) it reads and
those it writes. `SYNC_STEPS` are the steps of a call in output order; `APPLY_STEPS`
run over a batch that has records."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sync.config import TableConfig
from sync.sql import schemas
from sync.sql.dialect import PostgresDialect
from sync.sql.policy import KEY_VARIABLE, has_policies
from sync.sql.procedure.apply import apply_hard_sql, apply_soft_sql, delete_values_sql
from sync.sql.procedure.bookkeeping import (
    advance_watermark_sql,
    analyze_stage_sql,
    batch_counts_sql,
    bound_sql,
    empty_stage_sql,
    policy_key_sql,
    procedure_settings_sql,
    quarantine_sql,
    replayed_sql,
    single_flight_sql,
)
from sync.sql.procedure.call_result import call_result_sql
from sync.sql.procedure.context import CALL_TIME, Action, TableSql
from sync.sql.procedure.drift import drift_sql
from sync.sql.procedure.fields import has_toast
from sync.sql.procedure.history import RECOMPUTE, history_sql
from sync.sql.procedure.ordering import redundant_tombstones_sql, rerank_sql
from sync.sql.procedure.routing import counts_unmatched, unmatched_sql
from sync.sql.procedure.stage import stage_insert_sql
from sync.sql.procedure.stale import positionless_position_sql, replay_stale_sql, stale_sql, tied_order_sql
from sync.sql.procedure.text import indent
from sync.sql.procedure.toast import toast_sql
from sync.sql.procedure.truncate import truncate_sql


@dataclass(frozen=True)
class Variable:
    name: str
    type: str  # a SQL type, or one the dialect spells (schemas.LONG_TEXT)
    initial: str | None = None
    only: Callable[[TableConfig], bool] | None = None  # the tables that declare it (None: all)

    def declaration(self, d: PostgresDialect) -> str:
        return f"{self.name} {schemas.type_sql(d, self.type)}" + (f" := {self.initial}" if self.initial else "") + ";"


# The variables of the procedures, in the order DECLARE lists them.
VARIABLES = {
    v.name: v
    for v in (
        Variable(CALL_TIME, "timestamp"),
        Variable("v_wm_before", schemas.LONG_TEXT),
        Variable("v_read", "bigint", "0"),
        Variable("v_quarantined", "bigint", "0"),
        Variable("v_truncates", "bigint", "0"),
        Variable("v_rows", "bigint", "0"),
        Variable("v_positionless", "bigint", "0"),
        Variable("v_partitions", "bigint", "0"),
        Variable("v_advanced", "bigint", "0"),
        Variable("v_deletes", "bigint", "0"),
        Variable("v_set_aside", "bigint", "0"),
        Variable("v_unavailable", "bigint", "0"),
        Variable(RECOMPUTE, "bigint", "0", lambda table: table.history is not None),
        Variable("v_drift", "bigint", "0"),
        Variable("v_replayed", "bigint", "0"),
        Variable("v_not_newer", "bigint", "0"),
        Variable("v_until_time", "timestamp"),
        Variable("v_until_partition", "bigint"),
        Variable("v_until_offset", "bigint"),
        Variable("v_truncate_pos", "varchar(64)"),
        Variable("v_truncate_ts", "timestamp"),
        Variable("v_partition", "bigint"),
        Variable("v_offset", "bigint"),
        Variable("v_refresh_time", "timestamp"),
    )
}


def facts(*names: str) -> frozenset[str]:
    """Stage columns (`values`: the table's own columns) and record states, each name
    given alone or several in one space-separated string."""
    return frozenset(name for group in names for name in group.split())


# What the stage INSERT writes: every column, and the states a record is classified in.
STAGE = facts(
    "_kafka_partition _kafka_offset _kafka_timestamp _kafka_time _refresh_time _op _action _reason _rn",
    "_source_ts _source_pos _rank_pos values _unavailable _payload _raw_value _drift_img",
    Action.UPSERT,
    Action.DELETE,
    Action.QUARANTINE,
    Action.TOMBSTONE,
    Action.TRUNCATE,
    Action.ROUTED,
    Action.UNMATCHED,
)
KAFKA = "_kafka_partition _kafka_offset"
RANKED = facts("_rn _action", Action.UPSERT, Action.DELETE)  # the winners of each key
# The newest stored row of a key is found by the position columns the target shares with the stage.
STORED = facts(KAFKA, "_source_pos")


def _always(ctx: TableSql) -> bool:
    return True


def _source_order(ctx: TableSql) -> bool:
    return ctx.source_order


def _has_toast(ctx: TableSql) -> bool:
    return has_toast(ctx.table)


def _hard(ctx: TableSql) -> bool:
    return ctx.table.delete_mode == "hard"


def _soft(ctx: TableSql) -> bool:
    return ctx.table.delete_mode == "soft"


@dataclass(frozen=True)
class Step:
    """One step of the procedure contract: its SQL for a table, the variables it uses, the
    tables (and dialects) it is for, and what of the stage it reads and writes."""

    sql: Callable[[TableSql], str]
    uses: tuple[str, ...] = ()
    applies: Callable[[TableSql], bool] = _always
    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()


def stage_sql(ctx: TableSql) -> str:
    return (
        "-- 2./3. Records past the watermark (refresh_time only prunes), classified, typed and ranked\n"
        "--       per key, into the stage. The rules below read the stage and the keys' stored state, never a record's JSON again.\n"
        + stage_insert_sql(ctx)
        + "\nGET DIAGNOSTICS v_read := ROW_COUNT;"
    )


def steps_sql(ctx: TableSql, steps: Iterable[Step]) -> str:
    return "\n".join(step.sql(ctx) for step in steps if step.applies(ctx))


def apply_batch_sql(ctx: TableSql) -> str:
    """Steps 3 to 7 over the stage, when the batch has records (APPLY_STEPS)."""
    return "IF v_read > 0 THEN\n" + indent(steps_sql(ctx, APPLY_STEPS), 2) + "\nEND IF;"


ALL_STATES = facts(*Action)
# Steps 3 to 7 over the stage, in output order (run when the batch has records).
APPLY_STEPS = (
    Step(
        batch_counts_sql,
        (
            "v_drift",
            "v_quarantined",
            "v_partitions",
            "v_deletes",
            "v_positionless",
            "v_unavailable",
            RECOMPUTE,
            "v_truncates",
            "v_truncate_pos",
            "v_truncate_ts",
            "v_replayed",
            "v_wm_before",
        ),
        reads=facts(
            "_kafka_partition _drift_img _source_pos _source_ts _action _unavailable",
            Action.UPSERT,
            Action.DELETE,
            Action.TRUNCATE,
            Action.QUARANTINE,
        ),
    ),
    Step(
        redundant_tombstones_sql,
        ("v_positionless",),
        lambda ctx: ctx.source_order and ctx.table.format == "debezium-unwrap",
        reads=facts(KAFKA, "_action _op _refresh_time _source_pos values", Action.DELETE),
        writes=facts("_action", Action.TOMBSTONE),
    ),
    Step(
        rerank_sql,
        ("v_positionless",),
        _source_order,
        reads=RANKED | STORED | facts("_kafka_time _rank_pos values"),
        writes=facts("_rank_pos _rn"),
    ),
    Step(
        toast_sql,
        ("v_unavailable", "v_set_aside", "v_quarantined"),
        _has_toast,
        reads=RANKED | STORED | facts("_unavailable values _reason"),
        # Completes what is known, then quarantines the winners it could not complete with
        # their key's events since its delete, which becomes the key's winner.
        writes=facts("_unavailable values _action _reason _rn", Action.QUARANTINE),
    ),
    Step(
        stale_sql,
        ("v_not_newer",),
        _source_order,
        reads=RANKED | STORED | facts("values"),
        writes=facts("_action", Action.STALE),
    ),
    Step(
        tied_order_sql,
        ("v_not_newer",),
        _source_order,
        reads=RANKED | STORED | facts("_kafka_timestamp"),
        writes=facts("_action", Action.STALE),
    ),
    Step(
        positionless_position_sql,
        ("v_positionless",),
        _source_order,
        reads=RANKED | facts("_source_pos _rank_pos"),
        writes=facts("_source_pos"),
    ),
    Step(
        replay_stale_sql,
        ("v_replayed",),
        lambda ctx: not ctx.source_order,
        reads=RANKED | facts(KAFKA, "_kafka_timestamp values"),
        writes=facts("_action", Action.STALE),
    ),
    Step(
        truncate_sql,
        ("v_truncates", "v_truncate_pos", "v_truncate_ts", CALL_TIME),
        lambda ctx: ctx.table.on_truncate == "delete",
        reads=RANKED | facts(KAFKA, "_kafka_timestamp _source_pos _source_ts _rank_pos values", Action.TRUNCATE),
        writes=facts("_action", Action.TRUNCATED),
    ),
    Step(
        history_sql,
        ("v_unavailable", RECOMPUTE, "v_truncates", "v_truncate_pos", "v_truncate_ts"),
        lambda ctx: ctx.table.history is not None,
        reads=RANKED
        | facts(KAFKA, "_kafka_timestamp _kafka_time _source_pos _source_ts _rank_pos _op _unavailable values")
        | facts(Action.STALE, Action.TRUNCATED, Action.TRUNCATE),
    ),
    Step(
        apply_hard_sql,
        (CALL_TIME, "v_deletes"),
        _hard,
        reads=RANKED | facts(KAFKA, "_kafka_timestamp _source_ts _source_pos values"),
    ),
    Step(
        delete_values_sql,
        ("v_deletes", "v_unavailable"),
        lambda ctx: _soft(ctx) and bool(ctx.table.value_columns),
        reads=RANKED | STORED | facts("_unavailable values"),
        writes=facts("values"),
    ),
    Step(apply_soft_sql, (CALL_TIME, "v_deletes"), _soft, reads=RANKED | facts(KAFKA, "_source_ts _source_pos values")),
    Step(drift_sql, ("v_drift", CALL_TIME), reads=facts("_drift_img")),
    Step(unmatched_sql, (CALL_TIME,), counts_unmatched, reads=facts("_action _payload", Action.UNMATCHED)),
    Step(
        quarantine_sql,
        ("v_quarantined", CALL_TIME),
        reads=facts(KAFKA, "_kafka_timestamp _action _reason _payload _raw_value", Action.QUARANTINE),
    ),
    Step(replayed_sql, ("v_replayed", CALL_TIME)),
    Step(advance_watermark_sql, (CALL_TIME, "v_advanced", "v_partitions"), reads=facts(KAFKA, "_refresh_time")),
)
# The steps of `incremental_sync_<table>(p_max_records)`, in output order.
SYNC_STEPS = (
    Step(procedure_settings_sql, (), lambda ctx: bool(ctx.d.procedure_settings)),
    Step(single_flight_sql, (CALL_TIME,)),
    # KEY_VARIABLE: declared by the procedure of a table with column policies (sync.sql.policy).
    Step(policy_key_sql, (KEY_VARIABLE,), lambda ctx: has_policies(ctx.table)),
    Step(bound_sql, ("v_until_time", "v_until_partition", "v_until_offset")),
    Step(
        stage_sql,
        ("v_until_time", "v_until_partition", "v_until_offset", "v_read", KEY_VARIABLE),
        writes=STAGE,
    ),
    Step(analyze_stage_sql, ("v_read",), lambda ctx: ctx.d.analyze_stage, reads=facts("_action _rn values")),
    Step(apply_batch_sql, ("v_read",)),
    Step(call_result_sql, (CALL_TIME, "v_read", "v_wm_before"), reads=ALL_STATES | facts("_rn _action _kafka_timestamp")),
    Step(empty_stage_sql, ("v_read",)),
)


def declare(d: PostgresDialect, steps: Iterable[Step], table: TableConfig) -> list[str]:
    """The declarations of every variable the steps use that the table declares, in
    VARIABLES order."""
    used = {name for step in steps for name in step.uses}
    return [v.declaration(d) for v in VARIABLES.values() if v.name in used and (v.only is None or v.only(table))]

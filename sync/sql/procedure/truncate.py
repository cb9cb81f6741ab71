"""Truncate events (on_truncate = 'delete'): what precedes the newest truncate is removed
from the target and voided in the batch."""

from __future__ import annotations

from sync.sql import schemas
from sync.sql.apply import insert_deleted_keys_sql, key_match
from sync.sql.procedure.context import APPLIED, CALL_TIME, WINNERS, Action, TableSql
from sync.sql.procedure.text import indent

# Rows the truncate removes are recorded at its position (no Kafka coordinates of their own).
TRUNCATE_POSITION = {
    "_source_ts": "v_truncate_ts",
    "_source_pos": "v_truncate_pos",
    "_kafka_partition": "NULL",
    "_kafka_offset": "NULL",
}
VOIDED = f"s._rn = 1 AND s._action = '{Action.TRUNCATED}'"


def _deleted_at_truncate(ctx: TableSql, row: str) -> dict[str, str]:
    key_values = schemas.row_values(ctx.d, schemas.data_columns(ctx.table.key_columns), row)
    return {**key_values, **TRUNCATE_POSITION, "_deleted_at": CALL_TIME}


def _clear_older_sql(ctx: TableSql) -> str:
    """Stored rows older than the truncate's position: removed (remembered as deleted
    keys at it) or, in soft mode, marked deleted at it. Keys remembered as deleted before
    it are deleted at it too: a change between their delete and the truncate (a re-sent
    create the truncate voided, a late one) stays stale."""
    d, rel = ctx.d, ctx.rel
    older = "(_source_pos IS NULL OR _source_pos < v_truncate_pos)"
    if ctx.table.delete_mode == "soft":
        return (
            f"UPDATE {rel.target} SET _deleted = true, _source_ts = v_truncate_ts, _source_pos = v_truncate_pos,\n"
            f"       _kafka_partition = NULL, _kafka_offset = NULL, _synced_at = {CALL_TIME}\n"
            f"WHERE {older};"
        )
    return (
        "-- Keys deleted before the truncate are deleted at it: what lies between stays stale.\n"
        f"UPDATE {rel.deleted} SET _source_ts = v_truncate_ts, _source_pos = v_truncate_pos, _kafka_partition = NULL,\n"
        f"       _kafka_offset = NULL, _kafka_timestamp = NULL, _deleted_at = {CALL_TIME}\n"
        f"WHERE {older};\n"
        + insert_deleted_keys_sql(
            d,
            ctx.table,
            rel.deleted,
            _deleted_at_truncate(ctx, "t"),
            f"{rel.target} t",
            "(t._source_pos IS NULL OR t._source_pos < v_truncate_pos)\n"
            f"  AND NOT EXISTS (SELECT 1 FROM {rel.deleted} k WHERE {key_match(d, ctx.keys, 'k', 't')})",
        )
        + f"\nDELETE FROM {rel.target}\nWHERE {older};"
    )


def _record_voided_sql(ctx: TableSql) -> str:
    """Keys whose only events of the batch the truncate voids, and that are not stored:
    recorded as deleted at the truncate."""
    d, rel, table = ctx.d, ctx.rel, ctx.table
    unseen = f"NOT EXISTS (SELECT 1 FROM {rel.target} t WHERE {key_match(d, ctx.keys, 't', 's')})"
    if table.delete_mode == "soft":
        values = {
            **schemas.row_values(d, schemas.data_columns(table.columns), "s"),
            **TRUNCATE_POSITION,
            "_synced_at": CALL_TIME,
            "_deleted": "true",
        }
        rest = f"FROM {rel.stage} s\nWHERE {VOIDED} AND {unseen};"
        return schemas.insert_select_sql(d, rel.target, schemas.target(table), values, rest)
    return insert_deleted_keys_sql(
        d,
        table,
        rel.deleted,
        _deleted_at_truncate(ctx, "s"),
        f"{rel.stage} s",
        f"{VOIDED} AND {unseen}\n  AND NOT EXISTS (SELECT 1 FROM {rel.deleted} k WHERE {key_match(d, ctx.keys, 'k', 's')})",
    )


def _by_kafka_order_sql(ctx: TableSql) -> str:
    """Without positions: every stored row precedes the truncate; events of the batch
    precede it by offset in its partition, by timestamp across partitions."""
    stage = ctx.rel.stage
    clear_all = (
        f"UPDATE {ctx.rel.target} SET _deleted = true, _synced_at = {CALL_TIME};"
        if ctx.table.delete_mode == "soft"
        else f"DELETE FROM {ctx.rel.target};"
    )
    precedes = (
        "((x._kafka_partition = s._kafka_partition AND x._kafka_offset > s._kafka_offset)\n"
        "        OR (x._kafka_partition <> s._kafka_partition AND x._kafka_timestamp > s._kafka_timestamp))"
    )
    return (
        f"{clear_all}\n"
        f"UPDATE {stage} s SET _action = '{Action.TRUNCATED}'\n"
        f"WHERE {WINNERS}\n"
        f"  AND EXISTS (SELECT 1 FROM {stage} x WHERE x._action = '{Action.TRUNCATE}'\n"
        f"    AND {precedes});"
    )


def truncate_sql(ctx: TableSql) -> str:
    """Truncate events (on_truncate = 'delete'). A truncate has no key, so it may land on
    any partition: only the source position orders it against row events (Debezium:
    "ordering is guaranteed only for topics that use a single partition"). With a source
    order, the newest truncate's position T decides: stored rows older than T are removed
    (hard mode: remembered as deleted keys at T; soft mode: marked at T), events of the
    batch older than T are void, and everything newer stays. Without positions (order_by
    = 'kafka'), Kafka order decides: offsets within the truncate's partition, timestamps
    across partitions, and every stored row precedes it."""
    stage = ctx.rel.stage
    lines = [
        "-- Truncate events (on_truncate = 'delete', counted with the batch): the newest",
        "-- truncate's source position decides what precedes it; without one, Kafka order does.",
    ]
    if not ctx.source_order:
        return "\n".join([*lines, "IF v_truncates > 0 THEN", indent(_by_kafka_order_sql(ctx), 2), "END IF;"])
    voids = (
        f"UPDATE {stage} SET _action = '{Action.TRUNCATED}'\n"
        f"WHERE _rn = 1 AND _action IN {APPLIED} AND (_rank_pos IS NULL OR _rank_pos < v_truncate_pos);\n"
        "-- Keys whose only events this batch precede the truncate were deleted by it too: remembered,\n"
        "-- so a replay of those events stays stale.\n" + _record_voided_sql(ctx)
    )
    lines += [
        "IF v_truncates > 0 AND v_truncate_pos IS NOT NULL THEN",
        indent(_clear_older_sql(ctx), 2),
        indent(voids, 2),
        "ELSIF v_truncates > 0 THEN",
        indent(_by_kafka_order_sql(ctx), 2),
        "END IF;",
    ]
    return "\n".join(lines)

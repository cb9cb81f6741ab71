"""5. Never regress: a winner not newer than what is stored for its key is stale. One
statement decides it for every winner from one lookup of what is stored (`stored_state`:
the newest target row or deleted key of each key with a winner, one row per key), with
the compressed-MySQL tie rule as a CASE; a winner tied at the stored position is judged by
Kafka order in one more statement, only when a winner was found not newer than what is
stored. Then the positionless winners' positions, and the Kafka-order tables' replay rule."""

from __future__ import annotations

from sync.sql.apply import key_match
from sync.sql.procedure.context import APPLIED, WINNERS, Action, TableSql
from sync.sql.procedure.ordering import kafka_later, newest_stored, replayed, stored_state
from sync.sql.procedure.text import indent


def _winner_of_key(ctx: TableSql, tied: bool = False) -> str:
    """The stored row `t`'s key has a winner in the batch (`tied`: at the row's position)."""
    at = " AND y._source_pos = t._source_pos" if tied else ""
    match = key_match(ctx.d, ctx.keys, "y", "t")
    return f"EXISTS (SELECT 1 FROM {ctx.rel.stage} y WHERE y._rn = 1 AND y._action IN {APPLIED} AND {match}{at})"


def stale_sql(ctx: TableSql) -> str:
    """Each winner against the newest stored state of its key (`t`): older is stale; at
    exactly the stored position, a re-sent copy of the stored event is stale too, and a
    winner that changes something (another value, or a delete of a stored row, or an
    upsert of a deleted key) is another change of the same transaction (a compressed
    MySQL transaction shares one position): it keeps its action and is counted with the
    stale ones (v_not_newer) for `tied_order_sql`, which judges it by Kafka order. The
    lookup reads the target and the deleted keys only for the batch's keys, so the cost
    follows the batch."""
    d, q, table = ctx.d, ctx.q, ctx.table
    values = [q(c.target_name) for c in table.value_columns]
    deleted = ("t._deleted" if not ctx.hard_deletes else "false") + " AS deleted__"
    extra = [(deleted, "true"), *((f"t.{v}", "NULL") for v in values)]
    differs = "".join(f" OR {d.differs(f't.{v}', f's.{v}', c.sql_type)}" for v, c in zip(values, table.value_columns))
    stored = stored_state(ctx, _winner_of_key(ctx), extra)
    return (
        "-- 5. Never regress: a winner older than what is stored for its key (row or deleted key) is stale, and so is\n"
        "--    a re-sent copy of it; a change at the stored position (a compressed MySQL transaction's) is judged next.\n"
        f"UPDATE {ctx.rel.stage} s SET _action = CASE WHEN s._source_pos = t._source_pos\n"
        f"    AND (s._action = '{Action.UPSERT}' AND (t.deleted__{differs})\n"
        f"         OR s._action = '{Action.DELETE}' AND NOT t.deleted__) THEN s._action ELSE '{Action.STALE}' END\n"
        f"FROM {indent(stored, 5).lstrip()} t\n"
        f"WHERE {WINNERS} AND {key_match(d, ctx.keys, 't', 's')} AND {newest_stored()} AND s._source_pos <= t._source_pos;\n"
        "GET DIAGNOSTICS v_not_newer := ROW_COUNT;"
    )


def tied_order_sql(ctx: TableSql) -> str:
    """A winner tied at the stored position with a change (`stale_sql` leaves it its
    action) is the later change only when it is later in Kafka order than the record that
    wrote what is stored; else it is stale. Kafka order as everywhere (`kafka_later`):
    offsets within a partition, the Kafka time across partitions (a stored row's is its
    record's in the stream, a deleted key keeps its own), then the partition. Within one
    partition only a replayed record (at or below the watermark) can be the earlier; across
    partitions (after the topic grew, a tied change the producer appended late to the key's
    old partition) any can. Only when `stale_sql` found a winner not newer than what is
    stored (v_not_newer); the lookup holds only the stored rows a winner ties with, so the
    stream is read for those only."""
    rel, stage = ctx.rel, ctx.rel.stage
    extra = [("CAST(NULL AS timestamp) AS kafka_time__", "t._kafka_timestamp"), ("true AS row__", "false")]
    stored = stored_state(ctx, _winner_of_key(ctx, tied=True), extra)
    later = kafka_later("t", "t.stored_time__", "s", "s._kafka_timestamp", lines=False)
    # The outer join in a subquery of its own: Redshift takes none in an UPDATE's FROM list
    # ("Target table must be part of an equijoin predicate", r_UPDATE).
    return (
        "-- 5. A winner tied at the stored position, older in Kafka order than what wrote it: stale.\n"
        "IF v_not_newer > 0 THEN\n"
        f"  UPDATE {stage} s SET _action = '{Action.STALE}'\n"
        f"  FROM (SELECT r.*, COALESCE(m.kafka_timestamp, r.kafka_time__) AS stored_time__\n"
        f"        FROM {indent(stored, 13).lstrip()} r\n"
        f"        LEFT JOIN {rel.stream} m ON r.row__ AND m.kafka_partition = r._kafka_partition"
        " AND m.kafka_offset = r._kafka_offset) t\n"
        f"  WHERE {WINNERS} AND {key_match(ctx.d, ctx.keys, 't', 's')} AND {newest_stored()} AND s._source_pos = t._source_pos\n"
        f"    AND {later};\n"
        "END IF;"
    )


def positionless_position_sql(ctx: TableSql) -> str:
    return (
        "-- A winner without a source position was never stale; it is recorded at the position\n"
        "-- it ranked by, so replays of what it superseded stay stale.\n"
        "IF v_positionless > 0 THEN\n"
        f"  UPDATE {ctx.rel.stage} SET _source_pos = _rank_pos\n"
        f"  WHERE _rn = 1 AND _action IN {APPLIED} AND _source_pos IS NULL;\n"
        "END IF;"
    )


def replay_stale_sql(ctx: TableSql) -> str:
    """Kafka order (no source position): a replayed winner older in Kafka order than the
    row stored, or the delete remembered, for its key is stale. A replayed record is one
    at or below its partition's watermark (records of the stream are above it). A stored
    row's Kafka timestamp is its record's in the stream; a deleted key keeps its own."""
    rel = ctx.rel
    match = key_match(ctx.d, ctx.keys, "t", "s")
    stored = {
        rel.target: (
            f"{rel.target} t\n              LEFT JOIN {rel.stream} m"
            " ON m.kafka_partition = t._kafka_partition AND m.kafka_offset = t._kafka_offset",
            "m.kafka_timestamp",
        ),
        rel.deleted: (f"{rel.deleted} t", "t._kafka_timestamp"),
    }
    newer = "\n         OR ".join(
        f"EXISTS (SELECT 1 FROM {stored[relation][0]}\n"
        f"            WHERE {match}\n"
        f"              AND {indent(kafka_later('t', stored[relation][1], 's', 's._kafka_timestamp'), 14).lstrip()})"
        for relation in rel.held(ctx.table)
    )
    return (
        "-- 5. (replay) Never regress: a replayed record older than what is stored for its key is stale.\n"
        "IF v_replayed > 0 THEN\n"
        f"  UPDATE {rel.stage} s SET _action = '{Action.STALE}'\n"
        f"  WHERE {WINNERS}\n"
        f"    AND {replayed(ctx)}\n"
        f"    AND ({newer});\n"
        "END IF;"
    )

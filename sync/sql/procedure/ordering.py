"""4./5. The ordering rules over the stage: events without a source position ranked
again, redundant tombstones, and winners not newer than what is stored for their key
(stale, with the exception of tied changes of one transaction)."""

from __future__ import annotations

from sync.sql.apply import key_match
from sync.sql.dialect import PostgresDialect
from sync.sql.procedure.context import APPLIED, WINNERS, Action, TableSql, positionless
from sync.sql.procedure.text import indent


def kafka_time(record: str) -> str:
    """A record's Kafka time (stream columns `record`kafka_partition, ...; `_` for the
    stage's): the newest Kafka timestamp of its partition up to it. It never decreases
    along a partition, so Kafka order across partitions, (Kafka time, partition, offset),
    keeps each partition's offset order even where a producer's clock stepped back. Over
    a batch: every record of it, so the stage insert and the stage agree."""
    return (
        f"MAX({record}kafka_timestamp) OVER (PARTITION BY {record}kafka_partition ORDER BY {record}kafka_offset\n"
        "  ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"
    )


def kafka_order(time: str, partition: str, offset: str, newest_first: bool = True) -> str:
    """Kafka order: offsets within a partition; across partitions the Kafka time (see
    `kafka_time`; a record without one is the oldest), then partition and offset: Kafka
    orders nothing across partitions, the producer's timestamp is the only evidence."""
    if newest_first:
        return f"{time} DESC NULLS LAST, {partition} DESC, {offset} DESC"
    return f"{time} ASC NULLS FIRST, {partition}, {offset}"


def rank_order(position: str, kafka: str) -> str:
    """4. The order of a key's events, newest first: source position, then `kafka`
    (Kafka order, newest first)."""
    return f"{position} DESC NULLS LAST, {kafka}"


def kafka_earlier(a: str, b: str) -> str:
    """The record of the row `a` is earlier in Kafka order than the record of the row `b`
    (both carry `_kafka_partition`, `_kafka_offset`; NULL, so false, when either lacks them)."""
    return (
        f"({a}._kafka_partition < {b}._kafka_partition"
        f" OR ({a}._kafka_partition = {b}._kafka_partition AND {a}._kafka_offset < {b}._kafka_offset))"
    )


def kafka_later(a: str, a_time: str, b: str, b_time: str) -> str:
    """Record `a` (its `_kafka_partition`, `_kafka_offset`, and Kafka timestamp `a_time`)
    is later in Kafka order than `b`: by offset in one partition; across partitions by
    timestamp, then partition (a tie, or a time unknown)."""
    return (
        f"({a}._kafka_partition = {b}._kafka_partition AND {a}._kafka_offset > {b}._kafka_offset\n"
        f" OR {a}._kafka_partition <> {b}._kafka_partition\n"
        f"    AND ({a_time} > {b_time}\n"
        f"         OR (COALESCE({a_time} = {b_time}, true) AND {a}._kafka_partition > {b}._kafka_partition)))"
    )


def replayed(ctx: TableSql, row: str = "s") -> str:
    """The stage row `row` is a replayed quarantined record: at or below its partition's
    watermark (the stream's records of a batch are above it)."""
    return (
        f"EXISTS (SELECT 1 FROM {ctx.rel.watermark} w"
        f" WHERE w.kafka_partition = {row}._kafka_partition AND {row}._kafka_offset <= w.last_offset)"
    )


def stored_rows(d: PostgresDialect, target: str, keys: list[str], wanted: str) -> str:
    """One stored row per key of the target rows matching `wanted` (a condition on the
    stage row `x` and the target row `t`), the newest when the key is stored more than once:
    a primary key is not enforced on Redshift, and an UPDATE ... FROM that matches a row
    twice must not depend on which match wins (stored rows keep no Kafka time: between
    copies of one key, partition and offset only make the choice deterministic)."""
    key_list = ", ".join(f"t.{d.q(k)}" for k in keys)
    return (
        f"(SELECT * FROM (SELECT t.*, ROW_NUMBER() OVER (PARTITION BY {key_list}\n"
        f"          ORDER BY {rank_order('t._source_pos', 't._kafka_partition DESC, t._kafka_offset DESC')}) AS stored_rn__\n"
        f"        FROM {target} t WHERE {wanted}) o\n"
        "      WHERE o.stored_rn__ = 1)"
    )


def rerank_sql(ctx: TableSql) -> str:
    """Events without a source position (tombstones, PostgreSQL incremental-snapshot
    reads) come after the row stored for their key, whatever the batch replays before
    them: their rank is raised to the stored position and their keys are ranked again.
    "Before" is Kafka order (`kafka_order`): a key's records span two partitions once
    the topic's partition count grows."""
    d, q, rel, keys = ctx.d, ctx.q, ctx.rel, ctx.keys
    stage = rel.stage

    stored_wanted = f"EXISTS (SELECT 1 FROM {stage} y WHERE {positionless('y.')} AND {key_match(d, keys, 'y', 't')})"
    raise_to_stored = "".join(
        f"  UPDATE {stage} s SET _rank_pos = t._source_pos\n"
        f"  FROM {stored_rows(d, relation, keys, stored_wanted)} t\n"
        f"  WHERE {positionless('s.')} AND {key_match(d, keys, 't', 's')}\n"
        "    AND t._source_pos IS NOT NULL AND (s._rank_pos IS NULL OR s._rank_pos < t._source_pos);\n"
        for relation in rel.held(ctx.table)
    )
    oldest_first = kafka_order("x._kafka_time", "x._kafka_partition", "x._kafka_offset", newest_first=False)
    order = rank_order("x._rank_pos", kafka_order("x._kafka_time", "x._kafka_partition", "x._kafka_offset"))
    key_list = ", ".join("x." + q(k) for k in keys)
    same_key_positionless = f"EXISTS (SELECT 1 FROM {stage} y WHERE {positionless('y.')} AND {key_match(d, keys, 'y', 'x')})"
    # The events of keys with a positionless one, with their Kafka time (over the whole stage).
    events = (
        f"FROM (SELECT z.*, {indent(kafka_time('z._'), 14).lstrip()} AS _kafka_time\n"
        f"              FROM {stage} z) x\n"
        f"        WHERE x._action IN {APPLIED}\n"
        f"          AND {same_key_positionless}) r\n"
    )
    return (
        "-- 4. Events without a source position: each takes the newest position seen before it\n"
        "--    for its key in Kafka order (so it supersedes what precedes it and loses to what\n"
        "--    follows), and ranks after what is stored for its key (row or deleted key).\n"
        "IF v_positionless > 0 THEN\n"
        f"  UPDATE {stage} s SET _rank_pos = r.rank_pos\n"
        f"  FROM (SELECT x._kafka_partition, x._kafka_offset,\n"
        f"               MAX(x._source_pos) OVER (PARTITION BY {key_list} ORDER BY {oldest_first}\n"
        "                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS rank_pos\n"
        f"        {events}"
        f"  WHERE {positionless('s.')}\n"
        "    AND s._kafka_partition = r._kafka_partition AND s._kafka_offset = r._kafka_offset;\n"
        + raise_to_stored
        + f"  UPDATE {stage} s SET _rn = r.rn\n"
        f"  FROM (SELECT x._kafka_partition, x._kafka_offset,\n"
        f"               ROW_NUMBER() OVER (PARTITION BY {key_list} ORDER BY {order}) AS rn\n"
        f"        {events}"
        "  WHERE s._kafka_partition = r._kafka_partition AND s._kafka_offset = r._kafka_offset;\n"
        "END IF;"
    )


def redundant_tombstones_sql(ctx: TableSql) -> str:
    """Unwrapped topics: a tombstone right after a delete event of its key (the SMT's
    `rewrite-with-tombstone` mode; a connector restart re-sends both) adds nothing: the
    delete event carries the position, and is stale when it is a replay. Only a tombstone
    without such a delete before it is a delete (the `tombstone` and
    `delete-to-tombstone` modes). The record before a tombstone is in the batch, or, for
    the first record of a partition in the batch, the record at the partition's watermark
    (the last one read), looked up in the stream by offset and refresh time."""
    d, q, rel, keys = ctx.d, ctx.q, ctx.rel, ctx.keys
    stage, stream = rel.stage, rel.stream
    previous = ",\n".join(
        f"               LAG({q(k)}) OVER (PARTITION BY _kafka_partition ORDER BY _kafka_offset) AS {q('prev_' + k)}"
        for k in keys
    )
    same_key = " AND ".join(f"s.{q(k)} = p.{q('prev_' + k)}" for k in keys)
    tombstone = f"s._action = '{Action.DELETE}' AND s._op IS NULL"
    # b is a delete event: `__deleted` is "true", in the record or in its schemas.enable wrapper.
    delete_event = (
        "("
        + "\n         OR ".join(
            f"{d.json_get_text(obj, '__deleted')} = 'true'" for obj in ("b.payload", d.json_get("b.payload", "payload"))
        )
        + ")"
    )
    return (
        "-- 3. A tombstone right after a delete event of its key adds nothing (the delete event\n"
        "--    carries the position; Debezium's rewrite-with-tombstone mode, and its replays).\n"
        "IF v_positionless > 0 THEN\n"
        f"  UPDATE {stage} s SET _action = '{Action.TOMBSTONE}'\n"
        "  FROM (SELECT _kafka_partition, _kafka_offset,\n"
        "               LAG(_op) OVER (PARTITION BY _kafka_partition ORDER BY _kafka_offset) AS prev_op,\n"
        f"{previous}\n"
        f"        FROM {stage}) p\n"
        f"  WHERE {tombstone}\n"
        "    AND s._kafka_partition = p._kafka_partition AND s._kafka_offset = p._kafka_offset\n"
        f"    AND p.prev_op = 'd' AND {same_key};\n"
        "  -- The first record of its partition in this batch: the record before it was read last run.\n"
        f"  UPDATE {stage} s SET _action = '{Action.TOMBSTONE}'\n"
        f"  FROM {rel.watermark} w, {stream} a, {stream} b\n"
        f"  WHERE {tombstone}\n"
        "    AND w.kafka_partition = s._kafka_partition\n"
        "    AND a.kafka_partition = s._kafka_partition AND a.kafka_offset = s._kafka_offset AND a.refresh_time = s._refresh_time\n"
        "    AND b.kafka_partition = w.kafka_partition AND b.kafka_offset = w.last_offset AND b.refresh_time = w.last_refresh_time\n"
        f"    AND s._kafka_offset = (SELECT MIN(x._kafka_offset) FROM {stage} x WHERE x._kafka_partition = s._kafka_partition)\n"
        "    AND b.kafka_key = a.kafka_key\n"
        f"    AND {delete_event};\n"
        "END IF;"
    )


def stored_positions(ctx: TableSql) -> str:
    """The source positions stored for keys (column `_source_pos` of rows `k`): of the
    target rows and, in hard mode, of the deleted keys, one relation."""
    key_list = ", ".join(f"t.{ctx.q(k)}" for k in ctx.keys)
    held = ctx.rel.held(ctx.table)
    if len(held) == 1:
        return f"{held[0]} k"
    union = "\n                               UNION ALL ".join(f"SELECT {key_list}, t._source_pos FROM {r} t" for r in held)
    return f"({union}) k"


def stale_sql(ctx: TableSql) -> str:
    """5. A lookup of the newest stored position per winning key (a correlated MAX over the
    stored rows and deleted keys: at most one row, NULL when there is none), so the cost
    follows the batch, not the table. The number of stale winners goes to v_rows."""
    return (
        "-- 5. Never regress: a winner not newer than what is stored for its key is stale.\n"
        f"UPDATE {ctx.rel.stage} s SET _action = '{Action.STALE}', _reason = s._action\n"
        f"WHERE {WINNERS} AND s._source_pos IS NOT NULL\n"
        f"  AND s._source_pos <= (SELECT MAX(k._source_pos)\n"
        f"                        FROM {stored_positions(ctx)}\n"
        f"                        WHERE {key_match(ctx.d, ctx.keys, 'k', 's')});\n"
        "GET DIAGNOSTICS v_rows := ROW_COUNT;"
    )


def tied_changes_sql(ctx: TableSql) -> str:
    """5. Winners at exactly the stored position were set stale with the older ones (one
    lookup per winner); those that change something apply after all: another change of
    the same transaction (a compressed MySQL transaction shares one position), in Kafka
    order. What stays stale at a tie is a re-sent copy of the stored event (the same
    values, or a delete of a key deleted there). Stale winners are rare (replays), so
    this runs only when there are some (v_rows, from `stale_sql`); `_reason` holds the
    action they had."""
    d, q, rel, table = ctx.d, ctx.q, ctx.rel, ctx.table
    stage, target, deleted = rel.stage, rel.target, rel.deleted
    differs = " OR ".join(d.differs(f"t.{q(c.target_name)}", f"s.{q(c.target_name)}", c.sql_type) for c in table.value_columns)
    tied = f"{key_match(d, ctx.keys, 't', 's')} AND t._source_pos = s._source_pos"
    # (action it had, relation, what at the same position makes it a change)
    if ctx.hard_deletes:
        cases = [(Action.UPSERT, deleted, ""), (Action.DELETE, target, "")]
        if differs:
            cases.insert(0, (Action.UPSERT, target, f"({differs})"))
    else:
        cases = [
            (Action.UPSERT, target, f"(t._deleted{' OR ' + differs if differs else ''})"),
            (Action.DELETE, target, "NOT t._deleted"),
        ]
    # A replayed record was read before at its own offset: at a tie, when that is earlier
    # in Kafka order than the record that wrote what is stored, the replay is the older.
    replays = "\n".join(
        f"    UPDATE {stage} s SET _reason = NULL\n"
        f"    WHERE s._rn = 1 AND s._action = '{Action.STALE}' AND s._reason IS NOT NULL\n"
        f"      AND {replayed(ctx)}\n"
        f"      AND EXISTS (SELECT 1 FROM {relation} t WHERE {tied}\n"
        f"        AND {kafka_earlier('s', 't')});"
        for relation in rel.held(table)
    )
    updates = "\n".join(
        f"  UPDATE {stage} s SET _action = s._reason, _reason = NULL\n"
        f"  WHERE s._rn = 1 AND s._action = '{Action.STALE}' AND s._reason = '{action}'\n"
        f"    AND EXISTS (SELECT 1 FROM {relation} t WHERE {tied}" + (f"\n      AND {changes});" if changes else ");")
        for action, relation, changes in cases
    )
    return (
        "-- 5. A stale winner at exactly the stored position that changes something is another\n"
        "--    change of the same transaction (compressed MySQL binlog): it applies, in Kafka\n"
        "--    order. A re-sent copy of the stored event stays stale, and so does a replayed\n"
        "--    record earlier in Kafka order than the record that wrote what is stored (its\n"
        "--    `_reason` cleared). (One statement per case: Redshift takes no correlated\n"
        "--    subquery under an OR.)\n"
        "IF v_rows > 0 THEN\n"
        f"  IF v_replayed > 0 THEN\n{replays}\n  END IF;\n"
        f"{updates}\n"
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

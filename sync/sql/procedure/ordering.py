"""4. Kafka order and the order of a key's events, the newest stored state of keys, and
the rules that order the stage before the stale rules (sync/sql/procedure/stale.py):
events without a source position ranked again, redundant tombstones."""

from __future__ import annotations

from collections.abc import Sequence

from sync.sql.apply import key_match
from sync.sql.procedure.context import APPLIED, Action, TableSql, positionless
from sync.sql.procedure.fields import merged_levels, named_texts
from sync.sql.procedure.text import extended, indent, subquery
from sync.sql.semantic import DecodeSql


def kafka_time(record: str) -> str:
    """A record's Kafka time (stream columns `record`kafka_partition, ...; `_` for the
    stage's): the newest Kafka timestamp of its partition up to it. It never decreases
    along a partition, so Kafka order across partitions, (Kafka time, partition, offset),
    keeps each partition's offset order even where a producer's clock stepped back. Computed
    once, by the stage query over every record of the batch, and kept in the stage's
    `_kafka_time` for the steps that order the stage again."""
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


def kafka_later(a: str, a_time: str, b: str, b_time: str, lines: bool = True) -> str:
    """Record `a` (its `_kafka_partition`, `_kafka_offset`, and Kafka timestamp `a_time`)
    is later in Kafka order than `b`: by offset in one partition; across partitions by
    timestamp, then partition (a tie, or a time unknown). On several lines, or on one."""
    breaks = ("\n ", "\n    ", "\n         ") if lines else (" ", " ", " ")
    return (
        f"({a}._kafka_partition = {b}._kafka_partition AND {a}._kafka_offset > {b}._kafka_offset{breaks[0]}"
        f"OR {a}._kafka_partition <> {b}._kafka_partition{breaks[1]}"
        f"AND ({a_time} > {b_time}{breaks[2]}"
        f"OR (COALESCE({a_time} = {b_time}, true) AND {a}._kafka_partition > {b}._kafka_partition)))"
    )


def replayed(ctx: TableSql, row: str = "s") -> str:
    """The stage row `row` is a replayed quarantined record: at or below its partition's
    watermark (the stream's records of a batch are above it)."""
    return (
        f"EXISTS (SELECT 1 FROM {ctx.rel.watermark} w"
        f" WHERE w.kafka_partition = {row}._kafka_partition AND {row}._kafka_offset <= w.last_offset)"
    )


def stored_state(ctx: TableSql, wanted: str, extra: Sequence[tuple[str, ...]] = (), held: Sequence[str] | None = None) -> str:
    """What is stored for each key whose rows match `wanted` (a condition on the stored row
    `t`): its target rows and, in hard mode, its deleted key (`held`: those relations
    instead), each with its `_source_pos`, `_kafka_partition`, `_kafka_offset` and the
    `extra` columns (one expression per relation, the first named), numbered newest first
    per key. The statement that reads it keeps the newest (`newest_stored`): a primary key
    is not enforced on Redshift, and an UPDATE ... FROM that matches a row twice must not
    depend on which match wins; stored rows keep no Kafka time, so between copies of one key
    partition and offset only make the choice deterministic. The one lookup of what is
    stored: every rule that needs it reads it in this form."""
    relations = list(held or ctx.rel.held(ctx.table))

    def numbered(row: str) -> str:
        keys = ", ".join(f"{row}.{ctx.q(k)}" for k in ctx.keys)
        order = rank_order(f"{row}._source_pos", f"{row}._kafka_partition DESC, {row}._kafka_offset DESC")
        return f"ROW_NUMBER() OVER (PARTITION BY {keys}\n    ORDER BY {order}) AS stored_rn__"

    columns = ", ".join([*(f"t.{ctx.q(k)}" for k in ctx.keys), "t._source_pos", "t._kafka_partition", "t._kafka_offset"])
    if len(relations) == 1:
        extras = "".join(f", {e[0]}" for e in extra)
        return f"(SELECT {columns}{extras},\n  {numbered('t')}\n  FROM {relations[0]} t WHERE {wanted})"
    union = "\n        UNION ALL ".join(
        f"SELECT {columns}{''.join(f', {e[i]}' for e in extra)} FROM {relation} t\n        WHERE {wanted}"
        for i, relation in enumerate(relations)
    )
    return f"(SELECT k.*, {numbered('k')}\n  FROM ({union}) k)"


def newest_stored(alias: str = "t") -> str:
    """The row of `stored_state` (as `alias`) that is the newest stored state of its key."""
    return f"{alias}.stored_rn__ = 1"


def rerank_sql(ctx: TableSql) -> str:
    """Events without a source position (tombstones, PostgreSQL incremental-snapshot
    reads) come after the row stored for their key, whatever the batch replays before
    them: their rank is raised to the stored position and their keys are ranked again, in
    one statement over the events of those keys (`p`: each event's rank position, its own
    for an event with a position). "Before" is Kafka order (`kafka_order`, over the Kafka
    time the stage query wrote): a key's records span two partitions once the topic's
    partition count grows. The stage is joined on the key too (the DISTKEY: collocated on
    Redshift) besides the record's partition and offset. GREATEST ignores NULLs on both
    engines (r_GREATEST_LEAST: "NULL values in the list are ignored")."""
    d, q, rel, keys = ctx.d, ctx.q, ctx.rel, ctx.keys
    stage = rel.stage
    stored = stored_state(ctx, f"EXISTS (SELECT 1 FROM {stage} y WHERE {positionless('y.')} AND {key_match(d, keys, 'y', 't')})")
    oldest_first = kafka_order("x._kafka_time", "x._kafka_partition", "x._kafka_offset", newest_first=False)
    order = rank_order("p.rank_pos", kafka_order("p._kafka_time", "p._kafka_partition", "p._kafka_offset"))
    same_record = (
        f"{key_match(d, keys, 's', 'r')} AND s._kafka_partition = r._kafka_partition AND s._kafka_offset = r._kafka_offset"
    )
    # Its own position, else the newest position before it, raised to the stored one when that is newer.
    newest_before = (
        f"MAX(x._source_pos) OVER (PARTITION BY {', '.join('x.' + q(k) for k in keys)}\n"
        f"                         ORDER BY {oldest_first} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"
    )
    return (
        "-- 4. Events without a source position: each takes the newest position seen before it\n"
        "--    for its key in Kafka order (so it supersedes what precedes it and loses to what\n"
        "--    follows), and ranks after what is stored for its key (row or deleted key).\n"
        "IF v_positionless > 0 THEN\n"
        f"  UPDATE {stage} s SET _rank_pos = r.rank_pos, _rn = r.rn\n"
        f"  FROM (SELECT p.*, ROW_NUMBER() OVER (PARTITION BY {', '.join('p.' + q(k) for k in keys)}\n"
        f"                      ORDER BY {order}) AS rn\n"
        f"        FROM (SELECT {', '.join('x.' + q(k) for k in keys)}, x._kafka_partition, x._kafka_offset, x._kafka_time,\n"
        "                     CASE WHEN x._source_pos IS NULL THEN GREATEST(t._source_pos,\n"
        f"                       {newest_before})\n"
        "                     ELSE x._rank_pos END AS rank_pos\n"
        f"              FROM {stage} x\n"
        f"              LEFT JOIN {indent(stored, 24).lstrip()} t ON {key_match(d, keys, 't', 'x')} AND {newest_stored()}\n"
        f"              WHERE x._action IN {APPLIED}\n"
        f"                AND EXISTS (SELECT 1 FROM {stage} y WHERE {positionless('y.')} AND {key_match(d, keys, 'y', 'x')})) p) r\n"
        f"  WHERE {same_record};\n"
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
    q, rel, keys = ctx.q, ctx.rel, ctx.keys
    stage, stream = rel.stage, rel.stream
    previous = ",\n".join(
        f"               LAG({q(k)}) OVER (PARTITION BY _kafka_partition ORDER BY _kafka_offset) AS {q('prev_' + k)}"
        for k in keys
    )
    same_key = " AND ".join(f"s.{q(k)} = p.{q('prev_' + k)}" for k in keys)
    tombstone = f"s._action = '{Action.DELETE}' AND s._op IS NULL"
    # b is a delete event: `__deleted` is "true", in the record or in its schemas.enable wrapper.
    previous_record, delete_event = _delete_event(ctx)
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
        f"  FROM {rel.watermark} w, {stream} a, {previous_record}\n"
        f"  WHERE {tombstone}\n"
        "    AND w.kafka_partition = s._kafka_partition\n"
        "    AND a.kafka_partition = s._kafka_partition AND a.kafka_offset = s._kafka_offset AND a.refresh_time = s._refresh_time\n"
        "    AND b.kafka_partition = w.kafka_partition AND b.kafka_offset = w.last_offset AND b.refresh_time = w.last_refresh_time\n"
        f"    AND s._kafka_offset = (SELECT MIN(x._kafka_offset) FROM {stage} x WHERE x._kafka_partition = s._kafka_partition)\n"
        "    AND b.kafka_key = a.kafka_key\n"
        f"    AND {delete_event};\n"
        "END IF;"
    )


def _delete_event(ctx: TableSql) -> tuple[str, str]:
    """The stream as `b`, and the condition that its record `b` is a delete event of an
    unwrapped topic: `__deleted` is "true", in the record or in its schemas.enable wrapper.
    Where the dialect names a field's text (JSON_SIZE once per value), `b` names them."""
    d, stream = ctx.d, ctx.rel.stream

    def objects(row: str) -> list[str]:
        return [f"{row}.payload", d.json_get(f"{row}.payload", "payload")]

    named = [named_texts(d, obj, ["__deleted"], f"d{i}") for i, obj in enumerate(objects("f"))]
    if not any(texts for _, texts in named):
        texts = [d.json_get_text(obj, "__deleted") for obj in objects("b")]
        return f"{stream} b", "(" + "\n         OR ".join(f"{t} = 'true'" for t in texts) + ")"
    level = f"SELECT b.kafka_partition, b.kafka_offset, b.refresh_time, b.kafka_key, b.payload FROM {stream} b"
    for values in merged_levels([DecodeSql(levels) for levels, _ in named]):
        level = extended(d, level, values)
    deleted = " OR ".join(f"{texts['__deleted']} = 'true'" for _, texts in named)
    return (
        "(SELECT f.kafka_partition, f.kafka_offset, f.refresh_time, f.kafka_key,\n"
        f"            {deleted} AS deleted\n" + indent(subquery(d, level, "b"), 6) + ")"
    ), "b.deleted"

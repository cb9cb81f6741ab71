"""History mode, tombstone-only deletes (unwrapped topics): which are re-sent copies, and
which wait for their key's next record to tell.

A tombstone-only delete has no position: it ranks at the newest position before it
(`ordering.rerank_sql`). After a restart re-sends it, it follows the key's re-created row,
at that row's position: a delete after that position to all appearances, until the
record after it re-sends that same event (a real delete is followed by newer positions
only). Such a tombstone was a re-sent one: no version. A copy of the tombstone right after
a re-sent copy of that event (the key's next event) keeps it, wherever that copy ranks
(after a re-created row, at its position), whichever re-sent copy it follows (a second
restart can interrupt the first one's re-sent run): a restart that resumed before the
event before a real tombstone re-sends both, in order (the version is the first copy's).

When the batch ends on that re-sent copy, the record that tells is not read yet: the
tombstone waits as a marker (`_op = 'p'`), no version (an empty interval, never current,
outside its key's intervals). The key's first event of a later batch decides, as one
batch holding both records would: a tombstone makes the marker the delete again (a
version of the batch, `resolved_markers`), anything else removes it. The rules:
docs/correctness.md, "History mode"."""

from __future__ import annotations

from sync.sql.apply import key_match
from sync.sql.procedure.context import TableSql
from sync.sql.procedure.history_copies import EVENT_ACTIONS, EVENTS, OP, PENDING_OP, TRUNCATED_OP, same_version
from sync.sql.procedure.ordering import kafka_later, kafka_order
from sync.sql.procedure.text import indent, packed


def _same_values(ctx: TableSql, a: str, b: str, margin: str) -> str:
    d, q = ctx.d, ctx.q
    return "".join(
        f"\n{margin}AND NOT {d.differs(f'{a}.{q(col.target_name)}', f'{b}.{q(col.target_name)}', col.sql_type)}"
        for col in ctx.table.value_columns
    )


def _events(ctx: TableSql, column: str, window: str) -> str:
    """The batch's events, each with `window` over its key's events in Kafka order."""
    order = kafka_order("_kafka_timestamp", "_kafka_partition", "_kafka_offset", newest_first=False)
    keys = ", ".join(ctx.q(k) for k in ctx.keys)
    return (
        f"(SELECT *, {window}\n                OVER (PARTITION BY {keys} ORDER BY {order}) AS {column}\n"
        f"      FROM {ctx.rel.stage} s WHERE {EVENTS})"
    )


def _copy_followed(ctx: TableSql, t: str, next_is: str) -> str:
    """The last re-sent copy `k` of the stage event `s` (its key, position and values) in
    the batch, later than the tombstone `t`, whose key's next event in the batch,
    `k.tombstone_next__` (1: a tombstone; NULL: none, the batch ends on it), meets
    `next_is`. The last one: each restart re-sends the copy and, after a real delete, the
    tombstone; a copy followed by a tombstone that a later copy follows again only shows
    a restart that re-sent both."""
    d = ctx.d
    events = _events(ctx, "tombstone_next__", "LEAD(CASE WHEN _op IS NULL THEN 1 ELSE 0 END)")
    return (
        f"EXISTS (SELECT 1 FROM {events} k\n"
        f"    WHERE {next_is} AND {key_match(d, ctx.keys, 'k', 's')}\n"
        f"      AND COALESCE(k._source_pos, k._rank_pos) = {t}._valid_from_pos{_same_values(ctx, 'k', 's', '      ')}\n"
        f"      AND {indent(kafka_later('k', 'k._kafka_timestamp', t, f'{t}._kafka_timestamp'), 10).lstrip()}\n"
        f"      AND NOT EXISTS (SELECT 1 FROM {ctx.rel.stage} l WHERE l._action IN {EVENT_ACTIONS} AND {key_match(d, ctx.keys, 'l', 's')}\n"
        f"        AND COALESCE(l._source_pos, l._rank_pos) = {t}._valid_from_pos{_same_values(ctx, 'l', 's', '        ')}\n"
        f"        AND {indent(kafka_later('l', 'l._kafka_timestamp', 'k', 'k._kafka_timestamp'), 12).lstrip()}))"
    )


def _resent_tombstone(ctx: TableSql, t: str, pending: bool) -> str:
    """The versions `t` that are tombstone-only deletes a later re-sent copy `s` (a stage
    event) of `c`, the version before them, follows, no copy of `c` after them followed by
    a tombstone; `pending`: the batch ends on such a copy (else: it does not)."""
    d, q, hist = ctx.d, ctx.q, ctx.rel.history
    # A tombstone carries no row image: its version has no values (a delete event has its before image).
    no_image = "".join(f"\n  AND {t}.{q(col.target_name)} IS NULL" for col in ctx.table.value_columns)
    return (
        f"SELECT DISTINCT {', '.join(f'{t}.{q(k)}' for k in ctx.keys)}, {t}._valid_from_pos, {t}._kafka_partition, {t}._kafka_offset,\n"
        f"       {t}._op\n"
        f"FROM {ctx.rel.stage} s, {hist} c, {hist} {t}\n"
        f"WHERE {EVENTS} AND {t}._op = 'd' AND {OP} <> 'd'{no_image}\n"
        f"  AND {key_match(d, ctx.keys, t, 's')} AND {key_match(d, ctx.keys, 'c', 's')}\n"
        f"  AND {t}._valid_from_pos = COALESCE(s._source_pos, s._rank_pos) AND c._valid_from_pos = {t}._valid_from_pos\n"
        f"  AND c._op NOT IN ('d', '{TRUNCATED_OP}'){_same_values(ctx, 'c', 's', '  ')}\n"
        f"  AND {indent(kafka_later('s', 's._kafka_timestamp', t, f'{t}._kafka_timestamp'), 6).lstrip()}\n"
        f"  AND {indent(kafka_later(t, f'{t}._kafka_timestamp', 'c', 'c._kafka_timestamp'), 6).lstrip()}\n"
        + (
            f"  AND NOT {_copy_followed(ctx, t, 'k.tombstone_next__ = 1')}\n  AND {_copy_followed(ctx, t, 'k.tombstone_next__ IS NULL')}"
            if pending
            else f"  AND NOT {_copy_followed(ctx, t, 'COALESCE(k.tombstone_next__, 1) = 1')}"
        )
    )


def pending_tombstones(ctx: TableSql) -> str:
    """The versions that wait for their key's next record after this batch (rows `t`)."""
    return _resent_tombstone(ctx, "t", pending=True)


def _decided_by_batch(ctx: TableSql, row: str) -> str:
    """The marker `row`'s key has an event in the batch: its first decides."""
    return f"EXISTS (SELECT 1 FROM {ctx.rel.stage} s WHERE {EVENTS} AND {key_match(ctx.d, ctx.keys, 's', row)})"


def resolved_markers(ctx: TableSql, columns: list[str]) -> str:
    """The markers the batch does not void, as deletes again: a UNION ALL branch of the
    batch's events (`history.versions_sql`), dated by their own record. Their key's first
    event of the batch is a tombstone (a re-sent copy of them: it then adds nothing), or a
    re-sent copy of the version before them is followed by a tombstone or ends the batch
    (a second restart cut the re-sent run): the rules of `void_tombstones_sql` then keep
    them, or leave them waiting again."""
    d, hist = ctx.d, ctx.rel.history
    op = ctx.q("_op")
    selected = [f"'d' AS {c}" if c == op else f"p.{c}" for c in columns]
    first = _events(ctx, "first__", "ROW_NUMBER()")
    events = _events(ctx, "tombstone_next__", "LEAD(CASE WHEN _op IS NULL THEN 1 ELSE 0 END)")
    return (
        f"\n  UNION ALL\n  SELECT {packed(selected, ' ' * 9)}\n  FROM {hist} p\n"
        f"  WHERE p._op = '{PENDING_OP}'\n"
        f"    AND (EXISTS (SELECT 1 FROM {indent(first, 4).lstrip()} f\n"
        f"           WHERE f.first__ = 1 AND f._op IS NULL AND {key_match(d, ctx.keys, 'f', 'p')})\n"
        f"      OR EXISTS (SELECT 1 FROM {hist} c, {indent(events, 4).lstrip()} k\n"
        f"           WHERE COALESCE(k.tombstone_next__, 1) = 1 AND {key_match(d, ctx.keys, 'k', 'p')} AND {key_match(d, ctx.keys, 'c', 'p')}\n"
        f"             AND COALESCE(k._source_pos, k._rank_pos) = p._valid_from_pos AND c._valid_from_pos = p._valid_from_pos\n"
        f"             AND c._op NOT IN ('d', '{TRUNCATED_OP}', '{PENDING_OP}'){_same_values(ctx, 'c', 'k', '             ')}\n"
        f"             AND {indent(kafka_later('p', 'p._kafka_timestamp', 'c', 'c._kafka_timestamp'), 17).lstrip()}))"
    )


def void_tombstones_sql(ctx: TableSql) -> str:
    """The re-sent tombstones go (those whose copy may follow the batch's last record
    wait: `history.intervals_sql` marks them), and so do the markers their key's events in
    this batch decided (`resolved_markers` put back those it kept)."""
    hist = ctx.rel.history
    voided = _resent_tombstone(ctx, "t", pending=False)
    decided = f"SELECT {', '.join(f'p.{ctx.q(k)}' for k in ctx.keys)}, p._valid_from_pos, p._kafka_partition, p._kafka_offset, p._op\nFROM {hist} p\nWHERE p._op = '{PENDING_OP}' AND {_decided_by_batch(ctx, 'p')}"
    return (
        "-- History: a tombstone-only delete followed by a re-sent copy of the event before it was re-sent,\n"
        "-- unless a re-sent copy of that event is followed by the tombstone's (or may be: the batch ends on\n"
        "-- it); the waiting ones this batch decided go (those it kept are inserted again).\n"
        f"DELETE FROM {hist}\nUSING ({indent(voided, 7).lstrip()}\n"
        f"       UNION ALL\n       {indent(decided, 7).lstrip()}) v\n"
        f"WHERE {same_version(ctx, hist, 'v')} AND {hist}._op = v._op;"
    )

"""History mode: which of a batch's events are new versions and which are re-delivered
copies of versions the history holds.

Per key and position, the versions in version order (source position, then Kafka order)
are a sequence: those the history holds at the batch's positions, then the batch's
events. A restart re-sends a run of events in order, so a re-delivered copy repeats,
event for event, the run of versions just before it: a repeat at step L (each event the
same version as the one L places back). At a position of its own (a step of 1) that is
always a copy. At a tied position (a compressed MySQL transaction: every change of it at
one position) a transaction that changes a key back and forth repeats too, so a repeat at
a longer step is taken for a copy only where a restart shows: it is as long as its step
and starts with an event that cannot follow the version before it (an insert of a live
row, an update or delete of a deleted one), or a change at another position lies between
it and that version in their partition (a transaction's records are consecutive there
unless re-sent). The latter shows a restart however much of the re-sent run the batch
holds (a sync may run while the rest is on its way); the former does not: a shorter run
may follow a copy no record told from a version (the limit below), whose version would
then end its key's history in the wrong state. Deletes without an image (tombstone-only
deletes, whose position is the one ranked before them, not a transaction's) are a
sequence of their own at a position: one repeats the one before it. Otherwise a repeat
is versions, in Kafka order, as the current-state merge applies a tie: a restart that
stops and resumes within one compressed transaction's records re-sends changes that no
record tells from the transaction changing the key back. docs/correctness.md, "History mode"."""

from __future__ import annotations

from sync.sql.apply import key_match
from sync.sql.procedure.context import Action, TableSql
from sync.sql.procedure.text import packed

# The stage records that are events of their key: applied, superseded in the batch, older
# than the stored row (stale: a late event is a version in its place), or voided by a
# newer truncate of the batch.
EVENT_ACTIONS = f"('{Action.UPSERT}', '{Action.DELETE}', '{Action.STALE}', '{Action.TRUNCATED}')"
EVENTS = f"s._action IN {EVENT_ACTIONS}"
# A version's operation: the event's (c, r, u, d; a tombstone has none: a delete).
OP = "CASE WHEN s._op IN ('c', 'r', 'u') THEN s._op ELSE 'd' END"
# A closing marker: a truncate ended the version before it.
TRUNCATED_OP = "t"
# A tombstone-only delete waiting for its key's next record (`history_tombstones`): no version.
PENDING_OP = "p"
# A version the previous one at its position cannot precede without a restart between.
IMPOSSIBLE = "(x._op = 'c' AND x.prev_op__ IN ('c', 'r', 'u') OR x._op IN ('u', 'd') AND x.prev_op__ = 'd')"


def unwrapped(ctx: TableSql) -> bool:
    """Only unwrapped topics have tombstone-only deletes (the full envelope's tombstones are skipped)."""
    return ctx.table.format == "debezium-unwrap"


def copies_ctes(ctx: TableSql, columns: list[str], events: str, same_version: str, order: str, gate: str | None) -> str:
    """The WITH clause: `_ev`, the batch's events as versions (`events`: its SELECT of
    `columns`); `_at`, the versions the history holds at an event's key and position;
    `_dup`, the keys' positions with more than one version (of `_at` and `_ev`: only there
    can an event repeat one; most batches' events are alone at their position and skip the
    rest); `_seq`, the versions at those positions, numbered (`n__`) apart from the deletes
    without an image (`imageless__`, tombstone-only deletes among them, ranked at the
    position before them), which are a sequence of their own; `_rep`, the batch's events
    that repeat a version before them, by step and run; `_copy`, the repeats that are
    re-delivered copies. `same_version`: rows `a` and `b` are one version; `order`: the
    version order of the rows `x`; `gate`: a condition without which no stored version lies
    at a position of the batch (none: the history is read)."""
    d, q, hist = ctx.d, ctx.q, ctx.rel.history
    keys = [q(k) for k in ctx.keys]
    key_list = ", ".join(f"x.{k}" for k in keys)
    at = f"PARTITION BY {key_list}, x.pos__, x.imageless__\n           ORDER BY {order}"
    no_image = "".join(f" AND y.{q(c.target_name)} IS NULL" for c in ctx.table.value_columns)
    b_keys = ", ".join(f"b.{k}" for k in keys)
    r_keys = ", ".join(keys)
    e_keys = ", ".join(f"e.{k}" for k in keys)
    # Closing markers, and for unwrapped topics tombstones waiting for their key's next record, are no versions.
    not_versions = f"NOT IN ('{TRUNCATED_OP}', '{PENDING_OP}')" if unwrapped(ctx) else f"<> '{TRUNCATED_OP}'"
    pos = "COALESCE(e._valid_from_pos, '')"
    return (
        f"WITH _ev AS (\n{events}),\n"
        "-- the versions the history holds at a position of one of the batch's events\n"
        "_at AS (\n"
        f"  SELECT {packed([f'h.{c}' for c in columns], ' ' * 9)}, COALESCE(h._valid_from_pos, '') AS pos__\n"
        f"  FROM {hist} h\n"
        f"  WHERE h._op {not_versions}\n"
        + (f"    AND {gate}\n" if gate else "")
        + f"    AND COALESCE(h._valid_from_pos, '') >= (SELECT MIN({pos}) FROM _ev e)\n"
        f"    AND EXISTS (SELECT 1 FROM _ev e WHERE {key_match(d, ctx.keys, 'e', 'h')}\n"
        f"      AND {pos} = COALESCE(h._valid_from_pos, ''))),\n"
        "-- the key's positions with more than one version: only there can an event be a copy\n"
        "_dup AS (\n"
        f"  SELECT {r_keys}, pos__\n"
        f"  FROM (SELECT {r_keys}, pos__ FROM _at\n"
        "        UNION ALL\n"
        f"        SELECT {e_keys}, {pos} FROM _ev e) v\n"
        f"  GROUP BY {r_keys}, pos__ HAVING COUNT(*) > 1),\n"
        "-- each key's versions at such a position: the history's, then the batch's events\n"
        "_seq AS (\n"
        f"  SELECT x.*, ROW_NUMBER() OVER ({at}) AS n__,\n"
        f"         LAG(x._op) OVER ({at}) AS prev_op__,\n"
        f"         COUNT(*) OVER (PARTITION BY {key_list}, x.pos__, x.imageless__) AS members__\n"
        f"  FROM (SELECT y.*, y._op = 'd'{no_image} AS imageless__\n"
        "        FROM (SELECT a.*, false AS new__ FROM _at a\n"
        "              UNION ALL\n"
        f"              SELECT e.*, {pos}, true FROM _ev e) y\n"
        f"        WHERE EXISTS (SELECT 1 FROM _dup u WHERE {key_match(d, ctx.keys, 'u', 'y')} AND u.pos__ = y.pos__)) x),\n"
        "-- a batch's event that is the same version as the one `step__` before it, numbered along\n"
        "-- each run of such at one step (`run__`)\n"
        "_rep AS (\n"
        f"  SELECT {b_keys}, b.pos__, b.imageless__, b.n__, b.n__ - a.n__ AS step__,\n"
        f"         b.n__ - ROW_NUMBER() OVER (PARTITION BY {b_keys}, b.pos__, b.imageless__, b.n__ - a.n__\n"
        "                                    ORDER BY b.n__) AS run__\n"
        f"  FROM _seq a JOIN _seq b ON {key_match(d, ctx.keys, 'a', 'b')} AND a.pos__ = b.pos__\n"
        "    AND a.imageless__ = b.imageless__ AND a.n__ < b.n__\n"
        f"  WHERE b.new__ AND b.members__ > 1 AND a.members__ > 1 AND {same_version}),\n"
        "-- a re-sent copy: a repeat at a step of 1 (the versions just before it, again), a run as long as\n"
        "-- its step whose first event cannot follow the version before it, or any run with a change at\n"
        "-- another position between them in their partition (however much of the re-sent run the batch holds)\n"
        "_copy AS (\n"
        f"  SELECT {', '.join(f'r.{k}' for k in keys)}, r.pos__, r.imageless__, r.n__\n"
        "  FROM _rep r\n"
        f"  JOIN (SELECT {r_keys}, pos__, imageless__, step__, run__, MIN(n__) AS first__, COUNT(*) AS length__\n"
        f"        FROM _rep GROUP BY {r_keys}, pos__, imageless__, step__, run__) g\n"
        f"    ON {key_match(d, ctx.keys, 'g', 'r')} AND g.pos__ = r.pos__ AND g.imageless__ = r.imageless__\n"
        "    AND g.step__ = r.step__ AND g.run__ = r.run__\n"
        f"  JOIN _seq x ON {key_match(d, ctx.keys, 'x', 'g')} AND x.pos__ = g.pos__ AND x.imageless__ = g.imageless__\n"
        "    AND x.n__ = g.first__\n"
        f"  JOIN _seq p ON {key_match(d, ctx.keys, 'p', 'g')} AND p.pos__ = g.pos__ AND p.imageless__ = g.imageless__\n"
        "    AND p.n__ = g.first__ - 1\n"
        f"  WHERE g.step__ = 1 OR g.length__ >= g.step__ AND {IMPOSSIBLE}\n"
        f"    OR {_restart_between(ctx)})\n"
    )


def _restart_between(ctx: TableSql) -> str:
    """A restart lies between the rows `p` and `x` of one partition: a change or read at
    another position lies between them there (the history's, or the batch's). The records
    of one compressed transaction are consecutive in each partition while nothing re-sends
    them; re-sent, the records after them up to the restart (and from where it resumed)
    come between."""
    between = (
        "o._kafka_partition = x._kafka_partition\n"
        "             AND o._kafka_offset > p._kafka_offset AND o._kafka_offset < x._kafka_offset AND o._op IN ('c', 'r', 'u')"
    )
    return (
        "p._kafka_partition = x._kafka_partition\n"
        f"      AND (EXISTS (SELECT 1 FROM {ctx.rel.history} o WHERE {between}\n"
        "             AND COALESCE(o._valid_from_pos, '') <> x.pos__)\n"
        f"        OR EXISTS (SELECT 1 FROM {ctx.rel.stage} o WHERE {between}\n"
        "             AND o._source_pos <> x.pos__))"
    )


def new_versions(ctx: TableSql, columns: list[str]) -> str:
    """The batch's events that are no copy (`copies_ctes`): those alone at their key's
    position, and those of `_seq` no `_copy`; rows of `columns`."""
    match = key_match(ctx.d, ctx.keys, "u", "e")
    return (
        "SELECT e.* FROM _ev e\n"
        f"WHERE NOT EXISTS (SELECT 1 FROM _dup u WHERE {match} AND u.pos__ = COALESCE(e._valid_from_pos, ''))\n"
        "UNION ALL\n"
        f"SELECT {packed([f'x.{c}' for c in columns], ' ' * 7)} FROM _seq x\n"
        "WHERE x.new__ AND NOT EXISTS (SELECT 1 FROM _copy c\n"
        f"  WHERE {key_match(ctx.d, ctx.keys, 'c', 'x')} AND c.pos__ = x.pos__ AND c.imageless__ = x.imageless__ AND c.n__ = x.n__)"
    )


def same_version(ctx: TableSql, a: str, b: str) -> str:
    """The rows `a` and `b` are one version: its key, position and Kafka record."""
    return (
        f"{key_match(ctx.d, ctx.keys, a, b)}\n"
        f"  AND COALESCE({a}._valid_from_pos, '') = COALESCE({b}._valid_from_pos, '')\n"
        f"  AND {a}._kafka_partition = {b}._kafka_partition AND {a}._kafka_offset = {b}._kafka_offset"
    )

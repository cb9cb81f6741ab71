"""History mode (history = true): every applied event of a batch becomes a version of its
key in the history table, in the same transaction as the current-state merge. Two
statements on the common path (a batch after every stored version of its keys): each key's
current version is closed where its first event begins (`_closing_sql`), then the batch's
events new to the history are inserted (`versions_sql`). Otherwise the intervals of the
keys they touch are recomputed after the INSERT from the next version in source order
(`history_intervals`). Truncates add a closing marker per open key
(`truncate_markers_sql`) and recompute every key. The rules: docs/correctness.md,
"History mode"."""

from __future__ import annotations

from sync.sql import schemas
from sync.sql.apply import key_match
from sync.sql.procedure.context import APPLIED, Action, TableSql
from sync.sql.procedure.fields import toastable
from sync.sql.procedure.history_copies import EVENTS, OP, PENDING_OP, TRUNCATED_OP, copies_ctes, new_versions, unwrapped
from sync.sql.procedure.history_intervals import INTERVAL, intervals, intervals_sql, mark, toast_columns, version_order
from sync.sql.procedure.history_tombstones import resolved_markers, void_tombstones_sql
from sync.sql.procedure.ordering import kafka_later, kafka_order
from sync.sql.procedure.text import indent, packed

# Orders that give each change of a row a position of its own: two changes of a key never
# tie. PostgreSQL's LSN; SQL Server's (commit LSN, change LSN, event_serial_no), where "the
# event_serial_no field differentiates events that have the same commit and change LSN"
# and only a primary-key change shares them, as a delete of the old key and a create of
# the new one (Debezium SQL Server connector, update events); Db2's (commit LSN, change
# LSN), one per row change. Snapshot reads share a position (the capture's newest LSN), one
# per key and snapshot: two snapshots at one LSN read one state. Under these orders a
# placeholder in either of two events at one position is the same value (the batch's
# newest event has its placeholders filled by then by the TOAST step, and a re-sent copy of
# it does not: it would not match its own copy), and two records at a key's position are
# one change. Orders whose changes tie (a compressed MySQL transaction, an Oracle SCN) tell
# a second change at the position by its values: only the later event's placeholder
# matches any.
UNTIED_ORDERS = ("postgres-lsn", "sqlserver-lsn", "db2-lsn")


def _same_values(ctx: TableSql, a: str, b: str) -> str:
    """The rows `a` and `b` (later) hold the same values: a TOAST placeholder in `b`
    matches any, and in `a` too where positions do not tie (`UNTIED_ORDERS`)."""
    d, q = ctx.d, ctx.q
    toast = {c.target_name for c in ctx.table.value_columns if toastable(c)}
    marked = (b, a) if ctx.table.order_by in UNTIED_ORDERS else (b,)
    return "\n      AND ".join(
        (
            f"({' OR '.join(f'{r}._unavailable LIKE {mark(c)}' for r in marked)}"
            f" OR NOT {d.differs(f'{a}.{q(c)}', f'{b}.{q(c)}', col.sql_type)})"
        )
        if c in toast
        else f"NOT {d.differs(f'{a}.{q(c)}', f'{b}.{q(c)}', col.sql_type)}"
        for col in ctx.table.value_columns
        for c in [col.target_name]
    )


def versions_sql(ctx: TableSql) -> str:
    """The batch's events as versions, each once: a copy re-delivered in the batch, or an
    event that repeats versions the history holds, adds nothing (`history_copies`)."""
    d, table = ctx.d, ctx.table
    values = {
        **schemas.row_values(d, schemas.data_columns(table.columns), "s"),
        "_valid_from": "COALESCE(s._source_ts, s._kafka_timestamp)",
        "_valid_from_pos": "COALESCE(s._source_pos, s._rank_pos)",
        "_op": OP,
        "_kafka_partition": "s._kafka_partition",
        "_kafka_offset": "s._kafka_offset",
        "_kafka_timestamp": "s._kafka_timestamp",
        "_unavailable": "s._unavailable",
    }
    columns, selected = schemas.ordered(d, schemas.history(table), values, quoted=True)
    inner = [f"{e} AS {c}" for c, e in zip(columns, selected, strict=True)]
    events = f"  SELECT {packed(inner, ' ' * 9)}\n  FROM {ctx.rel.stage} s\n  WHERE {EVENTS}"
    if unwrapped(ctx):
        events += resolved_markers(ctx, columns)
    values_match = _same_values(ctx, "a", "b")
    same_version = "(a._op = 'd') = (b._op = 'd')" + (f"\n    AND (b._op = 'd'\n      OR {values_match})" if values_match else "")
    interval_columns = ", ".join(schemas.ordered(d, schemas.HISTORY, dict.fromkeys(INTERVAL), quoted=True)[0])
    return (
        "-- History: the batch's events as versions of their keys (superseded and late ones too),\n"
        "-- each once: a re-delivered copy of versions the history holds adds nothing. Their\n"
        "-- intervals among themselves; a recompute below joins them to the stored versions.\n"
        f"INSERT INTO {ctx.rel.history} (\n  {packed([*columns, interval_columns], '  ')}\n)\n"
        f"{copies_ctes(ctx, columns, events, same_version, version_order('x'), _stored_gate(ctx))}"
        f"SELECT {packed(['w.' + c for c in columns], ' ' * 7)},\n"
        f"       {(',' + chr(10) + '       ').join(intervals(ctx, 'w'))}\n"
        f"FROM ({indent(new_versions(ctx, columns), 6).lstrip()}) w;"
    )


def _stored_gate(ctx: TableSql) -> str | None:
    """Full envelope: `RECOMPUTE` counts every stored version at or after its key's first
    change in the batch (`history_counts`), so without one no stored version lies at a
    position of its key's events and the INSERT reads none (most batches: no late event,
    no re-sent copy). Unwrapped topics count no positions."""
    return None if unwrapped(ctx) else f"{RECOMPUTE} > 0"


def truncate_markers_sql(ctx: TableSql) -> str:
    """Each truncate of the batch closes every version open before it: each key whose
    newest version before the truncate's position is a row, and lies after the batch's
    truncate before it (which closed the key), gets a closing marker at the truncate (the
    coordinates of its first Kafka record in Kafka order: a copy re-sent to another
    partition comes later), once."""
    d, q, table, hist = ctx.d, ctx.q, ctx.table, ctx.rel.history
    key_list = ", ".join(f"x.{q(k)}" for k in ctx.keys)
    # A tombstone waiting for its key's next record is no version.
    waiting = f" AND x._op <> '{PENDING_OP}'" if unwrapped(ctx) else ""
    truncates = f"FROM {ctx.rel.stage} WHERE _action = '{Action.TRUNCATE}' AND _source_pos IS NOT NULL"
    values = {
        **schemas.row_values(d, schemas.data_columns(table.columns), "l", quoted=True),
        "_valid_from": "r._source_ts",
        "_valid_from_pos": "r._source_pos",
        "_op": f"'{TRUNCATED_OP}'",
        "_kafka_partition": "r._kafka_partition",
        "_kafka_offset": "r._kafka_offset",
        "_kafka_timestamp": "r._kafka_timestamp",
        # the closed version's placeholders too, which the recompute fills as the version's
        "_unavailable": "l._unavailable",
    }
    rest = (
        f"FROM (SELECT x.*, t.pos AS truncate_pos__, t.previous AS previous__,\n"
        f"             ROW_NUMBER() OVER (PARTITION BY t.pos, {key_list} ORDER BY {version_order('x', True)}) AS newest\n"
        f"      FROM {hist} x\n"
        "      JOIN (SELECT p.pos, LAG(p.pos) OVER (ORDER BY p.pos) AS previous\n"
        f"            FROM (SELECT DISTINCT _source_pos AS pos {truncates}) p) t ON x._valid_from_pos < t.pos{waiting}) l,\n"
        "     (SELECT _source_pos, _source_ts, _kafka_partition, _kafka_offset, _kafka_timestamp,\n"
        f"             ROW_NUMBER() OVER (PARTITION BY _source_pos ORDER BY {kafka_order('_kafka_time', '_kafka_partition', '_kafka_offset', newest_first=False)}) AS rn\n"
        f"      {truncates}) r\n"
        f"WHERE l.newest = 1 AND l._op NOT IN ('d', '{TRUNCATED_OP}') AND r.rn = 1 AND r._source_pos = l.truncate_pos__\n"
        "  AND (l.previous__ IS NULL OR l._valid_from_pos > l.previous__)\n"
        f"  AND NOT EXISTS (SELECT 1 FROM {hist} h WHERE {key_match(d, ctx.keys, 'h', 'l')}\n"
        f"    AND h._op = '{TRUNCATED_OP}' AND h._valid_from_pos = l.truncate_pos__);"
    )
    return schemas.insert_select_sql(d, hist, schemas.history(table), values, rest, quoted=True)


# The count of a batch's stored versions that need the full recompute (`history_counts`).
RECOMPUTE = "v_history_recompute"


# Where a condition's subquery goes on to the next line, under its SELECT.
_UNDER = "\0"


def _under_subquery(line: str) -> str:
    """`line` with its `_UNDER` mark made a line break lined up under the subquery it is in."""
    head, mark, rest = line.partition(_UNDER)
    return f"{head}\n{' ' * (head.rindex('(SELECT') + 1)}{rest}" if mark else line


def history_counts(ctx: TableSql, pad: str) -> dict[str, str]:
    """What the batch's counts add with a history (lines after the first start with
    `pad`): `RECOMPUTE`, the stored versions of its keys that need the full recompute of
    their intervals, not the short path (`_closing_sql`). Full envelope: those at or after
    the oldest source position of their key's changes in the batch (all of them when a
    change has none): an event inserted before or at a stored version's position, which
    may also change the value a stored TOAST placeholder took (a placeholder before every
    change of the batch keeps it). The batch's oldest position bounds the scan; the key's
    own decides, so a batch that holds an older event of another key (a partition read
    later than another: Kafka orders records only within one) keeps the short path. Only
    changes become versions: a tombstone (Debezium's default after every delete) has no
    position, and neither may a quarantined record; counting them would send every batch
    with a delete to the full recompute; nor are the stored versions of keys whose only
    records in the batch are such (no version of theirs is inserted). Unwrapped topics
    recompute every batch's keys (`_touched_intervals`): those with TOAST-able columns
    count the stored versions of the batch's keys that hold a placeholder, which the
    recompute then fills (the batch's own placeholders are `v_unavailable`'s, the current
    state's TOAST step); those without count nothing."""
    if ctx.table.history is None or unwrapped(ctx) and not toast_columns(ctx):
        return {}
    touched = key_match(ctx.d, ctx.keys, "s", "h")
    if unwrapped(ctx):
        which = f"\n{pad}     WHERE h._unavailable LIKE '%|%|%'"
    else:  # the key's own first change decides; the batch's oldest only prunes the scan
        which = "\n" + _under_subquery(
            f"{pad}     WHERE COALESCE(h._valid_from_pos, '') >= (SELECT MIN(COALESCE(s._source_pos, ''))"
            f"{_UNDER}FROM {ctx.rel.stage} s WHERE s._action IN {APPLIED})"
        )
        touched += f"\n{pad}           AND COALESCE(s._source_pos, '') <= COALESCE(h._valid_from_pos, '')"
    return {
        RECOMPUTE: f"(SELECT COUNT(*) FROM {ctx.rel.history} h{which}\n"
        f"{pad}       AND EXISTS (SELECT 1 FROM {ctx.rel.stage} s WHERE s._action IN {APPLIED} AND {touched}))"
    }


def _closing_sql(ctx: TableSql) -> str:
    """The touched keys' intervals when every stored version of each lies before the key's
    first change in the batch (`history_counts`): the versions the INSERT writes next have
    their final intervals among themselves, and the only stored version that changes is
    each key's current one, which ends where the key's first event begins (the first of its
    sequence at that position: never a copy). One read of the history, no window over it.
    Run before the INSERT (`_closing_first`), it finds the stored versions alone; it would
    close none of the INSERT's either (each begins at or after its key's first event)."""
    q, keys = ctx.q, ctx.keys
    first = ", ".join(f"r.{q(k)}" for k in keys)
    return (
        "-- History: every stored version of a batch key precedes the key's first event, so each\n"
        "-- key's current version ends where that event begins.\n"
        f"UPDATE {ctx.rel.history} h SET _valid_to = f._valid_from, _valid_to_pos = f._valid_from_pos, _is_current = false\n"
        f"FROM (SELECT {first}, r._valid_from, r._valid_from_pos\n"
        f"      FROM (SELECT e.*, ROW_NUMBER() OVER (PARTITION BY {', '.join(f'e.{q(k)}' for k in keys)}"
        f" ORDER BY {version_order('e')}) AS first__\n"
        f"            FROM (SELECT {', '.join(f's.{q(k)}' for k in keys)}, COALESCE(s._source_ts, s._kafka_timestamp) AS _valid_from,\n"
        "                         COALESCE(s._source_pos, s._rank_pos) AS _valid_from_pos, s._kafka_timestamp, s._kafka_partition,\n"
        f"                         s._kafka_offset\n                  FROM {ctx.rel.stage} s WHERE {EVENTS}) e) r\n"
        "      WHERE r.first__ = 1) f\n"
        f"WHERE {key_match(ctx.d, keys, 'h', 'f')} AND h._is_current AND COALESCE(h._valid_from_pos, '') < f._valid_from_pos;"
    )


def _if_chain(branches: list[tuple[str, str]], otherwise: str | None = None) -> str:
    """IF / ELSIF / ELSE over (condition, statements) branches."""
    parts = [f"{'IF' if n == 0 else 'ELSIF'} {c} THEN\n{indent(body, 2)}\n" for n, (c, body) in enumerate(branches)]
    return "".join(parts) + (f"ELSE\n{indent(otherwise, 2)}\n" if otherwise else "") + "END IF;"


# A batch that truncates the table (on_truncate = "delete"): every open version closes.
TRUNCATES = "v_truncates > 0 AND v_truncate_pos IS NOT NULL"


def _recompute_guard(ctx: TableSql) -> str:
    """When the touched keys' intervals are recomputed, their TOAST placeholders filled:
    the batch holds a placeholder (`v_unavailable`) or a stored version of its keys needs
    it (`history_counts`)."""
    return ("v_unavailable > 0 OR " if toast_columns(ctx) else "") + f"{RECOMPUTE} > 0"


def _touched_intervals(ctx: TableSql) -> tuple[list[tuple[str, str]], str | None]:
    """The touched keys' intervals after the versions' INSERT, as IF branches and what runs
    otherwise. Unwrapped topics otherwise recompute without filling: a re-sent tombstone
    the batch removes, or a waiting one it decides (`history_tombstones`), changes the
    interval of the version before it, wherever that lies in its key's sequence, which
    closing the current version does not reach. A full-envelope table otherwise closes each
    key's current version before the INSERT (`_closing_first`): nothing here."""
    if not history_counts(ctx, ""):
        return [], intervals_sql(ctx)
    return [(_recompute_guard(ctx), intervals_sql(ctx))], intervals_sql(ctx, fill=False) if unwrapped(ctx) else None


def _closing_first(ctx: TableSql, recomputed: list[str]) -> str:
    """A full-envelope table's short path (`_closing_sql`) when none of the `recomputed`
    conditions holds, taken before the versions' INSERT: its index probes then find each
    key's stored versions alone, not the batch's new ones beside them (none of which it
    could close: each begins at or after the key's first event). Unwrapped topics and
    tables without a count never take it."""
    if unwrapped(ctx) or not history_counts(ctx, ""):
        return ""
    none = " OR ".join(f"({c})" if " AND " in c else c for c in recomputed)
    return _if_chain([(f"NOT ({none})", _closing_sql(ctx))]) + "\n"


def _earlier_record_sql(ctx: TableSql) -> str:
    """Under an order whose changes never share a position (`UNTIED_ORDERS`), a stored
    version that a batch event at its key and position precedes in Kafka order gives way to
    it: a restart re-sent the change to another partition, and the copy was read first
    (its original's partition was appended late). One record stays the version, the first
    in Kafka order, as in one batch and in a rebuild; the INSERT after this writes it."""
    h = ctx.rel.history  # no alias: Redshift's DELETE takes none on its own table
    earlier = kafka_later(h, f"{h}._kafka_timestamp", "s", "s._kafka_timestamp")
    return (
        "-- History: a stored version whose change a batch event read late holds at an earlier Kafka\n"
        "-- record (a copy was read first) is that event's: it is deleted, and the INSERT writes the event.\n"
        f"DELETE FROM {h} USING {ctx.rel.stage} s\n"
        f"WHERE {EVENTS} AND {key_match(ctx.d, ctx.keys, h, 's')}\n"
        f"  AND {h}._valid_from_pos = COALESCE(s._source_pos, s._rank_pos)\n"
        f"  AND {h}._op IN ('c', 'r', 'u', 'd')\n"
        f"  AND {indent(earlier, 2).lstrip()};"
    )


def _earlier_records(ctx: TableSql) -> str:
    """`_earlier_record_sql` where a stored version may lie at a batch event's position
    (`RECOMPUTE`): full envelope, untied orders."""
    if unwrapped(ctx) or ctx.table.order_by not in UNTIED_ORDERS:
        return ""
    return _if_chain([(f"{RECOMPUTE} > 0", _earlier_record_sql(ctx))]) + "\n"


def history_sql(ctx: TableSql) -> str:
    """The history's statements of a batch with records."""
    branches, otherwise = _touched_intervals(ctx)
    if ctx.table.on_truncate == "delete":
        truncated = (
            "-- A truncate closes every open version; every key's intervals are recomputed.\n"
            f"{truncate_markers_sql(ctx)}\n{intervals_sql(ctx, keys_of_batch=False)}"
        )
        branches = [(TRUNCATES, truncated), *branches]
    recompute = _if_chain(branches, otherwise) if branches else otherwise
    void = f"{void_tombstones_sql(ctx)}\n" if unwrapped(ctx) else ""
    return f"{_closing_first(ctx, [c for c, _ in branches])}{_earlier_records(ctx)}{versions_sql(ctx)}\n{void}{recompute}"

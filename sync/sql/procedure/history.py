"""History mode (history = true): every applied event of a batch becomes a version of its
key in the history table, in the same transaction as the current-state merge. Two
statements on the common path: the batch's events new to the history are inserted
(`versions_sql`), then the intervals of the keys they touch are recomputed from the next
version in source order (`intervals_sql`). Truncates add a closing marker per open key
(`truncate_markers_sql`) and recompute every key. The rules: docs/correctness.md,
"History mode"."""

from __future__ import annotations

from sync.sql import schemas
from sync.sql.apply import key_match
from sync.sql.dialect import quote_literal
from sync.sql.procedure.context import Action, TableSql
from sync.sql.procedure.fields import toastable
from sync.sql.procedure.history_copies import EVENTS, OP, PENDING_OP, TRUNCATED_OP, copies_ctes, new_versions, same_version
from sync.sql.procedure.history_tombstones import pending_tombstones, resolved_markers, void_tombstones_sql
from sync.sql.procedure.text import indent, packed
from sync.sql.types import SqlType

_TIMESTAMP = SqlType("timestamp")
_POSITION = SqlType("varchar", 64)
# A version's interval, as the history table names it.
INTERVAL = ("_valid_to", "_valid_to_pos", "_is_current")


def version_order(row: str, newest_first: bool = False) -> str:
    """The order of a key's versions: source position (a version without one first), then
    Kafka order, as the current-state merge ranks a key's events (`ordering.rank_order`)."""
    columns = ("_valid_from_pos", "_kafka_timestamp", "_kafka_partition", "_kafka_offset")
    if newest_first:
        return ", ".join(f"{row}.{c} DESC" + (" NULLS LAST" if i < 2 else "") for i, c in enumerate(columns))
    return ", ".join(f"{row}.{c}" + (" ASC NULLS FIRST" if i < 2 else "") for i, c in enumerate(columns))


def _intervals(ctx: TableSql, row: str, marked: bool = False) -> list[str]:
    """A version's `valid_to`, `valid_to_pos` and `is_current` over the versions of its key
    (the rows `row`): to the next version's start; a closing marker, and in "close" mode a
    delete, lasts no time and is never current. One window: the last version has no next.
    `marked`: the rows with `pending__ = 1` are no versions (`history_tombstones`): a window
    of their own, no duration, never current."""
    q = ctx.q
    key_list = ", ".join(f"{row}.{q(k)}" for k in ctx.keys) + (f", {row}.pending__" if marked else "")
    window = f"PARTITION BY {key_list} ORDER BY {version_order(row)}"
    instant = f"('d', '{TRUNCATED_OP}')" if ctx.table.history.deletes == "close" else f"('{TRUNCATED_OP}')"
    at_once = f"{row}._op IN {instant}" + (f" OR {row}.pending__ = 1" if marked else "")
    lasting = f"{row}._op NOT IN {instant}" + (f" AND {row}.pending__ = 0" if marked else "")
    return [
        f"CASE WHEN {at_once} THEN {row}._valid_from\n            ELSE LEAD({row}._valid_from) OVER ({window}) END AS valid_to",
        f"CASE WHEN {at_once} THEN {row}._valid_from_pos\n"
        f"            ELSE LEAD({row}._valid_from_pos) OVER ({window}) END AS valid_to_pos",
        f"{lasting} AND LEAD(1) OVER ({window}) IS NULL AS is_current",
    ]


# Types Redshift's window functions neither partition by nor return (SUPER, VARBYTE).
UNWINDOWED = ("super", "varbyte")


def _toast_columns(ctx: TableSql) -> list[str]:
    """TOAST-able columns whose placeholders the history fills from the previous version
    (a SUPER or VARBYTE placeholder in a superseded event keeps NULL and its mark)."""
    return [c.target_name for c in ctx.table.value_columns if toastable(c) and c.sql_type.family not in UNWINDOWED]


def _mark(column: str) -> str:
    return quote_literal(f"%|{column}|%")


def _same_values(ctx: TableSql, a: str, b: str) -> str:
    """The rows `a` and `b` hold the same values (a TOAST placeholder in `b` matches any)."""
    d, q = ctx.d, ctx.q
    toast = {c.target_name for c in ctx.table.value_columns if toastable(c)}
    return "\n      AND ".join(
        (f"({b}._unavailable LIKE {_mark(c)} OR NOT {d.differs(f'{a}.{q(c)}', f'{b}.{q(c)}', col.sql_type)})")
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
    if _unwrapped(ctx):
        events += resolved_markers(ctx, columns)
    values_match = _same_values(ctx, "a", "b")
    same_version = "(a._op = 'd') = (b._op = 'd')" + (f"\n    AND (b._op = 'd'\n      OR {values_match})" if values_match else "")
    interval_columns = ", ".join(schemas.ordered(d, schemas.HISTORY, dict.fromkeys(INTERVAL), quoted=True)[0])
    return (
        "-- History: the batch's events as versions of their keys (superseded and late ones too),\n"
        "-- each once: a re-delivered copy of versions the history holds adds nothing. Their\n"
        "-- intervals among themselves; the UPDATE below joins them to the stored versions.\n"
        f"INSERT INTO {ctx.rel.history} (\n  {packed([*columns, interval_columns], '  ')}\n)\n"
        f"{copies_ctes(ctx, columns, events, same_version, version_order('x'), _stored_gate(ctx))}"
        f"SELECT {packed(['w.' + c for c in columns], ' ' * 7)},\n"
        f"       {(',' + chr(10) + '       ').join(_intervals(ctx, 'w'))}\n"
        f"FROM ({indent(new_versions(ctx, columns), 6).lstrip()}) w;"
    )


def _stored_gate(ctx: TableSql) -> str | None:
    """Full envelope: `RECOMPUTE` counts every stored version of the batch's keys at or after
    its oldest position (`history_counts`), so without one no stored version lies at a
    position of the batch's events and the INSERT reads none (most batches: no late event,
    no re-sent copy). Unwrapped topics count no positions."""
    return None if _unwrapped(ctx) else f"{RECOMPUTE} > 0"


def _unwrapped(ctx: TableSql) -> bool:
    """Only unwrapped topics have tombstone-only deletes (the full envelope's tombstones are skipped)."""
    return ctx.table.format == "debezium-unwrap"


def _recomputed(ctx: TableSql, keys_of_batch: bool, in_batch: bool, toast: list[str]) -> str:
    """Each version of the keys to recompute (those of the batch's events, or all), with its
    interval: to the next version's start (LEAD in version order); a closing marker, and
    in "close" mode a delete, lasts no time and is never current. TOAST placeholders take
    the value of the newest earlier version that had one. Unwrapped topics: a tombstone
    waiting for its key's next record (`in_batch`: one the batch leaves waiting too) is
    no version, `op` its marker's. `toast`: the columns whose placeholders are filled."""
    d, q, keys = ctx.d, ctx.q, ctx.keys
    key_list = ", ".join(f"x.{q(k)}" for k in keys)
    window = f"PARTITION BY {key_list} ORDER BY {version_order('x')}"
    groups = "".join(
        f",\n               COUNT(CASE WHEN x._unavailable LIKE {_mark(c)} THEN NULL ELSE 1 END) OVER ({window}\n"
        f"                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS {q('known_' + c)}"
        for c in toast
    )
    known = "".join(
        f",\n       x.{q(c)} AS {q('stored_' + c)},\n       FIRST_VALUE(x.{q(c)}) OVER (PARTITION BY {key_list}, x.{q('known_' + c)} ORDER BY {version_order('x')}\n"
        f"         ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS {q(c)}"
        for c in toast
    )
    touched = (
        f"\n        WHERE EXISTS (SELECT 1 FROM {ctx.rel.stage} s WHERE {EVENTS} AND {key_match(d, keys, 's', 'x')})"
        if keys_of_batch
        else ""
    )
    marked, flag, waiting, op = _unwrapped(ctx), "", "", ""
    if marked:
        waiting = (
            f"\n        LEFT JOIN ({indent(pending_tombstones(ctx), 19).lstrip()}) p\n          ON {indent(same_version(ctx, 'x', 'p'), 8).lstrip()}"
            if in_batch
            else ""
        )
        flag = f",\n               CASE WHEN x._op = '{PENDING_OP}'{' OR p._kafka_offset IS NOT NULL' if in_batch else ''} THEN 1 ELSE 0 END AS pending__"
        op = f"\n       x._op, CASE WHEN x.pending__ = 1 THEN '{PENDING_OP}' ELSE x._op END AS op,"
    rows = f"(SELECT x.*{flag}{groups}\n        FROM {ctx.rel.history} x{waiting}{touched}) x"
    return (
        f"(SELECT {', '.join(f'x.{q(k)}' for k in keys)}, x._valid_from_pos, x._kafka_partition, x._kafka_offset,\n"
        f"       x._valid_to, x._valid_to_pos, x._is_current, x._unavailable,{op}\n"
        f"       {(',' + chr(10) + '       ').join(_intervals(ctx, 'x', marked))}"
        f"{known}\n"
        f"FROM {rows}) n"
    )


def intervals_sql(ctx: TableSql, keys_of_batch: bool = True, in_batch: bool = True, fill: bool = True) -> str:
    """The intervals (and TOAST values) of the versions of the keys the batch touched,
    recomputed over each key's versions: an older event inserted late splits the interval
    it falls into. Only versions that change are written. `in_batch`: a sync batch's (not
    a snapshot's), whose tombstones may wait for their key's next record (unwrapped topics).
    `fill`: TOAST placeholders are filled (without: none of the versions holds one)."""
    d, q = ctx.d, ctx.q
    toast = _toast_columns(ctx) if fill else []
    sets = ["_valid_to = n.valid_to", "_valid_to_pos = n.valid_to_pos", "_is_current = n.is_current"]
    sets += [f"{q(c)} = CASE WHEN h._unavailable LIKE {_mark(c)} THEN n.{q(c)} ELSE h.{q(c)} END" for c in toast]
    changed = [
        d.differs("n._valid_to", "n.valid_to", _TIMESTAMP),
        d.differs("n._valid_to_pos", "n.valid_to_pos", _POSITION),
        "n._is_current <> n.is_current",
        *(
            f"n._unavailable LIKE {_mark(c)} AND {d.differs('n.' + q('stored_' + c), 'n.' + q(c), col.sql_type)}"
            for col in ctx.table.value_columns
            if (c := col.target_name) in toast
        ),
    ]
    if _unwrapped(ctx):
        sets.append("_op = n.op")
        changed.append("n._op <> n.op")
    changed_lines = [changed[0], *(f"         OR {c}" for c in changed[1:])]
    return (
        "-- History: each touched key's versions end where the next begins (source order); only\n"
        "-- the versions that change are written.\n"
        f"UPDATE {ctx.rel.history} h SET {packed(sets, '    ')}\n"
        f"FROM (SELECT n.* FROM {_recomputed(ctx, keys_of_batch, in_batch, toast)}\n"
        f"      WHERE {chr(10).join(changed_lines)}) n\n"
        f"WHERE {same_version(ctx, 'h', 'n')};"
    )


def truncate_markers_sql(ctx: TableSql) -> str:
    """A truncate closes every open version: each key whose newest version before the
    truncate's position is a row gets a closing marker at the truncate (its Kafka record's
    coordinates), once."""
    d, q, table, hist = ctx.d, ctx.q, ctx.table, ctx.rel.history
    key_list = ", ".join(f"x.{q(k)}" for k in ctx.keys)
    # A tombstone waiting for its key's next record is no version.
    waiting = f" AND x._op <> '{PENDING_OP}'" if _unwrapped(ctx) else ""
    values = {
        **schemas.row_values(d, schemas.data_columns(table.columns), "l", quoted=True),
        "_valid_from": "v_truncate_ts",
        "_valid_from_pos": "v_truncate_pos",
        "_op": f"'{TRUNCATED_OP}'",
        "_kafka_partition": "r._kafka_partition",
        "_kafka_offset": "r._kafka_offset",
        "_kafka_timestamp": "r._kafka_timestamp",
    }
    rest = (
        f"FROM (SELECT x.*, ROW_NUMBER() OVER (PARTITION BY {key_list} ORDER BY {version_order('x', True)}) AS newest\n"
        f"      FROM {hist} x WHERE x._valid_from_pos < v_truncate_pos{waiting}) l,\n"
        "     (SELECT _kafka_partition, _kafka_offset, _kafka_timestamp,\n"
        "             ROW_NUMBER() OVER (ORDER BY _kafka_partition, _kafka_offset) AS rn\n"
        f"      FROM {ctx.rel.stage} WHERE _action = '{Action.TRUNCATE}' AND _source_pos = v_truncate_pos) r\n"
        f"WHERE l.newest = 1 AND l._op NOT IN ('d', '{TRUNCATED_OP}') AND r.rn = 1\n"
        f"  AND NOT EXISTS (SELECT 1 FROM {hist} h WHERE {key_match(d, ctx.keys, 'h', 'l')}\n"
        f"    AND h._op = '{TRUNCATED_OP}' AND h._valid_from_pos = v_truncate_pos);"
    )
    return schemas.insert_select_sql(d, hist, schemas.history(table), values, rest, quoted=True)


# The count of a batch's stored versions that need the full recompute (`history_counts`).
RECOMPUTE = "v_history_recompute"


def history_counts(ctx: TableSql, pad: str) -> dict[str, str]:
    """What the batch's counts add with a history (lines after the first start with
    `pad`): `RECOMPUTE`, the stored versions of its keys that need the full recompute of
    their intervals, not the short path (`_closing_sql`). Those that hold a TOAST
    placeholder, whose value an event inserted before them changes; and (full envelope)
    those at or after the batch's oldest source position (all of them when a record has
    none): an event inserted before or at a stored version's position. The batch's own
    placeholders are `v_unavailable`'s (the current state's TOAST step). Unwrapped topics
    without TOAST-able columns always recompute (`_touched_intervals_sql`): no count."""
    if ctx.table.history is None:
        return {}
    placeholder = ["h._unavailable LIKE '%|%|%'"] if _toast_columns(ctx) else []
    later = (
        []
        if _unwrapped(ctx)
        else [f"COALESCE(h._valid_from_pos, '') >= (SELECT MIN(COALESCE(s._source_pos, '')) FROM {ctx.rel.stage} s)"]
    )
    conditions = [*placeholder, *later]
    if not conditions:
        return {}
    which = (
        f"\n{pad}     WHERE {conditions[0]}"
        if len(conditions) == 1
        else f" WHERE ({conditions[0]}\n{pad}         OR {conditions[1]})"
    )
    touched = key_match(ctx.d, ctx.keys, "s", "h")
    return {
        RECOMPUTE: f"(SELECT COUNT(*) FROM {ctx.rel.history} h{which}\n"
        f"{pad}       AND EXISTS (SELECT 1 FROM {ctx.rel.stage} s WHERE {touched}))"
    }


def _closing_sql(ctx: TableSql) -> str:
    """The touched keys' intervals when no stored version of them lies at or after the
    batch's oldest position (`history_counts`): the versions the INSERT wrote have
    their final intervals among themselves, and the only stored version that changes is
    each key's current one, which ends where the key's first event begins (the first of its
    sequence at that position: never a copy). One read of the history, no window over it."""
    q, keys = ctx.q, ctx.keys
    first = ", ".join(f"r.{q(k)}" for k in keys)
    return (
        "-- History: no stored version of the batch's keys lies at or after its oldest position, so\n"
        "-- each key's current version ends where its first event begins.\n"
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


def _touched_intervals_sql(ctx: TableSql) -> str:
    """The touched keys' intervals: recomputed, their TOAST placeholders filled, when the
    batch holds a placeholder (`v_unavailable`) or a stored version of its keys needs it
    (`history_counts`); otherwise each key's current version is closed (`_closing_sql`).
    Unwrapped topics always recompute: a re-sent tombstone the batch removes, or a waiting
    one it decides (`history_tombstones`), changes the interval of the version before it,
    wherever that lies in its key's sequence, which closing the current version does not
    reach (without a placeholder their recompute fills none)."""
    if not history_counts(ctx, ""):
        return intervals_sql(ctx)
    quiet = intervals_sql(ctx, fill=False) if _unwrapped(ctx) else _closing_sql(ctx)
    guard = ("v_unavailable > 0 OR " if _toast_columns(ctx) else "") + f"{RECOMPUTE} > 0"
    return f"IF {guard} THEN\n{indent(intervals_sql(ctx), 2)}\nELSE\n{indent(quiet, 2)}\nEND IF;"


def history_sql(ctx: TableSql) -> str:
    """The history's statements of a batch with records."""
    recompute = _touched_intervals_sql(ctx)
    if ctx.table.on_truncate == "delete":
        recompute = (
            "IF v_truncates > 0 AND v_truncate_pos IS NOT NULL THEN\n"
            "  -- A truncate closes every open version; every key's intervals are recomputed.\n"
            f"{indent(truncate_markers_sql(ctx), 2)}\n{indent(intervals_sql(ctx, keys_of_batch=False), 2)}\n"
            f"ELSE\n{indent(recompute, 2)}\nEND IF;"
        )
    void = f"{void_tombstones_sql(ctx)}\n" if _unwrapped(ctx) else ""
    return f"{versions_sql(ctx)}\n{void}{recompute}"

"""History mode: the intervals of a key's versions (`_valid_to`, `_valid_to_pos`,
`_is_current`), each ending where the next version in source order begins, and the TOAST
placeholders the history fills from the version before (`intervals_sql`). The rules:
docs/correctness.md, "History mode"."""

from __future__ import annotations

from sync.sql.apply import key_match
from sync.sql.dialect import quote_literal
from sync.sql.procedure.context import TableSql
from sync.sql.procedure.fields import toastable
from sync.sql.procedure.history_copies import EVENTS, PENDING_OP, TRUNCATED_OP, same_version, unwrapped
from sync.sql.procedure.history_tombstones import pending_tombstones
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


def intervals(ctx: TableSql, row: str, marked: bool = False) -> list[str]:
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


def toast_columns(ctx: TableSql) -> list[str]:
    """TOAST-able columns whose placeholders the history fills from the previous version
    (a SUPER or VARBYTE placeholder in a superseded event keeps NULL and its mark)."""
    return [c.target_name for c in ctx.table.value_columns if toastable(c) and c.sql_type.family not in UNWINDOWED]


def mark(column: str) -> str:
    return quote_literal(f"%|{column}|%")


def _carried(ctx: TableSql, toast: list[str]) -> list[str]:
    """Columns a truncate's closing marker takes from the version before it (its values
    are those of the version it closes, which a late event inserted before it replaces),
    besides the filled TOAST-able ones (`toast`), whose markers join the placeholders."""
    if ctx.table.on_truncate != "delete":
        return []
    return [c.target_name for c in ctx.table.value_columns if c.target_name not in toast and c.sql_type.family not in UNWINDOWED]


def _unknown(ctx: TableSql, row: str, column: str, grouped: bool = False) -> str:
    """The version `row` holds no value of its own for the filled TOAST-able `column`
    (`grouped`: in parentheses when it is a disjunction, to stand before an AND)."""
    if ctx.table.on_truncate != "delete":
        return f"{row}._unavailable LIKE {mark(column)}"
    either = f"{row}._unavailable LIKE {mark(column)} OR {row}._op = '{TRUNCATED_OP}'"
    return f"({either})" if grouped else either


def _recomputed(ctx: TableSql, keys_of_batch: bool, in_batch: bool, toast: list[str]) -> str:
    """Each version of the keys to recompute (those of the batch's events, or all), with its
    interval: to the next version's start (LEAD in version order); a closing marker, and
    in "close" mode a delete, lasts no time and is never current. TOAST placeholders take
    the value of the newest earlier version that had one. Unwrapped topics: a tombstone
    waiting for its key's next record (`in_batch`: one the batch leaves waiting too) is
    no version, `op` its marker's. `toast`: the columns whose placeholders are filled."""
    d, q, keys = ctx.d, ctx.q, ctx.keys
    key_list = ", ".join(f"x.{q(k)}" for k in keys)
    # The versions read (v), each numbered by the known values before it (x).
    numbering = f"PARTITION BY {', '.join(f'v.{q(k)}' for k in keys)} ORDER BY {version_order('v')}"
    groups = "".join(
        f",\n               COUNT(CASE WHEN {_unknown(ctx, 'v', c)} THEN NULL ELSE 1 END) OVER ({numbering}\n"
        f"                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS {q('known_' + c)}"
        for c in toast
    )
    known = "".join(
        f",\n       x.{q(c)} AS {q('stored_' + c)},\n       FIRST_VALUE(x.{q(c)}) OVER (PARTITION BY {key_list}, x.{q('known_' + c)} ORDER BY {version_order('x')}\n"
        f"         ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS {q(c)}"
        for c in toast
    ) + "".join(
        f",\n       x.{q(c)} AS {q('stored_' + c)},\n       CASE WHEN x._op = '{TRUNCATED_OP}' THEN LAG(x.{q(c)}) OVER (PARTITION BY {key_list}"
        f" ORDER BY {version_order('x')})\n         ELSE x.{q(c)} END AS {q(c)}"
        for c in _carried(ctx, toast)
    )
    touched = (
        f"\n        WHERE EXISTS (SELECT 1 FROM {ctx.rel.stage} s WHERE {EVENTS} AND {key_match(d, keys, 's', 'v')})"
        if keys_of_batch
        else ""
    )
    marked, flag, waiting, op = unwrapped(ctx), "", "", ""
    if marked:
        waiting = (
            f"\n        LEFT JOIN ({indent(pending_tombstones(ctx), 19).lstrip()}) p\n          ON {indent(same_version(ctx, 'v', 'p'), 8).lstrip()}"
            if in_batch
            else ""
        )
        flag = f",\n               CASE WHEN v._op = '{PENDING_OP}'{' OR p._kafka_offset IS NOT NULL' if in_batch else ''} THEN 1 ELSE 0 END AS pending__"
        op = f"\n       x._op, CASE WHEN x.pending__ = 1 THEN '{PENDING_OP}' ELSE x._op END AS op,"
    elif ctx.table.on_truncate == "delete":
        op = " x._op,"
    rows = f"(SELECT v.*{flag}{groups}\n        FROM {ctx.rel.history} v{waiting}{touched}) x"
    return (
        f"(SELECT {', '.join(f'x.{q(k)}' for k in keys)}, x._valid_from_pos, x._kafka_partition, x._kafka_offset,\n"
        f"       x._valid_to, x._valid_to_pos, x._is_current, x._unavailable,{op}\n"
        f"       {(',' + chr(10) + '       ').join(intervals(ctx, 'x', marked))}"
        f"{known}\n"
        f" FROM {indent(rows, 1).lstrip()}) n"
    )


def intervals_sql(ctx: TableSql, keys_of_batch: bool = True, in_batch: bool = True, fill: bool = True) -> str:
    """The intervals (and TOAST values) of the versions of the keys the batch touched,
    recomputed over each key's versions: an older event inserted late splits the interval
    it falls into. Only versions that change are written. `in_batch`: a sync batch's (not
    a snapshot's), whose tombstones may wait for their key's next record (unwrapped topics).
    `fill`: TOAST placeholders are filled (without: none of the versions holds one)."""
    d, q = ctx.d, ctx.q
    toast = toast_columns(ctx) if fill else []
    carried = _carried(ctx, toast)
    # Recomputed (n), those that change (c).
    sets = ["_valid_to = c.valid_to", "_valid_to_pos = c.valid_to_pos", "_is_current = c.is_current"]
    sets += [f"{q(col)} = CASE WHEN {_unknown(ctx, 'h', col)} THEN c.{q(col)} ELSE h.{q(col)} END" for col in toast]
    sets += [f"{q(col)} = CASE WHEN h._op = '{TRUNCATED_OP}' THEN c.{q(col)} ELSE h.{q(col)} END" for col in carried]
    without_own = {c: _unknown(ctx, "n", c, grouped=True) for c in toast} | {c: f"n._op = '{TRUNCATED_OP}'" for c in carried}
    changed = [
        d.differs("n._valid_to", "n.valid_to", _TIMESTAMP),
        d.differs("n._valid_to_pos", "n.valid_to_pos", _POSITION),
        "n._is_current <> n.is_current",
        *(
            f"{without_own[c]} AND {d.differs('n.' + q('stored_' + c), 'n.' + q(c), col.sql_type)}"
            for col in ctx.table.value_columns
            if (c := col.target_name) in without_own
        ),
    ]
    if unwrapped(ctx):
        sets.append("_op = c.op")
        changed.append("n._op <> n.op")
    changed_lines = [changed[0], *(f"         OR {c}" for c in changed[1:])]
    return (
        "-- History: each touched key's versions end where the next begins (source order); only\n"
        "-- the versions that change are written.\n"
        f"UPDATE {ctx.rel.history} h SET {packed(sets, '    ')}\n"
        f"FROM (SELECT n.*\n      FROM {indent(_recomputed(ctx, keys_of_batch, in_batch, toast), 11).lstrip()}\n"
        f"      WHERE {chr(10).join(changed_lines)}) c\n"
        f"WHERE {same_version(ctx, 'h', 'c')};"
    )

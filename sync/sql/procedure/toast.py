"""3. (TOAST) Unchanged out-of-line values arrive as Debezium's placeholder: a winner takes
the value from the newest earlier event of the batch that had it, else the stored one,
and is quarantined when neither is known."""

from __future__ import annotations

from sync.debezium.vocabulary import TOAST_PLACEHOLDER
from sync.sql.apply import key_match
from sync.sql.dialect import quote_literal
from sync.sql.procedure.bookkeeping import counted_quarantine
from sync.sql.procedure.context import APPLIED, Action, TableSql
from sync.sql.procedure.fields import toastable
from sync.sql.procedure.ordering import newest_stored, stored_state
from sync.sql.procedure.text import indent


def upsert_winner(row: str = "s") -> str:
    """The stage row `row` is the winning upsert of its key."""
    return f"{row}._rn = 1 AND {row}._action = '{Action.UPSERT}'"


def toast_sql(ctx: TableSql) -> str:
    """Winners whose columns carried the TOAST placeholder take the value from the newest
    earlier event of the batch that had it, else keep the value stored in the target: one
    UPDATE, one CASE per column, over what is known for each such winner (`u`: per column
    the rank of the newest earlier event that had it and that event's value, the newest
    stored row's, and `unknown__`, the columns still without one). A delete ends the key's
    values: an event before the batch's newest delete of the key (`deleted__`, the lowest
    rank of its deletes before the winner), a stored row when the batch deletes the key,
    and a soft-deleted row hold none. A winner left with a column of no known value is
    quarantined here (`unknown_toast_sql` gives the reason and settles its key)."""
    d, q, keys = ctx.d, ctx.q, ctx.keys
    cols = [c.target_name for c in ctx.table.value_columns if toastable(c)]
    stage = ctx.rel.stage
    key_cols = ", ".join(q(k) for k in keys)
    marked = [quote_literal(f"%|{c}|%") for c in cols]
    keep = [
        f"{q(c)} = CASE WHEN s._unavailable NOT LIKE {mark} THEN s.{q(c)} WHEN u.rn{i} IS NOT NULL THEN u.batch{i}"
        f" WHEN u.stored THEN u.stored{i} ELSE s.{q(c)} END"
        for i, (c, mark) in enumerate(zip(cols, marked, strict=True))
    ]
    # The columns still without a value (none in the batch, no stored row alive to keep it
    # from, and no newer one that makes the winner stale): the winner is quarantined and its
    # marks name them for its reason. An applied winner keeps its marks: its history version
    # takes the previous version's value, which a late event may change.
    still = " || ".join(
        f"CASE WHEN v._unavailable LIKE {mark} AND v.rn{i} IS NULL THEN {quote_literal(c + '|')} ELSE '' END"
        for i, (c, mark) in enumerate(zip(cols, marked, strict=True))
    )
    unknown = f"CASE WHEN NOT (v.stored OR v.older) THEN '|' || {still} END AS unknown__"
    keep.append(f"_action = CASE WHEN u.unknown__ <> '|' THEN '{Action.QUARANTINE}' ELSE s._action END")
    keep.append("_unavailable = CASE WHEN u.unknown__ <> '|' THEN u.unknown__ ELSE s._unavailable END")
    newest_with = ",\n".join(
        [
            f"                    MIN(CASE WHEN _action = '{Action.UPSERT}' AND COALESCE(_unavailable, '') NOT LIKE {mark} THEN _rn END) AS rn{i}"
            for i, mark in enumerate(marked)
        ]
        + [f"                    MIN(CASE WHEN _action = '{Action.DELETE}' THEN _rn END) AS deleted__"]
    )
    known = ", ".join(
        f"CASE WHEN m.deleted__ IS NULL OR m.rn{i} < m.deleted__ THEN m.rn{i} END AS rn{i}, p{i}.{q(c)} AS batch{i},"
        f" t.{q(c)} AS stored{i}"
        for i, c in enumerate(cols)
    )
    # A deleted key (a soft-deleted row, or a remembered delete) holds no value to keep, but
    # a winner older than it is stale: neither applied nor quarantined here.
    soft = ctx.table.delete_mode == "soft"
    extra = [(f"t.{q(c)}", "NULL") for c in cols] + [("t._deleted",) if soft else ("false AS deleted__", "true")]
    gone = "t._deleted" if soft else "t.deleted__"
    earlier = "".join(
        f"        LEFT JOIN {stage} p{i} ON {key_match(d, keys, f'p{i}', 'w')} AND p{i}._rn = m.rn{i} AND p{i}._action = '{Action.UPSERT}'\n"
        for i in range(len(cols))
    )
    placeholders = (
        f"EXISTS (SELECT 1 FROM {stage} x WHERE x._rn = 1 AND x._action = '{Action.UPSERT}' AND x._unavailable IS NOT NULL"
        f" AND {key_match(d, keys, 'x', 't')})"
    )
    stored = stored_state(ctx, placeholders, extra)
    return (
        "-- 3. (TOAST) Unchanged out-of-line values arrive as a placeholder and keep what is known.\n"
        "IF v_unavailable > 0 THEN\n"
        f"  UPDATE {stage} s SET " + ",\n         ".join(keep) + "\n"
        f"  FROM (SELECT v.*, {unknown}\n"
        f"        FROM (SELECT {', '.join(f'w.{q(k)}' for k in keys)}, w._unavailable,"
        f" t.stored_rn__ IS NOT NULL AND m.deleted__ IS NULL AND NOT {gone} AS stored,\n"
        f"                     COALESCE(w._source_pos < t._source_pos, false) AS older,\n"
        f"                     {known}\n"
        f"              FROM {stage} w\n"
        f"              LEFT JOIN (SELECT {key_cols},\n{indent(newest_with, 6)}\n"
        f"                         FROM {stage} WHERE _action IN ('{Action.UPSERT}', '{Action.DELETE}') AND _rn > 1 GROUP BY {key_cols}) m"
        f" ON {key_match(d, keys, 'm', 'w')}\n"
        f"{indent(earlier.rstrip(chr(10)), 6)}\n"
        f"              LEFT JOIN {indent(stored, 24).lstrip()} t ON {key_match(d, keys, 't', 'w')} AND {newest_stored()}\n"
        f"              WHERE {upsert_winner('w')} AND w._unavailable IS NOT NULL) v) u\n"
        f"  WHERE {upsert_winner()} AND s._unavailable IS NOT NULL AND {key_match(d, keys, 'u', 's')};\n"
        f"{indent(unknown_toast_sql(ctx), 2)}\n"
        "END IF;"
    )


def unknown_toast_sql(ctx: TableSql) -> str:
    """3. (TOAST) A winner whose placeholder found no earlier value (none in the batch since
    the key's last delete, no stored row of the key alive) cannot be applied faithfully:
    `toast_sql` quarantined it. The key's events since its newest delete in the batch lack
    that value too (an event with it would have filled the winner): they are quarantined
    with it, to be replayed together, in order, each kept with its payload and the columns
    without a value, never a silent NULL (a backfill, then a quarantine replay, brings them
    in). The delete, if the batch has one, becomes the key's winner: what is known of the
    key ends there. The count then also holds that delete: it only guards the quarantine."""
    d, keys, stage = ctx.d, ctx.keys, ctx.rel.stage
    key_cols = ", ".join(f"w.{ctx.q(k)}" for k in keys)
    reason = f"'no earlier value is known for the TOAST placeholder ({TOAST_PLACEHOLDER}) in ' || BTRIM(s._unavailable, '|')"
    return (
        f"UPDATE {stage} s SET _rn = CASE WHEN s._action = '{Action.DELETE}' THEN 1 ELSE s._rn END,\n"
        f"    _action = CASE WHEN s._action = '{Action.DELETE}' THEN s._action ELSE '{Action.QUARANTINE}' END,\n"
        f"    _reason = SUBSTRING(CASE WHEN s._action = '{Action.DELETE}' THEN s._reason ELSE {reason} END, 1, 1000)\n"
        f"FROM (SELECT {key_cols}, MIN(x._rn) AS deleted__\n"
        f"      FROM {stage} w LEFT JOIN {stage} x ON {key_match(d, keys, 'x', 'w')} AND x._action = '{Action.DELETE}' AND x._rn > 1\n"
        f"      WHERE w._rn = 1 AND w._action = '{Action.QUARANTINE}' AND w._reason IS NULL GROUP BY {key_cols}) k\n"
        f"WHERE {key_match(d, keys, 's', 'k')} AND s._rn <= COALESCE(k.deleted__, s._rn)\n"
        f"  AND (s._action IN {APPLIED} AND s._rn > 1 OR s._action = '{Action.QUARANTINE}' AND s._reason IS NULL);\n"
        + counted_quarantine()
    )

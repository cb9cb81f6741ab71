"""3. (TOAST) Unchanged out-of-line values arrive as Debezium's placeholder: a winner takes
the value from the newest earlier event of the batch that had it, else the stored one,
and is quarantined when neither is known."""

from __future__ import annotations

from sync.debezium.vocabulary import TOAST_PLACEHOLDER
from sync.sql.apply import key_match
from sync.sql.dialect import quote_literal
from sync.sql.procedure.context import Action, TableSql
from sync.sql.procedure.fields import toastable
from sync.sql.procedure.ordering import stored_rows
from sync.sql.procedure.text import indent

UPSERT_WINNER = f"s._rn = 1 AND s._action = '{Action.UPSERT}'"


def toast_sql(ctx: TableSql) -> str:
    """Winners whose columns carried the TOAST placeholder take the value from the newest
    earlier event of the batch that had it, else keep the value stored in the target."""
    d, q, keys = ctx.d, ctx.q, ctx.keys
    toast_cols = [c.target_name for c in ctx.table.value_columns if toastable(c)]
    stage, target = ctx.rel.stage, ctx.rel.target
    key_cols = ", ".join(q(k) for k in keys)

    lines = [
        "-- 3. (TOAST) Unchanged out-of-line values arrive as a placeholder and keep what is known.",
        "IF v_unavailable > 0 THEN",
    ]
    for col in toast_cols:
        mark = quote_literal(f"%|{col}|%")
        lines.append(
            indent(
                f"UPDATE {stage} s SET {q(col)} = p.{q(col)}, _unavailable = REPLACE(s._unavailable, {quote_literal('|' + col + '|')}, '|')\n"
                f"FROM {stage} p,\n"
                f"     (SELECT {key_cols}, MIN(_rn) AS rn FROM {stage}\n"
                f"      WHERE _action = '{Action.UPSERT}' AND _rn > 1 AND COALESCE(_unavailable, '') NOT LIKE {mark}\n"
                f"      GROUP BY {key_cols}) m\n"
                f"WHERE {UPSERT_WINNER} AND s._unavailable LIKE {mark}\n"
                f"  AND {key_match(d, keys, 'm', 's')} AND {key_match(d, keys, 'p', 's')} AND p._rn = m.rn AND p._action = '{Action.UPSERT}';",
                2,
            )
        )
    keep = ",\n       ".join(
        f"{q(c)} = CASE WHEN s._unavailable LIKE {quote_literal(f'%|{c}|%')} THEN t.{q(c)} ELSE s.{q(c)} END" for c in toast_cols
    )
    placeholders = (
        f"EXISTS (SELECT 1 FROM {stage} x WHERE x._rn = 1 AND x._action = '{Action.UPSERT}' AND x._unavailable IS NOT NULL"
        f" AND {key_match(d, keys, 'x', 't')})"
    )
    lines.append(
        indent(
            f"UPDATE {stage} s SET {keep}\n"
            f"FROM {stored_rows(d, target, keys, placeholders)} t\n"
            f"WHERE {UPSERT_WINNER} AND s._unavailable IS NOT NULL\n  AND {key_match(d, keys, 't', 's')};",
            2,
        )
    )
    lines.append("END IF;")
    return "\n".join(lines)


def unknown_toast_sql(ctx: TableSql) -> str:
    """3. (TOAST) A winner whose placeholder found no earlier value (none in the batch, no
    stored row) cannot be applied faithfully: quarantined with its payload, never a silent
    NULL. A backfill, then a quarantine replay, brings it in."""
    same_key = key_match(ctx.d, ctx.keys, "t", "s")
    return (
        "IF v_unavailable > 0 THEN\n"
        f"  UPDATE {ctx.rel.stage} s SET _action = '{Action.QUARANTINE}',\n"
        f"         _reason = SUBSTRING('no earlier value is known for the TOAST placeholder ({TOAST_PLACEHOLDER}) in '\n"
        "                             || BTRIM(s._unavailable, '|'), 1, 1000)\n"
        f"  WHERE {UPSERT_WINNER} AND s._unavailable <> '|'\n"
        f"    AND NOT EXISTS (SELECT 1 FROM {ctx.rel.target} t WHERE {same_key});\n"
        "END IF;"
    )

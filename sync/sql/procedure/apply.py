"""6. Apply the winners to the target: DELETE then INSERT (hard deletes remembered as
deleted keys), or, in soft mode, deletes that mark the row and keep its last values."""

from __future__ import annotations

from sync.sql import schemas
from sync.sql.apply import insert_deleted_keys_sql, key_match, soft_delete_sql
from sync.sql.dialect import quote_literal
from sync.sql.procedure.context import APPLIED, CALL_TIME, WINNERS, Action, TableSql
from sync.sql.procedure.fields import toastable
from sync.sql.procedure.ordering import newest_stored, stored_state
from sync.sql.procedure.text import indent

UPSERTS = f"s._rn = 1 AND s._action = '{Action.UPSERT}'"
DELETES = f"s._rn = 1 AND s._action = '{Action.DELETE}'"


def load_sql(ctx: TableSql, deleted_flag: str, where: str) -> str:
    """INSERT INTO the target the stage rows `s` matching `where` (soft mode: with their
    `_deleted` flag)."""
    d, table = ctx.d, ctx.table
    values = {
        **schemas.row_values(d, [*schemas.data_columns(table.columns), *schemas.POSITION], "s"),
        "_synced_at": CALL_TIME,
        **({"_deleted": deleted_flag} if table.delete_mode == "soft" else {}),
    }
    rest = f"FROM {ctx.rel.stage} s\nWHERE {where};"
    return schemas.insert_select_sql(d, ctx.rel.target, schemas.target(table), values, rest, quoted=True)


def _delete_current_sql(ctx: TableSql, actions: str) -> str:
    """DELETE the target rows of the winners whose action is in `actions`. Redshift's
    DELETE takes no alias for its target: the key match names it in full, and the stage's
    alias starts with '_', which no table name can (a table named "s" would otherwise
    clash with an alias s)."""
    rel = ctx.rel
    return (
        f"DELETE FROM {rel.target}\nUSING {rel.stage} _s\nWHERE _s._rn = 1 AND _s._action {actions}\n"
        f"  AND {key_match(ctx.d, ctx.keys, rel.target, '_s')};"
    )


def _when_deletes(sql: str) -> str:
    """`sql`, run only when the batch has deletes (`v_deletes`, counted with the batch)."""
    return f"IF v_deletes > 0 THEN\n{indent(sql, 2)}\nEND IF;"


def apply_hard_sql(ctx: TableSql) -> str:
    d, rel, keys = ctx.d, ctx.rel, ctx.keys
    remembered = {**schemas.row_values(d, schemas.deleted_keys(ctx.table), "s"), "_deleted_at": CALL_TIME}
    return "\n".join(
        [
            "-- 6. Apply: remove the current row of every key with a winning event (the join is\n"
            "--    on the key, which is the DISTKEY, so it is collocated), then insert the upserts.\n"
            + _delete_current_sql(ctx, f"IN {APPLIED}"),
            "-- Deleted keys are remembered, so neither a replay nor a backfill resurrects them.\n"
            f"DELETE FROM {rel.deleted}\nUSING {rel.stage} s\nWHERE {WINNERS}\n  AND {key_match(d, keys, rel.deleted, 's')};",
            _when_deletes(insert_deleted_keys_sql(d, ctx.table, rel.deleted, remembered, f"{rel.stage} s", DELETES)),
            load_sql(ctx, "false", UPSERTS),
        ]
    )


def _deleting(ctx: TableSql) -> str:
    """The stored row `t`'s key has a winning delete in the batch."""
    return (
        f"EXISTS (SELECT 1 FROM {ctx.rel.stage} x WHERE x._rn = 1 AND x._action = '{Action.DELETE}'"
        f" AND {key_match(ctx.d, ctx.keys, 'x', 't')})"
    )


def delete_values_sql(ctx: TableSql) -> str:
    """Soft mode: a delete's values where its before image has none."""
    d, rel, keys, q = ctx.d, ctx.rel, ctx.keys, ctx.q
    value_cols = [c.target_name for c in ctx.table.value_columns]
    keys_sql = ", ".join(q(k) for k in keys)
    fill = ",\n       ".join(f"{q(c)} = COALESCE(s.{q(c)}, p.{q(c)})" for c in value_cols)
    stored = ",\n       ".join(f"{q(c)} = COALESCE(s.{q(c)}, t.{q(c)})" for c in value_cols)
    deleting = _deleting(ctx)
    earlier_upsert = f"x._action = '{Action.UPSERT}' AND x._rn > 1"
    return _when_deletes(
        "-- A delete whose before image holds only the key (REPLICA IDENTITY DEFAULT, unwrap\n"
        "-- rewrite) keeps the values of the newest earlier upsert of the batch.\n"
        f"UPDATE {rel.stage} s SET {fill}\n"
        f"FROM {rel.stage} p,\n"
        f"     (SELECT {keys_sql}, MIN(_rn) AS rn FROM {rel.stage}\n"
        f"      WHERE _action = '{Action.UPSERT}' AND _rn > 1 GROUP BY {keys_sql}) m\n"
        f"WHERE {DELETES}\n"
        f"  AND {key_match(d, keys, 'm', 's')} AND {key_match(d, keys, 'p', 's')} AND p._rn = m.rn AND p._action = '{Action.UPSERT}';\n"
        "-- Without such an upsert, the stored row is the newest earlier state: a delete takes\n"
        "-- its values where the before image has none (never an older value over a newer\n"
        "-- NULL: the stored row is not consulted when the batch updated the key).\n"
        f"UPDATE {rel.stage} s SET {stored}\n"
        f"FROM {indent(stored_state(ctx, deleting, [(f't.{q(c)}',) for c in value_cols], held=[rel.target]), 5).lstrip()} t\n"
        f"WHERE {DELETES} AND {key_match(d, keys, 't', 's')} AND {newest_stored()}\n"
        f"  AND NOT EXISTS (SELECT 1 FROM {rel.stage} x WHERE {earlier_upsert} AND {key_match(d, keys, 'x', 's')});"
        + _placeholder_values_sql(ctx)
    )


def _placeholder_values_sql(ctx: TableSql) -> str:
    """Soft mode, TOAST-able columns: where the newest earlier upsert of a delete (`e`)
    sent the placeholder and the delete's image has no value either, the value is the one
    before that upsert: the newest earlier upsert of the batch that had it (`rn{i}`), else
    the stored row's (the batch's earlier upserts all left it unchanged)."""
    d, rel, keys, q = ctx.d, ctx.rel, ctx.keys, ctx.q
    cols = [c.target_name for c in ctx.table.value_columns if toastable(c)]
    if not cols:
        return ""
    keys_sql = ", ".join(q(k) for k in keys)
    marks = [quote_literal(f"%|{c}|%") for c in cols]
    newest_with = "".join(
        f",\n                   MIN(CASE WHEN COALESCE(_unavailable, '') NOT LIKE {m} THEN _rn END) AS rn{i}"
        for i, m in enumerate(marks)
    )
    known = "".join(
        f",\n             e._unavailable LIKE {m} AS marked{i},"
        f" CASE WHEN n.rn{i} IS NOT NULL THEN p{i}.{q(c)} ELSE t.{q(c)} END AS value{i}"
        for i, (c, m) in enumerate(zip(cols, marks, strict=True))
    )
    earlier = "".join(
        f"\n      LEFT JOIN {rel.stage} p{i} ON {key_match(d, keys, f'p{i}', 'n')} AND p{i}._rn = n.rn{i}"
        f" AND p{i}._action = '{Action.UPSERT}'"
        for i in range(len(cols))
    )
    stored = stored_state(ctx, _deleting(ctx), [(f"t.{q(c)}",) for c in cols], held=[rel.target])
    sets = ",\n    ".join(
        f"{q(c)} = CASE WHEN s.{q(c)} IS NULL AND u.marked{i} THEN u.value{i} ELSE s.{q(c)} END" for i, c in enumerate(cols)
    )
    return "\n-- A placeholder in that upsert (the value unchanged) takes the value before it: the newest\n" + (
        "-- earlier upsert of the batch that had it, else the stored row's (only a batch with placeholders).\n"
        "IF v_unavailable > 0 THEN\n"
        + indent(
            f"UPDATE {rel.stage} s SET {sets}\n"
            f"FROM (SELECT n.*{known}\n"
            f"      FROM (SELECT {keys_sql}, MIN(_rn) AS rn{newest_with}\n"
            f"            FROM {rel.stage} WHERE _action = '{Action.UPSERT}' AND _rn > 1 GROUP BY {keys_sql}) n\n"
            f"      JOIN {rel.stage} e ON {key_match(d, keys, 'e', 'n')} AND e._rn = n.rn AND e._action = '{Action.UPSERT}'{earlier}\n"
            f"      LEFT JOIN {indent(stored, 6).lstrip()} t ON {key_match(d, keys, 't', 'n')} AND {newest_stored()}\n"
            "      WHERE e._unavailable IS NOT NULL) u\n"
            f"WHERE {DELETES} AND {key_match(d, keys, 'u', 's')};",
            2,
        )
        + "\nEND IF;"
    )


def apply_soft_sql(ctx: TableSql) -> str:
    d, rel, keys = ctx.d, ctx.rel, ctx.keys
    last_values = {c.target_name: f"s.{d.q(c.target_name)}" for c in ctx.table.value_columns}
    return "\n".join(
        [
            "-- 6. Apply (soft deletes): upserts replace the row; deletes only mark it, keeping\n"
            "--    its last values (or record the key when it was never seen).\n"
            + _delete_current_sql(ctx, f"= '{Action.UPSERT}'"),
            load_sql(ctx, "false", UPSERTS),
            "-- A delete keeps the row's last values, completed above.\n"
            + _when_deletes(
                soft_delete_sql(d, ctx.table, rel.target, last_values, f"{rel.stage} s", DELETES)
                + "\n"
                + load_sql(
                    ctx,
                    "true",
                    f"{DELETES}\n  AND NOT EXISTS (SELECT 1 FROM {rel.target} t WHERE {key_match(d, keys, 't', 's')})",
                )
            ),
        ]
    )

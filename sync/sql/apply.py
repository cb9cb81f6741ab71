"""Statements that write deletes to a table's target and deleted keys: the same for the
procedure's winning events and for the backfill's snapshot rows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sync.config import TableConfig
from sync.sql import schemas
from sync.sql.dialect import PostgresDialect


def key_match(d: PostgresDialect, keys: Sequence[str], a: str, b: str) -> str:
    """The rows `a` and `b` have the same key (`keys`: the key columns' target names)."""
    return " AND ".join(f"{a}.{d.q(k)} = {b}.{d.q(k)}" for k in keys)


def insert_deleted_keys_sql(
    d: PostgresDialect, table: TableConfig, deleted: str, values: Mapping[str, str], source: str, where: str
) -> str:
    """INSERT INTO the deleted keys `deleted` ... SELECT `values` (by column name) FROM
    `source` WHERE `where`: deleted keys are remembered, so neither a replay nor a
    backfill resurrects them."""
    return schemas.insert_select_sql(d, deleted, schemas.deleted_keys(table), values, f"FROM {source}\nWHERE {where};")


def soft_delete_sql(
    d: PostgresDialect, table: TableConfig, target: str, values: Mapping[str, str], source: str, where: str
) -> str:
    """Soft deletes: the target rows `t` of the rows `s` of `source` matching `where` are
    marked deleted at the position of `s`, their value columns set to `values` (by column
    name: the row's last values)."""
    keep = "".join(f"       {d.q(name)} = {value},\n" for name, value in values.items())
    position = [f"{name} = s.{name}" for name in schemas.names(schemas.POSITION)]
    return (
        f"UPDATE {target} t SET {schemas.SOFT_DELETED.name} = true,\n"
        + keep
        + f"       {', '.join(position[:2])},\n"
        + f"       {', '.join(position[2:])}, _synced_at = {d.now()}\n"
        + f"FROM {source}\nWHERE {where}\n  AND {key_match(d, [c.target_name for c in table.key_columns], 't', 's')};"
    )

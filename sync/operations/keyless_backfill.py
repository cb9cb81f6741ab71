"""The backfill of a table without a primary key: the snapshot replaces the table, and only
where that is exact (the rule and its reason: `sync/sql/keyless_backfill.py`,
docs/correctness.md, "Backfill and reconcile of a table without a primary key").

The checks read the loaded stage and the table inside the load's transaction, under its
locks (a sync waits), so a refusal changes nothing and no sync can slip in between."""

from __future__ import annotations

from sync.sql.keyless_backfill import KeylessBackfillSql
from sync.warehouse import Warehouse

WHY = "a table without a primary key is backfilled from a snapshot taken at one source position"


class KeylessRefusal(ValueError):
    """The snapshot cannot be loaded into the table exactly; nothing was changed."""


def check_stage(wh: Warehouse, sql: KeylessBackfillSql) -> None:
    """The staged snapshot has rows, each with a source position, and one position."""
    rows, positioned, positions = wh.query(sql.stage_positions())[0]
    if not rows:
        raise KeylessRefusal(f"backfill: the snapshot has no row to load, so no source position: {WHY}")
    if positioned < rows:
        raise KeylessRefusal(
            f"backfill: {rows - positioned:,} of the snapshot's {rows:,} rows carry no source position: {WHY} "
            "(Debezium's reads carry it; give a table-shaped export a _source_pos column)"
        )
    if positions > 1:
        raise KeylessRefusal(
            f"backfill: the snapshot's rows carry {positions:,} source positions: {WHY} (the reads of one snapshot "
            "share one), so that the stream's changes are either in it or after it"
        )


def check_table(wh: Warehouse, sql: KeylessBackfillSql) -> None:
    """The stream has applied nothing at or after the snapshot's position."""
    rows, changes, snapshots = wh.query(sql.held_after())[0]
    if rows or changes or snapshots:
        held = [
            f"{n:,} {what}"
            for n, what in (
                (rows, "stored rows"),
                (changes, "applied changes"),
                (snapshots, "newer snapshot"),
            )
            if n
        ]
        raise KeylessRefusal(
            f"backfill: the table holds what the stream applied at or after the snapshot's position, or at no "
            f"position ({', '.join(held)}); without a primary key nothing tells which stored rows the snapshot "
            "already holds. Nothing was changed: backfill a snapshot taken after the stream's last applied change"
        )


def check_replace(wh: Warehouse, sql: KeylessBackfillSql) -> None:
    """Refuse (raise KeylessRefusal) unless the loaded stage may replace the table's rows."""
    check_stage(wh, sql)
    check_table(wh, sql)

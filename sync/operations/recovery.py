"""Recovery commands for source events that break ordering (SQL in sync/sql/recovery.py).

- `reset_positions`: after a MySQL failover or `RESET MASTER` (or a restore of the source
  database from a backup), clear the stored source positions so that events with the
  restarted (lower) positions apply.
- `offset_regressions`: records a re-created topic wrote at offsets at or below the
  watermark, which no sync will ever read; `rebase_offsets` moves the watermark so that
  exactly those records are read next.

Each takes `apply`: False only measures what it would change (nothing is written).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from sync.config import ConfigError, Pipeline, TableConfig
from sync.operations.conflicts import conflict_policy, retry_conflicts
from sync.sql import recovery as sql
from sync.sql import schemas
from sync.sql.dialect import PostgresDialect
from sync.sql.names import RUN_LOG, table_names
from sync.warehouse import Warehouse, WarehouseError


def _require_deployed(wh: Warehouse, pipeline: Pipeline, table_name: str) -> None:
    names = table_names(pipeline, pipeline.table(table_name))
    if not (wh.relation_exists(names.schema, RUN_LOG) and wh.relation_exists(names.schema, names.watermark)):
        raise WarehouseError(
            f"table {table_name!r} is not deployed in schema {names.schema!r} (run `redshift-sync deploy` first)"
        )


@contextmanager
def _recovery(
    wh: Warehouse, pipeline: Pipeline, table_name: str, apply: bool
) -> Iterator[tuple[TableConfig, PostgresDialect, datetime]]:
    """One transaction, under the procedure's lock when it changes anything; yields the
    table, the dialect and the start time."""
    table = pipeline.table(table_name)
    _require_deployed(wh, pipeline, table.name)
    d = wh.dialect.bind_schema(pipeline.schema)
    with wh.transaction():
        if apply:
            wh.execute(sql.lock_sql(d, pipeline, table))
        yield table, d, wh.scalar(f"SELECT {d.now()}")


@dataclass
class PositionReset:
    table: str
    target_rows: int  # rows whose stored position was (or would be) cleared
    deleted_keys: int | None  # the same in the deleted-keys table (None: soft deletes)
    applied: bool
    reread_from: dict[int, int] | None = None  # the watermark the next sync reads again from
    history_versions: int | None = None  # the history's versions whose positions were cleared (None: no history)


def parse_watermark(text: str | None) -> dict[int, int] | None:
    """A watermark as the run log writes it ("0:17,1:5"; "" or None: no partition read
    yet) as partition -> offset; None when it is not one (a list cut short: "(+N more)")."""
    out: dict[int, int] = {}
    for item in filter(None, (text or "").split(",")):
        partition, sep, offset = item.strip().partition(":")
        if not (sep and partition.isdigit() and offset.lstrip("-").isdigit()):
            return None
        out[int(partition)] = int(offset)
    return out


def reset_positions(
    wh: Warehouse, pipeline: Pipeline, table_name: str, apply: bool, reread_from: dict[int, int] | None = None
) -> PositionReset:
    """Clear the source positions stored in the target, the deleted-keys table and the
    history (its versions then precede every new event's: `history_positions_sql`), in one
    transaction under the procedure's lock, and log it (run again after a serialization
    conflict, `[operations] conflict_attempts`). With `reread_from` (a watermark), the
    watermark moves back to it too, so that the next sync applies the records read since
    then, which the stored positions made stale (partitions it does not name are read from
    their first record)."""
    table = pipeline.table(table_name)
    if table.order_by == "kafka":
        raise ConfigError(f'table {table_name!r} has order_by = "kafka": it stores no source positions to reset')
    if table.history is not None and reread_from is not None:
        raise ConfigError(
            f"--reread-from: table {table_name} keeps a history, which holds the records after the watermark as "
            "versions at their new positions, below the old ones: reading them again would add them twice. "
            "Reset without --reread-from (the history then keeps them where they are)"
        )
    return retry_conflicts(conflict_policy(pipeline), lambda: _reset_positions(wh, pipeline, table_name, apply, reread_from))[0]


def _reset_positions(
    wh: Warehouse, pipeline: Pipeline, table_name: str, apply: bool, reread_from: dict[int, int] | None
) -> PositionReset:
    with _recovery(wh, pipeline, table_name, apply) as (table, d, started):
        if apply:
            watermark_before = wh.scalar(sql.watermark_text_sql(d, pipeline, table))
            counts = [wh.execute(stmt) for stmt in sql.reset_positions_sql(d, pipeline, table)]
            versions = wh.execute(sql.history_positions_sql(d, pipeline, table, apply)) if table.history else None
            if reread_from is not None:
                _rewind(wh, pipeline, table, d, reread_from)
            watermark = wh.scalar(sql.watermark_text_sql(d, pipeline, table))
            wh.execute(
                sql.run_log_sql(
                    d,
                    pipeline,
                    table,
                    sql.RESET_POSITIONS,
                    started,
                    watermark_before,
                    watermark,
                    upserted=counts[0],
                    deleted=sum(counts[1:]),
                )
            )
        else:
            counts = [int(wh.scalar(stmt)) for stmt in sql.positioned_rows_sql(d, pipeline, table)]
            versions = int(wh.scalar(sql.history_positions_sql(d, pipeline, table, apply))) if table.history else None
    return PositionReset(table.name, counts[0], counts[1] if len(counts) > 1 else None, apply, reread_from, versions)


def _rewind(wh: Warehouse, pipeline: Pipeline, table: TableConfig, d: PostgresDialect, reread_from: dict[int, int]) -> None:
    """The watermark back to `reread_from`; every partition the watermark holds and
    `reread_from` does not name is read from its first record."""
    held = {
        int(p)
        for (p,) in wh.query(
            f"SELECT kafka_partition FROM {d.qualified(pipeline.schema, table_names(pipeline, table).watermark)}"
        )
    }
    after = {p: -1 for p in held} | reread_from
    first = wh.scalar(sql.first_refresh_sql(d, pipeline, table, after))
    if first is not None:
        for stmt in sql.rewind_sql(d, pipeline, table, sql.rebased_since(first), after):
            wh.execute(stmt)


@dataclass
class OffsetRegression:
    partition: int
    records: int  # refreshed after the partition's watermark, at an offset at or below it

    def message(self, table: str) -> str:
        return (
            f"partition {self.partition}: {self.records} records refreshed after the watermark have offsets at or "
            f"below it (topic re-created?): run `redshift-sync rebase-offsets --table {table} --yes`"
        )


def offset_regressions(wh: Warehouse, pipeline: Pipeline, table_name: str) -> list[OffsetRegression]:
    table = pipeline.table(table_name)
    names = table_names(pipeline, table)
    if not wh.relation_exists(names.schema, names.watermark):
        return []
    d = wh.dialect.bind_schema(pipeline.schema)
    return [OffsetRegression(int(p), int(n)) for p, n in wh.query(sql.offset_regressions_sql(d, pipeline, table))]


def regression_warnings(wh: Warehouse, pipeline: Pipeline, tables: Sequence[str]) -> list[str]:
    """One line per table and partition with records no sync will read: `<table>: partition ...`."""
    return [f"{t}: {r.message(t)}" for t in tables for r in offset_regressions(wh, pipeline, t)]


@dataclass
class PartitionRebase:
    partition: int
    last_offset_before: int | None  # None: the partition had no watermark row
    last_offset_after: int
    new_records: int


@dataclass
class OffsetRebase:
    table: str
    since_before: datetime | None
    since_after: datetime
    partitions: list[PartitionRebase]
    applied: bool


def rebase_offsets(wh: Warehouse, pipeline: Pipeline, table_name: str, apply: bool) -> OffsetRebase:
    """Move the watermark so that the next sync reads exactly the records refreshed after
    it (and never again the older ones): every partition from the first such refresh,
    from just before its first new offset (offset 0 for a partition with none yet). Run
    again after a serialization conflict (`[operations] conflict_attempts`)."""
    return retry_conflicts(conflict_policy(pipeline), lambda: _rebase_offsets(wh, pipeline, table_name, apply))[0]


def _rebase_offsets(wh: Warehouse, pipeline: Pipeline, table_name: str, apply: bool) -> OffsetRebase:
    with _recovery(wh, pipeline, table_name, apply) as (table, d, started):
        rows = [schemas.as_row(sql.WATERMARK_ROW, r) for r in wh.query(sql.watermark_rows_sql(d, pipeline, table))]
        before = {r["kafka_partition"]: (r["last_offset"], r["last_refresh_time"]) for r in rows}
        if not before:
            raise WarehouseError(f"table {table.name!r} has no watermark yet: nothing to rebase (sync reads every record)")
        new = {int(p): (int(first), at, int(count)) for p, first, at, count in wh.query(sql.new_records_sql(d, pipeline, table))}
        if not new:
            raise WarehouseError(
                f"table {table.name!r}: no record was refreshed after the watermark: nothing to rebase "
                "(after a topic is re-created, run this once its first records have been refreshed)"
            )
        since = sql.rebased_since(min(at for _, at, _ in new.values()))
        first_offsets = {p: first for p, (first, _, _) in new.items()}
        plan = [
            PartitionRebase(
                p,
                before[p][0] if p in before else None,
                first_offsets[p] - 1 if p in first_offsets else -1,
                new[p][2] if p in new else 0,
            )
            for p in sorted(set(before) | set(new))
        ]
        since_before = max((t for _, t in before.values() if t is not None), default=None)
        if apply:
            watermark_before = wh.scalar(sql.watermark_text_sql(d, pipeline, table))
            for stmt in sql.rebase_offsets_sql(d, pipeline, table, since, first_offsets, set(before)):
                wh.execute(stmt)
            watermark_after = wh.scalar(sql.watermark_text_sql(d, pipeline, table))
            wh.execute(sql.run_log_sql(d, pipeline, table, sql.REBASE_OFFSETS, started, watermark_before, watermark_after))
    return OffsetRebase(table.name, since_before, since, plan, apply)

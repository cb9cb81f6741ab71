"""SQL of the recovery commands for source events that break ordering.

`reset-positions`: after a MySQL failover or `RESET MASTER` binlog file numbers restart
lower (after a restore of the source database from a backup, SQL Server and Db2 LSNs and
Oracle SCNs do too), so every new event looks older than the position stored for its key
(stale).
Clearing the stored positions (a NULL position never makes an event stale) lets them
apply again.

`rebase-offsets`: a re-created topic restarts Kafka offsets below the watermark, so its
new records are never past it. The watermark is moved to the first refresh holding new
records, each partition to just before its first new offset.

Both run under the procedure's own lock (a running sync finishes first, the next one
waits), in one transaction, and write a run-log row with a status of their own.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sync.config import Pipeline, TableConfig
from sync.sql import schemas
from sync.sql.dialect import PostgresDialect, quote_literal
from sync.sql.names import RUN_LOG, table_names
from sync.sql.procedure import WATERMARK_ITEM
from sync.sql.procedure.routing import run_log_columns

RESET_POSITIONS = "reset-positions"
REBASE_OFFSETS = "rebase-offsets"


def timestamp_literal(value: datetime) -> str:
    return f"TIMESTAMP '{value.isoformat(sep=' ', timespec='microseconds')}'"


def lock_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """The lock the procedure takes first (its watermark, a control table: on Redshift every
    LOCK is exclusive, so never the target dashboards read): a running sync finishes
    before this, and the next one waits for it."""
    n = table_names(pipeline, table)
    return f"LOCK TABLE {d.qualified(n.schema, n.watermark)}{d.lock_mode};"


def watermark_text_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """The watermark as the run log writes it: `partition:last_offset,...`."""
    n = table_names(pipeline, table)
    return d.bounded_list(WATERMARK_ITEM, ",", "r.kafka_partition", d.qualified(n.schema, n.watermark)) + ";"


# What a recovery reads of a watermark row.
WATERMARK_ROW = tuple(schemas.column(schemas.WATERMARK, name) for name in ("kafka_partition", "last_offset", "last_refresh_time"))


def watermark_rows_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """The watermark rows, read as WATERMARK_ROW."""
    n = table_names(pipeline, table)
    columns = ", ".join(c.sql_name(d, quoted=True) for c in WATERMARK_ROW)
    return f"SELECT {columns}\nFROM {d.qualified(n.schema, n.watermark)}\nORDER BY {d.q('kafka_partition')};"


def _positioned_relations(pipeline: Pipeline, table: TableConfig) -> list[str]:
    """Where positions are stored: the target and, with hard deletes, the deleted keys."""
    n = table_names(pipeline, table)
    return [n.target] + ([n.deleted_keys] if table.delete_mode == "hard" else [])


def positioned_rows_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> list[str]:
    """How many rows hold a source position, per relation of `_positioned_relations`."""
    return [
        f"SELECT COUNT(*)\nFROM {d.qualified(pipeline.schema, r)}\nWHERE {d.q('_source_pos')} IS NOT NULL;"
        for r in _positioned_relations(pipeline, table)
    ]


def reset_positions_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> list[str]:
    """Clear the stored positions, per relation of `_positioned_relations`; a keyless
    table's pending deletes keep theirs: it only tells them apart (keyless_pending.py)."""
    pos = d.q("_source_pos")
    deleted = table_names(pipeline, table).deleted_keys
    return [
        "-- Stored positions no longer make newer events stale (a NULL position never does).\n"
        f"UPDATE {d.qualified(pipeline.schema, r)}\nSET {pos} = NULL\nWHERE {pos} IS NOT NULL"
        + (f" AND {d.q(schemas.PENDING_HASH.name)} IS NULL" if table.is_keyless and r == deleted else "")
        + ";"
        for r in _positioned_relations(pipeline, table)
    ]


def history_positions_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig, apply: bool) -> str:
    """The history's versions that hold a source position: cleared (`apply`), or counted.
    A cleared version sorts before every version at a position (NULLS FIRST), so the new
    server's events follow the old server's versions, and its intervals stay as they are:
    a batch's first event closes each key's current version, as after any stored version
    (sync/sql/procedure/history.py)."""
    n = table_names(pipeline, table)
    held = f"{d.q('_valid_from_pos')} IS NOT NULL OR {d.q('_valid_to_pos')} IS NOT NULL"
    history = d.qualified(n.schema, n.history)
    if not apply:
        return f"SELECT COUNT(*)\nFROM {history}\nWHERE {held};"
    return (
        "-- The old server's versions sort before every new event's (NULLS FIRST).\n"
        f"UPDATE {history}\nSET {d.q('_valid_from_pos')} = NULL, {d.q('_valid_to_pos')} = NULL\nWHERE {held};"
    )


def reset_positions_logged_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """When the table's positions were last reset (NULL: never), from the run log."""
    return (
        f"SELECT MAX({d.q('started_at')})\nFROM {d.qualified(pipeline.schema, RUN_LOG)}\n"
        f"WHERE {d.q('table_name')} = {quote_literal(table.name)} AND {d.q('status')} = '{RESET_POSITIONS}';"
    )


def offset_regressions_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """Per partition, the records refreshed after its watermark whose offsets are at or
    below it: the procedure never reads them (a re-created topic restarts its offsets)."""
    n = table_names(pipeline, table)
    q = d.q
    return (
        f"SELECT s.{q('kafka_partition')}, COUNT(*) AS {q('records')}\n"
        f"FROM {d.qualified(n.schema, n.stream)} s\n"
        f"JOIN {d.qualified(n.schema, n.watermark)} w ON w.{q('kafka_partition')} = s.{q('kafka_partition')}\n"
        f"WHERE s.{q('refresh_time')} > w.{q('last_refresh_time')}\n"
        f"  AND s.{q('kafka_offset')} <= w.{q('last_offset')}\n"
        f"GROUP BY s.{q('kafka_partition')}\n"
        f"ORDER BY s.{q('kafka_partition')};"
    )


def new_records_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """Per partition, the records refreshed after the watermark (after the partition's own
    last refresh; for a partition without a watermark row, after the table's newest): the
    first offset, the first refresh time and how many."""
    n = table_names(pipeline, table)
    q = d.q
    wm = d.qualified(n.schema, n.watermark)
    return (
        f"SELECT s.{q('kafka_partition')}, MIN(s.{q('kafka_offset')}) AS {q('first_offset')},\n"
        f"       MIN(s.{q('refresh_time')}) AS {q('first_refresh')}, COUNT(*) AS {q('records')}\n"
        f"FROM {d.qualified(n.schema, n.stream)} s\n"
        f"LEFT JOIN {wm} w ON w.{q('kafka_partition')} = s.{q('kafka_partition')}\n"
        f"WHERE s.{q('refresh_time')} > COALESCE(w.{q('last_refresh_time')}, (SELECT MAX({q('last_refresh_time')}) FROM {wm}))\n"
        f"GROUP BY s.{q('kafka_partition')}\n"
        f"ORDER BY s.{q('kafka_partition')};"
    )


def offset_ranges(offsets: dict[int, tuple[int, int | None]]) -> str:
    """A condition on the stream `s`: per partition, offsets after the first bound (and up
    to the second, when given)."""
    parts = [
        f"(s.kafka_partition = {int(p)} AND s.kafka_offset > {int(after)}"
        + (f" AND s.kafka_offset <= {int(upto)})" if upto is not None else ")")
        for p, (after, upto) in sorted(offsets.items())
    ]
    return "(" + " OR ".join(parts) + ")" if parts else "FALSE"


def first_refresh_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig, after: dict[int, int]) -> str:
    """When the first record after `after` (partition -> offset) was refreshed."""
    n = table_names(pipeline, table)
    ranges = offset_ranges({p: (o, None) for p, o in after.items()})
    return f"SELECT MIN(s.refresh_time)\nFROM {d.qualified(n.schema, n.stream)} s\nWHERE {ranges};"


def rewind_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig, since: datetime, after: dict[int, int]) -> list[str]:
    """The watermark moved back so that the next sync reads again every record after
    `after` (partition -> offset), refreshed at or after `since`: every row's refresh bound
    no later than `since` (the procedure reads from the newest one), and each partition's
    offset back to `after` (never forward)."""
    n = table_names(pipeline, table)
    q = d.q
    wm = d.qualified(n.schema, n.watermark)
    at = timestamp_literal(since)
    statements = [
        "-- Every partition reads again from the refresh of the first record to read again.\n"
        f"UPDATE {wm}\nSET {q('last_refresh_time')} = {at}, {q('updated_at')} = {d.now()}\n"
        f"WHERE {q('last_refresh_time')} > {at};"
    ]
    statements += [
        f"UPDATE {wm}\nSET {q('last_offset')} = {int(offset)}\n"
        f"WHERE {q('kafka_partition')} = {int(partition)} AND {q('last_offset')} > {int(offset)};"
        for partition, offset in sorted(after.items())
    ]
    return statements


def rebased_since(first_refresh: datetime) -> datetime:
    """The refresh time every watermark row gets: one microsecond (the resolution of a
    timestamp) before the first refresh holding new records. The procedure reads
    `refresh_time >= MAX(last_refresh_time)` (or `>`, in procedures generated before that
    change): either way the first new refresh is read, and no older one, as refreshes are
    never a microsecond apart."""
    return first_refresh - timedelta(microseconds=1)


def rebase_offsets_sql(
    d: PostgresDialect,
    pipeline: Pipeline,
    table: TableConfig,
    since: datetime,
    first_offsets: dict[int, int],
    existing: set[int],
) -> list[str]:
    """Every watermark row reads from `since` on and from offset 0 (a partition with no new
    record yet takes its first one when it comes), then each partition with new records
    from just before its first new offset (a row is added for a partition that had none)."""
    n = table_names(pipeline, table)
    q = d.q
    wm = d.qualified(n.schema, n.watermark)
    statements = [
        "-- Every partition reads from the first refresh after the old watermark, from offset 0.\n"
        f"UPDATE {wm}\nSET {q('last_offset')} = -1, {q('last_refresh_time')} = {timestamp_literal(since)}, "
        f"{q('updated_at')} = {d.now()};"
    ]
    for partition, offset in sorted(first_offsets.items()):
        if partition in existing:
            statements.append(
                f"UPDATE {wm}\nSET {q('last_offset')} = {int(offset) - 1}\nWHERE {q('kafka_partition')} = {int(partition)};"
            )
        else:
            columns = ", ".join(q(c) for c in ("kafka_partition", "last_offset", "last_refresh_time", "updated_at"))
            statements.append(
                f"INSERT INTO {wm} ({columns})\n"
                f"VALUES ({int(partition)}, {int(offset) - 1}, {timestamp_literal(since)}, {d.now()});"
            )
    return statements


def run_log_sql(
    d: PostgresDialect,
    pipeline: Pipeline,
    table: TableConfig,
    status: str,
    started: datetime,
    watermark_before: str | None,
    watermark_after: str | None,
    upserted: int = 0,
    deleted: int = 0,
) -> str:
    """The run-log row of a recovery command: nothing read, a status of its own; a
    position reset counts the target rows (`upserted`) and deleted keys (`deleted`) whose
    position it cleared."""
    text = lambda v: d.lit(v) if v is not None else "NULL"  # noqa: E731
    counts = {c.name: "0" for c in run_log_columns(pipeline, table) if c.type == "bigint"}
    columns, values = schemas.ordered(
        d,
        schemas.RUN_LOG,
        {
            "table_name": d.lit(table.name),
            "backend_pid": "PG_BACKEND_PID()",
            "started_at": timestamp_literal(started),
            "finished_at": d.now(),
            **counts,
            "upserted": str(int(upserted)),
            "deleted": str(int(deleted)),
            "watermark_before": text(watermark_before),
            "watermark_after": text(watermark_after),
            "lag_seconds": "NULL",
            "status": d.lit(status),
        },
        quoted=True,
    )
    return f"INSERT INTO {d.qualified(pipeline.schema, RUN_LOG)}\n  ({', '.join(columns)})\nVALUES ({', '.join(values)});"

"""`redshift-sync history rebuild --table T`: the history table made again from the records
the stream relation retains, with the backfill snapshot's versions below them, by the
procedure's own steps (sync/sql/history_rebuild.py), in one transaction under the table's
watermark lock.

It replaces stored versions only when told to (`apply`), and never presents a history with
a hole as complete: Kafka numbers a partition's records from offset 0, so a partition whose
first retained record is above 0 (its older records expired, the view was re-created after
they did, or `prune --stream` removed them) lost records the history was built from, unless
a backfill snapshot at least as new as that first retained record covers them. Such a
partition is a gap; a rebuild over it is refused unless the gap is accepted
(`accept_gap`), and its report says what is missing."""

from __future__ import annotations

import secrets
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from sync.config import ConfigError, Pipeline, TableConfig
from sync.operations.conflicts import conflict_policy, retry_conflicts
from sync.sql.history_rebuild import SNAPSHOT, TEMPORARY, RebuildSql
from sync.sql.policy import has_policies
from sync.warehouse import Warehouse


class Outcome(StrEnum):
    UNCHANGED = "unchanged"  # the stored history equals the rebuilt one
    WRITTEN = "written"  # the stored history had no version the rebuild lacks: written without asking
    REPLACED = "replaced"  # stored versions replaced (apply)
    NEEDS_YES = "needs --yes"  # it would replace stored versions: nothing changed
    GAP = "gap"  # the retained records do not cover the history: nothing changed


@dataclass
class PartitionCover:
    """What the stream retains of one partition the procedure has read."""

    partition: int
    last_applied: int  # the watermark's offset
    first_retained: int | None  # the lowest applied offset the stream still holds (None: none)
    first_retained_time: datetime | None  # its Kafka timestamp
    not_retained: int  # applied records below it (a partition's offsets start at 0)
    lost_versions: int  # stored versions those records opened, which no rebuild can restore
    covered: bool  # nothing missing, or a snapshot at least as new as the first retained record


@dataclass
class Rebuild:
    table: str
    outcome: Outcome
    records: int  # applied records the stream retains, read by the rebuild
    quarantined: int  # of them, records the procedure's rules quarantine (no version)
    snapshot_versions: int  # versions of backfill snapshots, kept below the stream
    snapshot_time: datetime | None  # the oldest of their times
    stored: int  # versions the history held
    rebuilt: int  # versions of the rebuilt history
    stored_only: int  # stored versions the rebuilt history lacks or holds otherwise
    rebuilt_only: int  # rebuilt versions the stored history lacks or holds otherwise
    partitions: list[PartitionCover] = field(default_factory=list)

    @property
    def gaps(self) -> list[PartitionCover]:
        return [p for p in self.partitions if not p.covered]

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "outcome": str(self.outcome), "complete": not self.gaps}


def history_table(pipeline: Pipeline, table_name: str) -> TableConfig:
    table = pipeline.table(table_name)
    if table.history is None:
        raise ConfigError(f"history rebuild: table {table.name} keeps no history (history = true in the pipeline file)")
    if has_policies(table):
        raise ConfigError(
            f"history rebuild: table {table.name} has column policies, whose hashes depend on the key in use "
            "when each event was applied; a rebuild cannot hash as the procedure did"
        )
    return table


def _partitions(wh: Warehouse, sql: RebuildSql, snapshot_time: datetime | None) -> list[PartitionCover]:
    rel, d = sql.ctx.rel, sql.d
    rows = wh.query(
        "SELECT w.kafka_partition, w.last_offset, w.last_refresh_time, f.kafka_offset, f.kafka_timestamp,\n"
        f"       (SELECT COUNT(*) FROM {rel.history} h WHERE h._kafka_partition = w.kafka_partition\n"
        "          AND h._kafka_offset < COALESCE(f.kafka_offset, w.last_offset + 1))\n"
        f"FROM {rel.watermark} w\n"
        "LEFT JOIN (SELECT s.kafka_partition, s.kafka_offset, s.kafka_timestamp,\n"
        "                  ROW_NUMBER() OVER (PARTITION BY s.kafka_partition ORDER BY s.kafka_offset) AS n\n"
        f"           FROM {d.q(TEMPORARY['stream'])} s) f ON f.kafka_partition = w.kafka_partition AND f.n = 1\n"
        "WHERE w.last_offset >= 0\nORDER BY w.kafka_partition"
    )
    out = []
    for partition, last, refreshed, first, first_time, lost in rows:
        missing = int(first) if first is not None else int(last) + 1
        newest_missing = first_time if first is not None else refreshed
        covered = missing == 0 or (snapshot_time is not None and newest_missing is not None and snapshot_time >= newest_missing)
        out.append(PartitionCover(int(partition), int(last), first, first_time, missing, int(lost), covered))
    return out


def _decide(result: Rebuild, apply: bool, accept_gap: bool) -> Outcome:
    if result.gaps and not accept_gap:
        return Outcome.GAP
    if result.stored_only == 0 and result.rebuilt_only == 0:
        return Outcome.UNCHANGED
    if result.stored_only == 0:
        return Outcome.WRITTEN
    return Outcome.REPLACED if apply else Outcome.NEEDS_YES


def rebuild_history(wh: Warehouse, pipeline: Pipeline, table_name: str, apply: bool = False, accept_gap: bool = False) -> Rebuild:
    """Rebuild the history of the table; replaces stored versions only with `apply`, and
    over a gap only with `accept_gap`."""
    table = history_table(pipeline, table_name)
    sql = RebuildSql(wh.dialect.bind_schema(pipeline.schema), pipeline, table, f"history_rebuild_{secrets.token_hex(6)}")
    q = sql.d.q

    def attempt() -> Rebuild:
        with wh.transaction():
            wh.execute(sql.lock())  # first: the snapshot of the transaction starts after it
            for statement in [*sql.setup(), sql.procedure_sql(), *sql.call_sql(), *sql.below_stream()]:
                wh.execute(statement)
            records = int(wh.scalar(f"SELECT COUNT(*) FROM {q(TEMPORARY['stream'])}") or 0)
            quarantined = int(wh.scalar(f"SELECT COUNT(*) FROM {q(TEMPORARY['quarantine'])}") or 0)
            snapshots, snapshot_time = wh.query(f"SELECT COUNT(*), MIN(_valid_from) FROM {q(SNAPSHOT)}")[0]
            ((stored, rebuilt, stored_only, rebuilt_only),) = wh.query(sql.differences_sql())
            result = Rebuild(
                table.name,
                Outcome.UNCHANGED,
                records,
                quarantined,
                int(snapshots),
                snapshot_time,
                int(stored),
                int(rebuilt),
                int(stored_only),
                int(rebuilt_only),
                _partitions(wh, sql, snapshot_time),
            )
            result.outcome = _decide(result, apply, accept_gap)
            if result.outcome in (Outcome.WRITTEN, Outcome.REPLACED):
                for statement in sql.replace_sql():
                    wh.execute(statement)
            for statement in sql.cleanup():
                wh.execute(statement)
        return result

    return retry_conflicts(conflict_policy(pipeline), attempt)[0]

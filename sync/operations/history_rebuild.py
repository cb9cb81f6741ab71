"""`redshift-sync history rebuild --table T`: the history table made again from the records
the stream relation retains, with the backfill snapshot's versions below them, by the
procedure's own steps (sync/sql/history_rebuild.py), in one transaction under the table's
watermark lock.

It replaces stored versions only when told to (`apply`), and never presents a history with
a hole as complete. Kafka numbers a partition's records from offset 0, one after another
(but where the table's `offset_gaps` says otherwise: sync/operations/loss.py), so of the
offsets the procedure applied (up to the watermark) the stream misses:

- those below its first retained record (they expired, the view was re-created after they
  did, or `prune --stream` removed them): covered when a backfill snapshot at least as new
  as that first record holds the state they led to (its versions are below the stream's);
- those between retained records (lost before they were read, or pruned): a hole no
  snapshot fills.

A partition with offsets missing and not covered is a gap: a rebuild over it is refused
unless the gap is accepted (`accept_gap`), and its report says what is missing; stored
versions whose record is gone are counted apart (a rebuild cannot restore them)."""

from __future__ import annotations

import secrets
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from sync.config import ConfigError, Pipeline, TableConfig
from sync.operations.conflicts import conflict_policy, retry_conflicts
from sync.operations.loss import EXPLAINED
from sync.sql.history_rebuild import DIFFERING_COLUMNS, SNAPSHOT, TEMPORARY, RebuildSql, Side
from sync.sql.history_snapshot import snapshot_version
from sync.sql.policy import has_policies
from sync.sql.recovery import reset_positions_logged_sql
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
    not_retained: int  # applied offsets below it (a partition's offsets start at 0)
    missing_between: int  # offsets missing between retained ones, beyond what `offset_gaps` explains
    lost_versions: int  # stored versions whose record the stream no longer retains: no rebuild restores them
    covered: bool  # nothing missing, or only offsets below the first retained record that a snapshot as new covers


# How many of each history's differing versions a rebuild names (the counts are of all).
DIFFERING_SHOWN = 10


@dataclass
class VersionDifference:
    """A version one history holds and the other lacks or holds otherwise."""

    side: Side
    key: dict[str, Any]  # the key columns' values, by target name
    valid_from_pos: str | None
    valid_from: datetime | None
    valid_to: datetime | None
    op: str
    kafka_partition: int | None
    kafka_offset: int | None
    values: dict[str, Any] = field(default_factory=dict)  # the value columns, by target name


@dataclass
class Rebuild:
    table: str
    outcome: Outcome
    records: int  # applied records the stream retains, read by the rebuild
    quarantined: int  # of them, records the procedure's rules quarantine (no version)
    snapshot_versions: int  # rebuilt versions of backfill snapshots, below the stream's
    snapshot_time: datetime | None  # the oldest time of the stored history's snapshot versions
    stored: int  # versions the history held
    rebuilt: int  # versions of the rebuilt history
    stored_only: int  # stored versions the rebuilt history lacks or holds otherwise
    rebuilt_only: int  # rebuilt versions the stored history lacks or holds otherwise
    partitions: list[PartitionCover] = field(default_factory=list)
    # the first DIFFERING_SHOWN (by key and position) of the stored and of the rebuilt
    # versions without an equal row in the other history
    differing: list[VersionDifference] = field(default_factory=list)

    @property
    def gaps(self) -> list[PartitionCover]:
        return [p for p in self.partitions if not p.covered]

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "outcome": str(self.outcome), "complete": not self.gaps}


def history_table(pipeline: Pipeline, table_name: str) -> TableConfig:
    table = pipeline.table(table_name)
    if table.history is None:
        raise ConfigError(
            f"history rebuild: table {table.name} keeps no history: set history = true on it in the pipeline file, "
            "then run `redshift-sync revision` and `redshift-sync deploy`"
        )
    if has_policies(table):
        raise ConfigError(
            f"history rebuild: table {table.name} has column policies, whose hashes depend on the key in use "
            "when each event was applied; a rebuild cannot hash as the procedure did"
        )
    return table


def _partitions(wh: Warehouse, sql: RebuildSql, snapshot_time: datetime | None) -> list[PartitionCover]:
    explained = EXPLAINED.get(sql.table.offset_gaps)  # compacted: gaps by design
    out = []
    for partition, last, refreshed, first, first_time, holes, lost in wh.query(sql.partitions_sql(explained)):
        prefix = 0 if explained is None else (int(first) if first is not None else int(last) + 1)
        newest_missing = first_time if first is not None else refreshed
        covered = prefix == 0 or (snapshot_time is not None and newest_missing is not None and snapshot_time >= newest_missing)
        cover = PartitionCover(int(partition), int(last), first, first_time, prefix, int(holes or 0), int(lost), covered)
        cover.covered = covered and not cover.missing_between
        out.append(cover)
    return out


def _differing(wh: Warehouse, sql: RebuildSql) -> list[VersionDifference]:
    """The versions the two histories do not share, each key's together in version order
    (source position, then Kafka record), a stored one before its rebuilt counterpart."""
    keys, values = sql.ctx.keys, [c.target_name for c in sql.table.value_columns]
    shown = 1 + len(keys) + len(DIFFERING_COLUMNS)  # side, key, then what every version tells
    found = [
        VersionDifference(
            Side(row[0]),
            dict(zip(keys, row[1 : 1 + len(keys)], strict=True)),
            *row[1 + len(keys) : shown],
            values=dict(zip(values, row[shown:], strict=True)),
        )
        for row in wh.query(sql.differing_sql(DIFFERING_SHOWN))
    ]
    return sorted(
        found,
        key=lambda v: (
            tuple(v.key.values()),
            v.valid_from_pos or "",
            v.kafka_partition if v.kafka_partition is not None else -1,
            v.kafka_offset if v.kafka_offset is not None else -1,
            v.side != Side.STORED,
        ),
    )


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
    d = wh.dialect.bind_schema(pipeline.schema)
    reset_at = wh.scalar(reset_positions_logged_sql(d, pipeline, table))
    if reset_at is not None:
        raise ConfigError(
            f"history rebuild: the source positions of table {table.name} were reset at {reset_at} (reset-positions): "
            "the stream's records from before and after it have positions that do not compare, and a rebuild orders "
            "them by position. The stored history keeps both in order (docs/correctness.md, History mode)"
        )
    sql = RebuildSql(d, pipeline, table, f"history_rebuild_{secrets.token_hex(6)}")
    q = sql.d.q

    def attempt() -> Rebuild:
        with wh.transaction():
            wh.execute(sql.lock())  # first: the snapshot of the transaction starts after it
            for statement in [*sql.setup(), sql.procedure_sql(), *sql.call_sql(), *sql.below_stream()]:
                wh.execute(statement)
            records = int(wh.scalar(f"SELECT COUNT(*) FROM {q(TEMPORARY['stream'])}") or 0)
            quarantined = int(wh.scalar(f"SELECT COUNT(*) FROM {q(TEMPORARY['quarantine'])}") or 0)
            snapshot_time = wh.scalar(f"SELECT MIN(_valid_from) FROM {q(SNAPSHOT)}")
            snapshots = wh.scalar(f"SELECT COUNT(*) FROM {q(TEMPORARY['history'])} h WHERE {snapshot_version('h')}")
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
                _differing(wh, sql) if stored_only or rebuilt_only else [],
            )
            result.outcome = _decide(result, apply, accept_gap)
            if result.outcome in (Outcome.WRITTEN, Outcome.REPLACED):
                for statement in sql.replace_sql():
                    wh.execute(statement)
            for statement in sql.cleanup():
                wh.execute(statement)
        return result

    return retry_conflicts(conflict_policy(pipeline), attempt)[0]

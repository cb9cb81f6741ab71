"""What every step of a table's procedure is written with: one `TableSql` per table (the
dialect, the pipeline, the table, its relations and key columns, computed once), the
states a stage record moves through (`Action`), and the conditions several steps share."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property

from sync.config import Pipeline, TableConfig
from sync.sql.dialect import PostgresDialect
from sync.sql.names import RUN_LOG, table_names


class Action(StrEnum):
    """The stage's `_action`: what the procedure does with a record (docs/correctness.md)."""

    UPSERT = "upsert"
    DELETE = "delete"
    QUARANTINE = "quarantine"
    TOMBSTONE = "tombstone"  # a Kafka tombstone: compaction's business, nothing to apply
    TRUNCATE = "truncate"  # a truncate event (op 't')
    TRUNCATED = "truncated"  # a winner a newer truncate voids
    STALE = "stale"  # a winner not newer than what is stored for its key
    ROUTED = "routed"  # a record of another table sharing the topic (sync.sql.procedure.routing)
    UNMATCHED = "unmatched"  # a change event no table sharing the topic selects


# Read order of the stream for bounded runs and record isolation: a prefix of it is a
# prefix of every partition (a refresh reads each partition's offsets in order).
READ_ORDER = "s.refresh_time, s.kafka_partition, s.kafka_offset"
# One partition's watermark as the run log writes it ("partition:offset"), over rows `r`.
WATERMARK_ITEM = "CAST(r.kafka_partition AS varchar(20)) || ':' || CAST(r.last_offset AS varchar(20))"
# Before any refresh: where a table's first run reads from.
NEVER = "TIMESTAMP '1900-01-01 00:00:00'"
# A run that is not bounded reads up to this refresh time.
UNBOUNDED = "TIMESTAMP '9999-12-31 00:00:00'"
# The call's one reading of the clock (UTC: PINNED_SETTING), taken once the lock is held:
# the run log's start, _synced_at, _deleted_at, the lag and every control-table time.
CALL_TIME = "v_started"
# Upserts and deletes: the records ranked per key, of which the first (_rn = 1) wins.
APPLIED = f"('{Action.UPSERT}', '{Action.DELETE}')"
# The winning event of each key, in the stage row `s`.
WINNERS = f"s._rn = 1 AND s._action IN {APPLIED}"
# What the run log counts of a batch, by run-log column: expressions over the stage.
OUTCOMES = {
    "upserted": f"COUNT(CASE WHEN _rn = 1 AND _action = '{Action.UPSERT}' THEN 1 END)",
    "deleted": f"COUNT(CASE WHEN _rn = 1 AND _action = '{Action.DELETE}' THEN 1 END)",
    "quarantined": f"COUNT(CASE WHEN _action = '{Action.QUARANTINE}' THEN 1 END)",
    "tombstones": f"COUNT(CASE WHEN _action = '{Action.TOMBSTONE}' THEN 1 END)",
    "stale": f"COUNT(CASE WHEN _action IN ('{Action.STALE}', '{Action.TRUNCATED}') THEN 1 END)",
    "superseded": f"COUNT(CASE WHEN _rn > 1 AND _action IN {APPLIED} THEN 1 END)",
    "truncates": f"COUNT(CASE WHEN _action = '{Action.TRUNCATE}' THEN 1 END)",
}


def positionless(prefix: str = "") -> str:
    """An upsert or delete without a source position (columns of the stage row `prefix`)."""
    return f"{prefix}_source_pos IS NULL AND {prefix}_action IN {APPLIED}"


@dataclass(frozen=True)
class Relations:
    """The qualified names of a table's relations and of the shared run log."""

    target: str
    stage: str
    stream: str
    watermark: str
    deleted: str
    quarantine: str
    run_log: str
    schema_drift: str
    history: str  # history = true only

    def held(self, table: TableConfig) -> list[str]:
        """What is stored for a key: its row, or (hard mode) its deleted-key record."""
        return [self.target] + ([self.deleted] if table.delete_mode == "hard" else [])


def relations(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> Relations:
    n = table_names(pipeline, table)
    names = (n.target, n.stage, n.stream, n.watermark, n.deleted_keys, n.quarantine, RUN_LOG, n.schema_drift, n.history)
    return Relations(*(d.qualified(n.schema, name) for name in names))


@dataclass(frozen=True)
class TableSql:
    """A table's procedure in the making: the dialect, the pipeline and the table, with what
    the steps derive from them (relations, key columns) computed once."""

    d: PostgresDialect
    pipeline: Pipeline
    table: TableConfig
    # The stage query reads the before image of every record (a keyless table's updates).
    before_images: bool = False

    @cached_property
    def rel(self) -> Relations:
        return relations(self.d, self.pipeline, self.table)

    @cached_property
    def keys(self) -> list[str]:
        """The key columns' target names."""
        return [c.target_name for c in self.table.key_columns]

    @property
    def q(self):
        return self.d.q

    @property
    def source_order(self) -> bool:
        """Events are ordered by their source position (else by Kafka order)."""
        return self.table.order_by != "kafka"

    @property
    def hard_deletes(self) -> bool:
        return self.table.delete_mode == "hard"

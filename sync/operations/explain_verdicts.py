"""The verdicts of `explain` (sync/operations/explain.py) on a key's records, read from
the stage rows the procedure's own steps left (sync/sql/explain.py): a pending record by
the rules' `Action`, rank and reason; a record already read by what is stored now and by
the quarantine. Positions read as their numbers (`readable_position`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sync.config import TableConfig
from sync.operations.ordering import readable_position
from sync.sql.explain import PENDING, RETAINED
from sync.sql.procedure import Action

APPLIED = (Action.UPSERT, Action.DELETE)


class Origin(StrEnum):
    """Where an entry of the explanation is from."""

    STORED = "stored row"
    DELETED = "remembered delete"
    STREAM = "stream"
    QUARANTINE = "quarantine"


class Outcome(StrEnum):
    """What the sync did, or would do, with a record."""

    STORED = "stored"  # the stored row, or the remembered delete, itself
    APPLIED = "applied"
    TOMBSTONE_DELETE = "tombstone-only delete"
    SUPERSEDED = "superseded"
    STALE = "stale"
    OLDER = "older"  # read earlier, older than what is stored now
    REDUNDANT_TOMBSTONE = "redundant tombstone"
    TOMBSTONE = "tombstone"  # a Kafka tombstone after a delete event: compaction's marker
    TRUNCATED = "truncated"
    QUARANTINED = "quarantined"


@dataclass
class Facts:
    """What the verdicts are read from: the key's stage rows by stage and Kafka
    coordinates, its stored rows, and its quarantine rows."""

    table: TableConfig
    stages: dict[str, dict[tuple[int, int], dict[str, Any]]]
    order: list[tuple[int, int]]  # the retained records, newest first as ranked
    stored: dict[str, Any] | None
    deleted: dict[str, Any] | None
    quarantine: list[dict[str, Any]]

    @property
    def stored_pos(self) -> str | None:
        positions = [r["_source_pos"] for r in (self.stored, self.deleted) if r and r["_source_pos"] is not None]
        return max(positions) if positions else None

    def holder(self, coordinates: tuple[int, int]) -> Origin | None:
        for origin, row in ((Origin.STORED, self.stored), (Origin.DELETED, self.deleted)):
            if row and (row["_kafka_partition"], row["_kafka_offset"]) == coordinates:
                return origin
        return None

    def newest_stored(self) -> str:
        rows = [r for r in (self.stored, self.deleted) if r and r["_kafka_partition"] is not None]
        return ", ".join(f"{r['_kafka_partition']}:{r['_kafka_offset']}" for r in rows) or "none"


def pending_verdict(facts: Facts, row: dict[str, Any]) -> tuple[Outcome, str]:
    """The rules' verdict on a record of the batch the next CALL reads (its stage row
    after the rules)."""
    action, reason = row["_action"], row["_reason"]
    if action == Action.QUARANTINE:
        return Outcome.QUARANTINED, f"quarantined: {reason}"
    if action == Action.STALE:
        if facts.table.order_by == "kafka":
            return Outcome.STALE, f"stale: older in Kafka order than the stored record {facts.newest_stored()}"
        return Outcome.STALE, f"stale: not newer than the stored position {readable_position(facts.stored_pos)}"
    if action == Action.TRUNCATED:
        return Outcome.TRUNCATED, "voided by a newer truncate of the table"
    if action == Action.TOMBSTONE:
        if facts.table.format == "debezium-unwrap":
            return Outcome.REDUNDANT_TOMBSTONE, "redundant tombstone after its delete event"
        return Outcome.TOMBSTONE, "tombstone after its delete event (compaction's marker): nothing to apply"
    if row["_rn"] != 1:
        pending = facts.stages[PENDING]
        winner = next(
            (c for c, r in pending.items() if r["_rn"] == 1 and facts.stages[RETAINED].get(c, r)["_action"] in APPLIED),
            None,
        )
        by = f"{winner[0]}:{winner[1]}" if winner else "a newer record"
        return Outcome.SUPERSEDED, f"superseded in its batch by {by}"
    if row["_op"] is None and action == Action.DELETE:
        at = (
            f"placed at position {readable_position(row['_source_pos'])}"
            if row["_source_pos"] is not None
            else "with no position stored"
        )
        return Outcome.TOMBSTONE_DELETE, f"tombstone-only delete {at}"
    verdict = f"applied ({action})"
    kept = [c for c in (row["_unavailable"] or "").split("|") if c]
    if kept:
        verdict += f", keeping the stored value of {', '.join(kept)} (TOAST placeholder)"
    if row["_source_pos"] is not None and row["_source_pos"] == facts.stored_pos:
        verdict += (
            f": another change at the stored position {readable_position(facts.stored_pos)} (one transaction), in Kafka order"
        )
    return Outcome.APPLIED, verdict


def read_verdict(facts: Facts, coordinates: tuple[int, int], row: dict[str, Any]) -> tuple[Outcome, str]:
    """A record at or below the watermark: read by an earlier CALL, judged by what is
    stored now and by the quarantine."""
    holder = facts.holder(coordinates)
    if holder is not None:
        return Outcome.APPLIED, f"applied: it wrote the {holder}"
    quarantined = next((q for q in facts.quarantine if (q["kafka_partition"], q["kafka_offset"]) == coordinates), None)
    if quarantined is not None:
        return Outcome.QUARANTINED, f"quarantined: {quarantined['reason']}"
    if row["_action"] == Action.TOMBSTONE:
        return Outcome.TOMBSTONE, "tombstone after its delete event (compaction's marker): nothing to apply"
    if row["_action"] == Action.QUARANTINE:
        return Outcome.QUARANTINED, f"quarantined: {row['_reason']} (no longer in the quarantine)"
    stored = facts.stored_pos
    if facts.table.order_by == "kafka" or row["_source_pos"] is None:
        what = "a tombstone" if row["_source_pos"] is None and facts.table.order_by != "kafka" else "a record"
        return Outcome.OLDER, (
            f"read earlier: {what} the stored record {facts.newest_stored()} replaced or outranked"
            " (superseded, stale, redundant, or applied and since replaced)"
        )
    if stored is None:
        return Outcome.OLDER, "read earlier: nothing is stored for the key now (removed by a truncate or a backfill)"
    if row["_source_pos"] == stored:
        return (
            Outcome.OLDER,
            f"read earlier: at the stored position {readable_position(stored)} (a re-sent copy, or a change of its transaction before the stored one)",
        )
    if row["_source_pos"] < stored:
        return (
            Outcome.OLDER,
            f"read earlier: older than the stored position {readable_position(stored)} (superseded or stale then, or applied and replaced since)",
        )
    return (
        Outcome.OLDER,
        f"read earlier: newer than the stored position {readable_position(stored)} yet not stored (voided by a truncate)",
    )

"""Which is newer for one key: what the warehouse holds (a target row, or a remembered
delete) or a snapshot row. One rule, which the backfill's merge applies in SQL and
`reconcile` in Python (tests/test_handover_rule.py checks on PostgreSQL that both agree):

- when both carry a source position, the positions decide;
- else their times decide. A held row is dated by the first of its `*_TIME` columns that
  is set: a delete without a source time (a tombstone-only delete, ExtractNewRecordState's
  default since Debezium 2.5) by its Kafka timestamp, set when it was produced, an upper
  bound of its commit time;
- a time unknown on either side decides nothing (UNKNOWN).

The merge keeps what the warehouse holds unless it is OLDER: the stream carries every later
change of the key, so keeping a row of unknown age never loses one, and a SAME stamp is the
change the warehouse already has (a second identical backfill changes nothing). Reconcile
counts a difference as the stream's when the held side is NEWER, or UNKNOWN (the merge kept
it for that reason); a difference at the SAME stamp is not the same change, so it is real.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum

# The columns a held row is dated by, first set wins: a target row, a remembered delete.
ROW_TIME = ("_source_ts",)
DELETE_TIME = ("_source_ts", "_kafka_timestamp")


class Recency(Enum):
    """The held side compared with the snapshot's."""

    NEWER = "newer"
    SAME = "same"
    OLDER = "older"
    UNKNOWN = "unknown"


STREAMS = frozenset({Recency.NEWER, Recency.UNKNOWN})  # a difference the stream explains


@dataclass(frozen=True)
class Stamp:
    """Where a row sits in the source: its position (ordered as text) and its time."""

    position: str | None
    time: datetime | None


def held_time_sql(alias: str, columns: tuple[str, ...]) -> str:
    """The time a held row of `alias` is dated by (ROW_TIME or DELETE_TIME)."""
    parts = [f"{alias}.{c}" for c in columns]
    return parts[0] if len(parts) == 1 else f"COALESCE({', '.join(parts)})"


def kept_sql(held: str, s: str, held_time: str) -> str:
    """SQL: true when the merge keeps the held row `held` over the snapshot row `s`
    (recency is not OLDER); `held_time` from `held_time_sql`."""
    return (
        f"CASE WHEN {s}._source_pos IS NOT NULL AND {held}._source_pos IS NOT NULL\n"
        f"       THEN {s}._source_pos <= {held}._source_pos\n"
        f"       ELSE COALESCE({held_time} >= {s}._source_ts, true) END"
    )


def _order(held: str | datetime, snapshot: str | datetime) -> Recency:
    if held == snapshot:
        return Recency.SAME
    return Recency.NEWER if held > snapshot else Recency.OLDER  # type: ignore[operator]


def recency(held: Stamp, snapshot: Stamp) -> Recency:
    """The held side compared with the snapshot's, by the rule `kept_sql` applies."""
    if held.position is not None and snapshot.position is not None:
        return _order(held.position, snapshot.position)
    if held.time is None or snapshot.time is None:
        return Recency.UNKNOWN
    return _order(held.time, snapshot.time)

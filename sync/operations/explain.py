"""`redshift-sync explain --table T --key K`: why a key's row looks the way it does.

Every record of the key the stream still retains, the quarantine's records of it, its
remembered delete and its stored row, each with its source position, Kafka coordinates
and a verdict. The verdicts come from the procedure's own steps (sync/sql/explain.py),
never from a second copy of its rules:

- a record above the watermark (pending) is judged by the rules of the batch the next
  CALL would read, run over temporary tables: "pending: above the watermark, would be
  applied / superseded in its batch by P:O / stale: not newer than the stored position
  ... / quarantined: reason";
- a record at or below the watermark was read by an earlier CALL, whose batch and whose
  stored state at the time are gone: it is judged by what the target holds now, the
  stored row's Kafka coordinates and source position (the record that wrote the stored
  row or the remembered delete is "applied"; an older one is "older than the stored
  position P"), and by the quarantine.

Stored values are read from the target (a column under a column policy shows as the
target holds it); records show their coordinates and verdicts, never their payload.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from sync.config import ConfigError, Pipeline, TableConfig
from sync.operations.ordering import readable_position
from sync.sql.explain import PENDING, QUARANTINED, RETAINED, STAGE_COLUMNS, ExplainSql
from sync.sql.procedure import Action
from sync.warehouse import Warehouse

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
class Entry:
    origin: Origin
    outcome: Outcome
    verdict: str
    pending: bool = False
    kafka_partition: int | None = None
    kafka_offset: int | None = None
    kafka_timestamp: str | None = None
    source_pos: str | None = None
    op: str | None = None
    values: dict[str, Any] = field(default_factory=dict)  # stored rows only, as the target holds them

    @property
    def coordinates(self) -> str:
        return f"{self.kafka_partition}:{self.kafka_offset}" if self.kafka_partition is not None else "-"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "origin": str(self.origin), "outcome": str(self.outcome)}


@dataclass
class Explanation:
    table: str
    key: dict[str, str]
    entries: list[Entry]

    def as_dict(self) -> dict[str, Any]:
        return {"table": self.table, "key": self.key, "entries": [e.as_dict() for e in self.entries]}


def key_values(table: TableConfig, given: Sequence[str]) -> list[str]:
    """The key's values in key-column order, from `FIELD=VALUE` items (the source field
    name or the target column name)."""
    by_name: dict[str, str] = {}
    for item in given:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--key {item!r}: expected FIELD=VALUE")
        by_name[name.strip()] = value
    out, used = [], set()
    for col in table.key_columns:
        name = next((n for n in (col.name, col.target_name) if n in by_name), None)
        if name is None:
            raise ConfigError(f"--key: no value for the key field {col.name} of table {table.name}")
        out.append(by_name[name])
        used.add(name)
    unknown = sorted(set(by_name) - used)
    if unknown:
        raise ConfigError(f"--key: {', '.join(unknown)} is not a key field of table {table.name}")
    return out


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass
class _Facts:
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


def _pending_verdict(facts: _Facts, row: dict[str, Any]) -> tuple[Outcome, str]:
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


def _read_verdict(facts: _Facts, coordinates: tuple[int, int], row: dict[str, Any]) -> tuple[Outcome, str]:
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


def _entries(facts: _Facts) -> list[Entry]:
    out: list[Entry] = []
    for origin, row in ((Origin.STORED, facts.stored), (Origin.DELETED, facts.deleted)):
        if row is not None:
            values = {k: _text(v) for k, v in row.items() if not k.startswith("_kafka") and k != "_source_pos"}
            out.append(
                Entry(
                    origin,
                    Outcome.STORED,
                    f"the {origin}" + (" (soft-deleted)" if row.get("_deleted") else ""),
                    kafka_partition=row["_kafka_partition"],
                    kafka_offset=row["_kafka_offset"],
                    kafka_timestamp=_text(row.get("_kafka_timestamp")),
                    source_pos=row["_source_pos"],
                    values=values,
                )
            )
    pending = facts.stages[PENDING]
    order = facts.order + [c for c in pending if c not in facts.stages[RETAINED]]
    for coordinates in order:
        row = pending.get(coordinates) or facts.stages[RETAINED][coordinates]
        if coordinates in pending:
            outcome, verdict = _pending_verdict(facts, row)
            verdict = f"pending: above the watermark, would be {verdict}"
        else:
            outcome, verdict = _read_verdict(facts, coordinates, row)
        out.append(
            Entry(
                Origin.STREAM,
                outcome,
                verdict,
                pending=coordinates in pending,
                kafka_partition=row["_kafka_partition"],
                kafka_offset=row["_kafka_offset"],
                kafka_timestamp=_text(row["_kafka_timestamp"]),
                source_pos=row["_source_pos"],
                op=row["_op"],
            )
        )
    for q in facts.quarantine:
        row = facts.stages[QUARANTINED].get((q["kafka_partition"], q["kafka_offset"]), {})
        out.append(
            Entry(
                Origin.QUARANTINE,
                Outcome.QUARANTINED,
                f"quarantined: {q['reason']} ({q['handled'] or 'waiting'})",
                kafka_partition=q["kafka_partition"],
                kafka_offset=q["kafka_offset"],
                kafka_timestamp=_text(q["kafka_timestamp"]),
                source_pos=row.get("_source_pos"),
                op=row.get("_op"),
            )
        )
    return out


def explain(wh: Warehouse, pipeline: Pipeline, table_name: str, key: Sequence[str]) -> Explanation:
    """Explains the key (`FIELD=VALUE` items) of the table; writes nothing (its
    transaction is rolled back) and takes no lock on a shared relation."""
    return explain_keys(wh, pipeline, table_name, [key])[0]


def explain_keys(wh: Warehouse, pipeline: Pipeline, table_name: str, keys: Sequence[Sequence[str]]) -> list[Explanation]:
    """Explains several keys of the table with one run of the steps."""
    table = pipeline.table(table_name)
    given = [key_values(table, key) for key in keys]
    d = wh.dialect.bind_schema(pipeline.schema)
    sql = ExplainSql(d, pipeline, table, f"explain_{secrets.token_hex(6)}", keys=len(given))
    with wh.rolled_back():
        for statement in sql.setup():
            wh.execute(statement, [v for values in given for v in values] if "%s" in statement else None)
        wh.execute(sql.procedure_sql())
        wh.execute(sql.call_sql())
        return [_explained(wh, sql, values) for values in given]


def _explained(wh: Warehouse, sql: ExplainSql, values: list[str]) -> Explanation:
    """One key's explanation, read from the temporary tables the steps filled."""

    def read(statement: str) -> list[tuple]:
        return wh.query(statement, values * (statement.count("%s") // len(values)))

    held = [
        [dict(zip([c.name for c in sql.stored_columns(deleted)], r, strict=True)) for r in read(sql.stored_sql(deleted))]
        for deleted in ([False, True] if sql.ctx.hard_deletes else [False])
    ]
    q_columns = ("kafka_partition", "kafka_offset", "kafka_timestamp", "run_started_at", "reason", "handled")
    quarantine = [dict(zip(q_columns, r, strict=True)) for r in read(sql.quarantine_sql())]
    stages: dict[str, dict[tuple[int, int], dict[str, Any]]] = {PENDING: {}, RETAINED: {}, QUARANTINED: {}}
    order = []
    for stage, *rest in read(sql.records_sql()):
        row = dict(zip(STAGE_COLUMNS, rest, strict=True))
        coordinates = (row["_kafka_partition"], row["_kafka_offset"])
        stages[stage][coordinates] = row
        if stage == RETAINED:
            order.append(coordinates)
    stored = held[0][0] if held[0] else None
    deleted = held[1][0] if len(held) > 1 and held[1] else None
    facts = _Facts(sql.table, stages, order, stored, deleted, quarantine)
    key = dict(zip([c.name for c in sql.table.key_columns], values, strict=True))
    return Explanation(sql.table.name, key, _entries(facts))

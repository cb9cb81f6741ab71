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
from typing import Any

from sync.config import ConfigError, Pipeline, TableConfig
from sync.operations.explain_verdicts import Facts, Origin, Outcome, pending_verdict, read_verdict
from sync.sql.explain import PENDING, QUARANTINED, RETAINED, STAGE_COLUMNS, ExplainSql
from sync.warehouse import Warehouse


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
    if table.is_keyless:
        raise ConfigError(f"explain: table {table.name} has no primary key, so no key names its rows")
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


def _entries(facts: Facts) -> list[Entry]:
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
            outcome, verdict = pending_verdict(facts, row)
            verdict = f"pending: above the watermark, would be {verdict}"
        else:
            outcome, verdict = read_verdict(facts, coordinates, row)
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
    facts = Facts(sql.table, stages, order, stored, deleted, quarantine)
    key = dict(zip([c.name for c in sql.table.key_columns], values, strict=True))
    return Explanation(sql.table.name, key, _entries(facts))

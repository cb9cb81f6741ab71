"""The quarantine as a queue: list what waits, replay it once the cause is fixed, or
discard it, and keep a record of either.

A replay marks the chosen records `replaying` and calls the table's procedure in the same
transaction; the procedure reads them with the stream's new records (see
`sync.sql.procedure.batch.replay_sql`), so they go through the same classification, ordering and
staleness rules as any record: one older than the row stored for its key is stale, one
that still fails is quarantined again with its new reason. The records replayed are
marked `replayed`, discarded ones `discarded`, each with the time (`handled_at`).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from datetime import datetime

from sync.config import Pipeline, TableConfig
from sync.operations.conflicts import conflict_policy, retry_conflicts
from sync.operations.runner import RunSummary, call_result, call_result_sql, call_sql, under_table_lock
from sync.sql import schemas
from sync.sql.dialect import PostgresDialect, quote_ident
from sync.sql.names import CALL_RESULT, QUARANTINE, table_names
from sync.sql.policy_replay import unreplayable
from sync.warehouse import Warehouse, WarehouseError


@dataclass
class QuarantinedRecord:
    kafka_partition: int
    kafka_offset: int
    kafka_timestamp: str | None
    quarantined_at: str | None
    reason: str
    handled: str | None
    handled_at: str | None
    value: str | None  # the payload as JSON text, or the raw value as text

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Selection:
    """Which waiting records of a table a command acts on."""

    table: str
    reason: str | None = None  # a part of the reason
    before: datetime | None = None  # quarantined before this time (naive UTC, as the tables hold it)

    def where(self, waiting_only: bool = True) -> tuple[str, list]:
        clauses, params = ["table_name = %s"], [self.table]
        if waiting_only:
            clauses.append("handled IS NULL")
        if self.reason:
            clauses.append("POSITION(%s IN reason) > 0")
            params.append(self.reason)
        if self.before is not None:
            clauses.append("run_started_at < %s")
            params.append(self.before)
        return " AND ".join(clauses), params


def _quarantine(pipeline: Pipeline) -> str:
    return f"{quote_ident(pipeline.schema)}.{quote_ident(QUARANTINE)}"


def _value_text(payload: object, raw: object) -> str | None:
    if payload is not None:
        return payload if isinstance(payload, str) else json.dumps(payload)
    if raw is not None:
        return bytes(raw).decode("utf-8", "replace")
    return None


# What `quarantine list` shows of a record.
LISTED = tuple(
    schemas.column(schemas.QUARANTINE, name)
    for name in (
        "kafka_partition",
        "kafka_offset",
        "kafka_timestamp",
        "run_started_at",
        "reason",
        "handled",
        "handled_at",
        "payload",
        "raw_value",
    )
)


def _text(value: object) -> str | None:
    return str(value) if value is not None else None


def list_records(
    wh: Warehouse, pipeline: Pipeline, sel: Selection, include_handled: bool = False, limit: int = 100
) -> tuple[int, list[QuarantinedRecord]]:
    """(how many match, the first `limit` of them in Kafka order)."""
    pipeline.table(sel.table)
    where, params = sel.where(waiting_only=not include_handled)
    total = wh.scalar(f"SELECT COUNT(*) FROM {_quarantine(pipeline)} WHERE {where}", params)
    rows = wh.query(
        f"SELECT {', '.join(schemas.names(LISTED))} "
        f"FROM {_quarantine(pipeline)} WHERE {where} ORDER BY run_started_at, kafka_partition, kafka_offset LIMIT {int(limit)}",
        params,
    )
    records = [
        QuarantinedRecord(
            kafka_partition=r["kafka_partition"],
            kafka_offset=r["kafka_offset"],
            kafka_timestamp=_text(r["kafka_timestamp"]),
            quarantined_at=_text(r["run_started_at"]),
            reason=r["reason"],
            handled=r["handled"],
            handled_at=_text(r["handled_at"]),
            value=_value_text(r["payload"], r["raw_value"]),
        )
        for r in (schemas.as_row(LISTED, row) for row in rows)
    ]
    return int(total), records


@dataclass
class ReplayResult:
    table: str
    replayed: int
    run: RunSummary  # the procedure call that applied them (new stream records included)
    quarantined_again: list[tuple[str, int]]  # (new reason, records)

    def as_dict(self) -> dict:
        return {
            "table": self.table,
            "replayed": self.replayed,
            "run": self.run.as_dict(),
            "quarantined_again": [{"reason": r, "records": n} for r, n in self.quarantined_again],
        }


def replay(wh: Warehouse, pipeline: Pipeline, sel: Selection) -> ReplayResult:
    """Mark the selected waiting records and run the table's procedure, in one transaction:
    either they are all replayed (applied, stale, superseded or quarantined again) or,
    when the call fails, nothing changes. A transaction stopped by a serialization conflict
    is run again (`[operations] conflict_attempts`); `run.retries` counts those."""
    _refuse_unreplayable(wh, pipeline, sel)
    result, retries = retry_conflicts(conflict_policy(pipeline), lambda: _replay_once(wh, pipeline, sel))
    result.run.retries += retries
    return result


def _refuse_unreplayable(wh: Warehouse, pipeline: Pipeline, sel: Selection) -> None:
    """Records quarantined because a policy field did not convert hold its hash or mask,
    not the value that failed (sync.sql.policy_replay): named, and the replay refused."""
    blocked = unreplayable(pipeline.table(sel.table))
    if not blocked:
        return
    where, params = sel.where()
    counts = wh.query(f"SELECT reason, COUNT(*) FROM {_quarantine(pipeline)} WHERE {where} GROUP BY reason", params)
    found = [(str(reason), int(n)) for reason, n in counts if reason in blocked]
    if found:
        named = "; ".join(f"{n} because field {blocked[reason]} did not convert ({reason})" for reason, n in found)
        raise ValueError(
            f"table {sel.table}: {named}. The quarantine holds that field's policy value (its hash or mask), not the "
            "value that failed, so such records cannot be replayed: discard them (redshift-sync quarantine discard "
            f"--table {sel.table} --reason TEXT), or select the others with --reason, and re-send the rows from the source"
        )


@dataclass(frozen=True)
class ReplaySql:
    """A replay: one transaction of the table's lock (`runner.under_table_lock`: no sync
    runs between the marking and the call), `mark` (the selection's parameters), the
    table's CALL, its result (`call_result_sql`) and `again` (parameters: the table name,
    twice), what failed again: besides the session's result table, only the table's own
    relations are read, never the shared run log."""

    mark: str
    again: str


def replay_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig, where: str) -> ReplaySql:
    names = table_names(pipeline, table)
    quarantine = d.qualified(names.schema, names.quarantine)
    return ReplaySql(
        mark=f"UPDATE {quarantine} SET handled = 'replaying' WHERE {where}",
        # Replayed records that failed again: quarantined anew by the replay's run.
        again=(
            f"SELECT q.reason, COUNT(*) FROM {quarantine} q WHERE q.table_name = %s AND q.handled IS NULL\n"
            f"  AND q.run_started_at = (SELECT started_at FROM {quote_ident(CALL_RESULT)} WHERE table_name = %s)\n"
            f"  AND EXISTS (SELECT 1 FROM {quarantine} o WHERE o.table_name = q.table_name AND o.handled = 'replayed'\n"
            "              AND o.kafka_partition = q.kafka_partition AND o.kafka_offset = q.kafka_offset)\n"
            "GROUP BY q.reason ORDER BY 2 DESC, 1"
        ),
    )


def _replay_once(wh: Warehouse, pipeline: Pipeline, sel: Selection) -> ReplayResult:
    table = pipeline.table(sel.table)
    where, params = sel.where()
    sql = replay_sql(wh.dialect.bind_schema(pipeline.schema), pipeline, table, where)
    started = time.perf_counter()
    with under_table_lock(wh, pipeline, table):
        marked = wh.execute(sql.mark, params)
        try:
            wh.execute(call_sql(pipeline, table.name))
            result = wh.query(call_result_sql(pipeline, table.name))
        except WarehouseError as exc:
            raise WarehouseError(f"replay of {table.name} rolled back, nothing changed: {exc}", exc.sqlstate) from exc
        run = call_result(pipeline, table.name, result, time.perf_counter() - started)
        again = wh.query(sql.again, (table.name, table.name))
    return ReplayResult(table.name, max(marked, 0), run, [(str(r), int(n)) for r, n in again])


def discard_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig, where: str) -> str:
    """The marking (parameters: the selection's), under the table's lock (`discard`)."""
    names = table_names(pipeline, table)
    return f"UPDATE {d.qualified(names.schema, names.quarantine)} SET handled = 'discarded', handled_at = {d.now()} WHERE {where}"


def discard(wh: Warehouse, pipeline: Pipeline, sel: Selection, apply: bool = True) -> int:
    """Mark the selected waiting records discarded (kept until retention prunes them); with
    `apply` false only count them."""
    where, params = sel.where()
    table = pipeline.table(sel.table)
    d = wh.dialect.bind_schema(pipeline.schema)
    if not apply:
        names = table_names(pipeline, table)
        return int(wh.scalar(f"SELECT COUNT(*) FROM {d.qualified(names.schema, names.quarantine)} WHERE {where}", params) or 0)
    with under_table_lock(wh, pipeline, table):
        return max(wh.execute(discard_sql(d, pipeline, table, where), params), 0)

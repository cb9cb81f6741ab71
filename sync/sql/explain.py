"""The SQL of `redshift-sync explain`: the procedure's own steps, never a second copy of
its rules, run in a transaction the caller rolls back, over session-temporary tables.

The procedure's relations are swapped for temporary ones wherever a step writes (the
stage, the target, the deleted keys) and wherever explain needs another starting point
(the watermark, the quarantine); the stream, and what only a step reads, stay the
shared relations, read and never written or locked. On Redshift a write to the shared
stage, even rolled back, conflicts with the scheduled CALL, and every LOCK is exclusive.

Three runs of the steps, in one temporary procedure:

- `pending`: the steps of a call up to the stage insert (the single-flight LOCK takes a
  temporary copy of the watermark, read without locking), then the rules of the batch:
  the applicable steps of `APPLY_STEPS` up to the last one that writes the stage (what
  follows applies the stage to the target and keeps the books). The target and the
  deleted keys are temporary copies of the key's rows: the rules judge a key by its own
  stored rows only, and a truncate's writes land in the copies.
- `retained`: the stage insert over every record the stream still retains (an empty
  watermark): their classification, key and source position.
- `quarantined`: the stage insert over the table's quarantined records, replayed from a
  temporary copy of the quarantine (a watermark past every refresh: no stream record).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from sync.config import Pipeline, TableConfig
from sync.sql import schemas
from sync.sql.dialect import PostgresDialect, quote_literal
from sync.sql.names import table_names
from sync.sql.procedure import APPLY_STEPS, SYNC_STEPS, Step, TableSql, rank_order
from sync.sql.procedure.assembly import plpgsql_procedure
from sync.sql.procedure.steps import declare

# Explain's temporary tables (the session's own: they shadow nothing of the pipeline's schema).
PENDING, RETAINED, QUARANTINED = "explain_pending", "explain_retained", "explain_quarantined"
STAGES = (PENDING, RETAINED, QUARANTINED)
WATERMARK, UNREAD, SEALED = "explain_watermark", "explain_unread", "explain_sealed"
TARGET, DELETED = "explain_target", "explain_deleted"
REPLAYING, NO_QUARANTINE = "explain_replaying", "explain_no_quarantine"
# Past every refresh: the stream contributes nothing to a run that reads from here on.
SEALED_AT = "TIMESTAMP '9999-12-31 00:00:00'"
# What explain reads of a stage row, in this order.
STAGE_COLUMNS = (
    "_kafka_partition",
    "_kafka_offset",
    "_kafka_timestamp",
    "_refresh_time",
    "_op",
    "_action",
    "_reason",
    "_rn",
    "_source_pos",
    "_rank_pos",
    "_unavailable",
)


@dataclass(frozen=True)
class SwappedSql(TableSql):
    """A table's steps with some of its relations (`Relations` fields) swapped for others."""

    swaps: tuple[tuple[str, str], ...] = ()

    @cached_property
    def rel(self):
        return replace(TableSql(self.d, self.pipeline, self.table).rel, **dict(self.swaps))


def read_steps() -> tuple[Step, ...]:
    """The steps of a call up to the stage insert (the first step that writes the stage)."""
    last = next(i for i, step in enumerate(SYNC_STEPS) if step.writes)
    return SYNC_STEPS[: last + 1]


def rule_steps(ctx: TableSql) -> tuple[Step, ...]:
    """The rules of a batch: the applicable steps of `APPLY_STEPS` up to the last that
    writes the stage."""
    applicable = [step for step in APPLY_STEPS if step.applies(ctx)]
    last = max(i for i, step in enumerate(applicable) if step.writes)
    return tuple(applicable[: last + 1])


def _sql(ctx: TableSql, steps: tuple[Step, ...]) -> str:
    return "\n".join(step.sql(ctx) for step in steps if step.applies(ctx))


@dataclass(frozen=True)
class ExplainSql:
    """Explain's statements for one table; the key's values are parameters (`%s`, in the
    order of the table's key columns)."""

    d: PostgresDialect
    pipeline: Pipeline
    table: TableConfig
    procedure_name: str  # unique per explain: two explains of a table never share one
    keys: int = 1  # how many keys are explained at once

    @cached_property
    def ctx(self) -> TableSql:
        return TableSql(self.d, self.pipeline, self.table)

    def _swapped(self, stage: str, **swaps: str) -> SwappedSql:
        held = {"target": self.d.q(TARGET), **({"deleted": self.d.q(DELETED)} if self.ctx.hard_deletes else {})}
        return SwappedSql(self.d, self.pipeline, self.table, swaps=tuple({"stage": stage, **held, **swaps}.items()))

    @property
    def procedure(self) -> str:
        """Where the temporary procedure lives: PostgreSQL's session schema, else the pipeline's."""
        schema = self.d.temporary_procedure_schema or self.pipeline.schema
        return self.d.qualified(schema, self.procedure_name)

    def key_condition(self, alias: str) -> str:
        """The row `alias` is of the explained key (one parameter per key column)."""
        q = self.d.q
        return " AND ".join(f"{alias}.{q(c.target_name)} = CAST(%s AS {c.sql_type})" for c in self.table.key_columns)

    def keys_condition(self, alias: str) -> str:
        """The row `alias` is of one of the explained keys (their parameters in turn)."""
        if self.keys == 1:
            return self.key_condition(alias)
        return "(" + "\n    OR ".join(f"({self.key_condition(alias)})" for _ in range(self.keys)) + ")"

    def setup(self) -> list[str]:
        """The temporary tables, and the copies of what the steps start from: the
        watermark, the key's stored rows, the table's quarantined records."""
        rel, d = self.ctx.rel, self.d
        like = [(name, rel.stage) for name in STAGES]
        like += [(WATERMARK, rel.watermark), (UNREAD, rel.watermark), (SEALED, rel.watermark), (TARGET, rel.target)]
        like += [(DELETED, rel.deleted)] if self.ctx.hard_deletes else []
        like += [(REPLAYING, rel.quarantine), (NO_QUARANTINE, rel.quarantine)]
        out = [f"CREATE TEMPORARY TABLE {d.q(name)} (LIKE {source})" for name, source in like]
        out.append(f"INSERT INTO {d.q(WATERMARK)} SELECT * FROM {rel.watermark}")
        sealed = {"kafka_partition": "-1", "last_offset": "-1", "last_refresh_time": SEALED_AT, "updated_at": SEALED_AT}
        out.append(schemas.insert_select_sql(d, d.q(SEALED), schemas.WATERMARK, sealed, "").rstrip())
        for copy, source in [(TARGET, rel.target)] + ([(DELETED, rel.deleted)] if self.ctx.hard_deletes else []):
            out.append(f"INSERT INTO {d.q(copy)} SELECT * FROM {source} t WHERE {self.keys_condition('t')}")
        columns = [c.name for c in schemas.QUARANTINE]
        selected = ["'replaying'" if name == "handled" else f"q.{name}" for name in columns]
        out.append(
            f"INSERT INTO {d.q(REPLAYING)} ({', '.join(columns)})\nSELECT {', '.join(selected)}\n"
            f"FROM {rel.quarantine} q WHERE q.table_name = {quote_literal(self.table.name)}"
        )
        return out

    def procedure_sql(self) -> str:
        """The temporary procedure: the three runs of the steps (module docstring)."""
        d = self.d
        pending = self._swapped(d.q(PENDING), watermark=d.q(WATERMARK))
        retained = self._swapped(d.q(RETAINED), watermark=d.q(UNREAD), quarantine=d.q(NO_QUARANTINE))
        quarantined = self._swapped(d.q(QUARANTINED), watermark=d.q(SEALED), quarantine=d.q(REPLAYING))
        body = [
            "-- Pending records: the call's reading of the stream, then the rules of the batch.",
            _sql(pending, read_steps()),
            _sql(pending, rule_steps(pending)),
            "-- Every record the stream retains, classified and ranked (an empty watermark).",
            _sql(retained, read_steps()),
            "-- The table's quarantined records, read as a replay reads them.",
            _sql(quarantined, read_steps()),
        ]
        n = table_names(self.pipeline, self.table)
        return plpgsql_procedure(
            f"{self.procedure}(p_max_records bigint)",
            f"redshift-sync explain (table {self.table.name}): the procedure {n.procedure}'s steps over\n"
            "temporary tables, in a transaction that is rolled back.",
            declare(d, [*SYNC_STEPS, *APPLY_STEPS], self.table),
            body,
        )

    def call_sql(self) -> str:
        return f"CALL {self.procedure}(CAST(NULL AS bigint))"

    def records_sql(self) -> str:
        """The key's rows of the three stages, each with the stage it is from, newest first
        as ranked (source position, then Kafka timestamp, partition and offset)."""
        d = self.d
        columns = ", ".join(f"s.{c}" for c in STAGE_COLUMNS)
        union = "\nUNION ALL\n".join(
            f"SELECT {quote_literal(name)} AS stage, {columns}\nFROM {d.q(name)} s\nWHERE {self.key_condition('s')}"
            for name in STAGES
        )
        return (
            union
            + "\nORDER BY "
            + rank_order("_rank_pos", "_kafka_timestamp DESC NULLS LAST, _kafka_partition DESC, _kafka_offset DESC")
        )

    def stored_columns(self, deleted: bool = False) -> tuple[schemas.Column, ...]:
        return schemas.deleted_keys(self.table) if deleted else schemas.target(self.table)

    def stored_sql(self, deleted: bool = False) -> str:
        """The key's stored rows (`deleted`: its remembered deletes), as the target holds them."""
        relation = self.ctx.rel.deleted if deleted else self.ctx.rel.target
        columns = ", ".join("t." + c.sql_name(self.d) for c in self.stored_columns(deleted))
        return f"SELECT {columns}\nFROM {relation} t\nWHERE {self.key_condition('t')}"

    def quarantine_sql(self) -> str:
        """The quarantine's rows of the key's quarantined records (matched by Kafka
        coordinates and quarantine time, which a replay reads as the refresh time)."""
        return (
            "SELECT q.kafka_partition, q.kafka_offset, q.kafka_timestamp, q.run_started_at, q.reason, q.handled\n"
            f"FROM {self.ctx.rel.quarantine} q\n"
            f"JOIN {self.d.q(QUARANTINED)} s ON s._kafka_partition = q.kafka_partition AND s._kafka_offset = q.kafka_offset\n"
            "  AND s._refresh_time = q.run_started_at\n"
            f"WHERE q.table_name = {quote_literal(self.table.name)} AND {self.key_condition('s')}\n"
            "ORDER BY q.run_started_at DESC, q.kafka_partition DESC, q.kafka_offset DESC"
        )

    def statements(self) -> list[str]:
        """Every statement explain runs, in order (the key's values bound by the caller; the
        statements after the CALL run once per key)."""
        out = [*self.setup(), self.procedure_sql(), self.call_sql(), self.records_sql(), self.stored_sql()]
        return out + ([self.stored_sql(deleted=True)] if self.ctx.hard_deletes else []) + [self.quarantine_sql()]

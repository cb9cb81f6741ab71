"""The SQL of `redshift-sync history rebuild`: the history table made again from what the
stream relation retains, by the procedure's own steps, never a second copy of its rules.

In one transaction that takes the table's watermark lock first, as the procedure does:

- the records the procedure has applied (at or below the watermark) are copied from the
  stream into a session-temporary table; every relation a step writes (stage, target,
  deleted keys, watermark, quarantine, drift, run log, history) is swapped for an empty
  temporary one (`SwappedSql`);
- a temporary procedure made of the sync procedure's steps (`SYNC_STEPS`) reads them all
  in one CALL into the empty temporary history, which holds every version those records
  open, by the rules of the procedure (source order, ties, TOAST, tombstone-only deletes,
  truncates);
- the snapshot versions of the stored history (those a backfill wrote:
  `history_snapshot.snapshot_version`) are added below the stream, as the backfill adds
  them, and every key's intervals recomputed by the procedure's statement;
- the caller compares the rebuilt history with the stored one, and replaces the stored
  rows only when told to.

Nothing but the history is written: the target, the watermark, the quarantine and the run
log stay as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property

from sync.config import Pipeline, TableConfig
from sync.sql import schemas
from sync.sql.apply import key_match
from sync.sql.dialect import PostgresDialect
from sync.sql.explain import SwappedSql
from sync.sql.history_snapshot import snapshot_history_sql, snapshot_version
from sync.sql.names import table_names
from sync.sql.procedure import APPLY_STEPS, SYNC_STEPS, TableSql
from sync.sql.procedure.assembly import plpgsql_procedure
from sync.sql.procedure.call_result import RESULT_COLUMNS
from sync.sql.procedure.steps import declare, steps_sql
from sync.sql.types import SqlType

# The session's temporary tables (they shadow nothing of the pipeline's schema), by the
# relation of the procedure each stands for.
TEMPORARY = {
    "stream": "history_rebuild_stream",
    "stage": "history_rebuild_stage",
    "target": "history_rebuild_target",
    "deleted": "history_rebuild_deleted",
    "watermark": "history_rebuild_watermark",
    "quarantine": "history_rebuild_quarantine",
    "schema_drift": "history_rebuild_drift",
    "run_log": "history_rebuild_run_log",
    "history": "history_rebuild_history",
}
SNAPSHOT = "history_rebuild_snapshot"  # the stored history's snapshot versions
# The history's own columns, as the dialect compares them (none is SUPER, the one family
# whose comparison differs: `differs`).
_CONTROL = SqlType("varchar")


class Side(StrEnum):
    """Which history holds a version the other lacks (`differing_sql`)."""

    STORED = "stored"  # a replacement removes it
    REBUILT = "rebuilt"  # a replacement adds it


# What `differing_sql` tells of a version besides its key.
DIFFERING_COLUMNS = ("_valid_from_pos", "_valid_from", "_valid_to", "_op", "_kafka_partition", "_kafka_offset")


@dataclass(frozen=True)
class RebuildSql:
    d: PostgresDialect
    pipeline: Pipeline
    table: TableConfig
    procedure_name: str  # unique per rebuild

    @cached_property
    def ctx(self) -> TableSql:
        return TableSql(self.d, self.pipeline, self.table)

    @cached_property
    def rebuilt(self) -> SwappedSql:
        """The procedure's steps over the temporary relations."""
        swaps = {field: self.d.q(name) for field, name in self._temporary().items()}
        return SwappedSql(self.d, self.pipeline, self.table, swaps=tuple(swaps.items()))

    def _temporary(self) -> dict[str, str]:
        # Soft deletes keep no deleted-keys table.
        return {k: v for k, v in TEMPORARY.items() if k != "deleted" or self.ctx.hard_deletes}

    @property
    def procedure(self) -> str:
        """Where the temporary procedure lives: PostgreSQL's session schema, else the pipeline's."""
        schema = self.d.temporary_procedure_schema or self.pipeline.schema
        return self.d.qualified(schema, self.procedure_name)

    def lock(self) -> str:
        return f"LOCK TABLE {self.ctx.rel.watermark}{self.d.lock_mode};"

    def setup(self) -> list[str]:
        """The temporary relations: the applied records of the stream, the others empty, and
        the stored history's snapshot versions."""
        d, rel = self.d, self.ctx.rel
        out = [f"DROP TABLE IF EXISTS {d.q(name)}" for name in [*self._temporary().values(), SNAPSHOT]]
        out.append(
            f"CREATE TEMPORARY TABLE {d.q(TEMPORARY['stream'])} AS\nSELECT s.* FROM {rel.stream} s\n"
            f"JOIN {rel.watermark} w ON w.kafka_partition = s.kafka_partition\nWHERE s.kafka_offset <= w.last_offset"
        )
        out += [
            f"CREATE TEMPORARY TABLE {d.q(name)} (LIKE {getattr(rel, field)} {d.like_options})"
            for field, name in self._temporary().items()
            if field not in ("stream", "run_log")
        ]
        # The run log's identity column is the shared table's: the copy has the rest.
        out.append(f"CREATE TEMPORARY TABLE {d.q(TEMPORARY['run_log'])} ({', '.join(schemas.definitions(d, RESULT_COLUMNS))})")
        out.append(f"CREATE TEMPORARY TABLE {d.q(SNAPSHOT)} (LIKE {rel.history})")
        out.append(f"INSERT INTO {d.q(SNAPSHOT)} SELECT * FROM {rel.history} h WHERE {snapshot_version('h')}")
        return out

    def procedure_sql(self) -> str:
        n = table_names(self.pipeline, self.table)
        return plpgsql_procedure(
            f"{self.procedure}(p_max_records bigint)",
            f"redshift-sync history rebuild (table {self.table.name}): the procedure {n.procedure}'s steps\n"
            "over temporary tables.",
            declare(self.d, [*SYNC_STEPS, *APPLY_STEPS], self.table),
            [steps_sql(self.rebuilt, SYNC_STEPS)],
        )

    def call_sql(self) -> list[str]:
        return [f"CALL {self.procedure}(CAST(NULL AS bigint))", f"DROP PROCEDURE {self.procedure}(bigint)"]

    def below_stream(self) -> list[str]:
        """The snapshot versions below the stream's, and every key's intervals."""
        q = self.d.q
        values = {c.target_name: f"s.{q(c.target_name)}" for c in self.table.columns}
        return snapshot_history_sql(self.rebuilt, q(SNAPSHOT), values, "s._valid_from", "s._valid_from_pos", "true")

    def _same(self, a: str, b: str) -> str:
        """The history rows `a` and `b` are one version: equal in every column, the TOAST
        marks too (which values were placeholders: an event's own, whatever its batch)."""
        d, q = self.d, self.d.q
        columns = [(c.target_name, c.sql_type) for c in self.table.columns]
        columns += [(c.name, _CONTROL) for c in schemas.HISTORY]
        return "\n    AND ".join(f"NOT {d.differs(f'{a}.{q(name)}', f'{b}.{q(name)}', t)}" for name, t in columns)

    def _without_equal(self, other: str) -> str:
        """The history row `a` has no equal row `b` in the history `other`."""
        keys = key_match(self.d, self.ctx.keys, "a", "b")
        return f"NOT EXISTS (SELECT 1 FROM {other} b WHERE {keys}\n    AND {self._same('a', 'b')})"

    def differences_sql(self) -> str:
        """Rows of the stored history with no equal rebuilt row, and rebuilt rows with no
        equal stored row; and the row counts of both."""
        rel, rebuilt = self.ctx.rel, self.d.q(TEMPORARY["history"])

        def unmatched(x: str, y: str) -> str:
            return f"(SELECT COUNT(*) FROM {x} a WHERE {self._without_equal(y)})"

        return (
            f"SELECT (SELECT COUNT(*) FROM {rel.history}), (SELECT COUNT(*) FROM {rebuilt}),\n"
            f"       {unmatched(rel.history, rebuilt)},\n       {unmatched(rebuilt, rel.history)}"
        )

    def differing_sql(self, limit: int) -> str:
        """The first `limit` versions (by key and position) of each history without an equal
        row in the other: `stored` (what a replacement removes) or `rebuilt` (what it adds),
        the key, the position and interval, the operation, the Kafka coordinates and the
        values (what tells two versions of one record apart)."""
        d, rel, rebuilt = self.d, self.ctx.rel, self.d.q(TEMPORARY["history"])
        keys = [f"a.{d.q(k)}" for k in self.ctx.keys]
        values = [f"a.{d.q(c.target_name)}" for c in self.table.value_columns]
        columns = ", ".join([*keys, *(f"a.{c}" for c in DIFFERING_COLUMNS), *values])

        def first(side: Side, x: str, y: str) -> str:
            order = ", ".join([*keys, "a._valid_from_pos ASC NULLS FIRST", "a._valid_from"])
            return f"SELECT '{side}' AS side, {columns}\n  FROM {x} a\n  WHERE {self._without_equal(y)}\n  ORDER BY {order} LIMIT {int(limit)}"

        stored, added = first(Side.STORED, rel.history, rebuilt), first(Side.REBUILT, rebuilt, rel.history)
        return f"SELECT * FROM ({stored}) s\nUNION ALL\nSELECT * FROM ({added}) r"

    def partitions_sql(self, explained: int | None) -> str:
        """Per partition the watermark holds: its last applied offset and refresh time; the
        lowest applied offset the stream retains and its Kafka time; the offsets missing
        between retained ones beyond the `explained` gap (None: any gap is by design); the
        stored versions whose record the stream no longer retains."""
        rel, stream = self.ctx.rel, self.d.q(TEMPORARY["stream"])
        hole = "x.kafka_offset - x.prev - 1"
        missing = "0" if explained is None else f"CASE WHEN {hole} > {explained} THEN {hole} ELSE 0 END"
        return (
            "SELECT w.kafka_partition, w.last_offset, w.last_refresh_time, r.first_offset, r.first_time, r.missing,\n"
            f"       (SELECT COUNT(*) FROM {rel.history} h WHERE h._kafka_partition = w.kafka_partition\n"
            f"          AND NOT EXISTS (SELECT 1 FROM {stream} s\n"
            "            WHERE s.kafka_partition = h._kafka_partition AND s.kafka_offset = h._kafka_offset))\n"
            f"FROM {rel.watermark} w\n"
            "LEFT JOIN (SELECT x.kafka_partition, MIN(x.kafka_offset) AS first_offset,\n"
            "                  MIN(CASE WHEN x.prev IS NULL THEN x.kafka_timestamp END) AS first_time,\n"
            f"                  SUM({missing}) AS missing\n"
            "           FROM (SELECT s.kafka_partition, s.kafka_offset, MAX(s.kafka_timestamp) AS kafka_timestamp,\n"
            "                        LAG(s.kafka_offset) OVER (PARTITION BY s.kafka_partition ORDER BY s.kafka_offset) AS prev\n"
            f"                 FROM {stream} s GROUP BY s.kafka_partition, s.kafka_offset) x\n"
            "           GROUP BY x.kafka_partition) r ON r.kafka_partition = w.kafka_partition\n"
            "WHERE w.last_offset >= 0\nORDER BY w.kafka_partition"
        )

    def replace_sql(self) -> list[str]:
        """The stored history replaced by the rebuilt one."""
        hist = self.ctx.rel.history
        columns = ", ".join(c.sql_name(self.d, quoted=True) for c in schemas.history(self.table))
        return [
            f"DELETE FROM {hist}",
            f"INSERT INTO {hist} ({columns})\nSELECT {columns} FROM {self.d.q(TEMPORARY['history'])}",
        ]

    def cleanup(self) -> list[str]:
        return [f"DROP TABLE {self.d.q(name)}" for name in [*self._temporary().values(), SNAPSHOT]]

"""SQL of the backfill of a table without a primary key (docs/correctness.md, "Tables
without a primary key", "Backfill and reconcile"): the snapshot replaces the table.

A multiset cannot be merged row by row: without a key nothing says which stored row a
snapshot row is. A snapshot taken at one source position P holds every row as of P, so it
replaces the target's rows and every applied position below P, as a snapshot's first read
does in the procedure (sync/sql/procedure/keyless.py), and P becomes the table's snapshot
position: a change below it is then stale, one at or above it applies. That is exact only
when the stream has applied nothing at or after P; `held_after` counts what would say
otherwise, and the caller refuses the backfill when it is not zero.

Each loaded row gets an identity of its own, as the procedure's rows have (the event that
wrote them: `_source_pos`, `_kafka_partition`, `_kafka_offset`): partition
BACKFILL_PARTITION, offset its number in the load. The table's snapshot position is
recorded with the same partition, which is after every Kafka partition (an int32): every
read at P (the same snapshot coming through the stream) is older in Kafka order, so stale.
"""

from __future__ import annotations

from sync.config import Pipeline, TableConfig
from sync.sql import schemas
from sync.sql.backfill_merge import BackfillSql, Step
from sync.sql.dialect import PostgresDialect

BACKFILL_PARTITION = 2**31  # no Kafka partition (an int32), and after every one of them


class KeylessBackfillSql:
    def __init__(self, d: PostgresDialect, pipeline: Pipeline, table: TableConfig):
        self.keyed = BackfillSql(d, pipeline, table)  # the stage, its load and the lock are the same
        self.d, self.table = d, table
        self.position = f"(SELECT MAX(_source_pos) FROM {self.keyed.stage})"

    def stage_positions(self) -> str:
        """The stage's rows, those with a position, and its distinct positions."""
        return f"SELECT COUNT(*), COUNT(_source_pos), COUNT(DISTINCT _source_pos)\nFROM {self.keyed.stage};"

    def held_after(self) -> str:
        """What the table holds that the snapshot's position P cannot place before it: rows
        and applied changes (pending deletes too) at a position after P, or of none (after
        `reset-positions`), and a snapshot position after P."""
        k, p = self.keyed, self.position
        return (
            f"SELECT (SELECT COUNT(*) FROM {k.target} WHERE _source_pos IS NULL OR _source_pos > {p}),\n"
            f"       (SELECT COUNT(*) FROM {k.deleted}\n"
            f"        WHERE _kafka_partition IS NULL AND (_source_pos IS NULL OR _source_pos >= {p})),\n"
            f"       (SELECT COUNT(*) FROM {k.deleted} WHERE _kafka_partition IS NOT NULL AND _source_pos > {p});"
        )

    def merge(self) -> list[Step]:
        """The replace, step by step (as `BackfillSql.merge`'s, counted the same way)."""
        d, k = self.d, self.keyed
        now = d.now()
        marker = {
            "_source_pos": "MAX(_source_pos)",
            "_source_ts": "MAX(_source_ts)",
            "_kafka_partition": str(BACKFILL_PARTITION),
            "_kafka_offset": "0",
            "_deleted_at": now,
        }
        rows = {
            **k.staged_values(),
            "_source_ts": "s._source_ts",
            "_source_pos": "s._source_pos",
            "_kafka_partition": str(BACKFILL_PARTITION),
            "_kafka_offset": "ROW_NUMBER() OVER (ORDER BY s._source_pos)",
            "_synced_at": now,
        }
        return [
            Step(k.count_stage(), count="staged", query=True),
            Step(
                f"-- The snapshot holds every row as of its position: the stored rows go.\nDELETE FROM {k.target};",
                count="replaced",
            ),
            Step(
                "-- So do the applied positions (all below it) and the pending deletes; its\n"
                "-- position is recorded as the table's snapshot position.\n"
                f"DELETE FROM {k.deleted};"
            ),
            Step(schemas.insert_select_sql(d, k.deleted, schemas.deleted_keys(self.table), marker, f"FROM {k.stage};")),
            Step(
                "-- Every row of the snapshot, as many times as it holds it.\n"
                + schemas.insert_select_sql(
                    d, k.target, schemas.target(self.table), rows, f"FROM {k.stage} s\nWHERE NOT s._delete;"
                ),
                count="loaded",
            ),
            Step(k.clear_stage()),
        ]

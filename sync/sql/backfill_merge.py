"""SQL of the backfill's load and merge: a stage shaped like the Parquet the Spark job
writes (target columns in order, then source metadata), and the watermark-aware merge.

Merge rule (README, "backfill and reconcile"; `sync/sql/handover.py` defines which side is
newer, and reconcile explains differences by the same rule): a snapshot row never
overwrites a row the stream wrote with a newer source time (or a later source position,
when both rows have one), and never resurrects a key the stream deleted after it. A delete
without a source time (a tombstone-only delete, Debezium's default since 2.5) is dated by
its Kafka timestamp, an upper bound of its commit time; a row or stage row whose time is
unknown is never replaced. Rows the stream already supersedes are removed from the stage first; the rest
replace their key. Running the same backfill again finds every row superseded (equal or
unknown time), so it changes nothing.

The merge locks the table's watermark first, like `incremental_sync_<t>()`, so a backfill
and a sync serialise instead of interleaving; the target itself is never locked (on
Redshift every LOCK is exclusive, and readers would wait for the whole load).
"""

from __future__ import annotations

from dataclasses import dataclass

from sync.config import Pipeline, TableConfig
from sync.sql import schemas
from sync.sql.apply import insert_deleted_keys_sql, key_match, soft_delete_sql
from sync.sql.dialect import PostgresDialect
from sync.sql.handover import DELETE_TIME, ROW_TIME, held_time_sql, kept_sql
from sync.sql.history_snapshot import backfill_history_sql
from sync.sql.names import table_names
from sync.sql.policy import newest_key_sql, policy_value_sql


@dataclass(frozen=True)
class Step:
    """One statement of the merge. A step with a `count` yields that number: the value a
    `query` step returns, or the rows a DELETE/INSERT/UPDATE changed (added up when
    several steps yield the same count)."""

    sql: str
    count: str | None = None
    query: bool = False


def backfill_stage_name(table: TableConfig) -> str:
    return f"{table.name}__backfill"


class BackfillSql:
    def __init__(self, d: PostgresDialect, pipeline: Pipeline, table: TableConfig):
        self.d = d
        self.pipeline = pipeline
        self.table = table
        self.names = table_names(pipeline, table)
        q = lambda name: d.qualified(self.names.schema, name)  # noqa: E731
        self.target = q(self.names.target)
        self.watermark = q(self.names.watermark)
        self.deleted = q(self.names.deleted_keys)
        self.stage = q(backfill_stage_name(table))
        self.soft = table.delete_mode == "soft"
        self.keys = [c.target_name for c in table.key_columns]
        self.columns = [c.target_name for c in table.columns]
        self.key = newest_key_sql(d, pipeline)  # column policies: the hash key

    def _key_match(self, a: str, b: str) -> str:
        return key_match(self.d, self.keys, a, b)

    def stage_table(self) -> str:
        d = self.d
        lines = [f"{d.q(c.target_name)} {d.parquet_stage_type(c.sql_type)}" for c in self.table.columns]
        lines += schemas.definitions(d, schemas.BACKFILL_STAGE, quoted=True)
        body = ",\n".join("  " + line for line in lines)
        attrs = d.table_attributes(self.table.distkey_name, self.keys, backup=False)
        return (
            "-- Backfill stage: the Parquet columns in order (COPY maps them by position).\n"
            f"CREATE {d.stage_table_prefix}TABLE {self.stage} (\n{body}\n){attrs};"
        )

    def drop_stage_table(self) -> str:
        """The stage is made anew for every backfill, so it always has the columns of the
        pipeline as it is now (revisions alter the target, not this scratch table)."""
        return f"DROP TABLE IF EXISTS {self.stage};"

    def lock(self) -> str:
        tables = [self.watermark] + ([] if self.soft else [self.deleted]) + [self.stage]
        return (
            "-- Same lock as incremental_sync takes first, the watermark: a sync waits. The\n"
            "-- target is not locked (on Redshift every LOCK is exclusive: readers would wait\n"
            "-- for the whole load); only the backfill and the procedure write it.\n"
            f"LOCK TABLE {', '.join(tables)}{self.d.lock_mode};"
        )

    def count_stage(self) -> str:
        return f"SELECT COUNT(*) FROM {self.stage};"

    def clear_stage(self) -> str:
        return f"{self.d.empty_table} {self.stage};"

    # ---- an empty target loads without its primary-key index (PostgreSQL) --------------
    def target_is_empty(self) -> str:
        return f"SELECT NOT EXISTS (SELECT 1 FROM {self.target});"

    def primary_key_name(self) -> str:
        return f"SELECT conname FROM pg_constraint\nWHERE conrelid = {self.d.lit(self.target)}::regclass AND contype = 'p';"

    def drop_primary_key(self, name: str) -> str:
        return (
            "-- The target is empty: its primary key is built once after the load instead of\n"
            "-- being maintained row by row (the snapshot holds one row per key).\n"
            f"ALTER TABLE {self.target} DROP CONSTRAINT {self.d.q(name)};"
        )

    def add_primary_key(self, name: str) -> str:
        keys = ", ".join(self.d.q(k) for k in self.keys)
        return f"ALTER TABLE {self.target} ADD CONSTRAINT {self.d.q(name)} PRIMARY KEY ({keys});"

    def copy_from_s3(self, manifest_url: str, iam_role: str) -> str:
        lit = self.d.lit
        return f"COPY {self.stage}\nFROM {lit(manifest_url)}\nIAM_ROLE {lit(iam_role)}\nFORMAT AS PARQUET\nMANIFEST;"

    def staged_values(self) -> dict[str, str]:
        """Each configured column of the stage row `s` as the target stores it: typed from
        its Parquet form, and converted by its column policy (a snapshot holds clear values)."""
        d = self.d
        return {
            c.target_name: policy_value_sql(d, c, d.from_parquet_stage(f"s.{d.q(c.target_name)}", c.sql_type), self.key)
            for c in self.table.columns
        }

    def merge(self) -> list[Step]:
        # Redshift's DELETE takes no alias for its table: the conditions name it in full.
        d, q = self.d, self.d.q
        staged = self.staged_values()
        steps = [
            Step(self.count_stage(), count="staged", query=True),
            # History mode: before the stream's newer rows take snapshot rows out of the stage.
            *(
                Step(sql, count="history_versions" if n == 0 else None)
                for n, sql in enumerate(backfill_history_sql(d, self.pipeline, self.table, self.stage, staged))
            ),
            Step(
                "-- Rows the stream wrote at or after the snapshot row's source time stay, and so do\n"
                "-- rows of unknown age (the stream carries every later change of their key).\n"
                f"DELETE FROM {self.stage}\nUSING {self.target} t\nWHERE {self._key_match('t', self.stage)}\n"
                f"  AND {kept_sql('t', self.stage, held_time_sql('t', ROW_TIME))};",
                count="kept_newer",
            ),
        ]
        if not self.soft:
            steps += [
                Step(
                    "-- Keys the stream deleted after the snapshot row stay deleted. A tombstone-only\n"
                    "-- delete has no source time: its Kafka timestamp, set when the delete was\n"
                    "-- produced, is an upper bound of its commit time.\n"
                    f"DELETE FROM {self.stage}\nUSING {self.deleted} t\nWHERE {self._key_match('t', self.stage)}\n"
                    f"  AND {kept_sql('t', self.stage, held_time_sql('t', DELETE_TIME))};",
                    count="kept_deleted",
                ),
            ]
        now = d.now()
        position = schemas.row_values(d, schemas.POSITION, "s")

        def load(deleted: str | None) -> str:
            """INSERT INTO the target the stage rows (`deleted`: their soft-delete flag)."""
            values = {**staged, **position, "_synced_at": now, **({"_deleted": deleted} if deleted else {})}
            return schemas.insert_select_sql(d, self.target, schemas.target(self.table), values, f"FROM {self.stage} s\n")

        if not self.soft:
            steps += [
                Step(f"DELETE FROM {self.target}\nUSING {self.stage} _s\nWHERE {self._key_match(self.target, '_s')};"),
                Step(f"DELETE FROM {self.deleted}\nUSING {self.stage} _s\nWHERE {self._key_match(self.deleted, '_s')};"),
                Step(
                    "-- Deletes in the snapshot are remembered like the stream's.\n"
                    + insert_deleted_keys_sql(
                        d,
                        self.table,
                        self.deleted,
                        {**{k: f"s.{q(k)}" for k in self.keys}, **position, "_deleted_at": now},
                        f"{self.stage} s",
                        "s._delete",
                    ),
                    count="deleted",
                ),
                Step(load(None) + "WHERE NOT s._delete;", count="loaded"),
            ]
        else:
            keep = {c.target_name: f"COALESCE({staged[c.target_name]}, t.{q(c.target_name)})" for c in self.table.value_columns}
            steps += [
                Step(
                    f"DELETE FROM {self.target}\nUSING {self.stage} _s\nWHERE NOT _s._delete\n  AND {self._key_match(self.target, '_s')};",
                ),
                Step(load("false") + "WHERE NOT s._delete;", count="loaded"),
                Step(
                    "-- Soft mode: a delete in the snapshot marks the row, keeping its values.\n"
                    + soft_delete_sql(d, self.table, self.target, keep, f"{self.stage} s", "s._delete"),
                    count="deleted",
                ),
                Step(
                    load("true")
                    + f"WHERE s._delete\n  AND NOT EXISTS (SELECT 1 FROM {self.target} t WHERE {self._key_match('t', 's')});",
                    count="deleted",
                ),
            ]
        steps.append(Step(self.clear_stage()))
        return steps

    def script(self) -> str:
        """The whole merge as one reviewable script (the load step in a comment)."""
        parts = [
            self.drop_stage_table(),
            self.stage_table(),
            "BEGIN;",
            self.lock(),
            self.clear_stage(),
            "-- load the stage here (COPY)",
        ]
        parts += [s.sql for s in self.merge()]
        parts.append("COMMIT;")
        return "\n\n".join(parts) + "\n"

"""Schema revisions at run time: the operations revision files call.

A revision file records the state it applies (`sync.schema.state`) and lists its
operations as calls on a `Revision`, e.g.::

    def upgrade() -> None:
        r = Revision.up(STATE, down_revision)
        r.add_column("customer", "email")
        r.replace_procedure("customer")

Each operation renders its SQL from the generator (`sync.sql.objects.pipeline_objects`)
at the state it moves to (creations) or from (drops), in the dialect of the connection:
the same revision runs on Redshift and on PostgreSQL, online or as `--sql` output.
Writing revisions and running alembic is `sync.schema.revisions`.
"""

from __future__ import annotations

from typing import Any

from sync.config import METADATA_PREFIX, ColumnConfig, Pipeline, Policy, TableConfig
from sync.schema.run_log import alter_run_log_sql
from sync.schema.state import State, pipeline_of
from sync.sql import schemas
from sync.sql.column_fill import column_fill_sql
from sync.sql.dialect import PostgresDialect, dialect_for, quote_literal
from sync.sql.names import table_names
from sync.sql.objects import SHARED_VIEWS, SqlObject, control_table_sql, heartbeat_objects, history_objects, pipeline_objects
from sync.sql.policy import conversion_sql, key_table, key_table_sql, quarantine_redaction_sql

SQLALCHEMY_DIALECTS = {"redshift": "redshift", "postgresql": "postgres"}


def _data_relations(config: TableConfig) -> tuple[str, ...]:
    """The relations (`TableNames` attributes) that hold the table's configured columns."""
    return ("target", "stage", "history") if config.history is not None else ("target", "stage")


def state_at(script: Any, revision_id: str | None) -> State | None:
    """A revision's own STATE, or that of its nearest ancestor with one (a hand-written
    revision, e.g. a backfill, records none). None before the first revision."""
    while revision_id is not None:
        rev = script.get_revision(revision_id)
        state = getattr(rev.module, "STATE", None)
        if state is not None:
            return state
        if isinstance(rev.down_revision, (tuple, list)):
            raise ValueError(f"revision {revision_id} merges branches: give it a STATE")
        revision_id = rev.down_revision
    return None


def recorded_state(revision_id: str | None) -> State | None:
    """The state of a revision, inside a running migration (see `state_at`)."""
    from alembic import context

    return state_at(context.script, revision_id)


class Revision:
    """The operations of one migration step, from state `before` to state `after`.
    Creations render from `after`, drops name objects from `before`."""

    def __init__(self, before: State | None, after: State | None):
        from alembic import op

        self._op = op
        name = op.get_context().dialect.name
        if name not in SQLALCHEMY_DIALECTS:
            raise ValueError(f"unsupported database {name!r}: use PostgreSQL or Redshift")
        self.dialect = SQLALCHEMY_DIALECTS[name]
        self.before = pipeline_of(before) if before else None
        self.after = pipeline_of(after) if after else None
        self._origins = (before or {}).get("origin", ""), (after or {}).get("origin", "")
        for setting in self._dialect(self.after or self.before).session_settings:
            self._run(setting)

    @classmethod
    def up(cls, state: State, down_revision: str | None) -> Revision:
        return cls(recorded_state(down_revision), state)

    @classmethod
    def down(cls, state: State, down_revision: str | None) -> Revision:
        return cls(state, recorded_state(down_revision))

    # -- helpers
    def _dialect(self, pipeline: Pipeline | None) -> PostgresDialect:
        assert pipeline is not None
        return dialect_for(self.dialect, pipeline.schema)

    def _run(self, sql: str) -> None:
        """The generator's SQL exactly as rendered. Not through op.execute(): text() would
        read `:name` as a bind parameter and, for Redshift's format paramstyle, double
        every '%' (modulo in the procedures) in --sql output and online alike."""
        ctx = self._op.get_context()
        statement = sql.strip().removesuffix(";")
        if ctx.as_sql:
            ctx.impl.static_output(statement + ctx.impl.command_terminator)
        else:
            ctx.connection.exec_driver_sql(statement, execution_options={"no_parameters": True})

    def _outside_transaction(self, statements: list[str]) -> None:
        """Redshift refuses ALTER COLUMN TYPE (and key changes) in a transaction block."""
        with self._op.get_context().autocommit_block():
            for sql in statements:
                self._run(sql)

    def _objects(self, which: str, table: str | None, kinds: tuple[str, ...] | None = None) -> list[SqlObject]:
        pipeline = self.after if which == "after" else self.before
        origin = self._origins[1] if which == "after" else self._origins[0]
        assert pipeline is not None, f"no {which} state for this operation"
        return [
            o
            for o in pipeline_objects(pipeline, self.dialect, origin)
            if o.table == table and o.kind != "setting" and (kinds is None or o.kind in kinds)
        ]

    def _drop(self, obj: SqlObject) -> None:
        d = self._dialect(self.before)
        name = d.qualified(obj.schema, obj.name)
        statement = {
            "table": f"DROP TABLE IF EXISTS {name};",
            "stream": f"DROP {d.stream_relation} IF EXISTS {name};",
            "procedure": d.drop_procedure(name, obj.arguments),
            "function": f"DROP FUNCTION IF EXISTS {name};",
            "external_schema": f"DROP SCHEMA IF EXISTS {d.q(obj.name)};",
            "view": f"DROP VIEW IF EXISTS {name};",
            "schema": f"DROP SCHEMA IF EXISTS {d.q(obj.name)};",
        }.get(obj.kind)  # indexes go with their table
        if statement:
            self._run(statement)

    def _alter(self, pipeline: Pipeline | None, table: str, relations: tuple[str, ...], action: str) -> list[str]:
        d = self._dialect(pipeline)
        assert pipeline is not None
        n = table_names(pipeline, pipeline.table(table))
        return [f"ALTER TABLE {d.qualified(n.schema, getattr(n, rel))} {action};" for rel in relations]

    # -- the pipeline's shared objects
    def create_pipeline(self) -> None:
        """Schema, external schema (Redshift), helper functions (PostgreSQL), run log; the
        shared views come with `replace_views`, once the tables exist."""
        for obj in self._objects("after", None):
            if obj.kind != "view":
                self._run(obj.sql)

    def replace_views(self) -> None:
        """The shared views over every table's quarantine and schema-drift tables."""
        for obj in self._objects("after", None, ("view",)):
            self._run(obj.sql)

    def drop_views(self) -> None:
        """Before tables go (PostgreSQL refuses to drop a table a view reads)."""
        for obj in self._objects("before", None, ("view",)):
            self._drop(obj)

    def separate_control_tables(self) -> None:
        """From one quarantine and one schema-drift table every table's procedure read and
        wrote (two tables' CALLs could stop each other with a serialization conflict) to
        one of each per table: the rows move to their table's own, and the shared names
        become views over them (docs/redshift.md, "Concurrency and isolation")."""
        self._move_control_rows(self.after, to_shared=False)

    def join_control_tables(self) -> None:
        """The reverse of `separate_control_tables`."""
        self._move_control_rows(self.before, to_shared=True)

    def _move_control_rows(self, pipeline: Pipeline | None, to_shared: bool) -> None:
        assert pipeline is not None
        d = self._dialect(pipeline)
        if to_shared:
            self.drop_views()
            for view, _, cols in SHARED_VIEWS:
                self._run(control_table_sql(d, pipeline.schema, view, cols))
        for table in pipeline.tables:
            n = table_names(pipeline, table)
            for view, attr, cols in SHARED_VIEWS:
                own, shared = d.qualified(n.schema, getattr(n, attr)), d.qualified(pipeline.schema, view)
                if not to_shared:
                    self._run(control_table_sql(d, n.schema, getattr(n, attr), cols))
                columns = ", ".join(schemas.names(cols))
                source, target = (own, shared) if to_shared else (shared, own)
                where = "" if to_shared else f" WHERE table_name = {quote_literal(table.name)}"
                self._run(f"INSERT INTO {target} ({columns}) SELECT {columns} FROM {source}{where};")
                if to_shared:
                    self._run(f"DROP TABLE {own};")
        if not to_shared:
            for view, _, _ in SHARED_VIEWS:
                self._run(f"DROP TABLE {d.qualified(pipeline.schema, view)};")
            self.replace_views()

    def drop_pipeline(self) -> None:
        """Drops what create_pipeline made. The schema is dropped without CASCADE: objects
        that are not the pipeline's make the downgrade fail instead of disappearing."""
        for obj in reversed(self._objects("before", None)):
            self._drop(obj)

    def add_run_log_column(self, name: str) -> None:
        """A run-log column added since the run log was made (sync.schema.run_log); its
        rows written before hold NULL."""
        self._run(alter_run_log_sql(self._dialect(self.after), self.after, name, add=True))

    def drop_run_log_column(self, name: str) -> None:
        self._run(alter_run_log_sql(self._dialect(self.before), self.before, name, add=False))

    def replace_functions(self) -> None:
        for obj in self._objects("after", None, ("function",)):
            self._run(obj.sql)

    def create_heartbeat(self) -> None:
        """The heartbeat topic's stream relation ([heartbeat] added or its topic changed)."""
        for obj in heartbeat_objects(self._dialect(self.after), self.after):
            self._run(obj.sql)

    def drop_heartbeat(self) -> None:
        for obj in reversed(heartbeat_objects(self._dialect(self.before), self.before)):
            self._drop(obj)

    def recreate_source(self) -> None:
        """Where the warehouse reads the topics itself (Redshift): the external schema
        again, with the streaming MVs of the tables both states have (new and removed
        tables bring and take their own)."""
        assert self.before is not None and self.after is not None
        if not self._dialect(self.after).streaming_ingestion:
            return
        common = [t.name for t in self.after.tables if t.name in {b.name for b in self.before.tables}]
        for table in common:
            for obj in self._objects("before", table, ("stream",)):
                self._drop(obj)
        for obj in reversed(self._objects("before", None, ("external_schema", "stream"))):  # the heartbeat's too
            self._drop(obj)
        for obj in self._objects("after", None, ("external_schema", "stream")):
            self._run(obj.sql)
        for table in common:
            for obj in self._objects("after", table, ("stream",)):
                self._run(obj.sql)

    # -- one table's objects
    def create_table(self, table: str) -> None:
        """Stream (MV on Redshift), target, stage, watermark, deleted keys, procedure."""
        for obj in self._objects("after", table):
            self._run(obj.sql)

    def drop_table(self, table: str) -> None:
        for obj in reversed(self._objects("before", table)):
            self._drop(obj)

    def create_history(self, table: str) -> None:
        """The history table (history = true), created empty."""
        assert self.after is not None
        for obj in history_objects(self._dialect(self.after), self.after, self.after.table(table)):
            self._run(obj.sql)

    def drop_history(self, table: str) -> None:
        assert self.before is not None
        for obj in history_objects(self._dialect(self.before), self.before, self.before.table(table)):
            self._drop(obj)  # its index goes with it

    def replace_procedure(self, table: str) -> None:
        """The procedure from this state; the table's schema-drift history goes with the old
        one (it described the previous pipeline file), so `status` shows only current drift."""
        for obj in self._objects("after", table, ("procedure",)):
            self._run(obj.sql)
        d = self._dialect(self.after)
        assert self.after is not None
        n = table_names(self.after, self.after.table(table))
        self._run(f"DELETE FROM {d.qualified(n.schema, n.schema_drift)} WHERE table_name = {quote_literal(table)};")

    def recreate_stream(self, table: str, dialect: str) -> None:
        """Only on `dialect`. A re-created streaming MV re-reads its topic from offset 0;
        the watermark skips what was applied already."""
        if self.dialect != dialect:
            return
        for obj in self._objects("before", table, ("stream",)):
            self._drop(obj)
        for obj in self._objects("after", table, ("stream", "index")):
            self._run(obj.sql)

    def recreate_index(self, table: str, dialect: str, index: str) -> None:
        """Only on `dialect`: the index dropped and built as this state's generator renders
        it (`CREATE INDEX IF NOT EXISTS` alone would keep the old definition); the relation
        it is on and what that holds stay."""
        if self.dialect != dialect:
            return
        for obj in self._objects("after", table, ("index",)):
            if obj.name == index:
                self._run(f"DROP INDEX IF EXISTS {self._dialect(self.after).qualified(obj.schema, obj.name)};")
                self._run(obj.sql)

    def recreate_stage(self, table: str) -> None:
        """The stage as this state's procedure reads it. It is empty between runs (every
        run empties it before it commits), so it is dropped and created again, under the
        table's lock: a scheduled CALL waits for this revision's transaction and then runs
        the procedure it replaces."""
        d = self._dialect(self.after)
        assert self.after is not None
        n = table_names(self.after, self.after.table(table))
        self._run(f"LOCK TABLE {d.qualified(n.schema, n.watermark)}{d.lock_mode};")
        for obj in self._objects("after", table, ("table",)):
            if obj.name == n.stage:
                self._run(f"DROP TABLE IF EXISTS {d.qualified(n.schema, n.stage)};")
                self._run(obj.sql)

    def restyle_watermark(self, table: str) -> None:
        """The watermark's distribution style as the generator renders it now (Redshift:
        ALTER DISTSTYLE, outside a transaction block; PostgreSQL has none: no-op)."""
        assert self.after is not None
        action = self._dialect(self.after).alter_diststyle("watermark")
        if action is not None:
            self._outside_transaction(self._alter(self.after, table, ("watermark",), action))

    def add_column(self, table: str, column: str) -> None:
        """ADD COLUMN on the target and the stage, one statement each (Redshift's rule),
        then the column filled for the stored rows from the records that wrote them, which
        the stream still holds (`sync.sql.column_fill`), in the same transaction."""
        assert self.after is not None
        config = self.after.table(table)
        col = config.column_by_any_name(column)
        assert col is not None, f"{table}.{column} is not in this revision's state"
        d = self._dialect(self.after)
        relations = _data_relations(config)
        for sql in self._alter(self.after, table, relations, f"ADD COLUMN {d.q(column)} {d.type_sql(col.sql_type)}"):
            self._run(sql)
        if col.policy is not None:  # filled with the policy's values: the key table first, then the key
            self._run(key_table_sql(d, self.after))
            self._require_key(col, table)
        self._run(column_fill_sql(d, self.after, config, col))
        if col.policy is not None:  # the quarantined records hold the new field in clear
            self._run(quarantine_redaction_sql(d, self.after, config, col.name))

    def apply_policy(self, table: str, column: str) -> None:
        """A column policy on a stored column: the key table made (if new), then the stored
        values and the quarantined records converted (`sync.sql.policy.conversion_sql`).
        A hash needs a key: online, a warehouse without one stops here."""
        assert self.after is not None
        config = self.after.table(table)
        col = config.column_by_any_name(column)
        assert col is not None and col.policy is not None, f"{table}.{column} has no policy in this revision's state"
        d = self._dialect(self.after)
        self._run(key_table_sql(d, self.after))
        self._require_key(col, table)
        for sql in conversion_sql(d, self.after, config, col):
            self._run(sql)

    def _require_key(self, col: ColumnConfig, table: str) -> None:
        """A hash needs a key (a NULL key hashes to NULL): online, a warehouse without one
        stops the revision here; the --sql script cannot check."""
        assert self.after is not None
        ctx = self._op.get_context()
        if col.policy == Policy.HASH and not ctx.as_sql:
            keys = ctx.connection.exec_driver_sql(
                f"SELECT COUNT(*) FROM {key_table(self._dialect(self.after), self.after)}"
            ).scalar()
            if not keys:
                raise RuntimeError(
                    f"{table}.{col.target_name}: policy = 'hash' needs a key: run redshift-sync policy rotate-key, then deploy"
                )

    def drop_column(self, table: str, column: str) -> None:
        d = self._dialect(self.before)
        assert self.before is not None
        relations = _data_relations(self.before.table(table))
        for sql in self._alter(self.before, table, relations, f"DROP COLUMN {d.q(column)}"):
            self._run(sql)
        assert self.before is not None
        col = self.before.table(table).column_by_any_name(column)
        after = self.after.table(table) if self.after and table in {t.name for t in self.after.tables} else None
        if col is not None and after is not None and col.name in after.dropped:  # policy = "drop"
            self._run(key_table_sql(d, self.after))
            self._run(quarantine_redaction_sql(d, self.after, after, col.name))

    def widen_column(self, table: str, column: str) -> None:
        """A wider type (`sync.sql.types.widens`) on the target and the stage, every value
        kept. In place where the engine alters the type (`in_place_widenings`), outside a
        transaction block (Redshift refuses ALTER COLUMN TYPE in one); elsewhere copied into
        a new column, in the revision's transaction: ADD COLUMN, UPDATE, DROP COLUMN, RENAME
        COLUMN (the column moves to the end of the table; the generated SQL names columns)."""
        assert self.before is not None and self.after is not None
        old = self.before.table(table).column_by_any_name(column)
        new = self.after.table(table).column_by_any_name(column)
        assert old is not None and new is not None, f"{table}.{column} is not in both states of this revision"
        d = self._dialect(self.after)
        type_sql = d.type_sql(new.sql_type)
        if old.sql_type.family in d.in_place_widenings:
            self._outside_transaction(
                self._alter(
                    self.after, table, _data_relations(self.after.table(table)), f"ALTER COLUMN {d.q(column)} TYPE {type_sql}"
                )
            )
            return
        n = table_names(self.after, self.after.table(table))
        copy = d.q(f"{METADATA_PREFIX}widening_{column}")  # '_': no configured column is named so
        for relation in (getattr(n, r) for r in _data_relations(self.after.table(table))):
            name = d.qualified(n.schema, relation)
            self._run(f"ALTER TABLE {name} ADD COLUMN {copy} {type_sql};")
            self._run(f"UPDATE {name} SET {copy} = {d.q(column)};")
            self._run(f"ALTER TABLE {name} DROP COLUMN {d.q(column)};")
            self._run(f"ALTER TABLE {name} RENAME COLUMN {copy} TO {d.q(column)};")

    def alter_sortkey(self, table: str) -> None:
        """Redshift re-sorts in the background; PostgreSQL has no sort key (no-op)."""
        assert self.after is not None
        action = self._dialect(self.after).alter_sortkey([c.target_name for c in self.after.table(table).sortkey_columns])
        if action is not None:
            self._outside_transaction(self._alter(self.after, table, ("target",), action))

    def alter_distkey(self, table: str) -> None:
        """The target, the stage and the deleted keys share the distribution key (Redshift only)."""
        assert self.after is not None
        config = self.after.table(table)
        action = self._dialect(self.after).alter_distkey(config.distkey_column.target_name)
        if action is not None:
            relations = ("target", "stage", "deleted_keys") if config.delete_mode == "hard" else ("target", "stage")
            self._outside_transaction(self._alter(self.after, table, relations, action))

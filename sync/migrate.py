"""Schema revisions with alembic: the operations revision files call, the settings
`migrations/env.py` reads, and the commands behind `deploy` and `revision`.

A revision file records the state it applies (`sync.schema_state`) and lists its
operations as calls on a `Revision`, e.g.::

    def upgrade() -> None:
        r = Revision.up(STATE, down_revision)
        r.add_column("customer", "email")
        r.replace_procedure("customer")

Each operation renders its SQL from the generator (`sync.sql.objects.pipeline_objects`)
at the state it moves to (creations) or from (drops), in the dialect of the connection:
the same revision runs on Redshift and on PostgreSQL, online or as `--sql` output.
"""

from __future__ import annotations

import os
import pprint
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sync.config import Pipeline
from sync.revision_plan import RevisionPlan, plan_revision
from sync.schema_state import State, drifted_objects, pipeline_of, same_model, state_for
from sync.sql.dialects import PostgresDialect, get_dialect
from sync.sql.names import table_names
from sync.sql.objects import SqlObject, pipeline_objects
from sync.warehouse import WarehouseError, resolve_dsn, sqlalchemy_url

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
DEFAULT_VERSIONS = Path("migrations") / "versions"
SQLALCHEMY_DIALECTS = {"redshift": "redshift", "postgresql": "postgres"}
# Any URL of the right dialect will do for `--sql` output: nothing connects.
OFFLINE_POSTGRES_URL = "postgresql+psycopg://localhost/redshift_sync"

# ---- operations used by revision files -----------------------------------------------


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
        return get_dialect(self.dialect, pipeline.schema)

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
            o for o in pipeline_objects(pipeline, self.dialect, origin)
            if o.table == table and o.kind != "setting" and (kinds is None or o.kind in kinds)
        ]

    def _drop(self, obj: SqlObject) -> None:
        d = self._dialect(self.before)
        name = d.qualified(obj.schema, obj.name)
        statement = {
            "table": f"DROP TABLE IF EXISTS {name};",
            "stream": f"DROP {'MATERIALIZED VIEW' if self.dialect == 'redshift' else 'TABLE'} IF EXISTS {name};",
            "procedure": f"DROP PROCEDURE IF EXISTS {name}();",
            "function": f"DROP FUNCTION IF EXISTS {name};",
            "external_schema": f"DROP SCHEMA IF EXISTS {d.q(obj.name)};",
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
        """Schema, external schema (Redshift), helper functions (PostgreSQL), run log, quarantine."""
        for obj in self._objects("after", None):
            self._run(obj.sql)

    def drop_pipeline(self) -> None:
        """Drops what create_pipeline made. The schema is dropped without CASCADE: objects
        that are not the pipeline's make the downgrade fail instead of disappearing."""
        for obj in reversed(self._objects("before", None)):
            self._drop(obj)

    def replace_functions(self) -> None:
        for obj in self._objects("after", None, ("function",)):
            self._run(obj.sql)

    def recreate_source(self) -> None:
        """Redshift only: the external schema again, with the streaming MVs of the tables
        both states have (new and removed tables bring and take their own)."""
        if self.dialect != "redshift":
            return
        assert self.before is not None and self.after is not None
        common = [t.name for t in self.after.tables if t.name in {b.name for b in self.before.tables}]
        for table in common:
            for obj in self._objects("before", table, ("stream",)):
                self._drop(obj)
        for obj in self._objects("before", None, ("external_schema",)):
            self._drop(obj)
        for obj in self._objects("after", None, ("external_schema",)):
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

    def replace_procedure(self, table: str) -> None:
        for obj in self._objects("after", table, ("procedure",)):
            self._run(obj.sql)

    def recreate_stream(self, table: str, dialect: str) -> None:
        """Only on `dialect`. A re-created streaming MV re-reads its topic from offset 0;
        the watermark skips what was applied already."""
        if self.dialect != dialect:
            return
        for obj in self._objects("before", table, ("stream",)):
            self._drop(obj)
        for obj in self._objects("after", table, ("stream", "index")):
            self._run(obj.sql)

    def add_column(self, table: str, column: str) -> None:
        """ADD COLUMN on the target and the stage, one statement each (Redshift's rule)."""
        assert self.after is not None
        col = self.after.table(table).column_by_any_name(column)
        assert col is not None, f"{table}.{column} is not in this revision's state"
        d = self._dialect(self.after)
        for sql in self._alter(self.after, table, ("target", "stage"), f"ADD COLUMN {d.q(column)} {d.type_sql(col.sql_type)}"):
            self._run(sql)

    def drop_column(self, table: str, column: str) -> None:
        d = self._dialect(self.before)
        for sql in self._alter(self.before, table, ("target", "stage"), f"DROP COLUMN {d.q(column)}"):
            self._run(sql)

    def widen_column(self, table: str, column: str) -> None:
        """A longer VARCHAR on the target and the stage, outside a transaction block."""
        assert self.after is not None
        col = self.after.table(table).column_by_any_name(column)
        assert col is not None, f"{table}.{column} is not in this revision's state"
        d = self._dialect(self.after)
        action = f"ALTER COLUMN {d.q(column)} TYPE {d.type_sql(col.sql_type)}"
        self._outside_transaction(self._alter(self.after, table, ("target", "stage"), action))

    def alter_sortkey(self, table: str) -> None:
        """Redshift re-sorts in the background; PostgreSQL has no sort key (no-op)."""
        if self.dialect != "redshift":
            return
        assert self.after is not None
        d = self._dialect(self.after)
        keys = ", ".join(d.q(c.target_name) for c in self.after.table(table).sortkey_columns)
        self._outside_transaction(self._alter(self.after, table, ("target",), f"ALTER SORTKEY ({keys})"))

    def alter_distkey(self, table: str) -> None:
        """The target, the stage and the deleted keys share the distribution key (Redshift only)."""
        if self.dialect != "redshift":
            return
        assert self.after is not None
        config = self.after.table(table)
        d = self._dialect(self.after)
        relations = ("target", "stage", "deleted_keys") if config.delete_mode == "hard" else ("target", "stage")
        action = f"ALTER DISTKEY {d.q(config.distkey_column.target_name)}"
        self._outside_transaction(self._alter(self.after, table, relations, action))


# ---- settings for env.py ------------------------------------------------------------


def database_url(config: Any, offline: bool) -> str:
    """-x dsn=... (or the CLI's --dsn), else $REDSHIFT_SYNC_DSN, else sqlalchemy.url of the
    ini file, else the embedded PostgreSQL (offline: a PostgreSQL URL, nothing connects)."""
    from alembic import context

    dsn = config.attributes.get("dsn") or context.get_x_argument(as_dictionary=True).get("dsn")
    dsn = resolve_dsn(dsn) or config.get_main_option("sqlalchemy.url")
    if dsn:
        return sqlalchemy_url(dsn)
    if offline:
        return OFFLINE_POSTGRES_URL
    from sync import embedded

    return sqlalchemy_url(embedded.start())


def pipeline_file(config: Any) -> Path:
    """-x config=... (or the CLI's --config), else $REDSHIFT_SYNC_CONFIG, else ./pipeline.toml."""
    from alembic import context

    from sync.config import resolve_config_path

    given = config.attributes.get("config") or context.get_x_argument(as_dictionary=True).get("config")
    return resolve_config_path(given)


def pipeline_warning(config: Any, head: str | None) -> str | None:
    """A note when the pipeline file in use differs from the head revision's state."""
    from sync.config import ConfigError, load_pipeline

    path = pipeline_file(config)
    if head is None or not path.exists():
        return None
    try:
        pipeline, _ = load_pipeline(path)
    except ConfigError as exc:
        return str(exc)
    state = state_at(_script(config), head)
    if state is not None and not same_model(state, pipeline):
        return f"{path} differs from the state of revision {head}: run `redshift-sync revision -m MESSAGE`"
    return None


# ---- commands -----------------------------------------------------------------------


def alembic_config(versions: Path | None = None, dsn: str | None = None, config: Path | None = None, **kwargs: Any) -> Any:
    """The alembic configuration the CLI uses: ./alembic.ini when there is one, else the
    package's migrations/ folder with ./migrations/versions; `versions` overrides the
    versions folder either way."""
    from alembic.config import Config

    ini = Path("alembic.ini")
    cfg = Config(str(ini) if ini.exists() else None, **kwargs)
    if not ini.exists():
        cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
        cfg.set_main_option("path_separator", "os")
        cfg.set_main_option("version_locations", str(DEFAULT_VERSIONS.resolve()))
        cfg.set_main_option("file_template", "%%(year)d%%(month).2d%%(day).2d_%%(rev)s_%%(slug)s")
    if versions is not None:
        cfg.set_main_option("version_locations", str(Path(versions).resolve()))
    cfg.attributes["dsn"] = dsn
    cfg.attributes["config"] = str(config) if config else None
    return cfg


def versions_dir(cfg: Any) -> Path:
    locations = cfg.get_main_option("version_locations")
    if locations:
        return Path(locations.split(os.pathsep)[0])
    return Path(cfg.get_main_option("script_location")) / "versions"


def _script(cfg: Any) -> Any:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(cfg)


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


def head(cfg: Any) -> tuple[str | None, State | None]:
    """The single head revision of the versions folder and its state (None, None: no revisions)."""
    script = _script(cfg)
    heads = script.get_heads()
    if len(heads) > 1:
        raise ValueError(f"{versions_dir(cfg)} has several heads ({', '.join(heads)}): merge them with `alembic merge`")
    rev = heads[0] if heads else None
    return rev, state_at(script, rev)


@dataclass
class WrittenRevision:
    path: Path
    revision: str
    plan: RevisionPlan


def _indent(lines: list[str]) -> str:
    return "\n    ".join(lines)


def write_revision(cfg: Any, pipeline: Pipeline, origin: str, message: str) -> WrittenRevision | None:
    """Write the revision from the last recorded state to `pipeline`; None when there is
    nothing to do. Raises RevisionRefused (nothing written) for changes Redshift cannot
    make in place."""
    from alembic import util

    parent, old = head(cfg)
    # The first revision's origin stays: running `revision` from another folder must not
    # rewrite every procedure's header comment.
    new = state_for(pipeline, old["origin"] if old else origin)
    plan = plan_revision(old, new)
    if plan.empty and old is not None and same_model(old, pipeline):
        return None
    versions = versions_dir(cfg)
    versions.mkdir(parents=True, exist_ok=True)
    rev_id = util.rev_id()
    summary = "\n".join(
        ["Upgrade:", *(f"    {line}" for line in plan.upgrade), "Downgrade:", *(f"    {line}" for line in plan.downgrade)]
    )
    script = _script(cfg).generate_revision(
        rev_id, message, head=parent or "base", version_path=versions,
        state=pprint.pformat(new, indent=1, width=100, sort_dicts=False),
        summary=summary,
        upgrades=_indent(plan.upgrade),
        downgrades=_indent(plan.downgrade),
    )
    return WrittenRevision(Path(script.path), rev_id, plan)


@dataclass
class DeployResult:
    applied: list[str]
    head: str
    warnings: list[str]


def deploy(cfg: Any, pipeline: Pipeline) -> DeployResult:
    """`alembic upgrade head`, after checking that the pipeline file is what the head
    revision records (else the warehouse would silently get an older pipeline)."""
    from alembic import command
    from alembic.util import CommandError
    from sqlalchemy.exc import SQLAlchemyError

    rev, state = head(cfg)
    if rev is None or state is None:
        raise ValueError(
            f"no revisions in {versions_dir(cfg)}: run `redshift-sync revision -m \"initial\"` "
            "(with --versions DIR for your own folder) and review the file first"
        )
    if not same_model(state, pipeline):
        raise ValueError(
            f"the pipeline file differs from the last revision ({rev} in {versions_dir(cfg)}): run "
            "`redshift-sync revision -m MESSAGE`, review the new file, then deploy"
        )
    warnings = [
        f"the installed generator renders {d.label} ({d.dialect}) differently from revision {rev}: "
        "run `redshift-sync revision -m 'regenerate'` to apply it"
        for d in drifted_objects(state)
        if d.kind != "setting"
    ]
    applied: list[str] = []
    cfg.attributes["on_version_apply"] = _collect(applied)
    try:
        command.upgrade(cfg, "head")
    except (SQLAlchemyError, CommandError) as exc:
        cause = getattr(exc, "orig", None) or exc
        done = f"; applied before it: {', '.join(applied)}" if applied else ""
        raise WarehouseError(
            f"upgrade stopped, the failing revision was rolled back{done}: {str(cause).strip().splitlines()[0]}"
        ) from exc
    return DeployResult(applied, rev, warnings)


def _collect(applied: list[str]) -> Callable[..., None]:
    def on_apply(*, step: Any, **_: Any) -> None:
        doc = step.up_revision.doc if step.up_revision is not None else ""
        applied.append(f"{step.up_revision_id} {doc}".strip())

    return on_apply

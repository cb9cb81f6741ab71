"""Schema revisions as tools: the alembic configuration the CLI uses, the settings
`migrations/env.py` reads, and the commands behind `redshift-sync revision` and `deploy`.
"""

from __future__ import annotations

import os
import pprint
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sync.config import Pipeline
from sync.resources import bundled
from sync.schema.migrate import state_at
from sync.schema.plan import RevisionPlan, plan_revision
from sync.schema.state import State, drifted_objects, same_model, state_for
from sync.sql.dialect import dialect_for
from sync.sql.objects import auto_refresh_requirements
from sync.warehouse import WarehouseError, dialect_of, resolve_dsn, sqlalchemy_url

DEFAULT_VERSIONS = Path("migrations") / "versions"
VERSIONS_ENV_VAR = "REDSHIFT_SYNC_VERSIONS"
# Any URL of the right dialect will do for `--sql` output: nothing connects.
OFFLINE_POSTGRES_URL = "postgresql+psycopg://localhost/redshift_sync"
OFFLINE_URLS = {
    "postgres": OFFLINE_POSTGRES_URL,
    "redshift": "redshift+redshift_connector://reviewer@redshift.invalid:5439/dev",
}


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
    from sync.local import embedded

    return sqlalchemy_url(embedded.start(embedded.data_dir(pipeline_file(config))))


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
        cfg.set_main_option("script_location", str(bundled("migrations")))
        cfg.set_main_option("path_separator", "os")
        cfg.set_main_option("version_locations", str(DEFAULT_VERSIONS.resolve()))
        cfg.set_main_option("file_template", "%%(year)d%%(month).2d%%(day).2d_%%(rev)s_%%(slug)s")
    if versions is not None:
        cfg.set_main_option("version_locations", str(Path(versions).resolve()))
    cfg.attributes["dsn"] = dsn
    cfg.attributes["config"] = str(config) if config else None
    cfg.attributes["configure_logger"] = False  # the commands say what they did; an ini's INFO logging would repeat it
    return cfg


def versions_setting(versions: Path | None, pipeline: Pipeline | None, path: Path | None) -> Path | None:
    """The revisions folder given once: --versions, else $REDSHIFT_SYNC_VERSIONS, else
    `[operations] versions` of the pipeline file (relative to that file); None leaves it
    to ./alembic.ini or ./migrations/versions."""
    if versions is not None:
        return versions
    if os.environ.get(VERSIONS_ENV_VAR):
        return Path(os.environ[VERSIONS_ENV_VAR])
    if pipeline is not None and pipeline.operations.versions and path is not None:
        return path.parent / pipeline.operations.versions
    return None


def versions_dir(cfg: Any) -> Path:
    locations = cfg.get_main_option("version_locations")
    if locations:
        return Path(locations.split(os.pathsep)[0])
    return Path(cfg.get_main_option("script_location")) / "versions"


def _script(cfg: Any) -> Any:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(cfg)


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
    # A plan with only warnings (the generator renders a table differently) is still
    # written: it records the new renderings, and the warnings say what to add by hand.
    if plan.empty and not plan.warnings and old is not None and same_model(old, pipeline):
        return None
    versions = versions_dir(cfg)
    versions.mkdir(parents=True, exist_ok=True)
    rev_id = util.rev_id()
    summary = "\n".join(
        ["Upgrade:", *(f"    {line}" for line in plan.upgrade), "Downgrade:", *(f"    {line}" for line in plan.downgrade)]
    )
    script = _script(cfg).generate_revision(
        rev_id,
        message,
        head=parent or "base",
        version_path=versions,
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
            f'no revisions in {versions_dir(cfg)}: run `redshift-sync revision -m "initial"` '
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
    dsn = resolve_dsn(cfg.attributes.get("dsn"))
    if dsn:
        warnings += auto_refresh_requirements(pipeline, dialect_for(dialect_of(dsn)))
    applied: list[str] = []
    cfg.attributes["on_version_apply"] = _collect(applied)
    try:
        command.upgrade(cfg, "head")
    except KeyboardInterrupt:
        if not applied:
            raise
        raise KeyboardInterrupt(
            f"applied {', '.join(applied)} before it (committed); the revision in progress was rolled back"
        ) from None
    except (SQLAlchemyError, CommandError) as exc:
        cause = getattr(exc, "orig", None) or exc
        reason = str(cause).strip().splitlines()[0]
        if isinstance(exc, SQLAlchemyError) and getattr(exc, "statement", None) is None and not applied:
            raise WarehouseError(f"cannot connect to the warehouse, nothing was deployed: {reason}") from exc
        done = f"; applied before it: {', '.join(applied)}" if applied else ""
        raise WarehouseError(f"upgrade stopped, the failing revision was rolled back{done}: {reason}") from exc
    if applied and (dsn or not cfg.get_main_option("sqlalchemy.url")):  # the database upgraded (None: embedded)
        warnings += _unknown_values(dsn, pipeline, cfg.attributes["config"])
    return DeployResult(applied, rev, warnings)


def _unknown_values(dsn: str | None, pipeline: Pipeline, path: str | None) -> list[str]:
    """What the upgrade could not know: stored rows whose value is unknown (an added column
    whose records carry the TOAST placeholder)."""
    from sync.operations.unknown_values import unknown_values
    from sync.warehouse import connect

    wh = connect(dsn, pipeline_file=Path(path) if path else None)
    try:
        return [u.describe() for t in pipeline.tables for u in unknown_values(wh, pipeline, t.name)]
    finally:
        wh.close()


def _collect(applied: list[str]) -> Callable[..., None]:
    def on_apply(*, step: Any, **_: Any) -> None:
        doc = step.up_revision.doc if step.up_revision is not None else ""
        applied.append(f"{step.up_revision_id} {doc}".strip())

    return on_apply


def offline_sql(cfg: Any, pipeline: Pipeline, dialect: str, since: str | None) -> None:
    """`alembic upgrade [since:]head --sql` for `dialect`, written to the configuration's
    output buffer: the script a DBA reviews and runs by hand."""
    from alembic import command

    rev, state = head(cfg)
    if rev is None or state is None:
        raise ValueError(f'no revisions in {versions_dir(cfg)}: run `redshift-sync revision -m "initial"` first')
    if not same_model(state, pipeline):
        raise ValueError(
            f"the pipeline file differs from the last revision ({rev}): run `redshift-sync revision -m MESSAGE` first"
        )
    cfg.attributes["dsn"] = OFFLINE_URLS[dialect]
    command.upgrade(cfg, f"{since}:head" if since else "head", sql=True)


# ---- the deployed revision ---------------------------------------------------------


def deployed_revision(wh: Any) -> str | None:
    """The revision alembic recorded in this database (None: none recorded)."""
    if not wh.relation_exists("public", "alembic_version"):
        return None
    return wh.scalar("SELECT version_num FROM alembic_version")


def deployment_problem(wh: Any, cfg: Any, pipeline: Pipeline) -> str | None:
    """What stands between the pipeline file and this database, phrased with the command
    to run; None when the database is at the revision that records the file. A database
    deployed without revisions (`generate` run by hand, the demo) is only checked for the
    pipeline's tables."""
    from alembic.util import CommandError

    from sync.sql.names import RUN_LOG, table_names

    rev = deployed_revision(wh)
    if rev is None:
        missing = [t.name for t in pipeline.tables if not wh.relation_exists(pipeline.schema, table_names(pipeline, t).watermark)]
        if not wh.relation_exists(pipeline.schema, RUN_LOG) or missing:
            what = f"tables {', '.join(missing)} are" if missing and len(missing) < len(pipeline.tables) else "the pipeline is"
            return f"{what} not deployed in this database (schema {pipeline.schema!r} does not exist or lacks them): run `redshift-sync deploy` first"
        return None
    try:
        state = state_at(_script(cfg), rev)
    except CommandError:
        return (
            f"this database is at revision {rev}, which {versions_dir(cfg)} does not hold: point the tool at the "
            f"pipeline's revisions folder ([operations] versions in the pipeline file, or ${VERSIONS_ENV_VAR})"
        )
    if state is None or same_model(state, pipeline):
        return None
    head_rev, head_state = head(cfg)
    if head_state is not None and same_model(head_state, pipeline):
        return f"this database is at revision {rev}; the pipeline file is revision {head_rev}: run `redshift-sync deploy` first"
    return (
        f"the pipeline file differs from revision {rev}, which this database is at: run `redshift-sync revision -m MESSAGE`, "
        "review the file it writes, then `redshift-sync deploy` (or restore the pipeline file)"
    )

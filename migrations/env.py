"""alembic environment of redshift-sync: the same revisions on Redshift and PostgreSQL,
online or as a reviewable script (`alembic upgrade head --sql`).

The database comes from the settings the CLI uses: `-x dsn=...` (or `--dsn` of
`redshift-sync deploy`), else $REDSHIFT_SYNC_DSN, else `sqlalchemy.url`, else the
embedded PostgreSQL. Revisions carry the pipeline state they apply; the pipeline file
(`-x config=...`, $REDSHIFT_SYNC_CONFIG or ./pipeline.toml) is only checked against the
head revision, with a warning when it has changes no revision records yet.
"""

from __future__ import annotations

import logging
from logging.config import fileConfig

from alembic import context
from sqlalchemy import create_engine, pool

from sync.schema.revisions import database_url, pipeline_warning

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name)
log = logging.getLogger("alembic.env")

OPTIONS = {
    # No primary key on alembic_version: with one, alembic emits INSERT ... RETURNING,
    # which Redshift rejects.
    "version_table_pk": False,
    # One transaction per revision: autocommit_block() can step out of it for the
    # statements Redshift refuses in a transaction block (ALTER COLUMN TYPE), and a
    # failing revision leaves the earlier ones applied and recorded.
    "transaction_per_migration": True,
    "target_metadata": None,
    "on_version_apply": config.attributes.get("on_version_apply") or (),
}


def warn_about_pipeline_file() -> None:
    heads = context.script.get_heads()
    note = pipeline_warning(config, heads[0] if len(heads) == 1 else None)
    if note:
        log.warning(note)


def run_migrations_offline() -> None:
    """Print the SQL: statements end with ';', alembic's own bookkeeping included."""
    context.configure(
        url=database_url(config, offline=True),
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        **OPTIONS,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = create_engine(database_url(config, offline=False), poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            context.configure(connection=connection, **OPTIONS)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


warn_about_pipeline_file()
if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()

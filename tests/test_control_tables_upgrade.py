"""A deployment of the earlier layout (one quarantine and one schema-drift table shared by
every table's procedure) upgrades through a revision to one of each per table, with the
shared names kept as views, and keeps every row; the downgrade brings the shared tables back.
"""

from __future__ import annotations

import re

from sync.config import load_pipeline
from sync.schema.revisions import alembic_config, deploy, write_revision
from sync.sql.dialect import dialect_for
from sync.sql.names import QUARANTINE, SCHEMA_DRIFT, table_names
from sync.sql.objects import SHARED_VIEWS, control_table_sql
from tests.test_migrations import ORIGIN, project  # noqa: F401 (a fixture)

PER_TABLE = r"'table cdc\.\w+__(quarantine|drift)': '[0-9a-f]{16}',?\s*"
VIEWS = r"'view cdc\.(sync_quarantine|sync_schema_drift)': '[0-9a-f]{16}',?\s*"


def as_earlier_revision(project) -> None:  # noqa: F811
    """The head revision as an earlier version wrote it: the shared tables recorded, no
    per-table ones, no views."""
    (head,) = (project / "migrations" / "versions").glob("*.py")
    text = re.sub(PER_TABLE, "", re.sub(VIEWS, "", head.read_text()))
    text = text.replace(
        "'fingerprints': {'postgres': {",
        f"'fingerprints': {{'postgres': {{'table cdc.{QUARANTINE}': '{'0' * 16}', 'table cdc.{SCHEMA_DRIFT}': '{'0' * 16}', ",
    )
    text = text.replace(
        "'redshift': {", f"'redshift': {{'table cdc.{QUARANTINE}': '{'0' * 16}', 'table cdc.{SCHEMA_DRIFT}': '{'0' * 16}', "
    )
    head.write_text(text.replace("    r.replace_views()\n", "").replace("    r.drop_views()\n", ""))


def as_earlier_layout(wh, pipeline) -> None:
    """The database as an earlier version deployed it: shared tables, no per-table ones."""
    d = dialect_for("postgres", "cdc")
    for view, attr, cols in SHARED_VIEWS:
        wh.execute(f'DROP VIEW IF EXISTS cdc."{view}"')
        for table in pipeline.tables:
            wh.execute(f'DROP TABLE cdc."{getattr(table_names(pipeline, table), attr)}"')
        wh.execute(control_table_sql(d, "cdc", view, cols))


def test_the_shared_quarantine_and_drift_tables_become_per_table_tables_and_views(project, database_dsn, wh):  # noqa: F811
    pipeline = load_pipeline(project / "pipeline.toml")[0]
    cfg = alembic_config(None, database_dsn)
    as_earlier_revision(project)
    deploy(cfg, pipeline)
    as_earlier_layout(wh, pipeline)
    wh.execute(
        "INSERT INTO cdc.sync_quarantine (table_name, kafka_partition, kafka_offset, reason) "
        "VALUES ('customer', 0, 7, 'bad'), ('orders', 1, 9, 'worse'), ('customer', 0, 8, 'bad')"
    )
    wh.execute("INSERT INTO cdc.sync_schema_drift VALUES ('orders', now(), 'unknown', 'NOTE', 3)")

    written = write_revision(cfg, pipeline, ORIGIN, "per-table control tables")
    assert written is not None
    text = written.path.read_text()
    assert "r.separate_control_tables()" in text and "r.join_control_tables()" in text
    assert not [w for w in written.plan.warnings if "quarantine" in w or "drift" in w], written.plan.warnings
    deploy(cfg, pipeline)

    assert wh.query("SELECT kafka_offset FROM cdc.customer__quarantine ORDER BY 1") == [(7,), (8,)]
    assert wh.query("SELECT kafka_offset, reason FROM cdc.orders__quarantine") == [(9, "worse")]
    assert wh.query("SELECT table_name, field FROM cdc.orders__drift") == [("orders", "NOTE")]
    assert wh.scalar("SELECT relkind::text FROM pg_class WHERE relname = 'sync_quarantine'") == "v"
    assert wh.scalar("SELECT COUNT(*) FROM cdc.sync_quarantine") == 3
    assert write_revision(cfg, pipeline, ORIGIN, "nothing") is None

    from alembic import command

    command.downgrade(cfg, "-1")
    assert wh.scalar("SELECT relkind::text FROM pg_class WHERE relname = 'sync_quarantine'") == "r"
    assert wh.scalar("SELECT COUNT(*) FROM cdc.sync_quarantine") == 3
    assert wh.scalar("SELECT COUNT(*) FROM pg_class WHERE relname = 'customer__quarantine'") == 0

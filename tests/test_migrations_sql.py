"""`alembic upgrade head --sql` for Redshift: the script a DBA reviews, checked in as a
golden file. Regenerate it after a deliberate change with

    UPDATE_GOLDEN=1 pytest tests/test_migrations_sql.py
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
import sqlglot
from alembic import command
from sqlglot import exp

from sync.schema.revisions import alembic_config, write_revision
from sync.sql.objects import pipeline_objects
from tests.helpers import REPO, make_pipeline

GOLDEN = REPO / "tests" / "golden" / "alembic_upgrade_redshift.sql"
REDSHIFT_URL = "redshift+redshift_connector://user:password@redshift.example.com:5439/dev"


def render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)  # no alembic.ini here: the package's migrations/ folder
    buf = io.StringIO()
    cfg = alembic_config(REPO / "migrations" / "versions", REDSHIFT_URL, output_buffer=buf)
    command.upgrade(cfg, "head", sql=True)
    return buf.getvalue()


def split_statements(script: str) -> list[str]:
    """Statements of a script, split on ';' outside quotes, dollar quotes and comments."""
    statements, start, i, n = [], 0, 0, len(script)
    while i < n:
        if script.startswith("--", i):
            i = script.find("\n", i) + 1 or n
        elif script[i] == "'":
            i = script.find("'", i + 1) + 1
            while script.startswith("'", i):  # a doubled quote inside the literal
                i = script.find("'", i + 1) + 1
        elif script.startswith("$$", i):
            i = script.index("$$", i + 2) + 2
        elif script[i] == ";":
            statements.append(script[start:i].strip())
            start = i = i + 1
        else:
            i += 1
    assert not script[start:].strip(), f"unterminated statement: {script[start:][:200]}"
    return statements


def test_offline_redshift_sql_matches_the_golden_file(tmp_path, monkeypatch):
    script = render(tmp_path, monkeypatch)
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(script)
    assert script == GOLDEN.read_text(), "regenerate with UPDATE_GOLDEN=1 and review the diff"


def test_offline_redshift_sql_parses_statement_by_statement():
    script = GOLDEN.read_text()
    assert "RETURNING" not in script.upper()
    statements = split_statements(script)
    kinds = []
    for sql in statements:
        tree = sqlglot.parse_one(sql, read="redshift")
        uncommented = "\n".join(line for line in sql.splitlines() if not line.startswith("--")).strip()
        if isinstance(tree, exp.Command):
            assert uncommented.startswith("CREATE EXTERNAL SCHEMA"), sql
        kinds.append(type(tree).__name__)
    # the whole upgrade is one transaction per revision, alembic's bookkeeping included
    assert kinds[0] == "Transaction" and kinds[-1] == "Commit"
    # per table: the sync (bounded), its scheduled call, and record isolation
    assert sum("CREATE OR REPLACE PROCEDURE" in s for s in statements) == 6
    assert sum("CREATE MATERIALIZED VIEW" in s for s in statements) == 2
    assert any(s.startswith("INSERT INTO alembic_version") for s in statements)


def test_offline_script_carries_the_generator_sql_unchanged(example_pipeline):
    """No '%' doubled, no ':name' taken for a bind parameter: every object's statement is
    exactly what the generator renders for Redshift."""
    statements = {
        "\n".join(line for line in s.splitlines() if not line.startswith("-- Running")).strip()
        for s in split_statements(GOLDEN.read_text())
    }
    for obj in pipeline_objects(example_pipeline, "redshift", "examples/salesdb/pipeline.toml"):
        assert obj.sql.strip().removesuffix(";") in statements, obj.name


def test_statement_splitter_respects_quotes_and_bodies():
    script = "SELECT 'a;b' AS x;\n-- c; d\nCREATE PROCEDURE p() AS $$ BEGIN x := 'it''s;'; END; $$ LANGUAGE plpgsql;\n"
    assert split_statements(script) == [
        "SELECT 'a;b' AS x",
        "-- c; d\nCREATE PROCEDURE p() AS $$ BEGIN x := 'it''s;'; END; $$ LANGUAGE plpgsql",
    ]


LINES = """
[[tables]]
name = "lines"
topic = "db.public.lines"
primary_key = ["order_id", "line_no"]
distkey = "order_id"
columns = [
  { name = "order_id", type = "bigint" },
  { name = "line_no", type = "integer" },
  { name = "sku", type = "varchar(20)" },
  { name = "note", type = "varchar(100)" },
]
"""
ITEMS = LINES.replace('"lines"', '"items"').replace("db.public.lines", "db.public.items")


def test_every_operation_renders_redshift_sql_that_parses(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    buf = io.StringIO()
    cfg = alembic_config(tmp_path / "versions", REDSHIFT_URL, output_buffer=buf)
    write_revision(cfg, make_pipeline(LINES + ITEMS), "pipeline.toml", "initial")
    changed = (
        LINES.replace('distkey = "order_id"', 'distkey = "line_no"\nsortkey = ["sku"]')
        .replace('"varchar(20)"', '"varchar(40)"')
        .replace('{ name = "note", type = "varchar(100)" },', '{ name = "qty", type = "decimal(10,2)" },')
    )
    written = write_revision(cfg, make_pipeline(changed), "pipeline.toml", "every kind of change")
    assert written is not None and written.plan.upgrade == [
        "r.drop_views()",
        'r.drop_table("items")',
        "r.replace_views()",
        'r.add_column("lines", "qty")',
        'r.widen_column("lines", "sku")',
        'r.alter_sortkey("lines")',
        'r.drop_column("lines", "note")',
        'r.alter_distkey("lines")',
        'r.replace_procedure("lines")',
    ]
    command.upgrade(cfg, "head", sql=True)
    command.downgrade(cfg, "head:base", sql=True)
    script = buf.getvalue()
    for expected in (
        'ALTER TABLE "cdc"."lines__stage" ADD COLUMN "qty" decimal(10,2);',
        'ALTER TABLE "cdc"."lines" ALTER COLUMN "sku" TYPE varchar(40);',
        'ALTER TABLE "cdc"."lines" ALTER SORTKEY ("sku");',
        'ALTER TABLE "cdc"."lines__deleted" ALTER DISTKEY "line_no";',
        # r_DROP_PROCEDURE: `DROP PROCEDURE sp_name ( [ [ argname ] [ argmode ] argtype [, ...] ] )`,
        # no IF EXISTS.
        'DROP PROCEDURE "cdc"."incremental_sync_items"();',
        'DROP MATERIALIZED VIEW IF EXISTS "cdc"."items__stream";',
        'DROP SCHEMA IF EXISTS "cdc";',
    ):
        assert expected in script
    for sql in split_statements(script):
        tree = sqlglot.parse_one(sql, read="redshift")
        uncommented = "\n".join(line for line in sql.splitlines() if not line.startswith("--")).strip()
        assert not isinstance(tree, exp.Command) or uncommented.startswith("CREATE EXTERNAL SCHEMA"), sql

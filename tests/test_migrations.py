"""Schema revisions on a real PostgreSQL: deploy as `alembic upgrade head`, revisions for a
pipeline file's changes, downgrades, refusals, and the alembic CLI itself.

Every test works in a temporary project folder (a copy of the example pipeline and of
its revisions); nothing is written into the repository.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command
from typer.testing import CliRunner

from sync.cli.app import app
from sync.config import Pipeline, load_pipeline
from sync.debezium.events import ChangeStream, MySqlSource
from sync.local.stream import ingest_file
from sync.operations.runner import sync
from sync.schema.plan import RevisionRefused
from sync.schema.revisions import alembic_config, deploy, write_revision
from sync.sql.objects import pipeline_objects
from sync.warehouse import Warehouse, WarehouseError
from tests.helpers import EXAMPLES, REPO, ingest, sync_one

ORIGIN = "examples/salesdb/pipeline.toml"  # what the example revisions record
EVENTS = EXAMPLES / "salesdb" / "events"

CATALOG = """
SELECT n.nspname, c.relname, c.relkind::text, c.xmin::text FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {user}
UNION ALL
SELECT n.nspname, p.proname, p.prokind::text, p.xmin::text FROM pg_proc p
  JOIN pg_namespace n ON n.oid = p.pronamespace WHERE {user}
UNION ALL
SELECT n.nspname, '', 'schema', n.xmin::text FROM pg_namespace n WHERE {user} AND n.nspname <> 'public'
ORDER BY 1, 2, 3
""".format(user="n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_%'")


def catalog(wh: Warehouse) -> list[tuple]:
    """Every user object with the transaction that last wrote its catalog row."""
    return wh.query(CATALOG)


def names(rows: list[tuple]) -> set[tuple]:
    return {r[:3] for r in rows}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder: the example pipeline file and a copy of the example revisions."""
    shutil.copytree(
        REPO / "migrations" / "versions", tmp_path / "migrations" / "versions", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(EXAMPLES / "salesdb" / "pipeline.toml", tmp_path / "pipeline.toml")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def edit_pipeline(project: Path, old: str, new: str) -> Pipeline:
    path = project / "pipeline.toml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return load_pipeline(path)[0]


@pytest.fixture
def upgraded(project: Path, database_dsn: str, example_pipeline: Pipeline):
    """The alembic configuration of the project, its database upgraded to the example's head."""
    cfg = alembic_config(None, database_dsn)
    deploy(cfg, example_pipeline)
    return cfg


def revise(cfg, project: Path, old: str, new: str, message: str):
    """Edit the pipeline file and write the revision for it."""
    pipeline = edit_pipeline(project, old, new)
    written = write_revision(cfg, pipeline, ORIGIN, message)
    assert written is not None
    return pipeline, written


def procedure_body(wh: Warehouse, name: str) -> str:
    return wh.scalar("SELECT prosrc FROM pg_proc WHERE proname = %s AND pronargs = 1", (name,))


def generated_body(pipeline: Pipeline, name: str) -> str:
    (obj,) = [o for o in pipeline_objects(pipeline, "postgres", ORIGIN) if o.name == name and o.arguments == "bigint"]
    return obj.sql.split("AS $$", 1)[1].rsplit("$$ LANGUAGE", 1)[0]


def columns(wh: Warehouse, table: str) -> dict[str, int | None]:
    return dict(
        wh.query(
            "SELECT column_name, character_maximum_length FROM information_schema.columns "
            "WHERE table_schema = 'cdc' AND table_name = %s",
            (table,),
        )
    )


def test_upgrade_to_head_twice_then_back_to_base_leaves_nothing(project, database_dsn, wh, example_pipeline):
    cfg = alembic_config(None, database_dsn)
    assert catalog(wh) == []

    first = deploy(cfg, example_pipeline)
    assert [a.split()[0] for a in first.applied] == [first.head]
    deployed = catalog(wh)
    assert {
        ("cdc", "customer", "r"),
        ("cdc", "orders__stream", "r"),
        ("cdc", "incremental_sync_orders", "p"),
        ("cdc", "sync_run_log", "r"),
        ("cdc", "sync_to_text", "f"),
        ("cdc", "", "schema"),
    } <= names(deployed)
    assert procedure_body(wh, "incremental_sync_customer") == generated_body(example_pipeline, "incremental_sync_customer")

    second = deploy(cfg, example_pipeline)
    assert second.applied == []
    assert catalog(wh) == deployed  # not one catalog row rewritten

    command.downgrade(cfg, "base")
    assert names(catalog(wh)) == {("public", "alembic_version", "r")}
    assert wh.scalar("SELECT COUNT(*) FROM alembic_version") == 0


def ingest_rows(wh: Warehouse, pipeline: Pipeline, rows: list[dict]) -> None:
    # Binlog positions after every example event, so the rows are newer than the target's.
    stream = ChangeStream(["CUST_ID"], MySqlSource(table="CUSTOMER", file_number=9))
    ingest(wh, pipeline, "customer", [stream.insert(r) for r in rows])
    sync_one(wh, pipeline, "customer")


def test_added_column_keeps_rows_and_fills_from_new_events(project, upgraded, wh, example_pipeline):
    cfg = upgraded
    ingest_file(wh, example_pipeline, "customer", EVENTS / "customer-1.jsonl")
    sync(wh, example_pipeline, ["customer"])
    before = wh.query('SELECT customer_id, name, mktsegment FROM cdc."customer" ORDER BY 1')
    assert len(before) == 5

    pipeline, written = revise(
        cfg,
        project,
        '{ name = "MKTSEGMENT", type = "varchar(64)" },',
        '{ name = "MKTSEGMENT", type = "varchar(64)" },\n  { name = "EMAIL", type = "varchar(128)" },',
        "customer email",
    )
    assert written.path.parent == project / "migrations" / "versions"
    assert written.plan.upgrade == ['r.add_column("customer", "email")', 'r.replace_procedure("customer")']
    assert written.plan.downgrade == ['r.drop_column("customer", "email")', 'r.replace_procedure("customer")']
    with pytest.raises(ValueError, match="differs from the last revision"):
        deploy(cfg, example_pipeline)  # the old file no longer matches the head

    assert [a.split()[0] for a in deploy(cfg, pipeline).applied] == [written.revision]
    assert "email" in columns(wh, "customer") and "email" in columns(wh, "customer__stage")
    assert wh.query('SELECT customer_id, name, mktsegment FROM cdc."customer" ORDER BY 1') == before
    assert wh.scalar('SELECT COUNT(*) FROM cdc."customer" WHERE email IS NOT NULL') == 0
    assert procedure_body(wh, "incremental_sync_customer") == generated_body(pipeline, "incremental_sync_customer")

    ingest_rows(
        wh,
        pipeline,
        [
            {"CUST_ID": "C001", "NAME": "Acme Corp", "MKTSEGMENT": "BUILDING", "EMAIL": "ops@acme.example"},
            {"CUST_ID": "C900", "NAME": "Wayne", "MKTSEGMENT": "MACHINERY", "EMAIL": "bruce@wayne.example"},
        ],
    )
    assert wh.query('SELECT customer_id, email FROM cdc."customer" WHERE email IS NOT NULL ORDER BY 1') == [
        ("C001", "ops@acme.example"),
        ("C900", "bruce@wayne.example"),
    ]
    assert wh.scalar('SELECT COUNT(*) FROM cdc."customer"') == 6

    command.downgrade(cfg, "-1")
    assert "email" not in columns(wh, "customer") and "email" not in columns(wh, "customer__stage")
    assert procedure_body(wh, "incremental_sync_customer") == generated_body(example_pipeline, "incremental_sync_customer")
    sync_one(wh, example_pipeline, "customer")
    assert wh.scalar('SELECT name FROM cdc."customer" WHERE customer_id = %s', ("C900",)) == "Wayne"


def test_widened_varchar_takes_longer_values(project, upgraded, wh):
    cfg = upgraded
    pipeline, written = revise(
        cfg,
        project,
        '{ name = "NAME", type = "varchar(256)" }',
        '{ name = "NAME", type = "varchar(1024)" }',
        "longer customer names",
    )
    assert written.plan.upgrade == ['r.widen_column("customer", "name")', 'r.replace_procedure("customer")']
    assert written.plan.downgrade[0].startswith("# customer.name stays varchar(1024)")

    deploy(cfg, pipeline)
    assert columns(wh, "customer")["name"] == 1024 and columns(wh, "customer__stage")["name"] == 1024
    ingest_rows(wh, pipeline, [{"CUST_ID": "C777", "NAME": "x" * 900, "MKTSEGMENT": "BUILDING"}])
    assert wh.scalar('SELECT LENGTH(name) FROM cdc."customer" WHERE customer_id = %s', ("C777",)) == 900

    # On Redshift the ALTER runs outside the revision's transaction block.
    out = offline_sql(cfg, f"{first_revision(cfg)}:{written.revision}")
    assert 'COMMIT;\n\nALTER TABLE "cdc"."customer" ALTER COLUMN "name" TYPE varchar(1024);\n\n' in out
    assert 'ALTER TABLE "cdc"."customer__stage" ALTER COLUMN "name" TYPE varchar(1024);\n\nBEGIN;' in out


REDSHIFT_URL = "redshift+redshift_connector://user:password@redshift.example.com:5439/dev"


def first_revision(cfg) -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(cfg).get_base()


def offline_sql(cfg, target: str) -> str:
    import io

    buf = io.StringIO()
    cfg.output_buffer = buf
    cfg.attributes["dsn"] = REDSHIFT_URL
    command.upgrade(cfg, target, sql=True)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            '{ name = "MKTSEGMENT", type = "varchar(64)" }',
            '{ name = "MKTSEGMENT", type = "integer" }',
            r"column mktsegment: varchar\(64\) -> integer: A revision changes a type only to one that holds every value",
        ),
        (
            '{ name = "NAME", type = "varchar(256)" }',
            '{ name = "NAME", type = "varchar(100)" }',
            r"column name: varchar\(256\) -> varchar\(100\)",
        ),
        (
            'primary_key = ["CUST_ID"]',
            'primary_key = ["CUST_ID", "NAME"]',
            r"primary key \(customer_id varchar\(64\)\) -> \(customer_id varchar\(64\), name varchar\(256\)\)",
        ),
        ('topic = "salesdb.salesdb.CUSTOMER"', 'topic = "salesdb.v2.CUSTOMER"', r"watermark holds offsets of the old topic"),
    ],
)
def test_changes_redshift_cannot_make_in_place_are_refused(project, old, new, expected):
    cfg = alembic_config(None, None)
    pipeline = edit_pipeline(project, old, new)
    before = sorted(os.listdir(project / "migrations" / "versions"))
    with pytest.raises(RevisionRefused, match=expected) as refused:
        write_revision(cfg, pipeline, ORIGIN, "refused")
    message = str(refused.value)
    assert ("Safe path: add a " in message and "backfill" in message) or "Safe path: list the field a second time" in message
    assert sorted(os.listdir(project / "migrations" / "versions")) == before


def test_sort_and_dist_keys_are_altered_on_redshift_only(project, upgraded, wh):
    cfg = upgraded
    pipeline, written = revise(
        cfg, project, 'distkey = "order_id"', 'distkey = "order_id"\nsortkey = ["PLACED_AT", "order_id"]', "orders sorted by time"
    )
    assert written.plan.upgrade == ['r.alter_sortkey("orders")', 'r.replace_procedure("orders")']
    assert written.plan.downgrade == ['r.alter_sortkey("orders")', 'r.replace_procedure("orders")']

    deploy(cfg, pipeline)  # PostgreSQL has no sort key: only the procedure changes
    assert procedure_body(wh, "incremental_sync_orders") == generated_body(pipeline, "incremental_sync_orders")
    out = offline_sql(cfg, f"{first_revision(cfg)}:{written.revision}")
    assert 'COMMIT;\n\nALTER TABLE "cdc"."orders" ALTER SORTKEY ("placed_at", "order_id");\n\nBEGIN;' in out


def test_new_table_comes_with_all_its_objects_and_goes_on_downgrade(project, upgraded, wh):
    cfg = upgraded
    pipeline, written = revise(
        cfg,
        project,
        '[[tables]]\nname = "orders"',
        (
            '[[tables]]\nname = "supplier"\ntopic = "salesdb.salesdb.SUPPLIER"\nprimary_key = ["SUPP_ID"]\n'
            'columns = [{ name = "SUPP_ID", type = "integer", target = "supplier_id" }, { name = "NAME", type = "varchar(64)" }]\n\n'
            '[[tables]]\nname = "orders"'
        ),
        "supplier table",
    )
    assert written.plan.upgrade == ["r.drop_views()", 'r.create_table("supplier")', "r.replace_views()"]
    deploy(cfg, pipeline)
    made = {n for (_, n, _) in names(catalog(wh))}
    assert {
        "supplier",
        "supplier__stream",
        "supplier__stage",
        "supplier__watermark",
        "supplier__deleted",
        "supplier__quarantine",
        "supplier__drift",
        "incremental_sync_supplier",
    } <= made
    assert "supplier__quarantine" in wh.scalar("SELECT pg_get_viewdef('cdc.sync_quarantine'::regclass)")
    command.downgrade(cfg, "-1")
    assert not any("supplier" in n for (_, n, _) in names(catalog(wh)))
    assert wh.relation_exists("cdc", "customer")


def test_revision_and_deploy_commands(project, database_dsn):
    runner = CliRunner()
    same = runner.invoke(app, ["revision", "-m", "nothing"])
    assert same.exit_code == 0 and "nothing to do" in same.output

    edit_pipeline(project, '{ name = "NAME", type = "varchar(256)" }', '{ name = "NAME", type = "date" }')
    refused = runner.invoke(app, ["revision", "-m", "date names"])
    assert refused.exit_code == 1, refused.output
    assert "new target name and the new type" in refused.output

    (project / "pipeline.toml").write_text((EXAMPLES / "salesdb" / "pipeline.toml").read_text())
    own = project / "own-versions"
    made = runner.invoke(app, ["revision", "-m", "initial", "--versions", str(own)])
    assert made.exit_code == 0, made.output
    assert "r.create_pipeline()" in made.output and len(list(own.glob("*.py"))) == 1

    first = runner.invoke(app, ["deploy", "--dsn", database_dsn, "--versions", str(own)])
    again = runner.invoke(app, ["deploy", "--dsn", database_dsn, "--versions", str(own)])
    assert first.exit_code == 0 and "applied" in first.output, first.output
    assert again.exit_code == 0 and "nothing to do" in again.output, again.output


def test_alembic_command_line(database_dsn, tmp_path):
    """The alembic CLI from the repository root, as a DBA would run it."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("REDSHIFT_SYNC_DSN", None)

    def alembic(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "alembic", "-x", f"dsn={database_dsn}", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout + done.stderr

    assert "(head)" in alembic("history")
    changed = tmp_path / "pipeline.toml"
    changed.write_text((EXAMPLES / "salesdb" / "pipeline.toml").read_text().replace("varchar(256)", "varchar(300)"))
    assert "differs from the state of revision" in alembic("-x", f"config={changed}", "upgrade", "head")
    assert "(head)" in alembic("current")
    alembic("downgrade", "base")
    assert "(head)" not in alembic("current")


HAND_WRITTEN = '''"""a hand-written data fix"""
from alembic import op

revision = "0da7afe0f1c5"
down_revision = "{parent}"
branch_labels = None
depends_on = None


def upgrade():
    op.execute('ALTER TABLE "cdc"."customer" ADD COLUMN "half" integer')
    op.execute("{second}")


def downgrade():
    op.execute('ALTER TABLE "cdc"."customer" DROP COLUMN "half"')
'''


def test_failing_revision_is_rolled_back_and_hand_written_revisions_fit_in(project, database_dsn, wh, example_pipeline):
    cfg = alembic_config(None, database_dsn)
    initial = deploy(cfg, example_pipeline).head
    script = project / "migrations" / "versions" / "0da7afe0f1c5_data_fix.py"
    script.write_text(HAND_WRITTEN.format(parent=initial, second="SELECT 1 / 0"))
    with pytest.raises(WarehouseError, match="rolled back.*division by zero"):
        deploy(cfg, example_pipeline)
    assert "half" not in columns(wh, "customer")
    assert wh.scalar("SELECT version_num FROM alembic_version") == initial

    script.write_text(HAND_WRITTEN.format(parent=initial, second="SELECT 1"))
    # a revision without STATE: the pipeline state is the nearest ancestor's
    pipeline = edit_pipeline(
        project, '{ name = "MKTSEGMENT", type = "varchar(64)" }', '{ name = "MKTSEGMENT", type = "varchar(80)" }'
    )
    written = write_revision(cfg, pipeline, ORIGIN, "wider segment")
    assert written is not None and 'r.widen_column("customer", "mktsegment")' in written.plan.upgrade
    assert "down_revision: Union[str, Sequence[str], None] = '0da7afe0f1c5'" in written.path.read_text()
    assert len(deploy(cfg, pipeline).applied) == 2
    assert columns(wh, "customer")["half"] is None and columns(wh, "customer")["mktsegment"] == 80
    command.downgrade(cfg, "base")
    assert names(catalog(wh)) == {("public", "alembic_version", "r")}


def test_rotated_credentials_recreate_the_external_schema_on_redshift(project, upgraded, wh):
    pipeline, written = revise(upgraded, project, 'role/redshift-streaming"', 'role/redshift-streaming-2"', "new role")
    before = catalog(wh)
    deploy(upgraded, pipeline)  # PostgreSQL has no external schema: nothing to do but record it
    assert catalog(wh) == before
    out = offline_sql(upgraded, f"{first_revision(upgraded)}:{written.revision}")
    steps = [
        'DROP MATERIALIZED VIEW IF EXISTS "cdc"."customer__stream";',
        'DROP MATERIALIZED VIEW IF EXISTS "cdc"."orders__stream";',
        'DROP SCHEMA IF EXISTS "msk_cdc";',
        "IAM_ROLE 'arn:aws:iam::123456789012:role/redshift-streaming-2'",
        'CREATE MATERIALIZED VIEW "cdc"."customer__stream"',
        'CREATE MATERIALIZED VIEW "cdc"."orders__stream"',
    ]
    positions = [out.index(step) for step in steps]
    assert positions == sorted(positions)


def test_a_table_the_generator_renders_differently_gets_a_revision_that_records_it(project, database_dsn):
    """Deploy warns about the drift; `revision` must then write a revision (with the
    warning) that records the new rendering, or the warning could never go away."""
    (head,) = (project / "migrations" / "versions").glob("*.py")
    text = head.read_text()
    # The target holds the users' data: its new rendering is left to a person (a warning);
    # the stage, empty between runs, is re-created by the revision.
    for label in ("customer", "customer__stage"):
        recorded = re.search(rf"'table cdc\.{label}': '([0-9a-f]{{16}})'", text).group(1)
        text = text.replace(recorded, "0" * 16)
    head.write_text(text)
    pipeline = load_pipeline(project / "pipeline.toml")[0]
    cfg = alembic_config(None, database_dsn)
    assert any("table cdc.customer " in w for w in deploy(cfg, pipeline).warnings)

    written = write_revision(cfg, pipeline, ORIGIN, "regenerate")
    assert written is not None
    assert any("table cdc.customer (postgres)" in w for w in written.plan.warnings)
    assert 'r.recreate_stage("customer")' in written.plan.upgrade
    assert deploy(cfg, pipeline).warnings == []
    assert write_revision(cfg, pipeline, ORIGIN, "nothing") is None


def test_an_index_the_generator_renders_differently_is_rebuilt_and_the_stream_keeps_its_records(project, database_dsn, wh):
    """On PostgreSQL the stream is a table of records (what `ingest` wrote): an index of it
    (or of the history) rendered differently is dropped and built anew on its own. The
    revision once re-created the stream for it, which dropped every record it held."""
    (head,) = (project / "migrations" / "versions").glob("*.py")
    text = head.read_text()
    recorded = re.search(r"'index cdc\.customer__s_pos': '([0-9a-f]{16})'", text).group(1)
    head.write_text(text.replace(recorded, "0" * 16))
    pipeline = load_pipeline(project / "pipeline.toml")[0]
    cfg = alembic_config(None, database_dsn)
    deploy(cfg, pipeline)
    ingest_file(wh, pipeline, "customer", EVENTS / "customer-1.jsonl")
    held = wh.scalar('SELECT COUNT(*) FROM cdc."customer__stream"')
    assert held > 0
    wh.execute("DROP INDEX cdc.customer__s_pos")  # the old rendering is gone; the new one must be built

    written = write_revision(cfg, pipeline, ORIGIN, "regenerate")
    assert written is not None
    assert 'r.recreate_index("customer", "postgres", "customer__s_pos")' in written.plan.upgrade
    assert not [line for line in written.plan.upgrade if "recreate_stream" in line]
    deploy(cfg, pipeline)
    assert wh.scalar('SELECT COUNT(*) FROM cdc."customer__stream"') == held
    assert wh.scalar("SELECT COUNT(*) FROM pg_indexes WHERE schemaname = 'cdc' AND indexname = 'customer__s_pos'") == 1
    sync_one(wh, pipeline, "customer")
    assert wh.scalar('SELECT COUNT(*) FROM cdc."customer"') == 5

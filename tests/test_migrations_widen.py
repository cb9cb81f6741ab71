"""Type changes as revisions: a widening keeps every stored value and lets later, larger
values in; any other change is refused with a path that can be followed to the end.

What the engines can do in place (docs/operations.md, "Changing a column's type"):
PostgreSQL's ALTER COLUMN TYPE converts any of these; Redshift's ALTER TABLE "ALTER COLUMN
column_name TYPE new_data_type: A clause that changes the size of a column defined as a
VARCHAR data type", not "within a transaction block" (r_ALTER_TABLE), so the other
widenings copy into a new column there (ADD COLUMN, UPDATE, DROP COLUMN, RENAME COLUMN)."""

from __future__ import annotations

import io
import re
from decimal import Decimal
from pathlib import Path

import pytest
import sqlglot
from alembic import command

from sync.config import load_pipeline
from sync.debezium.events import ChangeStream, PostgresSource
from sync.operations.quarantine import Selection, replay
from sync.schema.plan import RevisionRefused
from sync.schema.revisions import alembic_config, deploy, write_revision
from sync.sql.dialect import PostgresDialect
from sync.warehouse import Warehouse
from tests.helpers import ingest, pipeline_toml, sync_one
from tests.test_migrations_sql import split_statements

REDSHIFT_URL = "redshift+redshift_connector://user:password@redshift.example.com:5439/dev"
BEFORE = """
[[tables]]
name = "counter"
topic = "db.public.counter"
primary_key = ["id"]
order_by = "postgres-lsn"
columns = [
  { name = "id", type = "integer" },
  { name = "n", type = "integer" },
  { name = "code", type = "smallint" },
  { name = "amount", type = "decimal(10,2)" },
  { name = "ratio", type = "real" },
  { name = "label", type = "varchar(8)" },
]
"""
WIDER = (
    ('{ name = "n", type = "integer" }', '{ name = "n", type = "bigint" }'),
    ('{ name = "code", type = "smallint" }', '{ name = "code", type = "integer" }'),
    ('{ name = "amount", type = "decimal(10,2)" }', '{ name = "amount", type = "decimal(14,2)" }'),
    ('{ name = "ratio", type = "real" }', '{ name = "ratio", type = "double precision" }'),
    ('{ name = "label", type = "varchar(8)" }', '{ name = "label", type = "varchar(32)" }'),
)
STORED = 'SELECT id, n, code, amount, ratio::double precision, label FROM cdc."counter" ORDER BY id'


def _write(project: Path, text: str):
    path = project / "pipeline.toml"
    path.write_text(pipeline_toml(text))
    return load_pipeline(path)[0]


def _widened() -> str:
    text = BEFORE
    for old, new in WIDER:
        text = text.replace(old, new)
    return text


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _types(wh: Warehouse, table: str) -> dict[str, str]:
    return dict(
        wh.query(
            "SELECT column_name, format_type(a.atttypid, a.atttypmod) FROM information_schema.columns c "
            "JOIN pg_attribute a ON a.attrelid = ('cdc.' || quote_ident(c.table_name))::regclass AND a.attname = c.column_name "
            "WHERE c.table_schema = 'cdc' AND c.table_name = %s",
            (table,),
        )
    )


@pytest.mark.parametrize("in_place", [True, False], ids=["in-place", "copied"])
def test_integer_to_bigint_widening_revision(project, database_dsn, wh, monkeypatch, in_place):
    """integer -> bigint (and smallint -> integer, decimal(10,2) -> decimal(14,2), real ->
    double precision, varchar(8) -> varchar(32)) is a revision: the stored values are kept
    exactly, and later events with values only the wider type holds are applied. `copied`
    runs the statements Redshift gets (a new column, UPDATE, DROP, RENAME) on PostgreSQL."""
    if not in_place:
        monkeypatch.setattr(PostgresDialect, "in_place_widenings", ("varchar",))
    cfg = alembic_config(None, database_dsn)
    pipeline = _write(project, BEFORE)
    write_revision(cfg, pipeline, "pipeline.toml", "initial")
    deploy(cfg, pipeline)
    cs = ChangeStream(["id"], PostgresSource(table="counter"))
    row = {"id": 1, "n": 2**31 - 1, "code": -(2**15), "amount": "12345678.91", "ratio": 3.4028235e38, "label": "é" * 4}
    ingest(wh, pipeline, "counter", [cs.insert(row), cs.insert({**row, "id": 2, "n": 2**40})])
    assert sync_one(wh, pipeline, "counter").quarantined == 1  # 2**40 does not fit an integer
    before = wh.query(STORED)

    wider = _write(project, _widened())
    written = write_revision(cfg, wider, "pipeline.toml", "wider")
    assert written is not None
    assert written.plan.upgrade == [
        *(f'r.widen_column("counter", "{c}")' for c in ("n", "code", "amount", "ratio", "label")),
        'r.replace_procedure("counter")',
    ]
    deploy(cfg, wider)
    assert wh.query(STORED) == before
    # The record quarantined because 2**40 did not fit is replayed into the wider column.
    assert replay(wh, wider, Selection("counter")).replayed == 1
    assert wh.scalar('SELECT n FROM cdc."counter" WHERE id = 2') == 2**40
    for relation in ("counter", "counter__stage"):
        assert {k: v for k, v in _types(wh, relation).items() if k in row} == {
            "id": "integer",
            "n": "bigint",
            "code": "integer",
            "amount": "numeric(14,2)",
            "ratio": "double precision",
            "label": "character varying(32)",
        }
    big = {"id": 3, "n": 2**62, "code": 2**31 - 1, "amount": "999999999999.99", "ratio": 1.5e300, "label": "x" * 32}
    ingest(wh, wider, "counter", [cs.insert(big)])
    assert sync_one(wh, wider, "counter").upserted == 1
    assert wh.query(STORED)[2:] == [(3, 2**62, 2**31 - 1, Decimal("999999999999.99"), 1.5e300, "x" * 32)]


def test_redshift_widens_varchar_in_place_and_copies_the_rest(project):
    """The `--sql` script a DBA runs on Redshift: VARCHAR altered outside a transaction
    block, every other widening copied inside the revision's transaction."""
    buf = io.StringIO()
    cfg = alembic_config(None, REDSHIFT_URL, output_buffer=buf)
    first = write_revision(cfg, _write(project, BEFORE), "pipeline.toml", "initial")
    written = write_revision(cfg, _write(project, _widened()), "pipeline.toml", "wider")
    assert first is not None and written is not None
    command.upgrade(cfg, f"{first.revision}:{written.revision}", sql=True)
    script = buf.getvalue()
    assert 'COMMIT;\n\nALTER TABLE "cdc"."counter" ALTER COLUMN "label" TYPE varchar(32);' in script
    assert re.findall(r"ALTER COLUMN \"(\w+)\" TYPE", script) == ["label", "label"]
    for relation in ("counter", "counter__stage"):
        table = f'"cdc"."{relation}"'
        assert (
            f'ALTER TABLE {table} ADD COLUMN "_widening_n" bigint;\n\nUPDATE {table} SET "_widening_n" = "n";\n\n'
            f'ALTER TABLE {table} DROP COLUMN "n";\n\nALTER TABLE {table} RENAME COLUMN "_widening_n" TO "n";'
        ) in script
    for sql in split_statements(script):
        sqlglot.parse_one(sql, read="redshift")


def test_type_change_advice_is_followable(project, database_dsn, wh):
    """A change that is no widening (integer -> varchar) is refused; the path the message
    gives is followed to the end: the field listed a second time under a new name and
    type, the older rows copied by the UPDATE it names, the old column removed."""
    cfg = alembic_config(None, database_dsn)
    pipeline = _write(project, BEFORE)
    write_revision(cfg, pipeline, "pipeline.toml", "initial")
    deploy(cfg, pipeline)
    cs = ChangeStream(["id"], PostgresSource(table="counter"))
    ingest(wh, pipeline, "counter", [cs.insert({"id": 1, "n": 7, "label": "a"})])
    sync_one(wh, pipeline, "counter")
    wh.execute('DELETE FROM cdc."counter__stream"')  # its record has left the stream's retention

    with pytest.raises(RevisionRefused) as refused:
        write_revision(
            cfg, _write(project, BEFORE.replace('"n", type = "integer"', '"n", type = "varchar(20)"')), "pipeline.toml", "text"
        )
    message = str(refused.value)
    listed = re.search(r"`(\{ name = \"n\", target = \"n_v2\", type = \"varchar\(20\)\" \})`", message)
    update = re.search(r"`(UPDATE <table> SET .*?)`", message)
    assert listed and update, message

    added = _write(
        project,
        BEFORE.replace('  { name = "n", type = "integer" },\n', f'  {{ name = "n", type = "integer" }},\n  {listed.group(1)},\n'),
    )
    assert write_revision(cfg, added, "pipeline.toml", "n as text") is not None
    deploy(cfg, added)
    ingest(wh, added, "counter", [{**cs.insert({"id": 2, "n": 8, "label": "b"}), "offset": 1}])
    sync_one(wh, added, "counter")
    assert wh.query('SELECT id, n, n_v2 FROM cdc."counter" ORDER BY id') == [(1, 7, None), (2, 8, "8")]
    wh.execute(update.group(1).replace("<table>", 'cdc."counter"'))

    removed = _write(project, BEFORE.replace('  { name = "n", type = "integer" },\n', f"  {listed.group(1)},\n"))
    written = write_revision(cfg, removed, "pipeline.toml", "drop the integer n")
    assert written is not None and 'r.drop_column("counter", "n")' in written.plan.upgrade
    deploy(cfg, removed)
    assert wh.query('SELECT id, n_v2 FROM cdc."counter" ORDER BY id') == [(1, "7"), (2, "8")]

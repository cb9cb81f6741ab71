"""History mode added to a deployed table by a schema revision (and removed by its
downgrade), on a real PostgreSQL; the Redshift DDL of the history table."""

from __future__ import annotations

from alembic import command

from sync.schema.revisions import deploy
from sync.sql.dialect import dialect_for
from sync.sql.objects import history_objects
from tests.helpers import make_pipeline
from tests.test_migrations import columns, generated_body, ingest_rows, procedure_body, project, revise, upgraded  # noqa: F401 (fixtures)

CUSTOMER = 'order_by = "mysql-binlog"           # kafka | postgres-lsn | mysql-binlog\n'


def test_revision_adds_history_to_an_existing_table(project, upgraded, wh, example_pipeline):
    pipeline, written = revise(upgraded, project, CUSTOMER, CUSTOMER + "history = true\n", "customer history")
    assert written.plan.upgrade == ['r.create_history("customer")', 'r.replace_procedure("customer")']
    assert written.plan.downgrade == ['r.drop_history("customer")', 'r.replace_procedure("customer")']
    assert [a.split()[0] for a in deploy(upgraded, pipeline).applied] == [written.revision]
    assert {"customer_id", "_valid_from", "_valid_to_pos", "_is_current"} <= set(columns(wh, "customer__history"))
    assert procedure_body(wh, "incremental_sync_customer") == generated_body(pipeline, "incremental_sync_customer")

    ingest_rows(wh, pipeline, [{"CUST_ID": "C900", "NAME": "Wayne", "MKTSEGMENT": "MACHINERY"}])
    assert wh.query('SELECT customer_id, name, _op, _is_current FROM cdc."customer__history"') == [("C900", "Wayne", "c", True)]

    command.downgrade(upgraded, "-1")
    assert not wh.relation_exists("cdc", "customer__history")
    assert procedure_body(wh, "incremental_sync_customer") == generated_body(example_pipeline, "incremental_sync_customer")


def test_redshift_history_table_is_distributed_and_sorted_by_key():
    pipeline = make_pipeline(
        '[[tables]]\nname = "acc"\ntopic = "t.acc"\nprimary_key = ["id"]\norder_by = "postgres-lsn"\n'
        'history = { table = "acc_versions", deletes = "tombstone" }\n'
        'columns = [{ name = "id", type = "integer" }, { name = "note", type = "varchar(64)" }]\n'
    )
    (table,) = history_objects(dialect_for("redshift", "cdc"), pipeline, pipeline.tables[0])
    sql = table.sql
    assert sql.startswith('CREATE TABLE IF NOT EXISTS "cdc"."acc_versions" (')
    assert sql.endswith('DISTSTYLE KEY DISTKEY ("id")\nCOMPOUND SORTKEY ("id", "_valid_from");')

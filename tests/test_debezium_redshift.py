"""The Redshift renderings of the Debezium example pipelines (their committed SQL is
checked by tests/test_generated_sql.py): statements that parse with sqlglot's Redshift
dialect, and mixed-case navigation without cluster settings. The example also runs on
PostgreSQL."""

from __future__ import annotations

import tomllib

import pytest
import sqlglot

from sync.config import parse_pipeline
from sync.debezium.events import ChangeStream, PostgresSource
from sync.operations.runner import deploy
from sync.sql.dialect import dialect_for
from sync.sql.objects import pipeline_objects
from sync.sql.procedure import TableSql, schema_drift_sql, stage_insert_sql, toast_sql
from tests.helpers import EXAMPLES, feed

EXAMPLE = "inventory_pg"


def example(name: str):
    return parse_pipeline(tomllib.loads((EXAMPLES / name / "pipeline.toml").read_text()))


@pytest.mark.parametrize("name", ["salesdb", EXAMPLE, "debezium_shapes", "relational_sources", "jdbc_pagila"])
def test_redshift_statements_parse(name):
    pipeline = example(name)
    for obj in pipeline_objects(pipeline, "redshift", "x"):
        if obj.kind not in ("procedure", "external_schema"):
            sqlglot.parse(obj.sql, read="redshift", error_level=sqlglot.ErrorLevel.RAISE)
    # The statements of the procedure body that carry the Debezium logic parse too.
    d = dialect_for("redshift", pipeline.schema)
    for table in pipeline.tables:
        ctx = TableSql(d, pipeline, table)
        statements = [stage_insert_sql(ctx), *schema_drift_sql(ctx).split(";\n")]
        if any(c.sql_type.family in ("varchar", "super") for c in table.value_columns):  # the statements between IF ... END IF
            lines = toast_sql(ctx).splitlines()
            statements += "\n".join(
                ln for ln in lines if not ln.strip().startswith(("IF ", "END IF", "--", "GET DIAGNOSTICS", "v_"))
            ).split(";\n")
        for sql in statements:
            if "UNPIVOT" not in sql:  # PartiQL object unpivoting is beyond sqlglot's grammar
                sqlglot.parse(sql, read="redshift", error_level=sqlglot.ErrorLevel.RAISE)


def test_mixed_case_fields_navigate_without_cluster_settings():
    pipeline = example("salesdb")
    (proc,) = [
        o
        for o in pipeline_objects(pipeline, "redshift", "x")
        if o.kind == "procedure" and o.table == "customer" and o.arguments == "bigint"
    ]
    body = proc.sql.split("BEGIN", 1)[1]
    setting = body.index("SET LOCAL enable_case_sensitive_identifier TO true;")
    assert setting < body.index('."CUST_ID"')  # set before the first navigation
    assert '."after"' in body and '"MKTSEGMENT"' in body


def test_example_pipeline_on_postgres(wh):
    pipeline = example(EXAMPLE)
    deploy(wh, pipeline, "test")
    cs = ChangeStream(["id"], PostgresSource(table="products"), with_schema=True)
    product = {
        "id": 1,
        "Sku": "A-1",
        "description": "long text",
        "price": "/+0peQ==",
        "weight": {"scale": 3, "value": "ALxfFg=="},
        "released": 19000,
        "updated_at": 1700000000654321,
        "published_at": "2023-03-23T12:00:00+05:30",
        "attributes": '{"color": "red"}',
        "in_stock": True,
    }
    feed(wh, pipeline, "products", [cs.insert(product), cs.insert({**product, "id": 2})])
    feed(
        wh,
        pipeline,
        "products",
        [
            cs.update(None, {**product, "price": "D9I=", "description": "__debezium_unavailable_value"}),
            cs.delete({"id": 2}),
        ],
    )
    got = wh.query("SELECT id, sku, description, price, weight, released::text, attributes FROM inventory.products")
    assert [tuple(map(str, r)) for r in got] == [
        ("1", "A-1", "long text", "40.50", "12345.110000", "2022-01-08", "{'color': 'red'}")
    ]

    moves = [
        {"move_id": 5, "product_id": 1, "quantity": 3, "moved_at": 0, "__op": "c", "__lsn": 10, "__deleted": "false"},
        {"move_id": 5, "product_id": 1, "quantity": None, "moved_at": None, "__op": "d", "__lsn": 11, "__deleted": "true"},
    ]
    # rewrite-mode delete: the before image (key only) plus __deleted "true", in the same
    # batch as the insert: the soft-deleted row keeps the inserted values
    feed(wh, pipeline, "stock_moves", [{"partition": 0, "key": {"move_id": 5}, "value": m} for m in moves])
    assert wh.query("SELECT move_id, quantity, moved_at::text, _deleted FROM inventory.stock_moves") == [
        (5, 3, "1970-01-01 00:00:00", True)
    ]
    assert wh.scalar("SELECT COUNT(*) FROM inventory.sync_quarantine") == 0

"""A column added after the events already carried it: the revision fills it for the rows
already stored, from the records that wrote them (the stream relation keeps the history),
in the same upgrade, on both dialects.

Debezium's change events carry the whole row image in `after` (`before` for a delete):
https://debezium.io/documentation/reference/stable/connectors/mysql.html#mysql-change-event-values
so a field the pipeline file did not list yet is in the records the stream holds.
"""

from __future__ import annotations

import os
import re

import sqlglot

from sync.debezium.events import ChangeStream, MySqlSource
from sync.operations.runner import status
from sync.schema.revisions import deploy
from sync.sql.objects import pipeline_objects
from tests.helpers import REPO, ingest, sync_one
from tests.test_migrations import EVENTS, REDSHIFT_URL, first_revision, offline_sql, project, revise, upgraded  # noqa: F401
from tests.test_migrations_sql import split_statements

GOLDEN = REPO / "tests" / "golden" / "add_column_redshift.sql"
ADD_DISCOUNT = (
    '{ name = "MKTSEGMENT", type = "varchar(64)" },',
    '{ name = "MKTSEGMENT", type = "varchar(64)" },\n  { name = "DISCOUNT_PCT", type = "decimal(5,2)" },',
)


def test_added_column_holds_the_values_events_carried_before(project, upgraded, wh, example_pipeline):  # noqa: F811
    """Was: after the column was added, every existing row stayed NULL for good."""
    from sync.local.stream import ingest_file

    ingest_file(wh, example_pipeline, "customer", EVENTS / "customer-1.jsonl")  # C001..C005, no discount
    stream = ChangeStream(["CUST_ID"], MySqlSource(table="CUSTOMER", file_number=9))
    ingest(
        wh,
        example_pipeline,
        "customer",
        [
            stream.insert({"CUST_ID": "C100", "NAME": "Hooli", "MKTSEGMENT": "TECH", "DISCOUNT_PCT": 10}),
            stream.insert({"CUST_ID": "C101", "NAME": "Pied Piper", "MKTSEGMENT": "TECH", "DISCOUNT_PCT": 20}),
            stream.update(None, {"CUST_ID": "C101", "NAME": "Pied Piper", "MKTSEGMENT": "TECH", "DISCOUNT_PCT": "12.5"}),
            stream.update(None, {"CUST_ID": "C001", "NAME": "Acme Corp", "MKTSEGMENT": "BUILDING", "DISCOUNT_PCT": 7}),
            stream.insert({"CUST_ID": "C102", "NAME": "Bachman", "MKTSEGMENT": "TECH", "DISCOUNT_PCT": "lots"}),
        ],
    )
    sync_one(wh, example_pipeline, "customer")
    before = wh.query('SELECT customer_id, name, mktsegment, _source_pos FROM cdc."customer" ORDER BY 1')
    assert ("unknown", "DISCOUNT_PCT", 5) in status(wh, example_pipeline)[0].schema_drift

    pipeline, written = revise(upgraded, project, *ADD_DISCOUNT, "customer discount")
    deploy(upgraded, pipeline)
    assert wh.query('SELECT customer_id, name, mktsegment, _source_pos FROM cdc."customer" ORDER BY 1') == before
    filled = dict(wh.query('SELECT customer_id, discount_pct FROM cdc."customer"'))
    assert {k: (str(v) if v is not None else None) for k, v in filled.items() if k.startswith("C1") or k == "C001"} == {
        "C001": "7.00",
        "C100": "10.00",
        "C101": "12.50",  # the newest event of C101 wrote the row
        "C102": None,  # "lots" does not convert: the column stays NULL
    }
    assert filled["C002"] is None  # its event did not carry the field
    assert status(wh, pipeline)[0].schema_drift == []  # the revision handled it


def test_added_column_revision_for_redshift_is_golden_and_parses(project, upgraded):  # noqa: F811
    pipeline, written = revise(upgraded, project, *ADD_DISCOUNT, "customer discount")
    script = offline_sql(upgraded, f"{first_revision(upgraded)}:{written.revision}").replace(written.revision, "<revision>")
    for statement in split_statements(script):
        sqlglot.parse_one(statement, read="redshift")
    # The procedure is the generator's (its text is golden in sql/procedures/); the rest is kept here.
    procedures = [
        o
        for o in pipeline_objects(pipeline, "redshift", "examples/salesdb/pipeline.toml")
        if o.kind == "procedure" and o.table == "customer"
    ]
    assert len(procedures) == 3
    for proc in procedures:
        assert proc.sql in script
        signature = proc.sql.split("\n", 1)[0].removeprefix("CREATE OR REPLACE PROCEDURE ")
        script = script.replace(proc.sql, f"-- CREATE OR REPLACE PROCEDURE {signature} of the generator")
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(script)
    assert script == GOLDEN.read_text(), "regenerate with UPDATE_GOLDEN=1 and review the diff"
    fill = [s for s in split_statements(script) if 'SET "discount_pct" = v.value' in s]
    assert len(fill) == 1 and 'FROM "cdc"."customer__stream" s' in fill[0]
    # In the revision's transaction, right after the columns are added.
    assert re.search(
        r'BEGIN;\n(.|\n)*ADD COLUMN "discount_pct" decimal\(5,2\);\n\n-- customer.discount_pct for the rows already stored',
        script,
    )

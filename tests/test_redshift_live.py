"""Opt-in: the generated Redshift SQL on a real Redshift, one test per row of
docs/redshift.md. Set REDSHIFT_SYNC_TEST_REDSHIFT_DSN
(redshift+redshift_connector://user:password@host:5439/dev, a provisioned cluster or a
Serverless workgroup) to run it. Each test works in a scratch schema it drops afterwards;
the streaming materialized view is replaced by a plain table with the same columns, filled
with JSON_PARSE, so no MSK cluster is needed. Cost and set-up: docs/redshift.md."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from sync.config import Pipeline
from sync.debezium.events import ChangeStream, MySqlSource, PostgresSource
from sync.operations import stream_stand_in
from sync.operations.explain import explain
from sync.operations.runner import RunSummary, sync
from sync.operations.verify import Scratch
from sync.schema.revisions import deployed_revision
from sync.sql.dialect import RedshiftDialect, dialect_for
from sync.sql.names import SCHEMA_DRIFT, table_names
from sync.warehouse import WarehouseError, connect
from tests import explain_scenarios, policy_scenarios
from tests.cases import FLOAT_RANGE_CASES
from tests.helpers import make_pipeline
from tests.test_explain_sql import _pipeline, redshift_statements
from tests.test_redshift_total_casts import TYPED, typed_records

DSN = os.environ.get("REDSHIFT_SYNC_TEST_REDSHIFT_DSN")
pytestmark = [pytest.mark.redshift, pytest.mark.skipif(not DSN, reason="REDSHIFT_SYNC_TEST_REDSHIFT_DSN is not set")]

CUSTOMER = """
[[tables]]
name = "customer"
topic = "salesdb.salesdb.CUSTOMER"
primary_key = ["CUST_ID"]
order_by = "mysql-binlog"
distkey = "customer_id"
columns = [
  { name = "CUST_ID", type = "varchar(64)", target = "customer_id" },
  { name = "NAME", type = "varchar(256)" },
]
"""

TOAST = """
[[tables]]
name = "toast"
topic = "pg.public.toast"
primary_key = ["id"]
order_by = "postgres-lsn"
columns = [
  { name = "id", type = "integer" },
  { name = "name", type = "varchar(64)" },
  { name = "bio", type = "varchar(256)" },
]
"""


@pytest.fixture
def rs() -> Iterator[tuple[Any, str]]:
    schema = "rs_test_" + uuid.uuid4().hex[:8]
    wh = connect(DSN)
    try:
        yield wh, schema
    finally:
        wh.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        wh.close()


def deploy(wh: Any, tables_toml: str, schema: str) -> Pipeline:
    """Every object of the pipeline, the streaming MV replaced by its stand-in."""
    return Scratch(wh, "redshift", schema, lambda: connect(DSN)).deploy_pipeline(make_pipeline(tables_toml, schema=schema))


_refreshes = iter(range(1, 10**6))


def feed(wh: Any, pipeline: Pipeline, table: str, records: list[dict[str, Any]]) -> RunSummary:
    """The records as one refresh of the stream's stand-in, then one CALL of the procedure."""
    n = table_names(pipeline, pipeline.table(table))
    stream_stand_in.append_refresh(wh, RedshiftDialect().qualified(n.schema, n.stream), records, next(_refreshes))
    (run,) = sync(wh, pipeline, [table])
    assert run.status == "ok", run.error
    return run


def test_procedure_on_real_redshift(rs):
    wh, schema = rs
    pipeline = deploy(wh, CUSTOMER, schema)
    cs = ChangeStream(["CUST_ID"], MySqlSource())
    feed(
        wh,
        pipeline,
        "customer",
        [
            cs.insert({"CUST_ID": "A", "NAME": "a"}),
            cs.update({"CUST_ID": "A", "NAME": "a"}, {"CUST_ID": "A", "NAME": "b"}),
            cs.insert({"CUST_ID": "B", "NAME": "x"}),
            cs.delete({"CUST_ID": "B", "NAME": "x"}),
        ],
    )
    assert wh.query(f'SELECT customer_id, name FROM "{schema}"."customer"') == [("A", "b")]


def test_functions_the_procedures_use_exist(rs):
    # Open point: recently added functions on older patch tracks (r_TO_VARBYTE,
    # r_get_number_attributes, r_json_size).
    wh, _ = rs
    got = wh.query(
        "SELECT FROM_VARBYTE(TO_VARBYTE('AQID', 'base64'), 'hex'), GET_NUMBER_ATTRIBUTES(JSON_PARSE('{\"a\": 1}')), "
        "JSON_SIZE(JSON_PARSE('[1]')), CAN_JSON_PARSE('{')"
    )
    assert got == [("010203", 1, 3, False)]


def test_regexp_substr_without_a_match(rs):
    # Row 1, REGEXP_SUBSTR: "it returns an empty string".
    wh, _ = rs
    d = RedshiftDialect()
    assert wh.scalar("SELECT REGEXP_SUBSTR('[null,\"12\"]', '^[[]\"?([0-9]+)', 1, 1, 'e')") == ""
    assert wh.scalar(f"SELECT {d.regex_group(chr(39) + '[null,1]' + chr(39), '^[[]([0-9]+)')}") is None


def test_json_text_over_varchar_is_null_not_an_error(rs):
    # Row 2, JSON_SERIALIZE: "returns an error when the JSON format exceeds the VARCHAR limit".
    wh, _ = rs
    half = json.dumps(list(range(10_000, 17_000)))  # ~42 KB each, two make ~84 KB of JSON
    big = "ARRAY_CONCAT(JSON_PARSE(%s), JSON_PARSE(%s))"
    with pytest.raises(WarehouseError):
        wh.scalar(f"SELECT JSON_SERIALIZE({big})", (half, half))
    text = RedshiftDialect().json_get_text("t.x", "k").replace('t.x."k"', "t.v")
    assert wh.scalar(f"SELECT {text} FROM (SELECT {big} AS v) t", (half, half)) is None


def test_values_that_do_not_convert_are_quarantined_not_fatal(rs):
    # Row 3: no cast of event data may fail the CALL, whatever order Redshift evaluates in.
    wh, schema = rs
    pipeline = deploy(wh, TYPED, schema)
    records = typed_records()
    run = feed(wh, pipeline, "typed", records)
    assert (run.upserted, run.quarantined) == (1, len(records) - 1)
    assert wh.scalar(f'SELECT CAST(price AS varchar(10)) FROM "{schema}"."typed"') == "0.48"


def test_multi_byte_op_fits_its_column(rs):
    # Row 4, r_Character_types: VARCHAR(64) holds 64 bytes, not 64 characters.
    wh, schema = rs
    pipeline = deploy(wh, CUSTOMER, schema)
    cs = ChangeStream(["CUST_ID"], MySqlSource())
    rec = cs.insert({"CUST_ID": "A", "NAME": "a"})
    run = feed(wh, pipeline, "customer", [{**rec, "value": {**rec["value"], "op": "é" * 100}}])
    assert run.quarantined == 1


def test_lock_leaves_the_target_readable(rs):
    # Row 5, r_LOCK: a locked table makes readers wait; the procedure locks its watermark only.
    wh, schema = rs
    deploy(wh, CUSTOMER, schema)
    reader = connect(DSN)
    try:
        with wh.transaction():
            wh.execute(f'LOCK TABLE "{schema}"."customer__watermark"')
            reader.execute("SET statement_timeout TO 20000")
            assert reader.scalar(f'SELECT COUNT(*) FROM "{schema}"."customer"') == 0
    finally:
        reader.close()


def test_clock_has_microseconds(rs):
    # Row 6, r_GETDATE (whole seconds) vs r_TIMEOFDAY_function (microseconds).
    wh, _ = rs
    now = RedshiftDialect().now()
    samples = [wh.query(f"SELECT {now}, GETDATE()")[0] for _ in range(5)]
    assert any(clock.microsecond for clock, _ in samples)
    assert all(abs((clock - getdate).total_seconds()) < 2 for clock, getdate in samples)


def test_watermark_summary_of_many_partitions(rs):
    # Row 7, r_LISTAGG: a result over 65,535 bytes fails.
    wh, schema = rs
    pipeline = deploy(wh, CUSTOMER, schema)
    rows = ", ".join(f"({p}, 1000000000000, TIMESTAMP '2025-01-01 00:00:00', NULL)" for p in range(3000))
    wh.execute(f'INSERT INTO "{schema}"."customer__watermark" VALUES {rows}')
    (run,) = sync(wh, pipeline, ["customer"])
    assert run.status == "ok", run.error
    assert run.watermark_after.endswith(" more)") and len(run.watermark_after.encode()) <= 65535


def test_drop_procedure_without_if_exists(rs):
    # Row 9, r_DROP_PROCEDURE.
    wh, schema = rs
    deploy(wh, CUSTOMER, schema)
    d = dialect_for("redshift", schema)
    wh.execute(d.drop_procedure(d.qualified(schema, "incremental_sync_customer")))
    assert (
        wh.scalar(
            "SELECT COUNT(*) FROM pg_proc_info WHERE proname = 'incremental_sync_customer' "
            f"AND pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = '{schema}')"
        )
        == 0
    )


def test_analyze_runs_inside_the_procedure(rs):
    # Row 10, stored-procedure-constraints: ANALYZE is allowed; the stage is analyzed past 1,000 records.
    wh, schema = rs
    pipeline = deploy(wh, CUSTOMER, schema)
    cs = ChangeStream(["CUST_ID"], MySqlSource())
    run = feed(wh, pipeline, "customer", [cs.insert({"CUST_ID": f"K{i}", "NAME": "n"}) for i in range(1001)])
    assert run.upserted == 1001


def test_key_stored_twice(rs):
    # Row 11, r_CREATE_TABLE_NEW: primary keys are not enforced.
    wh, schema = rs
    pipeline = deploy(wh, TOAST, schema)
    cs = ChangeStream(["id"], PostgresSource(table="toast"))
    feed(wh, pipeline, "toast", [cs.insert({"id": 1, "name": "a", "bio": "old bio"})])
    wh.execute(f'INSERT INTO "{schema}"."toast" SELECT * FROM "{schema}"."toast"')
    run = feed(wh, pipeline, "toast", [cs.update(None, {"id": 1, "name": "a2", "bio": "__debezium_unavailable_value"})])
    assert run.upserted == 1
    assert wh.query(f'SELECT id, name, bio FROM "{schema}"."toast"') == [(1, "a2", "old bio")]


def test_unknown_field_is_counted_as_drift(rs):
    # Row 12, query-super: UNPIVOT ... AT binds each attribute name.
    wh, schema = rs
    pipeline = deploy(wh, CUSTOMER, schema)
    cs = ChangeStream(["CUST_ID"], MySqlSource())
    feed(wh, pipeline, "customer", [cs.insert({"CUST_ID": "A", "NAME": "a", "Extra": 1})])
    assert wh.query(f'SELECT kind, field, events FROM "{schema}"."{SCHEMA_DRIFT}"') == [("unknown", "Extra", 1)]


def test_status_reads_the_records_the_stream_skipped(rs):
    # r_SYS_STREAM_SCAN_ERRORS: readable by the user that owns the MV; none for a fresh table.
    from sync.operations.runner import status

    wh, schema = rs
    pipeline = deploy(wh, CUSTOMER, schema)
    (row,) = status(wh, pipeline)
    assert row.deployed and row.stream_errors == []


def test_json_parse_rejects_only_what_can_json_parse_rejects(rs):
    # CAN_JSON_PARSE guards JSON_PARSE in the streaming MV, where an error blocks ingestion:
    # whatever CAN_JSON_PARSE accepts must parse (super-configurations: duplicate attribute
    # names raise in JSON_PARSE unless json_parse_dedup_attributes is on).
    wh, _ = rs
    for text in ['{"a": 1, "a": 2}', '{"a": 1}', "[1, 2", '"x"']:
        if wh.scalar("SELECT CAN_JSON_PARSE(%s)", (text,)):
            wh.scalar("SELECT JSON_SERIALIZE(JSON_PARSE(%s))", (text,))


def test_float_values_outside_the_documented_range_are_quarantined(rs):
    # Row 16, r_Numeric_types201: REAL "a range of around 1E-37 to 1E+37", DOUBLE PRECISION
    # "around 1E-307 to 1E+308". Java's extremes (tests/cases.py FLOAT_RANGE_CASES): those
    # inside are stored, the rest quarantined, and the CALL succeeds.
    wh, schema = rs
    pipeline = deploy(
        wh,
        '[[tables]]\nname = "floats"\ntopic = "floats"\nprimary_key = ["id"]\n'
        'columns = [{ name = "id", type = "integer" }, { name = "r", type = "real" }, { name = "d", type = "double" }]\n',
        schema,
    )
    n = table_names(pipeline, pipeline.table("floats"))
    column = {"real": "r", "double": "d"}
    for i, (typ, text, _, _) in enumerate(FLOAT_RANGE_CASES):
        value = f'{{"before": null, "after": {{"id": {i}, "{column[typ]}": {text}}}, "source": {{"ts_ms": 1}}, "op": "c"}}'
        wh.execute(
            f'INSERT INTO "{n.schema}"."{n.stream}" VALUES (0, %s, \'C\', GETDATE(), NULL, NULL, '
            "TIMESTAMP '2026-01-01 00:00:00', JSON_PARSE(%s), NULL, JSON_PARSE(%s))",
            (i, value, json.dumps({"id": i})),
        )
    (run,) = sync(wh, pipeline, ["floats"])
    assert run.status == "ok", run.error
    stored = {i for (i,) in wh.query(f'SELECT id FROM "{schema}"."floats"')}
    assert stored == {i for i, (_, _, _, on_redshift) in enumerate(FLOAT_RANGE_CASES) if on_redshift}


def test_doctor_verify_on_real_redshift():
    # The same scenarios `redshift-sync doctor --verify` runs on a user's warehouse.
    from sync.operations.verify import verify
    from sync.operations.verify_scenarios import SCENARIOS

    report = verify(lambda: connect(DSN), SCENARIOS, lambda _: None)
    assert report.engine == "redshift" and report.failed == []


@pytest.fixture
def redshift_cli(rs, tmp_path) -> explain_scenarios.Cli:
    """The explain scenarios' pipeline in the scratch schema; records reach the streaming
    view's stand-in, the rest runs through the command line, as on PostgreSQL."""
    wh, schema = rs
    without_revision(wh)
    return explain_scenarios.scratch_cli(DSN, wh, schema, tmp_path)


def without_revision(wh: Any) -> None:
    if deployed_revision(wh) is not None:
        pytest.skip(
            "this database records an alembic revision (public.alembic_version), which the command line checks "
            "the pipeline file against: give REDSHIFT_SYNC_TEST_REDSHIFT_DSN a database without one"
        )


@pytest.mark.parametrize("scenario", explain_scenarios.SCENARIOS, ids=lambda s: s.__name__)
def test_explain_through_the_command_line(redshift_cli, scenario):
    # Issue-level acceptance: `explain` on both engines through the CLI (tests/test_explain.py
    # runs the same scenarios on PostgreSQL).
    scenario(redshift_cli)


@pytest.fixture
def redshift_policy_cli(rs, tmp_path) -> policy_scenarios.PolicyCli:
    """examples/customers_pii in the scratch schema, deployed as `doctor --verify` deploys;
    records reach the streaming view's stand-in, a revision is applied from the script
    `deploy --sql --dialect redshift` prints, the rest runs through the command line."""
    wh, schema = rs
    without_revision(wh)
    return policy_scenarios.scratch_cli(DSN, wh, schema, tmp_path)


@pytest.mark.parametrize("scenario", policy_scenarios.SCENARIOS, ids=lambda s: s.__name__)
def test_column_policies_through_the_command_line(redshift_policy_cli, scenario):
    # Issue-level acceptance: each policy on both engines through the CLI, with the
    # quarantine's redacted payload, a policy added by a revision, key rotation
    # (tests/test_policies.py runs the same scenarios on PostgreSQL).
    scenario(redshift_policy_cli)


def test_the_golden_sql_of_explain_runs_and_leaves_nothing(rs):
    # tests/golden/explain_redshift.sql in the scratch schema (test_explain_sql.py: the same
    # text): temporary tables LIKE the pipeline's, the procedure in the pipeline's schema
    # (Redshift has no temporary procedures), its CALL and the reads, in a transaction
    # rolled back; then explain itself on the same key.
    wh, schema = rs
    pipeline = Scratch(wh, "redshift", schema, lambda: connect(DSN)).deploy_pipeline(_pipeline("salesdb", schema))
    feed(wh, pipeline, "customer", [ChangeStream(["CUST_ID"], MySqlSource()).insert({"CUST_ID": "C001", "NAME": "a"})])
    with wh.rolled_back():
        for statement in redshift_statements(schema=schema):
            wh.execute(statement)
    procedures = (
        "SELECT COUNT(*) FROM pg_proc_info WHERE LEFT(proname, 8) = 'explain_' "
        f"AND pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = '{schema}')"
    )
    assert wh.scalar(procedures) == 0
    assert wh.query(f'SELECT customer_id, name FROM "{schema}"."customer"') == [("C001", "a")]
    (stored,) = [e for e in explain(wh, pipeline, "customer", ["CUST_ID=C001"]).entries if e.origin == "stored row"]
    assert stored.values["name"] == "a"
    assert wh.scalar(procedures) == 0

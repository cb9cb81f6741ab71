"""The pipeline file: the documented shape works as written; bad input is refused with a
message that names the key; nothing in a name can reach SQL."""

from __future__ import annotations

import tomllib

import pytest

from sync.config import ConfigError, load_pipeline, parse_pipeline
from sync.sql.objects import pipeline_objects

ISSUE_SHAPE = """
[pipeline]
schema = "cdc"

[source]
kind = "msk"
external_schema = "msk_cdc"
cluster_arn = "arn:aws:kafka:us-east-1:123456789012:cluster/demo/abc-1"
iam_role = "arn:aws:iam::123456789012:role/redshift-streaming"
authentication = "iam"

[[tables]]
name = "customer"
topic = "salesdb.salesdb.CUSTOMER"
format = "debezium"
primary_key = ["CUST_ID"]
delete_mode = "hard"
distkey = "customer_id"
sortkey = ["customer_id"]
columns = [
  { name = "CUST_ID", type = "varchar(64)", target = "customer_id" },
  { name = "NAME", type = "varchar(256)" },
  { name = "MKTSEGMENT", type = "varchar(64)" },
]
"""


def _parse(text: str):
    return parse_pipeline(tomllib.loads(text), "pipeline.toml")


def test_documented_shape_parses_as_written():
    p = _parse(ISSUE_SHAPE)
    t = p.table("customer")
    assert [c.target_name for c in t.columns] == ["customer_id", "name", "mktsegment"]
    assert [c.name for c in t.key_columns] == ["CUST_ID"]
    assert t.distkey_column.target_name == "customer_id"
    assert p.schema == "cdc" and p.source.external_schema == "msk_cdc"


def test_composite_keys():
    text = ISSUE_SHAPE.replace('primary_key = ["CUST_ID"]', 'primary_key = ["CUST_ID", "NAME"]')
    t = _parse(text).table("customer")
    assert [c.target_name for c in t.key_columns] == ["customer_id", "name"]


@pytest.mark.parametrize(
    "old, new, expected",
    [
        ('name = "customer"', 'name = "customer; DROP TABLE x"', "tables[0] (customer; DROP TABLE x).name: table name"),
        ('name = "customer"', 'name = "Customer"', "tables[0] (Customer).name: table name 'Customer' is not allowed"),
        (
            '{ name = "NAME", type',
            '{ name = "NAME\\" ; --", type',
            'tables[0] (customer).columns[1] (NAME" ; --).name: field name',
        ),
        (
            'target = "customer_id"',
            'target = "id\\"; DROP TABLE t; --"',
            "tables[0] (customer).columns[0] (CUST_ID).target: target column",
        ),
        ('schema = "cdc"', 'schema = "cdc\\".x"', "pipeline.schema"),
        ('external_schema = "msk_cdc"', 'external_schema = "a b"', "source.external_schema"),
        ('topic = "salesdb.salesdb.CUSTOMER"', 'topic = "t\\"; DROP"', "tables[0] (customer).topic"),
        ('iam_role = "arn:aws:iam::123456789012:role/redshift-streaming"', 'iam_role = "arn\' OR 1=1"', "source.iam_role"),
        (
            'type = "varchar(256)"',
            'type = "varchar(256)); DROP TABLE x; --"',
            "tables[0] (customer).columns[1] (NAME).type: type",
        ),
        ('type = "varchar(256)"', 'type = "money"', "unknown type"),
        ('delete_mode = "hard"', 'delete_mode = "purge"', "tables[0] (customer).delete_mode"),
        ('primary_key = ["CUST_ID"]', 'primary_key = ["ID"]', "'ID' is not one of the columns"),
        ('distkey = "customer_id"', 'distkey = "name"', "distkey: 'name' is not a primary-key column"),
        ('sortkey = ["customer_id"]', 'sortkey = ["nope"]', "sortkey: 'nope'"),
        ('format = "debezium"', 'formt = "debezium"', "tables[0] (customer).formt: unknown key"),
        ('kind = "msk"', 'kind = "kinesis"', "source.kind"),
        ('cluster_arn = "arn:aws:kafka:us-east-1:123456789012:cluster/demo/abc-1"', "", "needs cluster_arn"),
        (
            '{ name = "NAME", type = "varchar(256)" }',
            '{ name = "_NAME", type = "varchar(256)" }',
            "from field '_NAME'; set target =) '_name' is not allowed",
        ),
        ('{ name = "NAME", type = "varchar(256)" }', '{ name = "CUST_ID", type = "varchar(256)" }', "listed twice"),
    ],
)
def test_bad_input_is_refused_naming_the_key(old, new, expected):
    assert old in ISSUE_SHAPE
    with pytest.raises(ConfigError) as err:
        _parse(ISSUE_SHAPE.replace(old, new))
    assert expected in str(err.value)
    assert "pipeline.toml is invalid" in str(err.value)


def test_reserved_and_colliding_names():
    with pytest.raises(ConfigError, match="reserved"):
        _parse(ISSUE_SHAPE.replace('name = "customer"', 'name = "sync_run_log"'))
    with pytest.raises(ConfigError, match="may not contain '__'"):
        _parse(ISSUE_SHAPE.replace('name = "customer"', 'name = "customer__stage"'))
    twice = ISSUE_SHAPE + ISSUE_SHAPE[ISSUE_SHAPE.index("[[tables]]") :].replace("salesdb.salesdb.CUSTOMER", "other")
    with pytest.raises(ConfigError, match="customer defined more than once"):
        _parse(twice)


def test_load_pipeline_errors_are_actionable(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="pipeline.toml' not found; pass --config"):
        load_pipeline(None)
    bad = tmp_path / "p.toml"
    bad.write_text("[pipeline\nschema=")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        load_pipeline(bad)
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="cannot read"):
        load_pipeline(bad)
    good = tmp_path / "pipeline.toml"
    good.write_text(ISSUE_SHAPE)
    monkeypatch.setenv("REDSHIFT_SYNC_CONFIG", str(good))
    pipeline, path = load_pipeline(None)
    assert path == good and pipeline.tables[0].name == "customer"


def test_mixed_case_fields_are_quoted_in_generated_sql():
    p = _parse(ISSUE_SHAPE)
    sql = "\n".join(o.sql for o in pipeline_objects(p, "redshift", "pipeline.toml"))
    assert '."CUST_ID"' in sql and '"customer_id"' in sql
    pg = "\n".join(o.sql for o in pipeline_objects(p, "postgres", "pipeline.toml"))
    assert "->> 'CUST_ID'" in pg

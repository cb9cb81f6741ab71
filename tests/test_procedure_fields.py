"""How a record's fields are read (sync/sql/procedure/fields.py), pinned for a one-column
and a composite-key table on Redshift and PostgreSQL (the dialects read a member as JSON
or as text): each field once from the row image, a key field also from the Kafka key, which
fields may hold Debezium's TOAST placeholder and in which forms, and which row images the
schema-drift step reads. What they do is tested on a database in
tests/test_delivery_semantics.py (the bare Kafka key, the TOAST placeholder) and
tests/test_schema_drift.py; here, one behaviour per line of SQL."""

from __future__ import annotations

import tomllib

from sync.config import parse_pipeline
from sync.sql.dialect import dialect_for
from sync.sql.procedure.fields import (
    drift_image_sql,
    has_toast,
    kafka_key_field_sql,
    named_texts,
    placeholder_sql,
    raw_field_sql,
    raw_is_null,
    read_as_text,
    toastable,
    unavailable_sql,
)
from tests.helpers import COMPOSITE_KEY, EXAMPLES, ONE_COLUMN, table_sql

ONE, COMPOSITE = table_sql(ONE_COLUMN), table_sql(COMPOSITE_KEY)
PG_ONE, PG_COMPOSITE = table_sql(ONE_COLUMN, dialect="postgres"), table_sql(COMPOSITE_KEY, dialect="postgres")
# The placeholder in each form the PostgreSQL connector sends it: text, bytea (the
# JSON converter writes bytes as base64) and a text array.
FORMS = "('__debezium_unavailable_value', 'X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==', '[\"__debezium_unavailable_value\"]')"


def test_a_key_field_is_read_from_the_row_image_and_from_the_kafka_key():
    # Debezium, MySQL connector, "Change event keys": "For any given table, the change
    # event's key has a structure that contains a field for each column in the PRIMARY KEY
    # (or unique constraint) at the time the event was created."
    order_id, line_no = COMPOSITE.table.key_columns
    assert raw_field_sql(COMPOSITE.d, "f._img", order_id) == 'f._img."order_id"'
    assert kafka_key_field_sql(COMPOSITE.d, COMPOSITE.table, line_no) == 'f._key_env."line_no"'
    assert raw_field_sql(PG_COMPOSITE.d, "f._img", order_id) == "f._img -> 'order_id'"
    assert kafka_key_field_sql(PG_COMPOSITE.d, PG_COMPOSITE.table, line_no) == "f._key_env -> 'line_no'"


def test_a_one_column_key_is_a_member_of_the_kafka_key_or_the_bare_key_itself():
    # Confluent, "ExtractField SMT Usage Reference"
    # (https://docs.confluent.io/cloud/current/connectors/transforms/extractfield.html):
    # "ExtractField pulls a field out of a complex (non-primitive, Map or Struct) key or
    # value and replaces the entire key or value with the extracted field."
    (key,) = PG_ONE.table.key_columns
    assert kafka_key_field_sql(PG_ONE.d, PG_ONE.table, key) == (
        "CASE WHEN (jsonb_typeof(f._key_env) = 'object') THEN f._key_env -> 'id' ELSE f._key_env END"
    )
    # A text key read as text, the bare key's text too.
    text_key = table_sql(ONE_COLUMN.replace('"integer"', '"varchar(36)"'), dialect="postgres")
    assert kafka_key_field_sql(text_key.d, text_key.table, text_key.table.key_columns[0]) == (
        "CASE WHEN (jsonb_typeof(f._key_env) = 'object') THEN f._key_env ->> 'id' ELSE (f._key_env #>> '{}') END"
    )


def test_a_text_column_is_read_as_text_only_where_the_dialect_reads_a_member_as_text():
    (note,) = COMPOSITE.table.value_columns
    order_id = COMPOSITE.table.key_columns[0]
    # PostgreSQL: `->>` in place; Redshift: the SUPER member, bounded and cast later.
    assert raw_field_sql(PG_COMPOSITE.d, "f._img", note) == "f._img ->> 'note'"
    assert raw_field_sql(COMPOSITE.d, "f._img", note) == 'f._img."note"'
    assert read_as_text(PG_COMPOSITE.d, note) and not read_as_text(COMPOSITE.d, note)
    assert not read_as_text(PG_COMPOSITE.d, order_id)
    # A semantic type decodes its JSON, text or not.
    interval = table_sql(
        ONE_COLUMN.replace(
            'columns = [{ name = "id", type = "integer" }]',
            'columns = [{ name = "id", type = "integer" },'
            ' { name = "span", type = "varchar(64)", semantic = "io.debezium.time.Interval" }]',
        ),
        dialect="postgres",
    )
    assert not read_as_text(interval.d, interval.table.value_columns[0])


def test_a_missing_field_and_a_json_null_are_both_null():
    (note,) = PG_COMPOSITE.table.value_columns
    order_id = PG_COMPOSITE.table.key_columns[0]
    assert raw_is_null(PG_COMPOSITE.d, "f._j_v0", note) == "f._j_v0 IS NULL"
    assert raw_is_null(PG_COMPOSITE.d, "f._j_i0", order_id) == "(f._j_i0 IS NULL OR jsonb_typeof(f._j_i0) = 'null')"
    assert raw_is_null(COMPOSITE.d, "f._j_v0", note) == "(f._j_v0 IS NULL)"


def test_the_toast_placeholder_is_recognised_in_each_form_and_a_null_field_is_none():
    # Debezium blog, "Handling unchanged Postgres TOAST values" (2019-10-08,
    # https://debezium.io/blog/2019/10/08/handling-unchanged-postgres-toast-values/): "When
    # encountering an unchanged TOAST column value in the logical replication message
    # received from the database, the Debezium Postgres connector will represent that value
    # with a configurable placeholder. By default, that's the literal
    # __debezium_unavailable_value".
    assert placeholder_sql("f._x_v0") == f"COALESCE(f._x_v0 IN {FORMS}, false)"
    (note,) = PG_COMPOSITE.table.value_columns
    assert unavailable_sql(PG_COMPOSITE.d, "f._j_v0", note) == f"COALESCE(f._j_v0 IN {FORMS}, false)"
    # Redshift: the SUPER member's text, bounded first (JSON_SERIALIZE raises past its limit).
    redshift = unavailable_sql(COMPOSITE.d, "f._j_v0", note)
    assert redshift.startswith("COALESCE(CASE WHEN IS_VARCHAR((CASE WHEN JSON_SIZE(f._j_v0) <= 65535 THEN f._j_v0 END))")
    assert redshift.endswith(f" END IN {FORMS}, false)")


def test_only_text_super_and_varbyte_columns_may_hold_the_placeholder():
    # The blog above: "the biography TEXT column is a TOAST-able column, as its value may
    # exceed the page size limit".
    kinds = table_sql(
        ONE_COLUMN.replace(
            'columns = [{ name = "id", type = "integer" }]',
            'columns = [{ name = "id", type = "integer" }, { name = "code", type = "char(2)" },'
            ' { name = "doc", type = "super" }, { name = "blob", type = "varbyte(64)" },'
            ' { name = "n", type = "bigint" }, { name = "price", type = "decimal(12,2)" },'
            ' { name = "at", type = "timestamp" }, { name = "ok", type = "boolean" }]',
        )
    )
    assert {c.name: toastable(c) for c in kinds.table.columns} == {
        "id": False,
        "code": True,
        "doc": True,
        "blob": True,
        "n": False,
        "price": False,
        "at": False,
        "ok": False,
    }
    assert has_toast(COMPOSITE.table) and not has_toast(ONE.table)


def test_an_image_with_exactly_the_configured_fields_is_not_set_aside_for_drift():
    assert drift_image_sql(PG_COMPOSITE.d, PG_COMPOSITE.table) == (
        "CASE WHEN f._op IN ('c', 'r', 'u') AND (jsonb_typeof(f._img) = 'object')"
        " AND NOT (f._j_i0 IS NOT NULL AND f._j_i1 IS NOT NULL AND f._j_v0 IS NOT NULL"
        " AND ((f._img) - ARRAY['order_id', 'line_no', 'note']::text[]) = '{}'::jsonb) THEN f._img END"
    )
    assert drift_image_sql(COMPOSITE.d, COMPOSITE.table) == (
        "CASE WHEN f._op IN ('c', 'r', 'u') AND IS_OBJECT(f._img)"
        " AND NOT (f._j_i0 IS NOT NULL AND f._j_i1 IS NOT NULL AND f._j_v0 IS NOT NULL"
        " AND GET_NUMBER_ATTRIBUTES(f._img) = 3) THEN f._img END"
    )


def test_the_routers_key_field_is_read_from_the_kafka_key_only_and_is_no_image_field():
    # Debezium, "Topic Routing" (https://debezium.io/documentation/reference/stable/transformations/topic-routing.html):
    # "the topic routing transformation inserts a field into change event keys": the key,
    # not the value.
    pipeline = parse_pipeline(tomllib.loads((EXAMPLES / "shop_routing" / "pipeline.toml").read_text()))
    account = pipeline.table("account")
    for dialect, field, count in (
        ("redshift", 'f._key_env."__dbz__sourceIdentifier"', "GET_NUMBER_ATTRIBUTES(f._img) = 2"),
        ("postgres", "f._key_env ->> '__dbz__sourceIdentifier'", "((f._img) - ARRAY['id', 'email']::text[]) = '{}'::jsonb"),
    ):
        d = dialect_for(dialect, pipeline.schema)
        assert kafka_key_field_sql(d, account, account.key_columns[0]) == field
        # The image holds the id and the email: the key field is neither required nor counted.
        assert f"NOT (f._j_i1 IS NOT NULL AND f._j_v0 IS NOT NULL AND {count})" in drift_image_sql(d, account)


def test_the_text_of_each_field_is_named_once_where_the_dialect_names_texts():
    levels, named = named_texts(COMPOSITE.d, "f._src", ["file", "pos"], "p")
    assert named == {"file": "f._x_p0", "pos": "f._x_p1"}
    bounded, text = levels
    assert bounded == {
        "_b_p0": '(CASE WHEN JSON_SIZE(f._src."file") <= 65535 THEN f._src."file" END)',
        "_b_p1": '(CASE WHEN JSON_SIZE(f._src."pos") <= 65535 THEN f._src."pos" END)',
    }
    assert text["_x_p0"] == (
        "CASE WHEN IS_VARCHAR(f._b_p0) THEN f._b_p0::varchar(65535) WHEN f._b_p0 IS NOT NULL THEN JSON_SERIALIZE(f._b_p0) END"
    )
    # PostgreSQL reads a member as text in place: nothing to name.
    assert named_texts(PG_COMPOSITE.d, "f._src", ["file", "pos"], "p") == ([], {})

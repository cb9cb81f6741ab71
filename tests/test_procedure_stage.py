"""The stage INSERT (sync/sql/procedure/stage.py), pinned for a one-column and a
composite-key table: one behaviour per line."""

from __future__ import annotations

import tomllib

import pytest

from sync.config import parse_pipeline
from sync.sql.dialect import dialect_for
from sync.sql.procedure import TableSql
from sync.sql.procedure.stage import stage_insert_sql
from tests.helpers import COMPOSITE_KEY, EXAMPLES, ONE_COLUMN, assert_lines, table_sql
from tests.procedure_shape import _arguments

ONE, COMPOSITE = table_sql(ONE_COLUMN), table_sql(COMPOSITE_KEY)


def test_each_key_ranks_its_upserts_and_deletes_newest_first():
    assert_lines(
        stage_insert_sql(COMPOSITE),
        'INSERT INTO "cdc"."line__stage" (',
        "ROW_NUMBER() OVER (",
        "PARTITION BY CASE WHEN c._action IN ('upsert', 'delete') THEN 1 ELSE 0 END, c.\"order_id\", c.\"line_no\"",
        "ORDER BY c._source_pos DESC NULLS LAST, c._kafka_time DESC NULLS LAST, c._kafka_partition DESC, c._kafka_offset DESC),",
    )


def test_kafka_order_ranks_by_partition_and_offset_and_has_no_rank_position():
    sql = stage_insert_sql(table_sql(ONE_COLUMN, order_by="kafka"))
    assert_lines(
        sql,
        "ORDER BY c._kafka_time DESC NULLS LAST, c._kafka_partition DESC, c._kafka_offset DESC),",
        'c._source_pos, NULL, c."id", c._unavailable, c._quarantine_payload,',
    )


def test_a_key_falls_back_to_the_kafka_key():
    assert_lines(
        stage_insert_sql(ONE),
        'COALESCE(CAST(f._j_i0 AS integer), CAST(f._j_k0 AS integer)) AS "id", NULL AS _unavailable,',
    )


def test_the_source_time_is_kept_only_where_it_is_one():
    assert_lines(
        stage_insert_sql(ONE),
        "typed AS (SELECT f.*, CAST(f._ts_ms AS bigint) AS _source_ts_ms, NOT (f._ts_ms IS NULL) AS _has_source_ts,",
    )
    assert (
        "CASE WHEN t._source_ts_ms BETWEEN 0 AND 253402300799999 THEN t._source_ts_ms END AS _source_ts_ms,"
        in stage_insert_sql(ONE)
    )


def test_a_toast_placeholder_is_marked_once_and_leaves_the_value_null():
    assert_lines(
        stage_insert_sql(COMPOSITE),
        'COALESCE(CAST(f._j_i1 AS smallint), CAST(f._j_k1 AS smallint)) AS "line_no",',
        "NULLIF('|' || CASE WHEN f._u_v0 THEN 'note|' ELSE '' END, '|') AS _unavailable,",
        "CASE WHEN t._check_no IN (1, 3, 4, 6, 7, 8, 9, 10, 11) OR t._unavailable IS NOT NULL THEN t._payload END AS _quarantine_payload,",
    )
    assert "_unavailable IS NOT NULL THEN t._payload" not in stage_insert_sql(ONE)  # nothing TOAST-able


def test_the_raw_value_is_kept_for_quarantined_records_only():
    assert "CASE WHEN c._action = 'quarantine' THEN c._raw_value END, c._drift_img" in stage_insert_sql(ONE)


def test_a_text_field_is_bounded_once_then_cast_and_tested_for_the_placeholder_by_name():
    sql = stage_insert_sql(COMPOSITE)
    assert_lines(
        sql,
        'fields_1 AS (SELECT f.*, (CASE WHEN JSON_SIZE(f._j_v0) <= 65535 THEN f._j_v0 END) AS "_b_v0" FROM fields f),',
        "SELECT f.*, CASE WHEN IS_VARCHAR(f._b_v0) THEN f._b_v0::varchar(65535)"
        ' WHEN f._b_v0 IS NOT NULL THEN JSON_SERIALIZE(f._b_v0) END AS "_x_v0"',
        "COALESCE(f._x_v0 IN ('__debezium_unavailable_value', 'X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==',"
        ' \'["__debezium_unavailable_value"]\'), false) AS "_u_v0"',
        'CASE WHEN f._u_v0 THEN NULL ELSE CAST(CASE WHEN OCTET_LENGTH(f._x_v0) <= 100 THEN f._x_v0 END AS varchar(100)) END AS "note",',
    )
    assert sql.count("JSON_SIZE(f._j_v0)") == 1


def test_the_source_position_fields_are_bounded_once_each():
    sql = stage_insert_sql(COMPOSITE)
    assert_lines(
        sql,
        "LPAD(REGEXP_SUBSTR(f._x_p0, '[0-9]*$'), 20, '0') || '.' || LPAD(f._x_p1, 20, '0')"
        " || '.' || LPAD(COALESCE(f._x_p2, ''), 20, '0') AS _source_pos,",
    )
    for field in ("file", "pos", "row"):
        assert sql.count(f'JSON_SIZE(f._src."{field}")') == 1


def test_the_action_of_each_check_number_is_one_case_whose_else_is_the_quarantine():
    assert_lines(
        stage_insert_sql(ONE),
        "CASE t._check_no WHEN 0 THEN 'upsert' WHEN 2 THEN 'tombstone' WHEN 5 THEN 'truncate' WHEN 10 THEN 'delete'"
        " ELSE 'quarantine' END AS _action,",
    )


def _example_table(example: str, name: str) -> TableSql:
    pipeline = parse_pipeline(tomllib.loads((EXAMPLES / example / "pipeline.toml").read_text()))
    return TableSql(dialect_for("redshift", pipeline.schema), pipeline, pipeline.table(name))


@pytest.mark.parametrize(("example", "table"), [("inventory_pg", "products"), ("debezium_shapes", "blobs")])
def test_every_value_is_bounded_with_json_size_once(example, table):
    # AWS, JSON_SIZE: "functionally identical to OCTET_LENGTH(JSON_SERIALIZE)": each call
    # serializes the value again. Semantic decodes (decimals, zoned timestamps, JSON),
    # varbyte and super fields read the field's text named once, as text fields do.
    sizes = _arguments(stage_insert_sql(_example_table(example, table)), "JSON_SIZE")
    assert sizes and all(sizes.count(a) == 1 for a in sizes), sorted(a for a in set(sizes) if sizes.count(a) > 1)

"""The records of a run (sync/sql/procedure/batch.py), pinned for a one-column and a
composite-key table: one behaviour per line."""

from __future__ import annotations

from sync.sql.procedure.batch import batch_sql, pending_in_order_sql, replay_sql
from tests.helpers import COMPOSITE_KEY, ONE_COLUMN, assert_lines, table_sql

ONE, COMPOSITE = table_sql(ONE_COLUMN), table_sql(COMPOSITE_KEY)


def test_the_batch_is_the_stream_past_the_watermark_up_to_the_bound():
    assert_lines(
        batch_sql(ONE),
        'FROM "cdc"."tag__stream" s',
        'LEFT JOIN "cdc"."tag__watermark" w ON w.kafka_partition = s.kafka_partition',
        "WHERE s.refresh_time >= (SELECT COALESCE(MAX(m.last_refresh_time), TIMESTAMP '1900-01-01 00:00:00')"
        ' FROM "cdc"."tag__watermark" m)',
        "AND s.kafka_offset > COALESCE(w.last_offset, -1)",
        "AND (s.refresh_time < v_until_time",
        "OR (s.kafka_partition = v_until_partition AND s.kafka_offset <= v_until_offset))))",
    )


def test_the_envelope_is_unwrapped_once_per_record():
    assert_lines(
        batch_sql(COMPOSITE),
        'CASE WHEN IS_OBJECT(s.payload."schema") THEN s.payload."payload" ELSE s.payload END AS _env,',
        'CASE WHEN IS_OBJECT(s.key_payload."schema") THEN s.key_payload."payload" ELSE s.key_payload END AS _key_env',
        'CASE WHEN f._x_o0 = \'d\' THEN f._env."before" ELSE f._env."after" END AS _img, f._env."source" AS _src',
    )


def test_the_operation_is_bounded_once_then_read_by_name():
    sql = batch_sql(ONE)
    assert_lines(
        sql,
        'batch_1 AS (SELECT f.*, (CASE WHEN JSON_SIZE(f._env."op") <= 65535 THEN f._env."op" END) AS "_b_o0" FROM batch f),',
        "SELECT f.*, CASE WHEN IS_VARCHAR(f._b_o0) THEN f._b_o0::varchar(65535)"
        ' WHEN f._b_o0 IS NOT NULL THEN JSON_SERIALIZE(f._b_o0) END AS "_x_o0"',
        "SELECT f._kafka_partition, f._kafka_offset, f._kafka_timestamp, f._refresh_time, f._payload, f._raw_value, f._env,"
        " f._key_env, f._x_o0 AS _op,",
    )
    assert sql.count("JSON_SIZE") == 1
    # PostgreSQL reads the member as text in place: nothing to bound.
    assert "_b_o0" not in batch_sql(table_sql(ONE_COLUMN, dialect="postgres"))


def test_records_being_replayed_join_the_batch_without_a_kafka_key():
    assert_lines(
        replay_sql(ONE),
        "UNION ALL",
        "CAST(NULL AS super)",
        'FROM "cdc"."tag__quarantine" r',
        "WHERE r.table_name = 'tag' AND r.handled = 'replaying'",
    )


def test_the_nth_pending_record_in_read_order():
    assert_lines(
        pending_in_order_sql(COMPOSITE, "x.kafka_offset", "v_offset", "3"),
        "SELECT x.kafka_offset",
        "INTO v_offset",
        "FROM (SELECT s.*, ROW_NUMBER() OVER (ORDER BY s.refresh_time, s.kafka_partition, s.kafka_offset) AS read_no",
        "WHERE x.read_no = 3",
    )

"""TOAST placeholders (sync/sql/procedure/toast.py), pinned for the composite-key table
(the one-column table has nothing TOAST-able)."""

from __future__ import annotations

from sync.sql.procedure.toast import toast_sql, unknown_toast_sql
from tests.helpers import COMPOSITE_KEY, assert_lines, table_sql

COMPOSITE = table_sql(COMPOSITE_KEY)


def test_a_placeholder_takes_the_newest_earlier_value_of_the_batch():
    sql = toast_sql(COMPOSITE)
    assert_lines(
        sql,
        "IF v_unavailable > 0 THEN",
        'UPDATE "cdc"."line__stage" s SET "note" = CASE WHEN s._unavailable NOT LIKE \'%|note|%\' THEN s."note"'
        ' WHEN u.rn0 IS NOT NULL THEN u.batch0 WHEN u.stored THEN u.stored0 ELSE s."note" END,',
        "MIN(CASE WHEN COALESCE(_unavailable, '') NOT LIKE '%|note|%' THEN _rn END) AS rn0",
        'LEFT JOIN "cdc"."line__stage" p0 ON p0."order_id" = w."order_id" AND p0."line_no" = w."line_no"'
        " AND p0._rn = m.rn0 AND p0._action = 'upsert'",
        # A column taken from the batch leaves the list; one only stored stays in it.
        "_unavailable = '|' || CASE WHEN s._unavailable LIKE '%|note|%' AND u.rn0 IS NULL THEN 'note|' ELSE '' END",
    )
    # One statement completes every column (one CASE each); one more quarantines what it could not.
    assert sql.count("UPDATE ") == 2 and sql.count("IF v_unavailable > 0 THEN") == 1


def test_else_the_stored_value_of_the_newest_stored_row():
    sql = toast_sql(COMPOSITE)
    assert_lines(
        sql,
        'FROM (SELECT w."order_id", w."line_no", t.stored_rn__ IS NOT NULL AS stored, m.rn0, p0."note" AS batch0, t."note" AS stored0',
        "ORDER BY t._source_pos DESC NULLS LAST, t._kafka_partition DESC, t._kafka_offset DESC) AS stored_rn__",
    )
    # The target's rows only, the newest of the key kept in the join.
    assert 'FROM "cdc"."line" t WHERE EXISTS' in sql and "UNION ALL" not in sql
    assert ') t ON t."order_id" = w."order_id" AND t."line_no" = w."line_no" AND t.stored_rn__ = 1\n' in sql


def test_else_the_record_is_quarantined():
    assert_lines(
        unknown_toast_sql(COMPOSITE),
        'UPDATE "cdc"."line__stage" s SET _action = \'quarantine\', _reason = SUBSTRING(\'no earlier value is known for the TOAST'
        " placeholder (__debezium_unavailable_value) in ' || BTRIM(s._unavailable, '|'), 1, 1000)",
        "WHERE s._rn = 1 AND s._action = 'upsert' AND s._unavailable <> '|'",
        'AND NOT EXISTS (SELECT 1 FROM "cdc"."line" t WHERE t."order_id" = s."order_id" AND t."line_no" = s."line_no");',
    )

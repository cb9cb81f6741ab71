"""TOAST placeholders (sync/sql/procedure/toast.py), pinned for the composite-key table
(the one-column table has nothing TOAST-able)."""

from __future__ import annotations

from sync.sql.procedure.toast import toast_sql, unknown_toast_sql
from tests.helpers import COMPOSITE_KEY, assert_lines, table_sql

COMPOSITE = table_sql(COMPOSITE_KEY)


def test_a_placeholder_takes_the_newest_earlier_value_of_the_batch():
    assert_lines(
        toast_sql(COMPOSITE),
        "IF v_unavailable > 0 THEN",
        'UPDATE "cdc"."line__stage" s SET "note" = p."note", _unavailable = REPLACE(s._unavailable, \'|note|\', \'|\')',
        "WHERE _action = 'upsert' AND _rn > 1 AND COALESCE(_unavailable, '') NOT LIKE '%|note|%'",
        "WHERE s._rn = 1 AND s._action = 'upsert' AND s._unavailable LIKE '%|note|%'",
    )


def test_else_the_stored_value_of_the_newest_stored_row():
    assert_lines(
        toast_sql(COMPOSITE),
        'UPDATE "cdc"."line__stage" s SET "note" = CASE WHEN s._unavailable LIKE \'%|note|%\' THEN t."note" ELSE s."note" END',
        "ORDER BY t._source_pos DESC NULLS LAST, t._kafka_partition DESC, t._kafka_offset DESC) AS stored_rn__",
        "WHERE o.stored_rn__ = 1) t",
    )


def test_else_the_record_is_quarantined():
    assert_lines(
        unknown_toast_sql(COMPOSITE),
        'UPDATE "cdc"."line__stage" s SET _action = \'quarantine\',',
        "WHERE s._rn = 1 AND s._action = 'upsert' AND s._unavailable <> '|'",
        'AND NOT EXISTS (SELECT 1 FROM "cdc"."line" t WHERE t."order_id" = s."order_id" AND t."line_no" = s."line_no");',
    )

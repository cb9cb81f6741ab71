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
        "MIN(CASE WHEN _action = 'upsert' AND COALESCE(_unavailable, '') NOT LIKE '%|note|%' THEN _rn END) AS rn0,",
        # ... since the key's newest delete in the batch: a delete ends the key's values.
        "MIN(CASE WHEN _action = 'delete' THEN _rn END) AS deleted__",
        'CASE WHEN m.deleted__ IS NULL OR m.rn0 < m.deleted__ THEN m.rn0 END AS rn0, p0."note" AS batch0, t."note" AS stored0',
        'LEFT JOIN "cdc"."line__stage" p0 ON p0."order_id" = w."order_id" AND p0."line_no" = w."line_no"'
        " AND p0._rn = m.rn0 AND p0._action = 'upsert'",
        # The columns still without a value once the batch and the stored row are read ...
        "FROM (SELECT v.*, CASE WHEN NOT (v.stored OR v.older) THEN '|' || CASE WHEN v._unavailable LIKE '%|note|%'"
        " AND v.rn0 IS NULL THEN 'note|' ELSE '' END END AS unknown__",
        # ... are a quarantined winner's marks (its reason names them); an applied winner
        # keeps its own: its history version takes the previous version's value.
        "_unavailable = CASE WHEN u.unknown__ <> '|' THEN u.unknown__ ELSE s._unavailable END",
    )
    # One statement completes every column (one CASE each); one more quarantines what it could not.
    assert sql.count("UPDATE ") == 2 and sql.count("IF v_unavailable > 0 THEN") == 1


def test_else_the_stored_value_of_the_newest_stored_row():
    sql = toast_sql(COMPOSITE)
    assert_lines(
        sql,
        # Not when the batch deletes the key, nor a soft-deleted row (the composite table is soft).
        'FROM (SELECT w."order_id", w."line_no", w._unavailable, t.stored_rn__ IS NOT NULL AND m.deleted__ IS NULL'
        " AND NOT t._deleted AS stored,",
        "ORDER BY t._source_pos DESC NULLS LAST, t._kafka_partition DESC, t._kafka_offset DESC) AS stored_rn__",
    )
    # The target's rows only, the newest of the key kept in the join.
    assert 'FROM "cdc"."line" t WHERE EXISTS' in sql and "UNION ALL" not in sql
    assert ') t ON t."order_id" = w."order_id" AND t."line_no" = w."line_no" AND t.stored_rn__ = 1\n' in sql


def test_else_the_record_is_quarantined_with_its_keys_events_since_its_delete():
    assert_lines(
        toast_sql(COMPOSITE),
        "_action = CASE WHEN u.unknown__ <> '|' THEN 'quarantine' ELSE s._action END,",
        # unless it is older than what is stored for its key, a delete too: it is stale
        # (tests/test_history.py: a late TOAST placeholder before the stored state)
        "COALESCE(w._source_pos < t._source_pos, false) AS older,",
    )
    hard = toast_sql(table_sql(COMPOSITE_KEY.replace('delete_mode = "soft"', 'delete_mode = "hard"')))
    assert_lines(
        hard,
        'UNION ALL SELECT t."order_id", t."line_no", t._source_pos, t._kafka_partition, t._kafka_offset, NULL, true'
        ' FROM "cdc"."line__deleted" t',
    )
    assert_lines(
        unknown_toast_sql(COMPOSITE),
        # The key's events since its newest delete go with it; that delete becomes the winner.
        'UPDATE "cdc"."line__stage" s SET _rn = CASE WHEN s._action = \'delete\' THEN 1 ELSE s._rn END,',
        "_action = CASE WHEN s._action = 'delete' THEN s._action ELSE 'quarantine' END,",
        "_reason = SUBSTRING(CASE WHEN s._action = 'delete' THEN s._reason ELSE 'no earlier value is known for the TOAST"
        " placeholder (__debezium_unavailable_value) in ' || BTRIM(s._unavailable, '|') END, 1, 1000)",
        'WHERE w._rn = 1 AND w._action = \'quarantine\' AND w._reason IS NULL GROUP BY w."order_id", w."line_no") k',
        'WHERE s."order_id" = k."order_id" AND s."line_no" = k."line_no" AND s._rn <= COALESCE(k.deleted__, s._rn)',
        "AND (s._action IN ('upsert', 'delete') AND s._rn > 1 OR s._action = 'quarantine' AND s._reason IS NULL);",
    )

"""The apply (sync/sql/procedure/apply.py), pinned for a one-column table (hard deletes)
and the composite-key table (soft deletes): one behaviour per line."""

from __future__ import annotations

from sync.sql.procedure.apply import apply_hard_sql, apply_soft_sql, delete_values_sql
from tests.helpers import COMPOSITE_KEY, ONE_COLUMN, assert_lines, table_sql

ONE, COMPOSITE = table_sql(ONE_COLUMN), table_sql(COMPOSITE_KEY)


def test_hard_mode_deletes_every_winning_key_then_inserts_the_upserts():
    assert_lines(
        apply_hard_sql(ONE),
        'DELETE FROM "cdc"."tag"',
        'USING "cdc"."tag__stage" _s',
        "WHERE _s._rn = 1 AND _s._action IN ('upsert', 'delete')",
        'AND "cdc"."tag"."id" = _s."id";',
        'INSERT INTO "cdc"."tag" ("id", "_source_ts", "_source_pos", "_kafka_partition", "_kafka_offset", "_synced_at")',
        "WHERE s._rn = 1 AND s._action = 'upsert';",
    )


def test_hard_mode_remembers_deleted_keys_and_forgets_them_on_a_newer_upsert():
    assert_lines(
        apply_hard_sql(ONE),
        'DELETE FROM "cdc"."tag__deleted"',
        'AND "cdc"."tag__deleted"."id" = s."id";',
        'INSERT INTO "cdc"."tag__deleted" ("id", _source_ts, _source_pos, _kafka_partition, _kafka_offset, _kafka_timestamp, _deleted_at)',
        "WHERE s._rn = 1 AND s._action = 'delete';",
    )


def test_soft_mode_replaces_upserted_rows_and_marks_deleted_ones():
    sql = apply_soft_sql(COMPOSITE)
    assert_lines(
        sql,
        "WHERE _s._rn = 1 AND _s._action = 'upsert'",
        'AND "cdc"."line"."order_id" = _s."order_id" AND "cdc"."line"."line_no" = _s."line_no";',
        'UPDATE "cdc"."line" t SET _deleted = true,',
        'AND NOT EXISTS (SELECT 1 FROM "cdc"."line" t WHERE t."order_id" = s."order_id" AND t."line_no" = s."line_no");',
    )
    assert "__deleted" not in sql


def test_a_soft_delete_keeps_the_values_of_the_newest_earlier_state():
    assert_lines(
        delete_values_sql(COMPOSITE),
        'UPDATE "cdc"."line__stage" s SET "note" = COALESCE(s."note", p."note")',
        'UPDATE "cdc"."line__stage" s SET "note" = COALESCE(s."note", t."note")',
        'WHERE _action = \'upsert\' AND _rn > 1 GROUP BY "order_id", "line_no") m',
    )

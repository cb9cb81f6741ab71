"""Truncate events (sync/sql/procedure/truncate.py), pinned for a one-column table (hard
deletes) and the composite-key table (soft deletes)."""

from __future__ import annotations

from sync.sql.procedure.truncate import truncate_sql
from tests.helpers import COMPOSITE_KEY, ONE_COLUMN, assert_lines, table_sql

ONE = table_sql(ONE_COLUMN, on_truncate="delete")
COMPOSITE = table_sql(COMPOSITE_KEY)


def test_the_newest_truncate_position_decides():
    assert_lines(
        truncate_sql(ONE),
        "IF v_truncates > 0 AND v_truncate_pos IS NOT NULL THEN",
        "WHERE _rn = 1 AND _action IN ('upsert', 'delete') AND (_rank_pos IS NULL OR _rank_pos < v_truncate_pos);",
        "ELSIF v_truncates > 0 THEN",
    )


def test_hard_deletes_remember_the_removed_keys_at_the_truncate():
    assert_lines(
        truncate_sql(ONE),
        'SELECT t."id", v_truncate_ts, v_truncate_pos, NULL, NULL, v_started',
        'DELETE FROM "cdc"."tag"',
        "WHERE (_source_pos IS NULL OR _source_pos < v_truncate_pos);",
    )


def test_soft_deletes_mark_the_rows_at_the_truncate():
    assert_lines(
        truncate_sql(COMPOSITE),
        'UPDATE "cdc"."line" SET _deleted = true, _source_ts = v_truncate_ts, _source_pos = v_truncate_pos,',
        'UPDATE "cdc"."line" SET _deleted = true, _synced_at = v_started;',
    )


def test_kafka_order_every_stored_row_precedes_the_truncate():
    assert_lines(
        truncate_sql(table_sql(ONE_COLUMN, on_truncate="delete", order_by="kafka")),
        "IF v_truncates > 0 THEN",
        'DELETE FROM "cdc"."tag";',
        "AND ((x._kafka_partition = s._kafka_partition AND x._kafka_offset > s._kafka_offset)",
        "OR (x._kafka_partition <> s._kafka_partition AND x._kafka_timestamp > s._kafka_timestamp)));",
    )

"""History mode's tombstone-only deletes (sync/sql/procedure/history_tombstones.py), pinned
for a one-column and a composite-key table of an unwrapped topic: which tombstones a
restart re-sent, and which wait as a marker for their key's next record. What they do is
tested on a database in tests/test_history.py and tests/test_history_rebuild_property.py;
here, one behaviour per line of SQL."""

from __future__ import annotations

from sync.config import HistoryConfig
from sync.sql.procedure.history_tombstones import pending_tombstones, void_tombstones_sql
from tests.helpers import COMPOSITE_KEY, ONE_COLUMN, assert_lines, table_sql

ONE = table_sql(ONE_COLUMN, format="debezium-unwrap", history=HistoryConfig())
COMPOSITE = table_sql(COMPOSITE_KEY, format="debezium-unwrap", history=HistoryConfig())
# The key's next event in the batch, in Kafka order: 1 when it is a tombstone, NULL when none.
NEXT_IS_TOMBSTONE = (
    "OVER (PARTITION BY {keys} ORDER BY _kafka_timestamp ASC NULLS FIRST, _kafka_partition, _kafka_offset) AS tombstone_next__"
)


def test_a_tombstone_is_re_sent_when_a_change_of_its_key_follows_it_at_its_position():
    assert_lines(
        void_tombstones_sql(ONE),
        'DELETE FROM "cdc"."tag__history"',
        "WHERE s._action IN ('upsert', 'delete', 'stale', 'truncated') AND t._op = 'd'"
        " AND CASE WHEN s._op IN ('c', 'r', 'u') THEN s._op ELSE 'd' END <> 'd'",
        "AND t._valid_from_pos = COALESCE(s._source_pos, s._rank_pos) AND c._valid_from_pos = t._valid_from_pos",
        "AND c._op NOT IN ('d', 't')",
    )


def test_a_tombstone_stays_when_its_copy_is_the_next_event_after_a_copy_of_the_event_before_it():
    assert_lines(
        void_tombstones_sql(ONE),
        NEXT_IS_TOMBSTONE.format(keys='"id"'),
        # The batch ends on the copy (no next event): it may yet be followed, so it is kept too.
        'WHERE COALESCE(k.tombstone_next__, 1) = 1 AND k."id" = s."id"',
    )
    assert_lines(void_tombstones_sql(COMPOSITE), NEXT_IS_TOMBSTONE.format(keys='"order_id", "line_no"'))


def test_a_tombstone_waits_as_a_marker_when_the_batch_ends_on_the_copy_before_it():
    pending = pending_tombstones(ONE)
    assert_lines(
        pending, 'WHERE k.tombstone_next__ = 1 AND k."id" = s."id"', 'WHERE k.tombstone_next__ IS NULL AND k."id" = s."id"'
    )
    # No copy followed by a tombstone, one followed by nothing: each the key's last copy (no later one).
    assert pending.count("AND NOT EXISTS (SELECT 1 FROM (SELECT *") == 1 and pending.count("AND EXISTS") == 1
    assert pending.count('AND NOT EXISTS (SELECT 1 FROM "cdc"."tag__stage" l WHERE') == 2


def test_only_the_last_resent_copy_before_a_tombstone_keeps_it():
    """T c T c T c: a restart re-sent the tombstone and the create twice; the copy a tombstone
    follows is not the last one, so the tombstone is no delete (the property test's draw
    pg_unwrap_tombstone_history with two restarts found it)."""
    assert_lines(
        pending_tombstones(ONE),
        "AND NOT EXISTS (SELECT 1 FROM \"cdc\".\"tag__stage\" l WHERE l._action IN ('upsert', 'delete', 'stale', 'truncated') AND l.\"id\" = s.\"id\"",
        "AND COALESCE(l._source_pos, l._rank_pos) = t._valid_from_pos",
    )


def test_the_markers_of_the_batchs_keys_are_decided_by_it():
    assert_lines(
        void_tombstones_sql(COMPOSITE),
        'WHERE p._op = \'p\' AND EXISTS (SELECT 1 FROM "cdc"."line__stage" s'
        " WHERE s._action IN ('upsert', 'delete', 'stale', 'truncated') AND s.\"order_id\" = p.\"order_id\" AND s.\"line_no\" = p.\"line_no\")) v",
        'WHERE "cdc"."line__history"."order_id" = v."order_id" AND "cdc"."line__history"."line_no" = v."line_no"',
    )

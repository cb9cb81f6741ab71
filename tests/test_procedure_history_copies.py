"""History mode's copy rules (sync/sql/procedure/history_copies.py), pinned for a one-column
and a composite-key table: which of a batch's events are new versions and which repeat
versions the history holds. What they do is tested on a database in tests/test_history.py
and tests/test_property_cdc.py; here, one behaviour per line of SQL."""

from __future__ import annotations

from sync.config import HistoryConfig
from sync.sql.procedure.history import versions_sql
from sync.sql.procedure.history_copies import same_version
from tests.helpers import COMPOSITE_KEY, ONE_COLUMN, assert_lines, table_sql

ONE = table_sql(ONE_COLUMN, history=HistoryConfig())
COMPOSITE = table_sql(COMPOSITE_KEY, history=HistoryConfig())
UNWRAPPED = table_sql(ONE_COLUMN, format="debezium-unwrap", history=HistoryConfig())


def test_only_a_keys_positions_with_more_than_one_version_are_numbered():
    assert_lines(
        versions_sql(ONE),
        'FROM (SELECT "id", pos__ FROM _at',
        "SELECT e.\"id\", COALESCE(e._valid_from_pos, '') FROM _ev e) v",
        'GROUP BY "id", pos__ HAVING COUNT(*) > 1),',
        'WHERE EXISTS (SELECT 1 FROM _dup u WHERE u."id" = y."id" AND u.pos__ = y.pos__)) x),',
        'COUNT(*) OVER (PARTITION BY x."id", x.pos__, x.imageless__) AS members__',
    )
    assert_lines(
        versions_sql(COMPOSITE),
        'GROUP BY "order_id", "line_no", pos__ HAVING COUNT(*) > 1),',
        'COUNT(*) OVER (PARTITION BY x."order_id", x."line_no", x.pos__, x.imageless__) AS members__',
    )


def test_an_event_alone_at_its_position_is_a_version_and_a_numbered_one_unless_a_copy():
    assert_lines(
        versions_sql(ONE),
        'WHERE NOT EXISTS (SELECT 1 FROM _dup u WHERE u."id" = e."id" AND u.pos__ = COALESCE(e._valid_from_pos, \'\'))',
        "WHERE x.new__ AND NOT EXISTS (SELECT 1 FROM _copy c",
        'WHERE c."id" = x."id" AND c.pos__ = x.pos__ AND c.imageless__ = x.imageless__ AND c.n__ = x.n__)) w;',
    )


def test_a_repeat_is_a_copy_at_a_step_of_one_or_where_a_restart_shows():
    sql = versions_sql(COMPOSITE)
    assert_lines(
        sql,
        "WHERE g.step__ = 1 OR g.length__ >= g.step__ AND (x._op = 'c' AND x.prev_op__ IN ('c', 'r', 'u') OR x._op IN ('u', 'd') AND x.prev_op__ = 'd')",
        "OR p._kafka_partition = x._kafka_partition",
    )


def test_the_history_is_read_at_the_batchs_positions_only_behind_its_count():
    assert_lines(
        versions_sql(ONE),
        "WHERE h._op <> 't'",
        "AND v_history_recompute > 0",
        "AND COALESCE(h._valid_from_pos, '') >= (SELECT MIN(COALESCE(e._valid_from_pos, '')) FROM _ev e)",
    )
    # Unwrapped topics count no positions, and a tombstone waiting as a marker is no version.
    unwrapped = versions_sql(UNWRAPPED)
    assert_lines(unwrapped, "WHERE h._op NOT IN ('t', 'p')")
    assert "v_history_recompute > 0" not in unwrapped


def test_one_version_is_its_key_its_position_and_its_kafka_record():
    assert_lines(
        same_version(COMPOSITE, "h", "n"),
        'h."order_id" = n."order_id" AND h."line_no" = n."line_no"',
        "AND COALESCE(h._valid_from_pos, '') = COALESCE(n._valid_from_pos, '')",
        "AND h._kafka_partition = n._kafka_partition AND h._kafka_offset = n._kafka_offset",
    )

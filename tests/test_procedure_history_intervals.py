"""History mode's intervals (sync/sql/procedure/history_intervals.py), pinned for a
one-column and a composite-key table: the order of a key's versions, each version's
`_valid_to`, `_valid_to_pos` and `_is_current`, the TOAST placeholders filled from the
version before, and the recompute's variants (every key or the batch's, a sync batch's
waiting tombstones, no placeholders). What they do is tested on a database in
tests/test_history.py and tests/test_history_rebuild_property.py; here, one behaviour per
line of SQL."""

from __future__ import annotations

import pytest

from sync.config import HistoryConfig
from sync.sql.procedure.history_intervals import intervals, intervals_sql, mark, toast_columns, version_order
from tests.helpers import COMPOSITE_KEY, ONE_COLUMN, assert_lines, table_sql

ONE = table_sql(ONE_COLUMN, history=HistoryConfig())
COMPOSITE = table_sql(COMPOSITE_KEY, history=HistoryConfig())
UNWRAPPED = table_sql(ONE_COLUMN, format="debezium-unwrap", history=HistoryConfig())
ORDER = "{r}._valid_from_pos ASC NULLS FIRST, {r}._kafka_timestamp ASC NULLS FIRST, {r}._kafka_partition, {r}._kafka_offset"


def _lines(ctx, row: str, marked: bool = False) -> str:
    """The interval's columns as a SELECT list holds them."""
    return ",\n".join(intervals(ctx, row, marked))


def test_a_keys_versions_are_in_source_order_then_kafka_order_a_version_without_a_position_first():
    assert version_order("x") == ORDER.format(r="x")


def test_newest_first_is_the_exact_reverse_of_the_version_order():
    assert version_order("x", newest_first=True) == (
        "x._valid_from_pos DESC NULLS LAST, x._kafka_timestamp DESC NULLS LAST, x._kafka_partition DESC, x._kafka_offset DESC"
    )


def test_a_version_ends_where_the_next_begins_in_source_order():
    one = f'PARTITION BY w."id" ORDER BY {ORDER.format(r="w")}'
    assert_lines(
        _lines(ONE, "w"),
        f"ELSE LEAD(w._valid_from) OVER ({one}) END AS valid_to,",
        f"ELSE LEAD(w._valid_from_pos) OVER ({one}) END AS valid_to_pos,",
    )
    composite = f'PARTITION BY w."order_id", w."line_no" ORDER BY {ORDER.format(r="w")}'
    assert_lines(_lines(COMPOSITE, "w"), f"ELSE LEAD(w._valid_from) OVER ({composite}) END AS valid_to,")


def test_a_delete_version_is_closed_at_its_own_position():
    # deletes = "close" (the default): a delete, like a truncate's marker, lasts no time
    assert_lines(
        _lines(ONE, "w"),
        "CASE WHEN w._op IN ('d', 't') THEN w._valid_from",
        "CASE WHEN w._op IN ('d', 't') THEN w._valid_from_pos",
    )


def test_the_newest_version_is_current_unless_a_delete_or_a_marker():
    assert_lines(
        _lines(COMPOSITE, "w"),
        f"w._op NOT IN ('d', 't') AND LEAD(1) OVER (PARTITION BY w.\"order_id\", w.\"line_no\" ORDER BY {ORDER.format(r='w')})"
        " IS NULL AS is_current",
    )


def test_with_tombstone_deletes_a_delete_lasts_and_is_current_until_the_key_is_written_again():
    tombstones = table_sql(ONE_COLUMN, history=HistoryConfig(deletes="tombstone"))
    assert_lines(
        _lines(tombstones, "w"),
        "CASE WHEN w._op IN ('t') THEN w._valid_from",
        f"w._op NOT IN ('t') AND LEAD(1) OVER (PARTITION BY w.\"id\" ORDER BY {ORDER.format(r='w')}) IS NULL AS is_current",
    )


def test_a_waiting_tombstone_is_no_version_of_its_key():
    # Debezium, New Record State Extraction, `delete.tombstone.handling.mode`
    # (https://debezium.io/documentation/reference/stable/transformations/event-flattening.html):
    # "`tombstone` (default):: The SMT retains `TOMBSTONE` records in the stream." A tombstone
    # waiting for its key's next record (`pending__ = 1`) has a window of its own, no duration,
    # and is never current; the key's versions end and stay current as if it were not there.
    window = f'PARTITION BY x."id", x.pending__ ORDER BY {ORDER.format(r="x")}'
    assert_lines(
        _lines(UNWRAPPED, "x", marked=True),
        "CASE WHEN x._op IN ('d', 't') OR x.pending__ = 1 THEN x._valid_from",
        f"ELSE LEAD(x._valid_from) OVER ({window}) END AS valid_to,",
        f"x._op NOT IN ('d', 't') AND x.pending__ = 0 AND LEAD(1) OVER ({window}) IS NULL AS is_current",
    )


# Debezium, PostgreSQL connector, "Toasted values"
# (https://debezium.io/documentation/reference/stable/connectors/postgresql.html#postgresql-toasted-values):
# "any unchanged TOAST column value that is not part of the replica identity is not contained in
# the event"; "As Debezium cannot safely provide the column value in this case, the connector
# returns a placeholder value as defined by the connector configuration property,
# `unavailable.value.placeholder`." The stage marks such a column `|note|` in `_unavailable`.


def test_placeholders_are_filled_in_toastable_columns_but_super_and_varbyte():
    assert toast_columns(COMPOSITE) == ["note"]
    assert toast_columns(ONE) == []
    # Redshift's window functions neither partition by nor return SUPER or VARBYTE: such a
    # placeholder in a superseded version keeps NULL and its mark
    for family in ("super", "varbyte(100)"):
        assert toast_columns(table_sql(COMPOSITE_KEY.replace("varchar(100)", family), history=HistoryConfig())) == []


def test_a_columns_placeholder_mark_is_its_name_between_bars_as_a_quoted_literal():
    assert mark("note") == "'%|note|%'"
    assert mark("o'k") == "'%|o''k|%'"


def test_each_version_takes_its_recomputed_interval():
    assert_lines(
        intervals_sql(ONE),
        'UPDATE "cdc"."tag__history" h SET _valid_to = c.valid_to, _valid_to_pos = c.valid_to_pos, _is_current = c.is_current',
    )


@pytest.mark.parametrize(
    ("dialect", "valid_to", "valid_to_pos"),
    [
        (
            "redshift",
            "WHERE (n._valid_to <> n.valid_to OR (n._valid_to IS NULL) <> (n.valid_to IS NULL))",
            "OR (n._valid_to_pos <> n.valid_to_pos OR (n._valid_to_pos IS NULL) <> (n.valid_to_pos IS NULL))",
        ),
        ("postgres", "WHERE n._valid_to IS DISTINCT FROM n.valid_to", "OR n._valid_to_pos IS DISTINCT FROM n.valid_to_pos"),
    ],
    ids=["redshift", "postgres"],
)
def test_only_the_versions_whose_interval_changes_are_written(dialect, valid_to, valid_to_pos):
    one = intervals_sql(table_sql(ONE_COLUMN, dialect, history=HistoryConfig()))
    assert_lines(one, valid_to, valid_to_pos, "OR n._is_current <> n.is_current) c")
    composite = intervals_sql(table_sql(COMPOSITE_KEY, dialect, history=HistoryConfig()))
    assert_lines(composite, valid_to, valid_to_pos, "OR n._is_current <> n.is_current")


def test_the_batchs_keys_are_recomputed_or_every_key():
    assert_lines(
        intervals_sql(ONE),
        "WHERE EXISTS (SELECT 1 FROM \"cdc\".\"tag__stage\" s WHERE s._action IN ('upsert', 'delete', 'stale', 'truncated')"
        ' AND s."id" = v."id")) x) n',
    )
    assert_lines(
        intervals_sql(COMPOSITE),
        "WHERE EXISTS (SELECT 1 FROM \"cdc\".\"line__stage\" s WHERE s._action IN ('upsert', 'delete', 'stale', 'truncated')"
        ' AND s."order_id" = v."order_id" AND s."line_no" = v."line_no")) x) n',
    )
    every_key = intervals_sql(ONE, keys_of_batch=False)
    assert_lines(every_key, 'FROM "cdc"."tag__history" v) x) n')
    assert "tag__stage" not in every_key


def test_a_placeholder_takes_the_value_of_the_newest_earlier_version_that_had_one():
    sql = intervals_sql(COMPOSITE)
    keys = 'PARTITION BY x."order_id", x."line_no"'
    numbered = 'PARTITION BY v."order_id", v."line_no"'
    assert_lines(
        sql,
        # each version that knows the value starts a group, which the placeholders after it join
        # a truncate's closing marker (on_truncate = "delete") joins the placeholders: it takes the value
        f"COUNT(CASE WHEN v._unavailable LIKE '%|note|%' OR v._op = 't' THEN NULL ELSE 1 END) OVER ({numbered}"
        f" ORDER BY {ORDER.format(r='v')}",
        'ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS "known_note"',
        f'FIRST_VALUE(x."note") OVER ({keys}, x."known_note" ORDER BY {ORDER.format(r="x")}',
        # a value the event carried is kept
        '"note" = CASE WHEN h._unavailable LIKE \'%|note|%\' OR h._op = \'t\' THEN c."note" ELSE h."note" END',
    )


@pytest.mark.parametrize(
    ("dialect", "filled"),
    [
        (
            "redshift",
            "OR (n._unavailable LIKE '%|note|%' OR n._op = 't')"
            ' AND (n."stored_note" <> n."note" OR (n."stored_note" IS NULL) <> (n."note" IS NULL))) c',
        ),
        ("postgres", "OR (n._unavailable LIKE '%|note|%' OR n._op = 't') AND n.\"stored_note\" IS DISTINCT FROM n.\"note\") c"),
    ],
    ids=["redshift", "postgres"],
)
def test_a_version_whose_filled_placeholder_changes_is_written(dialect, filled):
    assert_lines(intervals_sql(table_sql(COMPOSITE_KEY, dialect, history=HistoryConfig())), filled)


def test_without_placeholders_to_fill_no_value_is_read_or_written():
    plain = intervals_sql(table_sql(COMPOSITE_KEY.replace('on_truncate = "delete"', ""), history=HistoryConfig()), fill=False)
    assert_lines(
        plain,
        'UPDATE "cdc"."line__history" h SET _valid_to = c.valid_to, _valid_to_pos = c.valid_to_pos, _is_current = c.is_current',
        "OR n._is_current <> n.is_current) c",
    )
    assert '"note"' not in plain
    sql = intervals_sql(COMPOSITE, fill=False)
    assert "known_note" not in sql and "_unavailable LIKE" not in sql
    # a truncate's closing marker takes the value of the version before it
    assert_lines(
        sql,
        '"note" = CASE WHEN h._op = \'t\' THEN c."note" ELSE h."note" END',
        'CASE WHEN x._op = \'t\' THEN LAG(x."note") OVER (PARTITION BY x."order_id", x."line_no" ORDER BY'
        f" {ORDER.format(r='x')})",
        'OR n._op = \'t\' AND (n."stored_note" <> n."note" OR (n."stored_note" IS NULL) <> (n."note" IS NULL))) c',
    )


def test_a_tombstone_the_sync_batch_leaves_waiting_becomes_a_marker():
    sql = intervals_sql(UNWRAPPED)
    assert_lines(
        sql,
        'LEFT JOIN (SELECT DISTINCT t."id", t._valid_from_pos, t._kafka_partition, t._kafka_offset,',
        "CASE WHEN v._op = 'p' OR p._kafka_offset IS NOT NULL THEN 1 ELSE 0 END AS pending__",
        "x._op, CASE WHEN x.pending__ = 1 THEN 'p' ELSE x._op END AS op,",
        "OR n._op <> n.op) c",
        'UPDATE "cdc"."tag__history" h SET _valid_to = c.valid_to, _valid_to_pos = c.valid_to_pos, _is_current = c.is_current,'
        " _op = c.op",
    )


def test_outside_a_sync_batch_only_the_stored_markers_wait():
    # a backfill snapshot's recompute (`history_snapshot`) decides no tombstone
    sql = intervals_sql(UNWRAPPED, keys_of_batch=False, in_batch=False)
    assert_lines(sql, "CASE WHEN v._op = 'p' THEN 1 ELSE 0 END AS pending__")
    assert "LEFT JOIN" not in sql

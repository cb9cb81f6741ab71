"""History mode's statements (sync/sql/procedure/history.py), pinned for a one-column and a
composite-key table: where a version begins, the batch's count of stored versions that need
the full recompute of their keys' intervals, the short path that closes each key's current
version instead, a truncate's closing markers, and the order of the statements. What they
do is tested on a database in tests/test_history.py and tests/test_history_rebuild.py;
tests/test_history_sql.py holds the statements' shape on the procedure's paths; here, one
behaviour per line of SQL."""

from __future__ import annotations

import pytest

from sync.config import HistoryConfig
from sync.sql.procedure.history import history_counts, history_sql, truncate_markers_sql, versions_sql
from tests.helpers import COMPOSITE_KEY, ONE_COLUMN, assert_lines, table_sql

ONE = table_sql(ONE_COLUMN, history=HistoryConfig())
COMPOSITE = table_sql(COMPOSITE_KEY, history=HistoryConfig())
UNWRAPPED = table_sql(ONE_COLUMN, format="debezium-unwrap", history=HistoryConfig())
UNWRAPPED_COMPOSITE = table_sql(COMPOSITE_KEY, format="debezium-unwrap", history=HistoryConfig())
# How two versions of the composite-key table compare `note` (a placeholder in the later, `b`,
# matches any value), by dialect.
SAME_NOTE = {
    "redshift": 'OR (b._unavailable LIKE \'%|note|%\' OR NOT (a."note" <> b."note" OR (a."note" IS NULL) <> (b."note" IS NULL))))),',
    "postgres": 'OR (b._unavailable LIKE \'%|note|%\' OR NOT a."note" IS DISTINCT FROM b."note"))),',
}


def _count(ctx) -> str:
    (count,) = history_counts(ctx, "").values()
    return count


def test_a_version_begins_at_its_events_source_time_and_position():
    # a record without a source time or position: its Kafka time, and the position the merge ranked it at
    assert_lines(
        versions_sql(ONE),
        'SELECT s."id" AS "id", COALESCE(s._source_ts, s._kafka_timestamp) AS "_valid_from",',
        'COALESCE(s._source_pos, s._rank_pos) AS "_valid_from_pos",',
    )
    assert_lines(
        versions_sql(COMPOSITE),
        'COALESCE(s._source_ts, s._kafka_timestamp) AS "_valid_from",',
        'COALESCE(s._source_pos, s._rank_pos) AS "_valid_from_pos",',
    )


@pytest.mark.parametrize("dialect", ["redshift", "postgres"])
def test_a_toast_placeholder_in_the_later_version_matches_any_value_of_the_earlier(dialect):
    # Debezium, PostgreSQL connector, "Toasted values"
    # (https://debezium.io/documentation/reference/stable/connectors/postgresql.html#postgresql-toasted-values):
    # "As Debezium cannot safely provide the column value in this case, the connector returns a
    # placeholder value as defined by the connector configuration property, `unavailable.value.placeholder`."
    # A re-sent event whose column holds the placeholder repeats a version with any value there.
    ctx = table_sql(COMPOSITE_KEY, dialect, history=HistoryConfig())
    assert_lines(versions_sql(ctx), "AND (b._op = 'd'", SAME_NOTE[dialect])
    # a table without value columns: two versions are the same when both or neither is a delete
    assert_lines(
        versions_sql(table_sql(ONE_COLUMN, dialect, history=HistoryConfig())),
        "WHERE b.new__ AND b.members__ > 1 AND a.members__ > 1 AND (a._op = 'd') = (b._op = 'd')),",
    )


def test_the_recompute_counts_only_stored_versions_of_the_batchs_keys():
    # a key's versions count only when a change of the key becomes a version: a key whose
    # only records in the batch are quarantined or tombstones inserts none before them
    assert_lines(
        _count(ONE),
        'AND EXISTS (SELECT 1 FROM "cdc"."tag__stage" s WHERE s._action IN (\'upsert\', \'delete\') AND s."id" = h."id"',
    )
    assert_lines(
        _count(COMPOSITE),
        """AND EXISTS (SELECT 1 FROM "cdc"."line__stage" s WHERE s._action IN ('upsert', 'delete')"""
        ' AND s."order_id" = h."order_id" AND s."line_no" = h."line_no"',
    )


def test_the_recompute_counts_a_stored_version_at_or_after_its_own_keys_first_change():
    # the batch's oldest position prunes the scan; the key's own first change decides
    # (tests/test_history.py: a batch older than another key's stored version)
    assert_lines(_count(ONE), "AND COALESCE(s._source_pos, '') <= COALESCE(h._valid_from_pos, '')))")
    # with TOAST-able columns too: a stored placeholder before every change of the batch keeps
    # its value (tests/test_history.py: a batch after a stored TOAST placeholder)
    assert_lines(_count(COMPOSITE), "AND COALESCE(s._source_pos, '') <= COALESCE(h._valid_from_pos, '')))")
    assert "_unavailable" not in _count(COMPOSITE)


def test_an_unwrapped_topic_counts_only_the_placeholders_its_keys_versions_hold():
    """Its tombstones re-sent or waiting always take the full recompute, so the batch's
    positions are not counted; a TOAST placeholder still is (the recompute fills it)."""
    count = _count(UNWRAPPED_COMPOSITE)
    assert_lines(count, "WHERE h._unavailable LIKE '%|%|%'")
    assert "_valid_from_pos" not in count


def test_the_full_recompute_runs_when_the_batch_or_a_stored_version_of_its_keys_needs_it():
    # the batch's own TOAST placeholders (`v_unavailable`) count only with a TOAST-able column
    assert_lines(history_sql(ONE), "IF v_history_recompute > 0 THEN")
    # after a truncate's branch, which recomputes every key
    assert_lines(history_sql(COMPOSITE), "ELSIF v_unavailable > 0 OR v_history_recompute > 0 THEN")


def test_the_short_path_runs_before_the_insert_exactly_when_the_recompute_does_not():
    # the negation of the branches after the INSERT, each condition spelled once
    assert_lines(history_sql(ONE), "IF NOT (v_history_recompute > 0) THEN")
    assert_lines(
        history_sql(COMPOSITE),
        "IF NOT ((v_truncates > 0 AND v_truncate_pos IS NOT NULL) OR v_unavailable > 0 OR v_history_recompute > 0) THEN",
    )
    sql = history_sql(ONE)
    assert sql.index("SET _valid_to = f._valid_from") < sql.index('INSERT INTO "cdc"."tag__history"')


def test_otherwise_each_keys_current_version_ends_where_its_first_event_begins():
    assert_lines(
        history_sql(ONE),
        'UPDATE "cdc"."tag__history" h SET _valid_to = f._valid_from, _valid_to_pos = f._valid_from_pos, _is_current = false',
        'FROM (SELECT e.*, ROW_NUMBER() OVER (PARTITION BY e."id" ORDER BY e._valid_from_pos ASC NULLS FIRST,'
        " e._kafka_timestamp ASC NULLS FIRST, e._kafka_partition, e._kafka_offset) AS first__",
        "WHERE r.first__ = 1) f",
        # the first event begins as its version does (`versions_sql`), and superseded events are versions too
        'FROM (SELECT s."id", COALESCE(s._source_ts, s._kafka_timestamp) AS _valid_from,',
        "COALESCE(s._source_pos, s._rank_pos) AS _valid_from_pos, s._kafka_timestamp, s._kafka_partition,",
        "FROM \"cdc\".\"tag__stage\" s WHERE s._action IN ('upsert', 'delete', 'stale', 'truncated')) e) r",
    )


def test_the_short_path_closes_only_a_current_version_older_than_the_keys_first_event():
    assert_lines(
        history_sql(ONE),
        'WHERE h."id" = f."id" AND h._is_current AND COALESCE(h._valid_from_pos, \'\') < f._valid_from_pos;',
    )
    assert_lines(
        history_sql(COMPOSITE),
        'WHERE h."order_id" = f."order_id" AND h."line_no" = f."line_no" AND h._is_current'
        " AND COALESCE(h._valid_from_pos, '') < f._valid_from_pos;",
    )


def test_an_unwrapped_topic_recomputes_without_filling_when_nothing_holds_a_placeholder():
    # Debezium, New Record State Extraction, `delete.tombstone.handling.mode`
    # (https://debezium.io/documentation/reference/stable/transformations/event-flattening.html):
    # "`tombstone` (default):: The SMT retains `TOMBSTONE` records in the stream." A re-sent or
    # waiting tombstone changes the interval of the version before it, wherever that lies, so
    # the short path (the current version closed) is never taken.
    sql = history_sql(UNWRAPPED_COMPOSITE)
    assert "SET _valid_to = f._valid_from" not in sql
    quiet = sql.rsplit("\nELSE\n", 1)[1]  # after the truncate and recompute branches
    assert_lines(
        quiet,
        'UPDATE "cdc"."line__history" h SET _valid_to = c.valid_to, _valid_to_pos = c.valid_to_pos, _is_current = c.is_current,',
        # a truncate's marker takes the values of the version before it (on_truncate = "delete")
        '"note" = CASE WHEN h._op = \'t\' THEN c."note" ELSE h."note" END, _op = c.op',
    )
    assert "known_note" not in quiet


# Debezium, PostgreSQL connector, "truncate events"
# (https://debezium.io/documentation/reference/stable/connectors/postgresql.html#postgresql-truncate-events):
# "A _truncate_ change event signals that a table has been truncated. The message key is `null`
# in this case"; "The `op` field value is `t`, signifying that this table was truncated."


def test_a_truncate_closes_a_key_with_a_marker_at_its_position_holding_the_last_values():
    # ... and their TOAST marks, so the recompute fills a placeholder of the closed version in the marker too
    assert_lines(
        truncate_markers_sql(ONE),
        "SELECT l.\"id\", r._source_ts, r._source_pos, 't', r._kafka_partition, r._kafka_offset, r._kafka_timestamp, l._unavailable",
    )
    assert_lines(
        truncate_markers_sql(COMPOSITE),
        'SELECT l."order_id", l."line_no", l."note", r._source_ts, r._source_pos, \'t\','
        " r._kafka_partition, r._kafka_offset, r._kafka_timestamp, l._unavailable",
    )


def test_a_truncate_closes_each_key_whose_newest_version_before_it_is_a_row():
    # each truncate of the batch (PostgreSQL emits one truncate event per TRUNCATE, at its
    # own LSN), for the keys the batch's truncate before it did not close already
    assert_lines(
        truncate_markers_sql(COMPOSITE),
        'ROW_NUMBER() OVER (PARTITION BY t.pos, x."order_id", x."line_no" ORDER BY x._valid_from_pos DESC NULLS LAST,'
        " x._kafka_timestamp DESC NULLS LAST, x._kafka_partition DESC, x._kafka_offset DESC) AS newest",
        "JOIN (SELECT p.pos, LAG(p.pos) OVER (ORDER BY p.pos) AS previous",
        'FROM (SELECT DISTINCT _source_pos AS pos FROM "cdc"."line__stage" WHERE _action = \'truncate\''
        " AND _source_pos IS NOT NULL) p) t ON x._valid_from_pos < t.pos) l,",
        "WHERE l.newest = 1 AND l._op NOT IN ('d', 't') AND r.rn = 1 AND r._source_pos = l.truncate_pos__",
        "AND (l.previous__ IS NULL OR l._valid_from_pos > l.previous__)",
    )


def test_a_truncates_marker_is_written_once_from_its_first_record_in_kafka_order():
    # "while it is recovering from the fault, it's possible that the connector might emit some
    # duplicate change events" (the PostgreSQL connector's "Behavior when things go wrong")
    assert_lines(
        truncate_markers_sql(ONE),
        "ROW_NUMBER() OVER (PARTITION BY _source_pos ORDER BY _kafka_time ASC NULLS FIRST, _kafka_partition, _kafka_offset) AS rn",
        'FROM "cdc"."tag__stage" WHERE _action = \'truncate\' AND _source_pos IS NOT NULL) r',
        'AND NOT EXISTS (SELECT 1 FROM "cdc"."tag__history" h WHERE h."id" = l."id"',
        "AND h._op = 't' AND h._valid_from_pos = l.truncate_pos__);",
    )


def test_a_tombstone_waiting_for_its_keys_next_record_is_not_closed_by_a_truncate():
    assert_lines(
        truncate_markers_sql(UNWRAPPED_COMPOSITE),
        'FROM (SELECT DISTINCT _source_pos AS pos FROM "cdc"."line__stage" WHERE _action = \'truncate\''
        " AND _source_pos IS NOT NULL) p) t ON x._valid_from_pos < t.pos AND x._op <> 'p') l,",
    )


def test_a_truncate_with_a_position_marks_and_recomputes_every_key_instead_of_the_batchs():
    sql = history_sql(COMPOSITE)  # on_truncate = "delete"
    assert_lines(
        sql,
        "IF v_truncates > 0 AND v_truncate_pos IS NOT NULL THEN",
        'FROM "cdc"."line__history" v) x) n',  # every key's versions: no filter on the batch's keys
    )
    truncated, batch = sql.split("IF v_truncates", 1)[1].split("\nELSIF ", 1)
    assert "INSERT INTO" in truncated and "v_history_recompute" not in truncated
    assert "v_truncate_pos" not in batch
    assert "v_truncates" not in history_sql(ONE), "a table whose truncates are skipped has no marker step"


def test_the_versions_are_inserted_and_re_sent_tombstones_dropped_before_the_intervals_are_recomputed():
    def statements(sql: str) -> list[str]:
        return [line.split()[0] for line in sql.splitlines() if line.startswith(("INSERT", "DELETE", "UPDATE", "IF "))]

    assert statements(history_sql(UNWRAPPED)) == ["INSERT", "DELETE", "UPDATE"]
    # the short path's closing UPDATE, under its IF, comes first (no recompute follows it);
    # then, under postgres-lsn, the recompute path's DELETE of versions a copy read first holds
    assert ONE.table.order_by == "postgres-lsn"
    assert statements(history_sql(ONE)) == ["IF", "IF", "INSERT", "IF"]
    assert statements(history_sql(UNWRAPPED_COMPOSITE)) == ["INSERT", "DELETE", "IF"]

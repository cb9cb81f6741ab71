"""The ordering rules' SQL (sync/sql/procedure/ordering.py), pinned for a one-column and a
composite-key table: one behaviour per line."""

from __future__ import annotations

from sync.sql.procedure.ordering import (
    kafka_order,
    positionless_position_sql,
    rank_order,
    replay_stale_sql,
    rerank_sql,
    stale_sql,
    tied_changes_sql,
)
from tests.helpers import COMPOSITE_KEY, ONE_COLUMN, assert_lines, table_sql

ONE, COMPOSITE = table_sql(ONE_COLUMN), table_sql(COMPOSITE_KEY)


def test_a_key_ranks_newest_first_by_position_then_kafka_order():
    assert rank_order("p", kafka_order("t", "k", "o")) == "p DESC NULLS LAST, t DESC NULLS LAST, k DESC, o DESC"
    assert kafka_order("t", "k", "o", newest_first=False) == "t ASC NULLS FIRST, k, o"


def test_a_winner_not_newer_than_the_stored_row_or_deleted_key_is_stale():
    assert_lines(
        stale_sql(ONE),
        'UPDATE "cdc"."tag__stage" s SET _action = \'stale\', _reason = s._action',
        "WHERE s._rn = 1 AND s._action IN ('upsert', 'delete') AND s._source_pos IS NOT NULL",
        "AND s._source_pos <= (SELECT MAX(k._source_pos)",
        'FROM (SELECT t."id", t._source_pos FROM "cdc"."tag" t',
        'UNION ALL SELECT t."id", t._source_pos FROM "cdc"."tag__deleted" t) k',
        'WHERE k."id" = s."id");',
        "GET DIAGNOSTICS v_rows := ROW_COUNT;",
    )
    # Soft deletes: the target holds deleted rows too, so it is the only lookup.
    assert "line__deleted" not in stale_sql(COMPOSITE)
    assert_lines(stale_sql(COMPOSITE), 'FROM "cdc"."line" k', 'WHERE k."order_id" = s."order_id" AND k."line_no" = s."line_no");')


def test_a_tied_winner_applies_when_it_changes_something():
    assert_lines(
        tied_changes_sql(ONE),
        "WHERE s._rn = 1 AND s._action = 'stale' AND s._reason = 'upsert'",
        'AND EXISTS (SELECT 1 FROM "cdc"."tag__deleted" t WHERE t."id" = s."id" AND t._source_pos = s._source_pos);',
        "WHERE s._rn = 1 AND s._action = 'stale' AND s._reason = 'delete'",
        'AND EXISTS (SELECT 1 FROM "cdc"."tag" t WHERE t."id" = s."id" AND t._source_pos = s._source_pos);',
    )
    assert_lines(
        tied_changes_sql(COMPOSITE),
        'AND (t._deleted OR (t."note" <> s."note" OR (t."note" IS NULL) <> (s."note" IS NULL))));',
        "AND NOT t._deleted);",
    )


def test_positionless_events_take_the_newest_position_before_them_then_rank_again():
    sql = rerank_sql(COMPOSITE)
    assert_lines(
        sql,
        "IF v_positionless > 0 THEN",
        'MAX(x._source_pos) OVER (PARTITION BY x."order_id", x."line_no"'
        " ORDER BY x._kafka_time ASC NULLS FIRST, x._kafka_partition, x._kafka_offset",
        "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS rank_pos",
        "FROM (SELECT z.*, MAX(z._kafka_timestamp) OVER (PARTITION BY z._kafka_partition ORDER BY z._kafka_offset",
        "AND t._source_pos IS NOT NULL AND (s._rank_pos IS NULL OR s._rank_pos < t._source_pos);",
        'ROW_NUMBER() OVER (PARTITION BY x."order_id", x."line_no" ORDER BY x._rank_pos DESC NULLS LAST,'
        " x._kafka_time DESC NULLS LAST, x._kafka_partition DESC, x._kafka_offset DESC) AS rn",
    )
    assert sql.count("SET _rank_pos = t._source_pos") == 1  # soft mode: the target only
    assert rerank_sql(ONE).count("SET _rank_pos = t._source_pos") == 2  # row, then deleted key


def test_a_positionless_winner_is_recorded_at_the_position_it_ranked_by():
    assert_lines(
        positionless_position_sql(ONE),
        'UPDATE "cdc"."tag__stage" SET _source_pos = _rank_pos',
        "WHERE _rn = 1 AND _action IN ('upsert', 'delete') AND _source_pos IS NULL;",
    )


def test_kafka_order_a_replayed_record_older_than_the_stored_one_is_stale():
    sql = replay_stale_sql(table_sql(ONE_COLUMN, order_by="kafka"))
    assert_lines(
        sql,
        "IF v_replayed > 0 THEN",
        'AND EXISTS (SELECT 1 FROM "cdc"."tag__watermark" w'
        " WHERE w.kafka_partition = s._kafka_partition AND s._kafka_offset <= w.last_offset)",
        "AND (t._kafka_partition = s._kafka_partition AND t._kafka_offset > s._kafka_offset",
        'LEFT JOIN "cdc"."tag__stream" m ON m.kafka_partition = t._kafka_partition AND m.kafka_offset = t._kafka_offset',
    )
    assert sql.count("EXISTS (SELECT 1 FROM") == 3  # the watermark, the row, the deleted key

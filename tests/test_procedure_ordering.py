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
    sql = tied_changes_sql(ONE)
    assert_lines(
        sql,
        "MAX(CASE WHEN x._reason = 'upsert' AND (t.deleted__) OR x._reason = 'delete' AND NOT t.deleted__ THEN 1 ELSE 0 END) AS changes,",
        'UNION ALL SELECT t."id", t._source_pos, t._kafka_partition, t._kafka_offset, t._kafka_timestamp, true FROM "cdc"."tag__deleted" t'
        ' WHERE EXISTS (SELECT 1 FROM "cdc"."tag__stage" y WHERE y._rn = 1 AND y._action = \'stale\' AND y."id" = t."id"'
        " AND y._source_pos = t._source_pos)) t",
        'ON t."id" = x."id" AND t._source_pos = x._source_pos',
        "AND c.changes = 1 AND c.older_replay = 0;",
    )
    assert sql.count("UPDATE ") == 1  # one pass over the stale winners
    assert_lines(
        tied_changes_sql(COMPOSITE),
        'MAX(CASE WHEN x._reason = \'upsert\' AND (t.deleted__ OR (t."note" <> x."note" OR (t."note" IS NULL) <> (x."note" IS NULL)))'
        " OR x._reason = 'delete' AND NOT t.deleted__ THEN 1 ELSE 0 END) AS changes,",
    )
    assert "UNION ALL" not in tied_changes_sql(COMPOSITE)  # soft mode: the target holds deleted rows


def test_a_replayed_tie_older_in_kafka_order_than_the_stored_record_stays_stale():
    assert_lines(
        tied_changes_sql(ONE),
        # Kafka order as the ranking and the Kafka-order replay rule judge it: offsets within a
        # partition, the Kafka time across partitions (a stored row's is its record's), then the partition.
        "MAX(CASE WHEN x._kafka_offset <= w.last_offset AND (t._kafka_partition = x._kafka_partition AND t._kafka_offset > x._kafka_offset"
        " OR t._kafka_partition <> x._kafka_partition AND (t.kafka_time__ > x._kafka_timestamp"
        " OR (COALESCE(t.kafka_time__ = x._kafka_timestamp, true) AND t._kafka_partition > x._kafka_partition))) THEN 1 ELSE 0 END)"
        " AS older_replay",
        'LEFT JOIN "cdc"."tag__watermark" w ON w.kafka_partition = x._kafka_partition',
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
        'UPDATE "cdc"."line__stage" s SET _rank_pos = CASE WHEN r.stored_pos > r.rank_pos OR r.rank_pos IS NULL',
        "THEN COALESCE(r.stored_pos, r.rank_pos) ELSE r.rank_pos END",
        'LEFT JOIN (SELECT * FROM (SELECT k.*, ROW_NUMBER() OVER (PARTITION BY "order_id", "line_no"',
        'WHERE o.stored_rn__ = 1) t ON t."order_id" = x."order_id" AND t."line_no" = x."line_no"',
        'FROM (SELECT x.*, ROW_NUMBER() OVER (PARTITION BY x."order_id", x."line_no" ORDER BY x._rank_pos DESC NULLS LAST,'
        " x._kafka_time DESC NULLS LAST, x._kafka_partition DESC, x._kafka_offset DESC) AS rn",
    )
    # Each statement joins the stage on the key (the DISTKEY) besides partition and offset.
    same_record = (
        's."order_id" = r."order_id" AND s."line_no" = r."line_no"'
        " AND s._kafka_partition = r._kafka_partition AND s._kafka_offset = r._kafka_offset"
    )
    assert sql.count(same_record) == 2
    assert sql.count("UPDATE ") == 2 and rerank_sql(ONE).count("UPDATE ") == 2
    assert "UNION ALL" not in sql  # soft mode: the target only
    assert_lines(
        rerank_sql(ONE), 'UNION ALL SELECT t."id", t._source_pos, t._kafka_partition, t._kafka_offset FROM "cdc"."tag__deleted" t'
    )


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


def test_a_super_value_at_a_tie_is_serialized_once_per_side():
    # JSON_SERIALIZE raises past VARCHAR's limit: each side is bounded first, once.
    with_doc = ONE_COLUMN.replace(
        'columns = [{ name = "id", type = "integer" }]',
        'columns = [{ name = "id", type = "integer" }, { name = "doc", type = "super" }]',
    )
    sql = tied_changes_sql(table_sql(with_doc))
    assert sql.count('JSON_SIZE(t."doc")') == 1 and sql.count('JSON_SIZE(x."doc")') == 1

"""The stale rules' SQL (sync/sql/procedure/stale.py), pinned for a one-column and a
composite-key table: one behaviour per line."""

from __future__ import annotations

from sync.sql.procedure.stale import positionless_position_sql, replay_stale_sql, stale_sql, tied_order_sql
from tests.helpers import COMPOSITE_KEY, ONE_COLUMN, assert_lines, table_sql

ONE, COMPOSITE = table_sql(ONE_COLUMN), table_sql(COMPOSITE_KEY)


def test_one_statement_judges_every_winner_against_the_newest_stored_state_of_its_key():
    sql = stale_sql(ONE)
    assert_lines(
        sql,
        # At the stored position a change keeps its action (the tie rule judges it); else stale.
        'UPDATE "cdc"."tag__stage" s SET _action = CASE WHEN s._source_pos = t._source_pos',
        "AND (s._action = 'upsert' AND (t.deleted__)",
        "OR s._action = 'delete' AND NOT t.deleted__) THEN s._action ELSE 'stale' END",
        # One lookup: the newest target row or deleted key of each key with a winner.
        'FROM (SELECT k.*, ROW_NUMBER() OVER (PARTITION BY k."id"',
        "ORDER BY k._source_pos DESC NULLS LAST, k._kafka_partition DESC, k._kafka_offset DESC) AS stored_rn__",
        'FROM (SELECT t."id", t._source_pos, t._kafka_partition, t._kafka_offset, false AS deleted__ FROM "cdc"."tag" t',
        'UNION ALL SELECT t."id", t._source_pos, t._kafka_partition, t._kafka_offset, true FROM "cdc"."tag__deleted" t',
        "WHERE s._rn = 1 AND s._action IN ('upsert', 'delete') AND t.\"id\" = s.\"id\" AND t.stored_rn__ = 1 AND s._source_pos <= t._source_pos;",
        # Stale winners and tied changes counted: the tie rule runs only when there are any.
        "GET DIAGNOSTICS v_not_newer := ROW_COUNT;",
    )
    # A join, no correlated lookup of the stored position, and no prior action parked.
    assert sql.count("UPDATE ") == 1 and "MAX(" not in sql and "_reason" not in sql
    assert "v_rows" not in sql
    # Soft deletes: the target holds deleted rows too, so it is the only lookup.
    composite = stale_sql(COMPOSITE)
    assert "line__deleted" not in composite and "UNION ALL" not in composite
    assert_lines(
        composite,
        'FROM (SELECT t."order_id", t."line_no", t._source_pos, t._kafka_partition, t._kafka_offset,'
        ' t._deleted AS deleted__, t."note",',
        "WHERE s._rn = 1 AND s._action IN ('upsert', 'delete')"
        ' AND t."order_id" = s."order_id" AND t."line_no" = s."line_no" AND t.stored_rn__ = 1 AND s._source_pos <= t._source_pos;',
        'AND (s._action = \'upsert\' AND (t.deleted__ OR (t."note" <> s."note" OR (t."note" IS NULL) <> (s."note" IS NULL)))',
    )


def test_a_tie_older_in_kafka_order_than_the_stored_record_stays_stale():
    sql = tied_order_sql(ONE)
    assert_lines(
        sql,
        # Only when a winner was found stale or tied with what is stored: never on the common path.
        "IF v_not_newer > 0 THEN",
        # The lookup holds the stored rows a winner ties with, and only those read the stream.
        "WHERE EXISTS (SELECT 1 FROM \"cdc\".\"tag__stage\" y WHERE y._rn = 1 AND y._action IN ('upsert', 'delete')"
        ' AND y."id" = t."id" AND y._source_pos = t._source_pos)',
        # The stored record's Kafka time, outer-joined in a subquery of its own (r_UPDATE:
        # no outer join in an UPDATE's FROM list).
        "FROM (SELECT r.*, COALESCE(m.kafka_timestamp, r.kafka_time__) AS stored_time__",
        'LEFT JOIN "cdc"."tag__stream" m ON r.row__ AND m.kafka_partition = r._kafka_partition AND m.kafka_offset = r._kafka_offset) t',
        # Kafka order as the ranking and the Kafka-order replay rule judge it: offsets within a
        # partition, the Kafka time across partitions (a stored row's is its record's), then the partition.
        "AND (t._kafka_partition = s._kafka_partition AND t._kafka_offset > s._kafka_offset"
        " OR t._kafka_partition <> s._kafka_partition AND (t.stored_time__ > s._kafka_timestamp"
        " OR (COALESCE(t.stored_time__ = s._kafka_timestamp, true) AND t._kafka_partition > s._kafka_partition)));",
    )
    assert sql.count("UPDATE ") == 1 and "_reason" not in sql


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
    sql = stale_sql(table_sql(with_doc))
    assert sql.count('JSON_SIZE(t."doc")') == 1 and sql.count('JSON_SIZE(s."doc")') == 1

"""The ordering rules' SQL (sync/sql/procedure/ordering.py), pinned for a one-column and a
composite-key table: one behaviour per line."""

from __future__ import annotations

from sync.sql.procedure.keyless import BEFORE
from sync.sql.procedure.ordering import kafka_order, rank_order, rerank_sql
from tests.helpers import COMPOSITE_KEY, ONE_COLUMN, REPO, assert_lines, table_sql
from tests.procedure_shape import procedures

ONE, COMPOSITE = table_sql(ONE_COLUMN), table_sql(COMPOSITE_KEY)


def test_a_key_ranks_newest_first_by_position_then_kafka_order():
    assert rank_order("p", kafka_order("t", "k", "o")) == "p DESC NULLS LAST, t DESC NULLS LAST, k DESC, o DESC"
    assert kafka_order("t", "k", "o", newest_first=False) == "t ASC NULLS FIRST, k, o"


def test_positionless_events_take_the_newest_position_before_them_then_rank_again():
    sql = rerank_sql(COMPOSITE)
    assert_lines(
        sql,
        "IF v_positionless > 0 THEN",
        # One statement: each event's rank position, then its key ranked again over them.
        'UPDATE "cdc"."line__stage" s SET _rank_pos = r.rank_pos, _rn = r.rn',
        'FROM (SELECT p.*, ROW_NUMBER() OVER (PARTITION BY p."order_id", p."line_no"',
        "ORDER BY p.rank_pos DESC NULLS LAST, p._kafka_time DESC NULLS LAST, p._kafka_partition DESC, p._kafka_offset DESC) AS rn",
        # A positionless event: the newest position before it in Kafka order, or the stored
        # one when that is newer (GREATEST ignores NULLs); an event with one keeps its own.
        "CASE WHEN x._source_pos IS NULL THEN GREATEST(t._source_pos,",
        'MAX(x._source_pos) OVER (PARTITION BY x."order_id", x."line_no"',
        "ORDER BY x._kafka_time ASC NULLS FIRST, x._kafka_partition, x._kafka_offset ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW))",
        "ELSE x._rank_pos END AS rank_pos",
        # The Kafka time the stage query wrote, not computed again.
        'FROM "cdc"."line__stage" x',
        'LEFT JOIN (SELECT t."order_id", t."line_no", t._source_pos, t._kafka_partition, t._kafka_offset,',
        'ROW_NUMBER() OVER (PARTITION BY t."order_id", t."line_no"',
    )
    # The statement joins the stage on the key (the DISTKEY) besides partition and offset.
    same_record = (
        's."order_id" = r."order_id" AND s."line_no" = r."line_no"'
        " AND s._kafka_partition = r._kafka_partition AND s._kafka_offset = r._kafka_offset"
    )
    assert sql.count(same_record) == 1
    # The newest stored row of the key, kept in the join.
    assert ') t ON t."order_id" = x."order_id" AND t."line_no" = x."line_no" AND t.stored_rn__ = 1\n' in sql
    assert sql.count("UPDATE ") == 1 and rerank_sql(ONE).count("UPDATE ") == 1
    assert "UNION ALL" not in sql  # soft mode: the target only
    assert "OVER (PARTITION BY z._kafka_partition" not in sql
    assert_lines(
        rerank_sql(ONE), 'UNION ALL SELECT t."id", t._source_pos, t._kafka_partition, t._kafka_offset FROM "cdc"."tag__deleted" t'
    )


def test_each_procedure_computes_the_kafka_time_once_per_stage_query():
    """The Kafka time (`kafka_time`: the newest Kafka timestamp of a record's partition up to
    it) is a window over the whole batch: the stage query computes it and the stage keeps
    it (`_kafka_time`), so the steps that order the stage again read it. A table without a
    primary key runs its stage query twice (before and after images)."""
    counts, keyless = {}, set()
    for path in sorted((REPO / "sql" / "procedures").glob("*/*.sql")):
        for name, (text, _) in procedures(path.read_text()).items():
            if "(p_max_records" in name:
                counts[name] = text.count("kafka_timestamp) OVER (PARTITION BY ")
                if f"_op = '{BEFORE}'" in text:
                    keyless.add(name)
    assert len(counts) >= 23 and keyless
    assert {n for name, n in counts.items() if name not in keyless} == {1}
    assert {counts[name] for name in keyless} == {2}

"""What surrounds the merge (sync/sql/procedure/bookkeeping.py): lock, watermark, counts,
quarantine, run log; pinned for a one-column and a composite-key table."""

from __future__ import annotations

from sync.sql.procedure.bookkeeping import (
    advance_watermark_sql,
    batch_counts_sql,
    bound_sql,
    quarantine_sql,
    run_log_row_sql,
    single_flight_sql,
)
from tests.helpers import COMPOSITE_KEY, ONE_COLUMN, assert_lines, table_sql

ONE, COMPOSITE = table_sql(ONE_COLUMN), table_sql(COMPOSITE_KEY)


def test_the_watermark_is_locked_then_the_clock_read_once():
    assert single_flight_sql(ONE).splitlines()[-2:] == [
        'LOCK TABLE "cdc"."tag__watermark";',
        "v_started := CAST(TO_TIMESTAMP(TIMEOFDAY(), 'Dy Mon DD HH24:MI:SS.US YYYY') AS timestamp);",
    ]


def test_a_batch_with_records_counts_its_replays_and_reads_the_watermark_it_found_in_its_counts():
    """Only a batch with records moves the watermark or replays a record: the run log's
    watermark before and the replay count are read in the batch counts' statement, which
    a call without records does not run."""
    assert_lines(
        batch_counts_sql(ONE),
        "SELECT c.*, w.watermark",
        "INTO v_drift, v_quarantined, v_partitions, v_deletes, v_positionless, v_replayed, v_wm_before",
        "(SELECT COUNT(*) FROM \"cdc\".\"tag__quarantine\" WHERE table_name = 'tag' AND handled = 'replaying') AS replayed",
        'FROM "cdc"."tag__stage") c,',
        "FROM (SELECT i.*, SUM(OCTET_LENGTH(i.item__) + 1) OVER (ORDER BY i.order__ ROWS UNBOUNDED PRECEDING) AS pos__",
        "FROM (SELECT r.*, CAST(r.kafka_partition AS varchar(20)) || ':' || CAST(r.last_offset AS varchar(20)) AS item__,"
        ' r.kafka_partition AS order__ FROM "cdc"."tag__watermark" r) i) p) w;',
    )


def test_a_bounded_run_stops_at_the_nth_pending_record():
    assert_lines(bound_sql(ONE), "IF p_max_records < 1 THEN", "WHERE x.read_no = p_max_records;")


def test_the_batch_counts_tell_the_rare_steps_it_needs():
    assert_lines(
        batch_counts_sql(ONE), "INTO v_drift, v_quarantined, v_partitions, v_deletes, v_positionless, v_replayed, v_wm_before"
    )
    assert_lines(
        batch_counts_sql(COMPOSITE),
        "MAX(CASE WHEN _action = 'truncate' THEN _source_pos END) AS truncate_pos,",
        "MAX(CASE WHEN _action = 'truncate' THEN _source_ts END) AS truncate_ts,",
        "INTO v_drift, v_quarantined, v_partitions, v_deletes, v_positionless, v_unavailable, v_truncates, v_truncate_pos, v_truncate_ts, v_replayed,",
    )
    assert_lines(
        batch_counts_sql(table_sql(ONE_COLUMN, order_by="kafka")),
        "INTO v_drift, v_quarantined, v_partitions, v_deletes, v_replayed, v_wm_before",
    )


def test_quarantined_records_keep_their_kafka_coordinates():
    assert_lines(
        quarantine_sql(ONE),
        "SELECT 'tag', _kafka_partition, _kafka_offset, _kafka_timestamp, _reason, _payload, _raw_value, v_started",
        "WHERE _action = 'quarantine';",
    )


def test_the_watermark_advances_never_back():
    """Redshift: an UPDATE, then an INSERT of the partitions seen for the first time. Not a
    MERGE: its "source_table can't be a view or a subquery" (MERGE,
    https://docs.aws.amazon.com/redshift/latest/dg/r_MERGE.html), and the batch's newest
    offset per partition is an aggregate of the stage, whose records would each match their
    partition's watermark row."""
    sql = advance_watermark_sql(COMPOSITE)
    assert_lines(
        sql,
        "WHERE w.kafka_partition = b._kafka_partition AND b.last_offset > w.last_offset;",
        "IF v_advanced < v_partitions THEN",
        'WHERE NOT EXISTS (SELECT 1 FROM "cdc"."line__watermark" w WHERE w.kafka_partition = b._kafka_partition);',
    )
    assert "MERGE" not in sql and "ON CONFLICT" not in sql


def test_the_watermark_is_one_statement_on_postgresql():
    """PostgreSQL: one INSERT ... ON CONFLICT on the watermark's primary key. "The optional
    ON CONFLICT clause specifies an alternative action to raising a unique violation or
    exclusion constraint violation error"; DO UPDATE's WHERE is a condition where "Only rows
    for which this expression returns true will be updated" (never back); and the statement
    "will not be allowed to affect any single existing row more than once" (INSERT,
    https://www.postgresql.org/docs/16/sql-insert.html): one proposed row per partition."""
    sql = advance_watermark_sql(table_sql(COMPOSITE_KEY, dialect="postgres"))
    assert_lines(
        sql,
        'INSERT INTO "cdc"."line__watermark" (kafka_partition, last_offset, last_refresh_time, updated_at)',
        'FROM "cdc"."line__stage" GROUP BY _kafka_partition) b',
        "ON CONFLICT (kafka_partition) DO UPDATE SET last_offset = EXCLUDED.last_offset,"
        " last_refresh_time = EXCLUDED.last_refresh_time, updated_at = EXCLUDED.updated_at",
        'WHERE EXCLUDED.last_offset > "cdc"."line__watermark".last_offset;',
    )
    assert [line.split()[0] for line in sql.splitlines() if not line.startswith(("--", " "))] == [
        "INSERT",
        "SELECT",
        "FROM",
        "ON",
        "WHERE",
    ]


def test_one_run_log_row_per_call_counts_the_stage_and_reads_the_watermark_it_leaves():
    """The outcomes are counted over the stage as the rules left it, in the statement that
    writes the row: no statement of its own on the common path."""
    assert_lines(
        run_log_row_sql(COMPOSITE),
        # A call without records leaves the watermark as it found it.
        "c.quarantined, c.tombstones, c.stale, c.superseded, c.truncates, CASE WHEN v_read > 0 THEN v_wm_before ELSE w.watermark_after END,",
        "w.watermark_after, c.lag_seconds, 'ok'",
        "FROM (SELECT COUNT(CASE WHEN _rn = 1 AND _action = 'upsert' THEN 1 END) AS upserted,",
        "DATEDIFF(microsecond, MAX(_kafka_timestamp), v_started) / 1000000.0 AS lag_seconds",
        'FROM "cdc"."line__stage") c,',
        "(SELECT LISTAGG(CASE WHEN p.pos__ <= 65503 THEN p.item__ END, ',') WITHIN GROUP (ORDER BY p.order__)",
        "FROM (SELECT r.*, CAST(r.kafka_partition AS varchar(20)) || ':' || CAST(r.last_offset AS varchar(20)) AS item__,"
        ' r.kafka_partition AS order__ FROM "cdc"."line__watermark" r) i) p) w;',
    )

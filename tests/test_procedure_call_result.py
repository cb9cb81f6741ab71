"""The run-log row a call leaves for its caller (sync/sql/procedure/call_result.py), pinned
for a one-column table on both engines. The conflicts it avoids are tested in
tests/test_conflict_matrix.py; here, one behaviour per line of SQL."""

from __future__ import annotations

import pytest

from sync.sql.procedure.call_result import call_result_sql
from tests.helpers import ONE_COLUMN, assert_lines, table_sql


@pytest.mark.parametrize("dialect", ["redshift", "postgres"])
def test_the_row_is_left_in_a_temporary_table_of_the_session_and_copied_to_the_run_log(dialect):
    sql = call_result_sql(table_sql(ONE_COLUMN, dialect))
    assert_lines(
        sql,
        'DROP TABLE IF EXISTS "sync_call_result";',
        'SELECT * FROM "sync_call_result";',
    )
    assert 'CREATE TEMP TABLE "sync_call_result" (table_name varchar(127) NOT NULL, backend_pid integer' in sql
    # The shared run log is written once and never read: a read would conflict with every other table's call.
    assert sql.count('"cdc"."sync_run_log"') == 1 and 'INSERT INTO "cdc"."sync_run_log"' in sql


def test_an_idle_call_reports_the_watermark_it_found_as_before_and_after():
    assert_lines(
        call_result_sql(table_sql(ONE_COLUMN)),
        "c.quarantined, c.tombstones, c.stale, c.superseded, c.truncates, CASE WHEN v_read > 0 THEN v_wm_before ELSE w.watermark_after END,",
        "w.watermark_after, c.lag_seconds, 'ok'",
    )


@pytest.mark.parametrize(
    ("dialect", "finished", "lag"),
    [
        (
            "redshift",
            "CAST(TO_TIMESTAMP(TIMEOFDAY(), 'Dy Mon DD HH24:MI:SS.US YYYY') AS timestamp)",
            "DATEDIFF(microsecond, MAX(_kafka_timestamp), v_started) / 1000000.0 AS lag_seconds",
        ),
        (
            "postgres",
            "(clock_timestamp() AT TIME ZONE 'UTC')",
            "EXTRACT(EPOCH FROM (v_started - MAX(_kafka_timestamp))) AS lag_seconds",
        ),
    ],
)
def test_the_end_of_the_call_and_the_lag_are_read_in_each_engines_terms(dialect, finished, lag):
    sql = call_result_sql(table_sql(ONE_COLUMN, dialect))
    assert finished in sql and lag in sql

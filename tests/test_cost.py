"""Cost per table: `status --json` gives each table's recent CALL durations (p50/p95 over
the run log); on Redshift, SYS_QUERY_HISTORY's account of the time its statements spent.

SYS_QUERY_HISTORY (https://docs.aws.amazon.com/redshift/latest/dg/SYS_QUERY_HISTORY.html):
"elapsed_time | bigint | The total time (microseconds) spent on the query", "queue_time
... spent in the service class queue", "execution_time ... spent running in the service
class", "transaction_id", "query_text | character(4000) | The query string. This string
might be truncated."; "regular users can see only their own data".
"""

from __future__ import annotations

import json
import os

import pytest
import sqlglot
from hypothesis import given
from hypothesis import strategies as st

from sync.operations.cost import RECENT_RUNS, call_durations, percentile, statement_time, statement_time_sql
from tests.helpers import REPO
from tests.test_cli import run
from tests.test_recovery import PIPELINE

GOLDEN = REPO / "tests" / "golden" / "statement_time_redshift.sql"


def log_runs(wh, table: str, seconds: list[float], status: str = "ok") -> None:
    for i, s in enumerate(seconds):
        wh.execute(
            "INSERT INTO cdc.sync_run_log (table_name, started_at, finished_at, events_read, status) "
            "VALUES (%s, TIMESTAMP '2026-01-01' + %s * INTERVAL '1 minute', "
            "TIMESTAMP '2026-01-01' + %s * INTERVAL '1 minute' + %s * INTERVAL '1 second', 1, %s)",
            (table, i, i, s, status),
        )


def test_status_json_shows_recent_call_durations(deployed, database_dsn):
    wh, _ = deployed
    log_runs(wh, "customer", [float(s) for s in range(1, 121)])  # the newest 100: 21 s .. 120 s
    log_runs(wh, "customer", [999.0], status="reset-positions")  # a recovery command is no CALL
    out = run("status", "--json", "--config", str(PIPELINE), "--dsn", database_dsn)
    assert out.returncode == 0, out.stderr
    rows = {r["table"]: r for r in json.loads(out.stdout)}
    customer = rows["customer"]["call_seconds"]
    # PostgreSQL's own percentile_cont over the same runs: an independent computation.
    p50, p95 = wh.query(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY d), percentile_cont(0.95) WITHIN GROUP (ORDER BY d) "
        "FROM (SELECT EXTRACT(EPOCH FROM finished_at - started_at) AS d FROM cdc.sync_run_log "
        f"WHERE table_name = 'customer' AND status = 'ok' ORDER BY run_id DESC LIMIT {RECENT_RUNS}) x"
    )[0]
    assert customer["runs"] == RECENT_RUNS
    assert customer["p50_seconds"] == pytest.approx(float(p50)) == pytest.approx(70.5)
    assert customer["p95_seconds"] == pytest.approx(float(p95)) == pytest.approx(115.05)
    assert customer["since"].startswith("2026-01-01 00:20")
    assert rows["orders"]["call_seconds"] == {"runs": 0, "p50_seconds": None, "p95_seconds": None, "since": None}
    assert rows["customer"]["statement_seconds"] is None  # PostgreSQL keeps no SYS_QUERY_HISTORY
    text = run("status", "--config", str(PIPELINE), "--dsn", database_dsn).stdout
    assert "CALL p50" in text and "1 min 10 s" in text


def test_real_runs_are_counted(deployed):
    from sync.debezium.events import ChangeStream, MySqlSource
    from tests.helpers import feed
    from tests.test_recovery import _row

    wh, pipeline = deployed
    stream = ChangeStream(["CUST_ID"], MySqlSource())
    for i in range(3):
        feed(wh, pipeline, "customer", [stream.insert(_row(i))])
    found = call_durations(wh.query, wh.dialect, pipeline, ["customer", "orders"])
    assert found["customer"].runs == 3 and 0 < found["customer"].p50_seconds <= found["customer"].p95_seconds < 60
    assert statement_time(wh.query, wh.dialect, pipeline, ["customer"]) is None


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=50), st.floats(min_value=0, max_value=1))
def test_a_percentile_lies_between_the_values_it_falls_between(values, q):
    ordered = sorted(values)
    result = percentile(values, q)
    rank = q * (len(values) - 1)
    assert ordered[int(rank)] - 1e-6 <= result <= ordered[min(int(rank) + 1, len(values) - 1)] + 1e-6
    assert percentile(values, 0) == round(ordered[0], 6) and percentile(values, 1) == round(ordered[-1], 6)


def test_the_statement_time_query_is_pinned(example_pipeline):
    sql = statement_time_sql(example_pipeline, ["customer", "orders"])
    sqlglot.parse_one(sql, read="redshift")
    text = sql + ";\n"
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "regenerate with UPDATE_GOLDEN=1 and review the diff"
    assert """WHEN LEFT(query_text, 39) = 'CALL "cdc"."incremental_sync_customer"(' THEN 'customer'""" in sql


def test_statement_time_reads_redshifts_rows():
    """The rows as the Data API returns them (numbers as text for the DECIMAL divisions)."""
    from sync.sql.dialect import dialect_for
    from tests.helpers import make_pipeline

    pipeline = make_pipeline(
        '[[tables]]\nname = "t"\ntopic = "t"\nprimary_key = ["ID"]\ncolumns = [{ name = "ID", type = "integer" }]\n'
    )
    rows = [("t", 12, "3.500000", "0.250000")]
    found = statement_time(lambda sql: rows, dialect_for("redshift", "cdc"), pipeline, ["t"])
    assert found["t"].as_dict() == {"calls": 12, "execution_seconds": 3.5, "queue_seconds": 0.25, "hours": 24}

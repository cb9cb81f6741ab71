"""Freshness ([heartbeat]): idle told apart from stalled and from a dead connector, in
`status --json` and in the Lambda's Embedded Metric Format lines.

The heartbeat records are shaped as Debezium documents them:

- topic (https://debezium.io/documentation/reference/stable/connectors/mysql.html,
  `topic.heartbeat.prefix`): "Controls the name of the topic to which the connector sends
  heartbeat messages. The topic name has this pattern: <topic.heartbeat.prefix>.<topic.prefix>
  For example, if the topic prefix is fulfillment, the default topic name is
  __debezium-heartbeat.fulfillment." (`heartbeat.interval.ms`: "Controls how frequently
  the connector sends heartbeat messages to a Kafka topic.")
- message: the key schema `io.debezium.connector.common.ServerNameKey` with one field
  `serverName`, the value schema `io.debezium.connector.common.Heartbeat` with one field
  `ts_ms` (debezium-core io/debezium/schema/SchemaFactory.java: HEARTBEAT_KEY_SCHEMA_NAME,
  HEARTBEAT_VALUE_SCHEMA_NAME); with the JSON converter's `schemas.enable=true` (its
  default) wrapped as {"schema": ..., "payload": ...}.
"""

from __future__ import annotations

import json
import os
import time
import tomllib
from pathlib import Path

import pytest
import sqlglot
from hypothesis import given
from hypothesis import strategies as st

from sync.aws import lambda_handler
from sync.config import parse_pipeline
from sync.local.stream import ingest_file
from sync.operations.freshness import (
    STALLED_STATES,
    Freshness,
    classify,
    measures_sql,
    refresh_ages_sql,
    table_freshness,
)
from sync.operations.runner import deploy, heartbeat_prune_sql, prune, sync
from sync.schema.plan import plan_revision
from sync.schema.state import state_for, warehouse_model
from sync.sql.dialect import dialect_for
from sync.sql.names import HEARTBEAT_STREAM
from sync.sql.objects import pipeline_objects
from tests.cli_runs import run_cli
from tests.helpers import EXAMPLES, REPO, local_lambda, metric_lines

EVENTS = EXAMPLES / "salesdb" / "events"
GOLDEN = REPO / "tests" / "golden" / "freshness_redshift.sql"
HEARTBEAT_TOPIC = "__debezium-heartbeat.salesdb"
HEARTBEAT_SECTION = f'\n[heartbeat]\ntopic = "{HEARTBEAT_TOPIC}"\nstale_after_seconds = 300\n'


def heartbeat_pipeline_text() -> str:
    text = (EXAMPLES / "salesdb" / "pipeline.toml").read_text()
    head, _, tables = text.partition("[[tables]]")
    return head + HEARTBEAT_SECTION + "\n[[tables]]" + tables


def heartbeat_pipeline():
    return parse_pipeline(tomllib.loads(heartbeat_pipeline_text()))


def heartbeat_line(ts_ms: int, offset: int, wrapped: bool) -> dict:
    """One heartbeat record as the connector `salesdb` sends it (see the module docstring)."""
    key = {"serverName": "salesdb"}
    value = {"ts_ms": ts_ms}
    if wrapped:
        key = {
            "schema": {
                "type": "struct",
                "fields": [{"type": "string", "optional": False, "field": "serverName"}],
                "optional": False,
                "name": "io.debezium.connector.common.ServerNameKey",
            },
            "payload": key,
        }
        value = {
            "schema": {
                "type": "struct",
                "fields": [{"type": "int64", "optional": False, "field": "ts_ms"}],
                "optional": False,
                "name": "io.debezium.connector.common.Heartbeat",
            },
            "payload": value,
        }
    return {"partition": 0, "offset": offset, "timestamp": ts_ms, "key": key, "value": value}


def write_heartbeats(path: Path, ages_seconds: list[float], first_offset: int = 0) -> Path:
    now_ms = int(time.time() * 1000)
    lines = [heartbeat_line(now_ms - int(age * 1000), first_offset + i, wrapped=i % 2 == 0) for i, age in enumerate(ages_seconds)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def timed(example: str, path: Path, age_seconds: float) -> Path:
    """An example events file with every record's Kafka timestamp `age_seconds` ago."""
    ts = int((time.time() - age_seconds) * 1000)
    lines = [json.loads(line) for line in (EVENTS / example).read_text().splitlines() if line.strip()]
    path.write_text("".join(json.dumps({**line, "timestamp": ts}) + "\n" for line in lines))
    return path


@pytest.fixture
def hb(wh, tmp_path):
    """The example pipeline with [heartbeat], deployed; its file written for the CLI."""
    pipeline = heartbeat_pipeline()
    deploy(wh, pipeline, "pipeline.toml")
    path = tmp_path / "pipeline.toml"
    path.write_text(heartbeat_pipeline_text())
    return wh, pipeline, path


def status_json(path: Path, dsn: str) -> dict[str, dict]:
    out = run_cli("status", "--json", "--config", str(path), "--dsn", dsn)
    assert out.returncode == 0, out.stderr
    return {row["table"]: row for row in json.loads(out.stdout)}


def test_idle_stalled_and_capture_down_in_status_json(hb, database_dsn, tmp_path):
    wh, pipeline, path = hb
    # customer: its records (an hour old) synced, nothing waits: idle once the heartbeat is fresh.
    ingest_file(wh, pipeline, "customer", timed("customer-1.jsonl", tmp_path / "c.jsonl", 3600))
    sync(wh, pipeline, ["customer"])
    # orders: its records (an hour old) wait, never synced.
    ingest_file(wh, pipeline, "orders", timed("orders-1.jsonl", tmp_path / "o.jsonl", 3600))
    beats = write_heartbeats(tmp_path / "hb1.jsonl", [30, 10])
    ingested = run_cli("ingest", "--heartbeat", "--file", str(beats), "--config", str(path), "--dsn", database_dsn)
    assert ingested.returncode == 0, ingested.stderr
    assert f"ingested 2 record(s) into the heartbeat ({HEARTBEAT_TOPIC}) (partition 0: offsets 0-1)" in ingested.stdout

    rows = status_json(path, database_dsn)
    customer, orders = rows["customer"]["freshness"], rows["orders"]["freshness"]
    assert customer["state"] == "idle" and customer["pending"] == 0 and customer["lag_seconds"] == 0
    assert 9 < customer["source_alive_seconds"] < 120
    assert customer["last_applied_at"] is not None and customer["last_event_at"] is not None
    assert orders["state"] == "stalled" and orders["pending"] > 0 and orders["lag_seconds"] > 300
    assert orders["last_applied_at"] is None

    # The connector stops: its newest heartbeat is an hour old.
    wh.execute(f'DELETE FROM "cdc"."{HEARTBEAT_STREAM}"')
    ingest_file(wh, pipeline, None, write_heartbeats(tmp_path / "hb2.jsonl", [3600]))
    rows = status_json(path, database_dsn)
    assert {t: r["freshness"]["state"] for t, r in rows.items()} == {"customer": "capture down", "orders": "capture down"}
    assert rows["customer"]["freshness"]["source_alive_seconds"] > 3500


def test_a_view_that_stops_refreshing_while_the_heartbeats_refreshes_is_not_idle(hb, database_dsn, tmp_path):
    wh, pipeline, path = hb
    for table in ("customer", "orders"):
        ingest_file(wh, pipeline, table, timed(f"{table}-1.jsonl", tmp_path / f"{table}.jsonl", 3600))
    sync(wh, pipeline)
    # customer's view last refreshed an hour ago (Redshift stopped its auto refresh); orders'
    # keeps refreshing (an ingest of nothing is a refresh that read nothing), as does the heartbeat's.
    wh.execute(
        "UPDATE cdc.sync_mv_refresh_history SET end_time = end_time - INTERVAL '1 hour' WHERE mv_name = 'customer__stream'"
    )
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    ingest_file(wh, pipeline, "orders", empty)
    ingest_file(wh, pipeline, None, write_heartbeats(tmp_path / "hb.jsonl", [5]))

    rows = status_json(path, database_dsn)
    assert rows["customer"]["freshness"]["state"] == "view not refreshing"
    assert rows["customer"]["freshness"]["view_refresh_age_seconds"] > 3500
    assert rows["orders"]["freshness"]["state"] == "idle"
    text = run_cli("status", "--config", str(path), "--dsn", database_dsn)
    assert "view not refreshing" in text.stdout and "idle" in text.stdout


def test_the_lambda_reports_freshness_in_its_metric_lines(hb, database_dsn, tmp_path, monkeypatch, capsys):
    wh, pipeline, path = hb
    for table in ("customer", "orders"):
        ingest_file(wh, pipeline, table, timed(f"{table}-1.jsonl", tmp_path / f"{table}.jsonl", 3600))
    ingest_file(wh, pipeline, None, write_heartbeats(tmp_path / "hb.jsonl", [20]))
    # orders' procedure is missing: its CALL fails and its records keep waiting.
    wh.execute("DROP PROCEDURE cdc.incremental_sync_orders()")
    local_lambda(monkeypatch, path, database_dsn)
    with pytest.raises(lambda_handler.SyncFailed):
        lambda_handler.handler({}, None)
    metrics = metric_lines(capsys.readouterr().out)
    assert metrics["customer"]["freshness"] == "idle" and metrics["customer"]["Stalled"] == 0
    assert metrics["orders"]["freshness"] == "stalled" and metrics["orders"]["Stalled"] == 1
    for line in metrics.values():
        names = {m["Name"] for m in line["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
        assert {"HeartbeatAgeSeconds", "Stalled", "CaptureDown", "WaitingSeconds"} <= names
        assert 19 < line["HeartbeatAgeSeconds"] < 300 and line["CaptureDown"] == 0


def test_without_a_heartbeat_nothing_changes(deployed):
    wh, pipeline = deployed
    assert table_freshness(wh.query, wh.dialect, pipeline, ["customer"]) == []
    assert "heartbeat" not in warehouse_model(pipeline)  # revisions recorded before [heartbeat] stay equal
    assert not any(o.name == HEARTBEAT_STREAM for o in pipeline_objects(pipeline, "redshift", "o"))


def test_adding_the_heartbeat_is_a_revision_that_creates_its_stream(example_pipeline):
    plan = plan_revision(state_for(example_pipeline, "p"), state_for(heartbeat_pipeline(), "p"))
    assert plan.upgrade == ["r.create_heartbeat()"] and plan.downgrade == ["r.drop_heartbeat()"]
    # stale_after_seconds is how the tool reads it, not what it deploys
    assert "stale_after_seconds" not in warehouse_model(heartbeat_pipeline())["heartbeat"]


def test_the_redshift_freshness_sql_is_pinned():
    pipeline = heartbeat_pipeline()
    d = dialect_for("redshift", pipeline.schema)
    (view,) = [o for o in pipeline_objects(pipeline, "redshift", "pipeline.toml") if o.name == HEARTBEAT_STREAM]
    statements = [
        view.sql,
        refresh_ages_sql(d, pipeline, [HEARTBEAT_STREAM, "customer__stream"]),
        measures_sql(d, pipeline, ["customer"]),
    ]
    for sql in statements:
        sqlglot.parse_one(sql, read="redshift")
    text = "\n\n".join(s.rstrip(";") + ";" for s in statements) + "\n"
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "regenerate with UPDATE_GOLDEN=1 and review the diff"
    assert f'FROM "msk_cdc"."{HEARTBEAT_TOPIC}"' in view.sql and "AUTO REFRESH YES" in view.sql


ages = st.one_of(st.none(), st.floats(min_value=0, max_value=1e6))


@given(ages, ages, ages, ages, st.integers(min_value=0, max_value=10), st.floats(min_value=0, max_value=1e6))
def test_the_state_follows_the_heartbeat_first(heartbeat_age, hb_refresh, refresh, event_age, pending, lag):
    state = classify(300, heartbeat_age, hb_refresh, refresh, event_age, pending, lag)
    if heartbeat_age is None or heartbeat_age > 300:
        assert state == Freshness.CAPTURE_DOWN
    elif pending and lag > 300:
        assert state in STALLED_STATES
    elif state == Freshness.IDLE:
        assert pending == 0 and (event_age is None or event_age > 300)


def test_prune_stream_keeps_the_newest_heartbeat_and_refresh(hb, tmp_path):
    wh, pipeline, _ = hb
    ingest_file(wh, pipeline, None, write_heartbeats(tmp_path / "hb1.jsonl", [30, 20, 10]))
    ingest_file(wh, pipeline, None, write_heartbeats(tmp_path / "hb2.jsonl", [5], first_offset=3))
    wh.execute(f"UPDATE cdc.{HEARTBEAT_STREAM} SET refresh_time = refresh_time - INTERVAL '40 days'")
    wh.execute("UPDATE cdc.sync_mv_refresh_history SET end_time = end_time - INTERVAL '40 days'")
    result = prune(wh, pipeline, stream=True)
    assert result.heartbeat == 3
    assert wh.query(f"SELECT kafka_offset FROM cdc.{HEARTBEAT_STREAM}") == [(3,)]
    assert wh.query("SELECT mv_name, COUNT(*) FROM cdc.sync_mv_refresh_history GROUP BY 1") == [(HEARTBEAT_STREAM, 1)]
    (customer,) = table_freshness(wh.query, wh.dialect, pipeline, ["customer"])
    assert 4 < customer.source_alive_seconds < 300
    redshift = heartbeat_prune_sql(pipeline, dialect_for("redshift", "cdc"), "GETDATE() - INTERVAL '30 days'")
    (statement,) = redshift  # Redshift keeps its own refresh history
    assert sqlglot.parse_one(statement, read="redshift").key == "delete"

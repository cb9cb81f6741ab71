"""Records lost before they were read: a stretch of offsets the topic no longer held when
the view refreshed (retention) is reported by `sync`, `status` and the Lambda, with the
backfill that repairs it; gaps the topic explains are not.

Kafka's documentation: a compacted topic keeps "at least the last known value for each
message key" and cleans older ones, so "the offset for a message never changes" but
offsets are missing after cleaning (https://kafka.apache.org/documentation/#compaction);
a transactional producer writes "control records" (commit and abort markers) into the
log, which "take up an offset" and are never returned to the application
(https://kafka.apache.org/documentation/#controlbatch, KIP-98); Kafka Connect source
connectors use transactions with `exactly.once.source.support` (KIP-618). Records past
`retention.ms` are deleted from the log, and Redshift's own note on a paused cluster:
"Records that expired from the stream during the paused period are not available."
"""

from __future__ import annotations

import json
import tomllib

import pytest
import sqlglot

from sync.aws import lambda_handler
from sync.config import parse_pipeline
from sync.debezium.events import ChangeStream, MySqlSource, write_jsonl
from sync.operations.loss import gaps_sql, lost_records, starts_sql
from sync.operations.runner import deploy, sync
from sync.schema.state import warehouse_model
from sync.sql.dialect import dialect_for
from tests.helpers import ingest, local_lambda, metric_lines
from tests.test_cli import run
from tests.test_recovery import PIPELINE, _row


def records(stream: ChangeStream, keys: range, offsets: range) -> list[dict]:
    return [{**stream.insert(_row(k)), "offset": o} for k, o in zip(keys, offsets, strict=True)]


def pipeline_file(tmp_path, offset_gaps: str | None) -> tuple:
    text = PIPELINE.read_text()
    if offset_gaps:
        text = text.replace('order_by = "mysql-binlog"', f'order_by = "mysql-binlog"\noffset_gaps = "{offset_gaps}"', 1)
    path = tmp_path / "pipeline.toml"
    path.write_text(text)
    return path, parse_pipeline(tomllib.loads(text))


def test_a_stretch_that_expired_before_the_refresh_is_reported_with_the_backfill(wh, database_dsn, tmp_path, monkeypatch, capsys):
    path, pipeline = pipeline_file(tmp_path, None)
    deploy(wh, pipeline, "pipeline.toml")
    stream = ChangeStream(["CUST_ID"], MySqlSource(file_number=3))
    ingest(wh, pipeline, "customer", records(stream, range(0, 5), range(0, 5)))
    sync(wh, pipeline, ["customer"])
    # Offsets 5-9 expired from the topic before the view's next refresh read them.
    write_jsonl(records(stream, range(5, 13), range(5, 13))[5:], tmp_path / "after-outage.jsonl")
    common = ["--config", str(path), "--dsn", database_dsn]
    assert run("ingest", "--table", "customer", "--file", str(tmp_path / "after-outage.jsonl"), *common).returncode == 0

    out = run("sync", "--table", "customer", *common)
    assert out.returncode == 0, out.stderr
    warning = " ".join(out.stderr.split())
    assert "customer: records lost before they were read: partition 0, offsets 5-9 (5) were not in the topic" in warning
    assert "run `redshift-sync backfill --table customer --snapshot <a snapshot of the source taken after 20" in warning

    st = run("status", "--json", *common)
    (customer,) = [r for r in json.loads(st.stdout) if r["table"] == "customer"]
    (gap,) = customer["lost_records"]
    assert (gap["partition"], gap["before_offset"], gap["next_offset"], gap["missing"]) == (0, 4, 10, 5)
    assert gap["command"].startswith("redshift-sync backfill --table customer --snapshot")

    local_lambda(monkeypatch, path, database_dsn)
    lambda_handler.handler({}, None)
    lines = metric_lines(capsys.readouterr().out)
    assert lines["customer"]["RecordsLost"] == 5 and "offsets 5-9" in lines["customer"]["lost_records"][0]
    assert lines["orders"]["RecordsLost"] == 0
    assert "RecordsLost" in {m["Name"] for m in lines["customer"]["_aws"]["CloudWatchMetrics"][0]["Metrics"]}


def test_a_compacted_topic_shows_no_loss(wh, database_dsn, tmp_path):
    path, pipeline = pipeline_file(tmp_path, "compacted")
    deploy(wh, pipeline, "pipeline.toml")
    stream = ChangeStream(["CUST_ID"], MySqlSource(file_number=3))
    ingest(wh, pipeline, "customer", records(stream, range(0, 3), range(0, 9, 3)))  # offsets 0, 3, 6: cleaned between
    sync(wh, pipeline, ["customer"])
    ingest(wh, pipeline, "customer", records(stream, range(3, 5), range(20, 24, 2)))
    out = run("sync", "--table", "customer", "--config", str(path), "--dsn", database_dsn)
    assert out.returncode == 0 and "lost" not in out.stderr, out.stderr
    st = json.loads(run("status", "--json", "--config", str(path), "--dsn", database_dsn).stdout)
    assert [r["lost_records"] for r in st] == [[], []]
    assert lost_records(wh.query, wh.dialect, pipeline, ["customer"]) == []


@pytest.mark.parametrize(("offset_gaps", "reported"), [("transaction-markers", []), (None, [(0, 2, 1), (0, 4, 1)])])
def test_one_commit_marker_per_transaction_is_not_a_loss(wh, offset_gaps, reported, tmp_path):
    """Three transactions of one record each, with their commit markers at offsets 1 and 3."""
    _, pipeline = pipeline_file(tmp_path, offset_gaps)
    deploy(wh, pipeline, "pipeline.toml")
    stream = ChangeStream(["CUST_ID"], MySqlSource(file_number=3))
    ingest(wh, pipeline, "customer", records(stream, range(0, 3), range(0, 6, 2)))
    found = lost_records(wh.query, wh.dialect, pipeline, ["customer"])
    assert [(g.partition, g.next_offset, g.missing) for g in found] == reported


def test_a_gap_wider_than_a_marker_is_reported_with_markers_declared(wh, tmp_path):
    _, pipeline = pipeline_file(tmp_path, "transaction-markers")
    deploy(wh, pipeline, "pipeline.toml")
    stream = ChangeStream(["CUST_ID"], MySqlSource(file_number=3))
    ingest(wh, pipeline, "customer", records(stream, range(0, 2), range(0, 2)))
    sync(wh, pipeline, ["customer"])
    ingest(wh, pipeline, "customer", records(stream, range(2, 4), range(5, 7)))  # offsets 2-4 gone
    (gap,) = lost_records(wh.query, wh.dialect, pipeline, ["customer"])
    assert (gap.before_offset, gap.next_offset, gap.missing) == (1, 5, 3)


def test_the_setting_is_not_deployed_and_the_redshift_sql_parses(tmp_path):
    _, compacted = pipeline_file(tmp_path, "compacted")
    _, default = pipeline_file(tmp_path, None)
    assert warehouse_model(compacted) == warehouse_model(default)  # no revision for it
    d = dialect_for("redshift", default.schema)
    for sql in (starts_sql(default, ["customer"]), gaps_sql(d, default, {"customer": {0: 4, 1: 7}, "orders": {}})):
        sqlglot.parse_one(sql, read="redshift")
    assert "WHEN 0 THEN 4 WHEN 1 THEN 7" in gaps_sql(d, default, {"customer": {0: 4, 1: 7}})

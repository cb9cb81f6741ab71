"""The stream rows `ingest` writes, column by column, as Redshift's streaming view holds
them: "kafka_timestamp | timestamp without time zone | Timestamp value of the record",
`kafka_timestamp_type` "C = CREATE_TIME (client); L = LOG_APPEND_TIME (broker)"
(Amazon Redshift, "Streaming ingestion ... Kafka metadata columns"). A Kafka record's
timestamp is a whole number of milliseconds since the epoch (Kafka's ProducerRecord:
"The timestamp of the record, in milliseconds since epoch"), so the stored timestamp is
that instant to the millisecond, at either end of the range a timestamp column holds."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from sync.local.stream import ingest_file
from sync.operations.runner import deploy
from tests.helpers import make_pipeline

TABLE = """
[[tables]]
name = "reading"
topic = "db.public.reading"
primary_key = ["id"]
columns = [{ name = "id", type = "integer" }]
"""
EPOCH = datetime(1970, 1, 1)


@pytest.mark.parametrize(
    "ms",
    [
        -62_135_596_800_000,  # 0001-01-01 00:00:00
        0,
        1_700_000_000_123,
        7_258_118_400_001,  # 2200-01-01 00:00:00.001
        167_893_511_642_187,  # a float of seconds gives .187012
        253_402_300_799_999,  # 9999-12-31 23:59:59.999 (a float of seconds gives .998993)
    ],
)
def test_kafka_timestamp_is_stored_to_the_millisecond(wh, tmp_path, ms):
    pipeline = make_pipeline(TABLE)
    deploy(wh, pipeline, "test")
    events = tmp_path / "events.jsonl"
    record = {"partition": 3, "offset": 2**63 - 1, "timestamp": ms, "timestamp_type": "L", "key": {"id": 1}, "value": {}}
    events.write_text(json.dumps(record) + "\n")
    ingest_file(wh, pipeline, "reading", events)
    row = wh.query(
        'SELECT kafka_partition, kafka_offset, kafka_timestamp_type, kafka_timestamp, kafka_key, payload::text FROM cdc."reading__stream"'
    )
    assert row == [(3, 2**63 - 1, "L", EPOCH + timedelta(milliseconds=ms), b'{"id":1}', "{}")]


def test_a_record_without_a_timestamp_takes_its_refresh_time(wh, tmp_path):
    pipeline = make_pipeline(TABLE)
    deploy(wh, pipeline, "test")
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps({"value": {"id": 1}, "headers": [{"h": "v"}]}) + "\n" + json.dumps({"value": None}) + "\n")
    result = ingest_file(wh, pipeline, "reading", events)
    rows = wh.query(
        "SELECT kafka_offset, kafka_timestamp, refresh_time, kafka_key, kafka_headers::text, payload::text, raw_value "
        'FROM cdc."reading__stream" ORDER BY kafka_offset'
    )
    t = result.refresh_time
    assert rows == [(0, t, t, None, '[{"h": "v"}]', '{"id": 1}', None), (1, t, t, None, None, None, None)]

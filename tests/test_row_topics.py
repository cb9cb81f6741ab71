"""Query-based topics (format = "row"): the Confluent JDBC source connector's messages.

The outside contract, the connector's documentation (JDBC Source Connector for Confluent
Platform, configuration options, `mode`):
  "timestamp - use a timestamp (or timestamp-like) column to detect new and modified rows.
   This assumes the column is updated with each write, and that values are monotonically
   incrementing, but not necessarily unique."
  "timestamp+incrementing - use two columns, a timestamp column that detects new and
   modified rows and a strictly incrementing column which provides a globally unique ID
   for updates so each row can be assigned a unique stream offset."
  "incrementing - use a strictly incrementing column on each table to detect only new
   rows. Note that this will not detect modifications or deletions of existing rows."
and its delivery guarantee ("At least once delivery"): after a restart it polls again from
its last committed offset, so rows already delivered arrive again. The messages are shaped
as the connector writes them with the JsonConverter (examples/jdbc_pagila/make_events.py
names the source of the sample rows).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from sync.config import ConfigError
from sync.operations.runner import deploy
from sync.warehouse import connect
from tests.cli_runs import run_cli
from tests.helpers import EXAMPLES, feed, ingest, make_pipeline, sync_one

EXAMPLE = EXAMPLES / "jdbc_pagila"
EVENTS = EXAMPLE / "events"

TABLE = """
[[tables]]
name = "item"
topic = "db.item"
format = "row"
primary_key = ["id"]
order_by = "column:{order}"
columns = [
  {{ name = "id", type = "integer" }},
  {{ name = "name", type = "varchar(32)" }},
  {{ name = "updated_at", type = "timestamp"{semantic} }},
  {{ name = "seq", type = "bigint" }},
]
"""
MS = ', semantic = "io.debezium.time.Timestamp"'


def _cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    return run_cli(*args, env=env)


def test_jdbc_source_topic_syncs_through_the_cli_with_re_polled_windows(database_dsn, tmp_path):
    """The example's messages through `redshift-sync ingest ... sync`: a restart re-polls
    rows already delivered, a row changes twice within one millisecond, a producer retry
    sends an old version late, a tombstone and a bad time arrive; the target holds each
    row as the connector last read it, and no record fails the CALL."""
    env = {"REDSHIFT_SYNC_CONFIG": str(EXAMPLE / "pipeline.toml"), "REDSHIFT_SYNC_DSN": database_dsn}
    env["REDSHIFT_SYNC_VERSIONS"] = str(tmp_path)
    for step in (["revision", "-m", "pagila"], ["deploy"]):
        out = _cli(*step, env=env)
        assert out.returncode == 0, out.stderr

    def ingest_and_sync(name: str) -> dict:
        out = _cli("ingest", "--table", "address", "--file", str(EVENTS / f"{name}.jsonl"), env=env)
        assert out.returncode == 0, out.stderr
        out = _cli("sync", "--table", "address", "--json", env=env)
        assert out.returncode == 0, out.stderr
        (summary,) = json.loads(out.stdout)
        return summary

    first = ingest_and_sync("address-1")
    assert (first["events_read"], first["upserted"], first["superseded"]) == (5, 3, 2)
    second = ingest_and_sync("address-2")
    # 101 and 100b: the same values at the stored position (stale: no change); 100's old
    # copy: older than 100b in the same batch (superseded); the tombstone skipped; 103
    # quarantined; 102c (a tie with other values) and 104 applied.
    assert (second["events_read"], second["upserted"], second["deleted"]) == (7, 2, 0)
    assert (second["stale"], second["superseded"], second["tombstones"], second["quarantined"]) == (2, 1, 1, 1)

    wh = connect(database_dsn)
    try:
        target = wh.query(
            "SELECT address_id, address2, district, phone, last_update::text, _source_pos FROM pagila.address ORDER BY 1"
        )
        reason = wh.scalar("SELECT reason FROM pagila.sync_quarantine")
    finally:
        wh.close()
    assert target == [
        (100, "Apartment #1234", "Georgia", "6171054059", "2021-08-13 00:43:38.508", "00000001628815418508"),
        (101, "", "Tete", "817248913162", "2017-02-15 09:45:30", "00000001487151930000"),
        (102, "", "Dubai", "412903167999", "2021-08-13 00:43:40.117", "00000001628815420117"),
        (104, "", "Tete", "817248913162", "2021-08-13 00:43:40.117", "00000001628815420117"),
    ]
    assert reason == "field last_update does not convert from io.debezium.time.Timestamp to timestamp"

    # Re-running with nothing new changes nothing; the whole second refresh once more is a no-op.
    assert ingest_and_sync("address-2")["upserted"] == 0


def test_incrementing_mode_without_a_kafka_key_takes_the_key_from_the_row(database_dsn, tmp_path):
    env = {"REDSHIFT_SYNC_CONFIG": str(EXAMPLE / "pipeline.toml"), "REDSHIFT_SYNC_DSN": database_dsn}
    env["REDSHIFT_SYNC_VERSIONS"] = str(tmp_path)
    for step in (["revision", "-m", "pagila"], ["deploy"]):
        assert _cli(*step, env=env).returncode == 0
    assert _cli("ingest", "--table", "payment", "--file", str(EVENTS / "payment-1.jsonl"), env=env).returncode == 0
    out = _cli("sync", "--table", "payment", "--json", env=env)
    (summary,) = json.loads(out.stdout)
    assert (summary["upserted"], summary["superseded"], summary["quarantined"]) == (3, 1, 0)
    wh = connect(database_dsn)
    try:
        assert wh.query("SELECT payment_id, amount::text FROM pagila.payment ORDER BY 1") == [
            (16050, "1.99"),
            (16051, "0.99"),
            (16052, "6.99"),
        ]
    finally:
        wh.close()


@pytest.fixture
def item(wh):
    def make(order: str = "updated_at", semantic: str = MS):
        pipeline = make_pipeline(TABLE.format(order=order, semantic=semantic))
        deploy(wh, pipeline, "test")
        return pipeline

    return make


def _row(i: int, name: str, updated_at, seq: int = 0) -> dict:
    return {"key": None, "value": {"id": i, "name": name, "updated_at": updated_at, "seq": seq}}


def _target(wh) -> list[tuple]:
    return wh.query("SELECT id, name, _source_pos FROM cdc.item ORDER BY id")


def test_an_older_row_polled_again_never_overwrites_a_newer_one(wh, item):
    pipeline = item()
    feed(wh, pipeline, "item", [_row(1, "new", 2000)])
    run = feed(wh, pipeline, "item", [_row(1, "old", 1000)])
    assert (run.upserted, run.stale) == (0, 1)
    assert _target(wh) == [(1, "new", "00000000000000002000")]


def test_identical_rows_polled_again_are_no_ops(wh, item):
    pipeline = item()
    feed(wh, pipeline, "item", [_row(1, "a", 1000), _row(2, "b", 1000)])
    before = wh.query("SELECT id, _kafka_offset, _synced_at FROM cdc.item ORDER BY id")
    run = feed(wh, pipeline, "item", [_row(1, "a", 1000), _row(2, "b", 1000)] * 2)
    assert (run.upserted, run.stale, run.superseded) == (0, 2, 2)
    assert wh.query("SELECT id, _kafka_offset, _synced_at FROM cdc.item ORDER BY id") == before


def test_a_tie_on_the_column_with_other_values_is_the_later_read(wh, item):
    """Timestamps are "not necessarily unique": the later record of the key in Kafka order
    is the later read of the row, in the same batch and across batches."""
    pipeline = item()
    feed(wh, pipeline, "item", [_row(1, "first", 1000), _row(1, "second", 1000)])
    assert _target(wh) == [(1, "second", "00000000000000001000")]
    run = feed(wh, pipeline, "item", [_row(1, "third", 1000)])
    assert run.upserted == 1
    assert _target(wh) == [(1, "third", "00000000000000001000")]


def test_a_tombstone_on_a_row_topic_is_skipped_not_a_delete(wh, item):
    pipeline = item()
    feed(wh, pipeline, "item", [_row(1, "a", 1000)])
    run = feed(wh, pipeline, "item", [{"key": {"id": 1}, "value": None}])
    assert (run.tombstones, run.deleted) == (1, 0)
    assert _target(wh) == [(1, "a", "00000000000000001000")]


def test_text_timestamps_order_to_the_microsecond(wh, item):
    """Timestamps sent as text (ISO 8601, 'T' or a space, optional fraction and Z)."""
    pipeline = item(semantic="")
    feed(wh, pipeline, "item", [_row(1, "b", "2021-08-13T00:43:38.51Z"), _row(2, "x", "2021-08-13 00:43:38")])
    run = feed(wh, pipeline, "item", [_row(1, "a", "2021-08-13 00:43:38.508"), _row(2, "y", "2021-08-13T00:43:38.000001")])
    assert (run.upserted, run.stale) == (1, 1)
    assert _target(wh) == [(1, "b", "20210813004338510000"), (2, "y", "20210813004338000001")]


def test_an_incrementing_column_orders_by_its_number(wh, item):
    pipeline = item(order="seq")
    feed(wh, pipeline, "item", [_row(1, "ten", 0, seq=10)])
    run = feed(wh, pipeline, "item", [_row(1, "nine", 0, seq=9), _row(2, "one", 0, seq=1)])
    assert (run.upserted, run.stale) == (1, 1)
    assert _target(wh) == [(1, "ten", "00000000000000000010"), (2, "one", "00000000000000000001")]


@pytest.mark.parametrize(
    "updated_at",
    [None, "soon", -5, 1.5, 10**25, {"ms": 1}, [1], True, "2021-08-13T00:43:38+02:00", "9" * 30],
)
def test_any_order_value_is_a_position_or_none_and_never_fails_the_call(wh, item, updated_at):
    """Garbage in the order column: the position is NULL (the rules of events without a
    position), the value itself quarantined when it does not convert; the CALL goes on."""
    pipeline = item(semantic="")
    ingest(wh, pipeline, "item", [_row(1, "stored", "2021-08-13 00:43:38")])
    sync_one(wh, pipeline, "item")
    ingest(wh, pipeline, "item", [_row(1, "bad", updated_at), _row(2, "fine", "2021-08-13 00:43:39")])
    run = sync_one(wh, pipeline, "item")
    assert run.events_read == 2
    assert run.status == "ok", run.error
    assert wh.scalar("SELECT name FROM cdc.item WHERE id = 2") == "fine"
    ((name, position),) = wh.query("SELECT name, _source_pos FROM cdc.item WHERE id = 1")
    assert position is None or (len(position) == 20 and position.isdigit()), position
    # The bad record either applied (a position-less event) or was accounted for.
    assert name == "bad" or run.quarantined + run.stale == 1, (name, run)


def test_row_shaped_jsonl_without_wrappers_ingests(wh, item, tmp_path):
    """A file of bare rows (what an S3 sink writes for the topic), schemas wrapper or not."""
    from sync.local.stream import ingest_file

    pipeline = item()
    path = tmp_path / "rows.jsonl"
    wrapped = {"schema": {"type": "struct", "fields": [], "name": "item"}, "payload": {"id": 2, "name": "w", "updated_at": 5}}
    path.write_text(json.dumps({"id": 1, "name": "bare", "updated_at": 5, "seq": 1}) + "\n" + json.dumps(wrapped) + "\n")
    assert ingest_file(wh, pipeline, "item", path).records == 2
    run = sync_one(wh, pipeline, "item")
    assert run.upserted == 2
    assert [r[:2] for r in _target(wh)] == [(1, "bare"), (2, "w")]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("column:updated_at", "column:nope", "order_by: 'nope' is not one of the columns' field names of table 'item'"),
        (
            '"timestamp", semantic',
            '"boolean", semantic',
            "order_by: column 'updated_at' is boolean; the order column is a timestamp",
        ),
        (
            '"column:updated_at"',
            '"postgres-lsn"',
            "order_by: 'postgres-lsn' reads Debezium's source block, which format = 'row' does not",
        ),
        (
            "column:updated_at",
            "colum:updated_at",
            "order_by 'colum:updated_at' is not one of 'kafka', 'postgres-lsn', 'mysql-binlog', 'sqlserver-lsn', 'oracle-scn', 'db2-lsn' or",
        ),
        (
            'format = "row"',
            'format = "debezium"',
            "order_by: 'column:updated_at' orders by a column of the row, for format = 'row' only",
        ),
    ],
)
def test_a_bad_order_column_is_a_clear_error_naming_the_field(old, new, message):
    text = TABLE.format(order="updated_at", semantic=MS)
    assert old in text
    with pytest.raises(ConfigError) as err:
        make_pipeline(text.replace(old, new))
    assert "tables[0] (item)" in str(err.value) and message in str(err.value)


def _infer(sample, *args: str):
    from typer.testing import CliRunner

    from sync.cli.app import app

    return CliRunner().invoke(app, ["infer", "--sample", str(sample), *args])


def test_infer_recognises_a_jdbc_source_sample_and_its_block_syncs(wh):
    """Rows with their schema and no envelope: format = "row"; the key field is the one the
    bare key (ExtractField$Key) equals; the Connect Timestamp named like an update time
    orders the table."""
    from sync.local.stream import ingest_file

    sample = EVENTS / "address-1.jsonl"
    result = _infer(sample, "--table", "address", "--topic", "pagila.public.address")
    assert result.exit_code == 0, result.output
    block = result.output
    assert 'format = "row"' in block and 'primary_key = ["address_id"]' in block
    assert 'order_by = "column:last_update"' in block
    assert '{ name = "last_update", type = "timestamp", semantic = "io.debezium.time.Timestamp" }' in block
    pipeline = make_pipeline(block)
    deploy(wh, pipeline, "test")
    ingest_file(wh, pipeline, "address", sample)
    assert sync_one(wh, pipeline, "address").upserted == 3
    assert wh.scalar("SELECT COUNT(*) FROM cdc.sync_schema_drift") == 0


def _sample(tmp_path, name: str, fields: list[dict], payload: dict):
    path = tmp_path / "sample.jsonl"
    value = {"schema": {"type": "struct", "name": name, "optional": False, "fields": fields}, "payload": payload}
    path.write_text(json.dumps({"key": None, "value": value}) + "\n")
    return path


def test_infer_without_a_polling_column_asks_for_one(tmp_path):
    fields = [{"type": "int64", "optional": False, "field": "id"}, {"type": "string", "optional": True, "field": "note"}]
    sample = _sample(tmp_path, "notes", fields, {"id": 1, "note": "x"})
    result = _infer(sample, "-t", "notes", "--topic", "db.notes", "--primary-key", "id")
    assert result.exit_code == 0, result.output
    assert 'format = "row"' in result.output and 'order_by = "kafka"' in result.output
    assert "# order_by: pick the connector's polling column" in result.output


def test_infer_keeps_an_unwrapped_debezium_row_apart(tmp_path):
    """ExtractNewRecordState without added fields is also a bare row, but its schema keeps
    Debezium's `<prefix>.<table>.Value` name."""
    fields = [{"type": "int64", "optional": False, "field": "id"}]
    sample = _sample(tmp_path, "pg.public.notes.Value", fields, {"id": 1})
    result = _infer(sample, "-t", "notes", "--topic", "pg.public.notes", "--primary-key", "id")
    assert result.exit_code == 0, result.output
    assert 'format = "debezium-unwrap"' in result.output

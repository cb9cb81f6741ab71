"""The handover when the stream's deletes are tombstones and its rows carry no source time.

Debezium's ExtractNewRecordState defaults to `delete.tombstone.handling.mode=tombstone`
since 2.5: "a record with null value" replaces the delete event, and the original
tombstone is dropped (Debezium documentation, "New Record State Extraction", options
table; `shared/reference/debezium.md`). The record carries the key and nothing else: no
`__source_ts_ms`, no position. Rows only carry `__source_ts_ms` when `add.fields` asks for
it. The Kafka record's timestamp is set when the record is produced (or appended), after
the commit. A snapshot taken before such a delete must not bring the key back, a snapshot
row must not overwrite a newer stream row of unknown source time, and the same backfill
run twice changes nothing, in both delete modes."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from sync.local.stream import ingest_file
from sync.operations.backfill import run_backfill
from sync.operations.runner import sync
from tests.helpers import make_pipeline

pytestmark = pytest.mark.spark

SNAPSHOT_TIME = datetime(2024, 5, 1, 12, 0, 0)
AFTER = datetime(2024, 5, 1, 12, 5, 0, tzinfo=timezone.utc)  # the stream's Kafka timestamps
BEFORE = datetime(2024, 5, 1, 11, 0, 0, tzinfo=timezone.utc)


def tables_for(mode: str) -> str:
    """The [[tables]] TOML of the item table in delete mode `mode`."""
    return f"""
[[tables]]
name = "item"
topic = "shop.item"
format = "debezium-unwrap"
delete_mode = "{mode}"
primary_key = ["id"]
columns = [
  {{ name = "id", type = "integer" }},
  {{ name = "name", type = "varchar(64)" }},
]
"""


def pipeline_for(mode: str):
    return make_pipeline(tables_for(mode))


def ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


def stream(wh, pipeline, tmp_path, records: list[dict]) -> None:
    path = tmp_path / f"stream-{len(list(tmp_path.iterdir()))}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    ingest_file(wh, pipeline, "item", path)
    (run,) = sync(wh, pipeline, ["item"])
    assert run.status == "ok", run.error


def snapshot(tmp_path, rows: dict[int, str]) -> str:
    path = tmp_path / "snapshot.jsonl"
    path.write_text("".join(json.dumps({"id": k, "name": v}) + "\n" for k, v in rows.items()))
    return str(path)


def everything(wh, mode: str) -> list:
    rows = wh.query('SELECT * FROM cdc."item" ORDER BY id')
    deleted = wh.query('SELECT * FROM cdc."item__deleted" ORDER BY id') if mode == "hard" else []
    return [rows, deleted]


def live(wh, mode: str) -> dict[int, str]:
    where = "WHERE NOT _deleted" if mode == "soft" else ""
    return dict(wh.query(f'SELECT id, name FROM cdc."item" {where} ORDER BY id'))


@pytest.fixture
def deployed_item(wh, request):
    from sync.operations.runner import deploy

    pipeline = pipeline_for(request.param)
    deploy(wh, pipeline, "item.toml")
    return wh, pipeline, request.param


both_modes = pytest.mark.parametrize("deployed_item", ["hard", "soft"], indirect=True)


@both_modes
def test_tombstone_only_delete_is_not_resurrected_by_an_older_snapshot(deployed_item, spark, tmp_path):
    wh, pipeline, mode = deployed_item
    stream(
        wh,
        pipeline,
        tmp_path,
        [
            {"timestamp": ms(BEFORE), "key": {"id": 1}, "value": {"id": 1, "name": "one", "__source_ts_ms": ms(BEFORE)}},
            {"timestamp": ms(BEFORE), "key": {"id": 2}, "value": {"id": 2, "name": "two", "__source_ts_ms": ms(BEFORE)}},
            # delete.tombstone.handling.mode=tombstone: a null value (JSON null with the
            # JsonConverter) is the delete itself; delete-to-tombstone: a Kafka null.
            {"timestamp": ms(AFTER), "key": {"id": 1}, "value": "null"},
            {"timestamp": ms(AFTER), "key": {"id": 2}, "value": None},
        ],
    )
    assert live(wh, mode) == {}
    snap = snapshot(tmp_path, {1: "one", 2: "two", 3: "three"})
    first = run_backfill(wh, pipeline, "item", snap, "json", SNAPSHOT_TIME, spark=spark)
    assert live(wh, mode) == {3: "three"}, "a snapshot older than the delete brought the key back"
    assert first.loaded == 1
    state = everything(wh, mode)
    again = run_backfill(wh, pipeline, "item", snap, "json", SNAPSHOT_TIME, spark=spark)
    assert everything(wh, mode) == state, "a second identical backfill changed the table"
    assert (again.loaded, again.deleted) == (0, 0)


@both_modes
def test_snapshot_newer_than_a_tombstone_loads_the_key_again(deployed_item, spark, tmp_path):
    """The Kafka timestamp bounds the delete's commit time: a snapshot taken after it is
    newer (hard mode keeps the bound in the deleted keys; soft mode keeps the marked row,
    whose time is unknown, until the stream re-inserts the key)."""
    wh, pipeline, mode = deployed_item
    stream(
        wh,
        pipeline,
        tmp_path,
        [
            {"timestamp": ms(BEFORE), "key": {"id": 1}, "value": {"id": 1, "name": "one"}},
            {"timestamp": ms(BEFORE), "key": {"id": 1}, "value": None},
        ],
    )
    run_backfill(wh, pipeline, "item", snapshot(tmp_path, {1: "one again"}), "json", SNAPSHOT_TIME, spark=spark)
    assert live(wh, mode) == ({1: "one again"} if mode == "hard" else {})


@both_modes
def test_stream_row_without_source_time_is_not_overwritten_by_an_older_snapshot(deployed_item, spark, tmp_path):
    wh, pipeline, mode = deployed_item
    # No add.fields: the rows carry no __source_ts_ms.
    stream(wh, pipeline, tmp_path, [{"timestamp": ms(AFTER), "key": {"id": 5}, "value": {"id": 5, "name": "new"}}])
    snap = snapshot(tmp_path, {5: "old", 6: "six"})
    run_backfill(wh, pipeline, "item", snap, "json", SNAPSHOT_TIME, spark=spark)
    assert live(wh, mode) == {5: "new", 6: "six"}, "an older snapshot overwrote a newer stream row"
    state = everything(wh, mode)
    run_backfill(wh, pipeline, "item", snap, "json", SNAPSHOT_TIME, spark=spark)
    assert everything(wh, mode) == state


@both_modes
def test_snapshot_without_any_source_time_never_replaces_a_stream_row(deployed_item, spark, tmp_path):
    """Debezium-unwrap snapshot records without __source_ts_ms and no --snapshot-time:
    keys the stream never wrote load; the others keep the stream's row."""
    wh, pipeline, mode = deployed_item
    stream(wh, pipeline, tmp_path, [{"timestamp": ms(BEFORE), "key": {"id": 7}, "value": {"id": 7, "name": "stream"}}])
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps({"id": 7, "name": "snap"}) + "\n" + json.dumps({"id": 8, "name": "eight"}) + "\n")
    run_backfill(wh, pipeline, "item", str(events), "debezium", None, spark=spark)
    assert live(wh, mode) == {7: "stream", 8: "eight"}
    state = everything(wh, mode)
    run_backfill(wh, pipeline, "item", str(events), "debezium", None, spark=spark)
    assert everything(wh, mode) == state

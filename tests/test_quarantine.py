"""`quarantine list|replay|discard`: a record that waits for a fix is applied once the fix
is deployed, through the same classification and staleness rules as any record.

Debezium's MySQL connector gives every change its binlog position (`source.file`,
`source.pos`, `source.row`: https://debezium.io/documentation/reference/stable/connectors/mysql.html#mysql-create-events);
a replayed record older by that position than the stored row must not overwrite it.
"""

from __future__ import annotations

import pytest

from sync.debezium.events import ChangeStream, MySqlSource
from sync.local.stream import ingest_file
from sync.operations.quarantine import Selection, discard, list_records, replay
from sync.operations.runner import sync
from sync.schema.revisions import deploy
from tests.helpers import ingest, make_pipeline, sync_one
from tests.test_migrations import EVENTS, columns, project, revise, upgraded  # noqa: F401  (fixtures)

LONG = "Acme Corporation of " + "x" * 280  # 300 characters: too long for varchar(256)
NARROW = "field NAME does not convert to varchar(256)"


def name_of(wh, key: str) -> str | None:
    return wh.scalar('SELECT name FROM cdc."customer" WHERE customer_id = %s', (key,))


@pytest.fixture
def quarantined(project, upgraded, wh, example_pipeline):  # noqa: F811
    """Two records quarantined for a too-narrow NAME: a new customer C777, and an update
    of C001 that a later update of C001 (applied) supersedes."""
    ingest_file(wh, example_pipeline, "customer", EVENTS / "customer-1.jsonl")
    sync_one(wh, example_pipeline, "customer")
    stream = ChangeStream(["CUST_ID"], MySqlSource(table="CUSTOMER", file_number=9))
    ingest(
        wh,
        example_pipeline,
        "customer",
        [
            stream.insert({"CUST_ID": "C777", "NAME": LONG, "MKTSEGMENT": "BUILDING"}),
            stream.update(None, {"CUST_ID": "C001", "NAME": LONG, "MKTSEGMENT": "BUILDING"}),
            stream.update(None, {"CUST_ID": "C001", "NAME": "Acme Renamed", "MKTSEGMENT": "BUILDING"}),
        ],
    )
    run = sync_one(wh, example_pipeline, "customer")
    assert run.quarantined == 2 and run.upserted == 1
    return upgraded


def test_list_shows_waiting_records_with_reason_and_value(quarantined, wh, example_pipeline):
    total, records = list_records(wh, example_pipeline, Selection("customer"))
    assert total == 2
    assert {r.reason for r in records} == {NARROW}
    assert all(r.handled is None and LONG in r.value for r in records)
    assert list_records(wh, example_pipeline, Selection("customer", reason="not valid JSON"))[0] == 0


def test_replay_after_widening_applies_the_record_and_an_older_one_stays_stale(quarantined, project, wh):
    cfg = quarantined
    # Replayed before the fix: both fail again, with the same reason, and nothing is lost.
    from sync.config import load_pipeline

    pipeline, _ = load_pipeline(project / "pipeline.toml")
    first = replay(wh, pipeline, Selection("customer"))
    assert first.replayed == 2 and first.quarantined_again == [(NARROW, 2)]
    assert first.run.quarantined == 2

    widened, _ = revise(
        cfg,
        project,
        '{ name = "NAME", type = "varchar(256)" }',
        '{ name = "NAME", type = "varchar(1024)" }',
        "longer customer names",
    )
    deploy(cfg, widened)
    assert columns(wh, "customer")["name"] == 1024
    result = replay(wh, widened, Selection("customer"))
    assert result.replayed == 2 and result.quarantined_again == []
    assert result.run.upserted == 1 and result.run.stale == 1
    assert name_of(wh, "C777") == LONG
    assert name_of(wh, "C001") == "Acme Renamed"  # the replayed update is older than the stored row
    assert list_records(wh, widened, Selection("customer"))[0] == 0
    handled = wh.query("SELECT handled, COUNT(*) FROM cdc.sync_quarantine GROUP BY 1 ORDER BY 1")
    assert handled == [("replayed", 4)]
    # The watermark did not move back: a sync with nothing new reads nothing.
    assert sync(wh, widened, ["customer"])[0].events_read == 0


def test_replay_in_kafka_order_keeps_a_newer_stored_row(project, database_dsn, wh):  # noqa: F811
    """order_by = "kafka": the replayed record is older by Kafka offset than the stored row."""
    from sync.operations.runner import deploy as deploy_objects

    def pipeline_with(width: int):
        return make_pipeline(f"""
[[tables]]
name = "item"
topic = "shop.item"
primary_key = ["id"]
order_by = "kafka"
columns = [{{ name = "id", type = "integer" }}, {{ name = "label", type = "varchar({width})" }}]
""")

    narrow = pipeline_with(4)
    deploy_objects(wh, narrow, "test")
    event = lambda i, label: {"value": {"op": "u", "after": {"id": i, "label": label}, "source": {}}}  # noqa: E731
    ingest(wh, narrow, "item", [event(1, "too long"), event(1, "ok"), event(2, "long too")])
    assert sync_one(wh, narrow, "item").quarantined == 2
    wh.execute('ALTER TABLE cdc."item" ALTER COLUMN label TYPE varchar(16)')
    wh.execute('ALTER TABLE cdc."item__stage" ALTER COLUMN label TYPE varchar(16)')
    wide = pipeline_with(16)
    deploy_objects(wh, wide, "test")  # the procedure for the wider column
    result = replay(wh, wide, Selection("item"))
    assert (result.replayed, result.run.upserted, result.run.stale) == (2, 1, 1)
    assert wh.query('SELECT id, label FROM cdc."item" ORDER BY 1') == [(1, "ok"), (2, "long too")]


def test_discard_by_reason_and_time_is_recorded(quarantined, wh, example_pipeline):
    from datetime import datetime

    assert discard(wh, example_pipeline, Selection("customer", before=datetime(2000, 1, 1))) == 0
    assert discard(wh, example_pipeline, Selection("customer", reason="no such reason")) == 0
    assert discard(wh, example_pipeline, Selection("customer", reason="does not convert")) == 2
    assert list_records(wh, example_pipeline, Selection("customer"))[0] == 0
    total, records = list_records(wh, example_pipeline, Selection("customer"), include_handled=True)
    assert total == 2 and all(r.handled == "discarded" and r.handled_at for r in records)
    # Nothing left to replay.
    assert replay(wh, example_pipeline, Selection("customer")).replayed == 0

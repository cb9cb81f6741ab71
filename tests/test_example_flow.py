"""The example pipeline end to end on PostgreSQL: the batches of the demo."""

from __future__ import annotations

from sync.local.stream import ingest_file
from sync.operations.runner import sync
from tests.helpers import EXAMPLES

EVENTS = EXAMPLES / "salesdb" / "events"


def test_customer_batches_end_as_the_source(deployed):
    wh, pipeline = deployed
    for name in ("customer-1.jsonl", "customer-2.jsonl", "customer-3.jsonl"):
        ingest_file(wh, pipeline, "customer", EVENTS / name)
        (run,) = sync(wh, pipeline, ["customer"])
        assert run.status == "ok", run.error
    rows = wh.query('SELECT customer_id, name, mktsegment FROM cdc."customer" ORDER BY 1')
    assert rows == [
        ("C001", "Acme Corp", "BUILDING"),
        ("C002", "Globex Corporation", "MACHINERY"),
        ("C003", "Initech (re-opened)", "MACHINERY"),
        ("C005", "Hooli", "BUILDING"),
        ("C104", "Umbrella", "HOUSEHOLD"),
    ]
    reasons = sorted(r for (r,) in wh.query("SELECT reason FROM cdc.sync_quarantine"))
    assert reasons == ["primary key field CUST_ID is missing or not a varchar(64)", "value is not valid JSON"]
    raw = wh.scalar("SELECT raw_value FROM cdc.sync_quarantine WHERE payload IS NULL")
    assert bytes(raw) == b"this is not JSON {"

    (again,) = sync(wh, pipeline, ["customer"])
    assert (again.events_read, again.upserted, again.deleted) == (0, 0, 0)
    assert wh.query('SELECT customer_id, name, mktsegment FROM cdc."customer" ORDER BY 1') == rows

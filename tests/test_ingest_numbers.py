"""`ingest` of JSON numbers PostgreSQL's jsonb cannot hold. JSON (RFC 8259, section 6)
puts no limit on a number's range; jsonb stores numbers as numeric, which holds "up to
131072 digits before the decimal point; up to 16383 digits after the decimal point"
(PostgreSQL, Numeric Types). Such a record is ingested raw and quarantined by the sync,
like any value the stream relation cannot parse; it never rejects the whole file."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from sync.debezium.vocabulary import Reason
from sync.local.stream import ingest_file, loads_exact
from sync.operations.runner import deploy
from tests.helpers import make_pipeline, sync_one

TABLE = """
[[tables]]
name = "reading"
topic = "db.public.reading"
primary_key = ["id"]
columns = [{ name = "id", type = "integer" }, { name = "v", type = "decimal(12,2)" }]
"""


def _line(offset: int, number: str) -> str:
    value = f'{{"before": null, "after": {{"id": {offset}, "v": {number}}}, "source": {{"ts_ms": 1}}, "op": "c"}}'
    return json.dumps({"offset": offset, "key": {"id": offset}, "value": "@"}).replace('"@"', value)


@pytest.mark.parametrize("number", ["1e-20000", "0.1e-16383", "1e131072", "-5E+200000", "0e-16384"])
def test_a_number_beyond_numeric_is_quarantined_not_a_failed_ingest(wh, tmp_path, number):
    pipeline = make_pipeline(TABLE)
    deploy(wh, pipeline, "test")
    events = tmp_path / "events.jsonl"
    events.write_text(f"{_line(0, '12.5')}\n{_line(1, number)}\n{_line(2, '1.0e-16382')}\n")
    result = ingest_file(wh, pipeline, "reading", events)
    assert (result.records, result.unparseable_values) == (3, 1)
    run = sync_one(wh, pipeline, "reading")
    assert (run.upserted, run.quarantined) == (2, 1)
    assert wh.query('SELECT id, v::text FROM cdc."reading" ORDER BY id') == [(0, "12.50"), (2, "0.00")]
    ((offset, reason, raw),) = wh.query("SELECT kafka_offset, reason, raw_value FROM cdc.sync_quarantine")
    assert (offset, reason) == (1, Reason.NOT_JSON)
    assert loads_exact(bytes(raw).decode())["after"]["v"] == Decimal(number)  # kept whole

"""Values that do not convert, through the generated procedure on PostgreSQL: every one is
quarantined and the run goes on. The same records run on Redshift in
tests/test_redshift_live.py; there, Redshift may evaluate a CASE branch for rows the CASE
does not select (docs/redshift.md, row 3), so the generated SQL validates each value inside
the argument of the conversion that reads it, a logic both engines run."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sync.debezium.events import ChangeStream, PostgresSource
from sync.local.stream import ingest_records, parse_line
from sync.operations.runner import deploy, sync
from tests.helpers import make_pipeline

# Every conversion that could raise on Redshift.
TYPED = """
[[tables]]
name = "typed"
topic = "pg.public.typed"
primary_key = ["id"]
order_by = "postgres-lsn"
columns = [
  { name = "id", type = "integer" },
  { name = "small", type = "smallint" },
  { name = "price", type = "decimal(4,2)", semantic = "org.apache.kafka.connect.data.Decimal", scale = 3 },
  { name = "weight", type = "decimal(20,6)", semantic = "io.debezium.data.VariableScaleDecimal" },
  { name = "released", type = "date", semantic = "io.debezium.time.Date" },
  { name = "updated_at", type = "timestamp", semantic = "io.debezium.time.MicroTimestamp" },
  { name = "published_at", type = "timestamptz", semantic = "io.debezium.time.ZonedTimestamp" },
  { name = "attributes", type = "super", semantic = "io.debezium.data.Json" },
  { name = "blob", type = "varbyte(16)" },
  { name = "note", type = "varchar(8)" },
]
"""

GOOD = {
    "id": 1,
    "small": 7,
    "price": "AeI=",
    "weight": {"scale": 2, "value": "AeI="},
    "released": 19000,
    "updated_at": 1700000000654321,
    "published_at": "2023-03-23T12:00:00.5+05:30",
    "attributes": '{"k": 1}',
    "blob": "AQID",
    "note": "ok",
}
# Each replaces one field of GOOD with a value that does not convert to its column.
BAD = [
    {"small": "abc"},
    {"small": 10**9},
    {"price": "!!!!"},
    {"price": "AYab"},  # not base64; 99.995 rounds past decimal(4,2)
    {"weight": {"scale": 10**9, "value": "AQ=="}},
    {"weight": {"scale": -(2**31), "value": "AQ=="}},  # the smallest integer: negating it overflows
    {"weight": {"scale": -39, "value": "AQ=="}},  # 10**39: more than 38 digits
    {"released": 10**12},
    {"updated_at": -(2**63)},
    {"published_at": "2023-02-30T00:00:00Z"},
    {"published_at": "2023-13-01T00:00:00Z"},
    {"published_at": "nope"},
    {"attributes": "{not json"},
    {"blob": "not base64!"},
    {"blob": "A" * 100},  # 75 bytes for a varbyte(16)
    {"note": "é" * 8},  # 16 bytes for a varchar(8)
]


def typed_records() -> list[dict[str, Any]]:
    cs = ChangeStream(["id"], PostgresSource(table="typed"))
    return [cs.insert(GOOD)] + [cs.insert({**GOOD, "id": i, **bad}) for i, bad in enumerate(BAD, start=2)]


def test_values_that_do_not_convert_are_quarantined(wh):
    pipeline = make_pipeline(TYPED)
    deploy(wh, pipeline, "test")
    records = typed_records()
    ingest_records(wh, pipeline, "typed", [parse_line(json.dumps(r).encode(), i) for i, r in enumerate(records, 1)])
    (run,) = sync(wh, pipeline, ["typed"])
    assert run.status == "ok", run.error
    assert (run.upserted, run.quarantined) == (1, len(BAD))
    assert wh.query("SELECT price::text, weight::text, released::text, published_at AT TIME ZONE 'UTC' FROM cdc.typed") == [
        ("0.48", "4.820000", "2022-01-08", datetime(2023, 3, 23, 6, 30, 0, 500000))
    ]
    reasons = [r for (r,) in wh.query("SELECT reason FROM cdc.sync_quarantine ORDER BY kafka_offset")]
    assert len(reasons) == len(BAD) and all("does not convert" in r for r in reasons), reasons

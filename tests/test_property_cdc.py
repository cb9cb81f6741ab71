"""Property: for random CDC histories split into random ingest batches, the target after
every sync equals the plain-Python reference model of the semantics (tests/cdc_model.py),
and exactly the malformed records are quarantined.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.debezium import ChangeStream, MySqlSource
from sync.runner import deploy
from sync.warehouse import connect
from tests.cdc_model import expected_quarantine, expected_rows
from tests.conftest import make_pipeline
from tests.helpers import ingest, sync_one

TABLE = '''
[[tables]]
name = "t_{mode}"
topic = "db.t_{mode}"
primary_key = ["ID", "REGION"]
order_by = "{order}"
delete_mode = "{delete_mode}"
columns = [
  {{ name = "ID", type = "integer", target = "id" }},
  {{ name = "REGION", type = "varchar(8)", target = "region" }},
  {{ name = "NAME", type = "varchar(32)" }},
  {{ name = "AMOUNT", type = "decimal(10,2)" }},
]
'''
MODES = {
    "binlog_hard": ("mysql-binlog", "hard"),
    "binlog_soft": ("mysql-binlog", "soft"),
    "kafka_hard": ("kafka", "hard"),
}

KEYS = [(i, r) for i in range(4) for r in ("eu", "us")]


@dataclass
class Event:
    record: dict[str, Any]  # the Kafka record, as ingest reads it
    op: str  # c/u/d, 'tombstone', or 'bad' (malformed: must be quarantined)


actions = st.lists(
    st.tuples(
        st.sampled_from(["write", "write", "write", "delete", "pk_change", "replay", "bad_json", "no_key"]),
        st.sampled_from(KEYS),
        st.sampled_from(KEYS),
        st.text(alphabet="abcxyz é'\";", max_size=6),
        st.integers(min_value=-99999, max_value=99999),
    ),
    min_size=1,
    max_size=30,
)


def build_history(steps, replay_allowed: bool) -> list[Event]:
    cs = ChangeStream(["ID", "REGION"], MySqlSource(table="T"), partitions=1)
    current: dict[tuple[int, str], dict] = {}
    events: list[Event] = []

    def row_for(key, name, amount):
        return {"ID": key[0], "REGION": key[1], "NAME": name, "AMOUNT": f"{amount / 100:.2f}"}

    for kind, key, other, name, amount in steps:
        if kind == "write":
            row = row_for(key, name, amount)
            rec = cs.update(current[key], row) if key in current else cs.insert(row)
            current[key] = row
            events.append(Event(rec, "u"))
        elif kind == "delete" and key in current:
            events.append(Event(cs.delete(current.pop(key)), "d"))
            events.append(Event(cs.tombstone({"ID": key[0], "REGION": key[1]}), "tombstone"))
        elif kind == "pk_change" and key in current and other not in current:
            old = current.pop(key)
            new = {**old, "ID": other[0], "REGION": other[1]}
            events.append(Event(cs.delete(old), "d"))
            events.append(Event(cs.tombstone(old), "tombstone"))
            events.append(Event(cs.insert(new), "c"))
            current[other] = new
        elif kind == "replay" and replay_allowed and events:
            earlier = events[amount % len(events)]
            events.append(Event(json.loads(json.dumps(earlier.record)), earlier.op))
        elif kind == "bad_json":
            events.append(Event({"partition": 0, "key": None, "value": "{\"op\": \"c\", broken"}, "bad"))
        elif kind == "no_key":
            rec = cs.insert({"ID": None, "REGION": None, "NAME": name, "AMOUNT": "1.00"})
            events.append(Event(rec, "bad"))
    return events


@pytest.fixture(scope="module")
def warehouses(pg_server_dsn):
    admin = connect(pg_server_dsn)
    name = "prop_cdc"
    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.execute(f'CREATE DATABASE "{name}"')
    admin.close()
    prefix, _, query = pg_server_dsn.partition("?")
    wh = connect(prefix.rsplit("/", 1)[0] + "/" + name + ("?" + query if query else ""))
    pipelines = {}
    for mode, (order, delete_mode) in MODES.items():
        pipelines[mode] = make_pipeline(TABLE.format(mode=mode, order=order, delete_mode=delete_mode))
        deploy(wh, pipelines[mode], "test")
    yield wh, pipelines
    wh.close()


def _reset(wh, table: str) -> None:
    for suffix in ("", "__stream", "__stage", "__watermark", "__deleted"):
        if wh.relation_exists("cdc", table + suffix):
            wh.execute(f'TRUNCATE cdc."{table}{suffix}"')
    wh.execute("TRUNCATE cdc.sync_quarantine, cdc.sync_run_log")


@pytest.mark.parametrize("mode", list(MODES))
@settings(max_examples=70)
@given(steps=actions, cuts=st.lists(st.integers(min_value=0, max_value=60), max_size=4))
def test_target_matches_reference_model_after_every_sync(warehouses, mode, steps, cuts):
    wh, pipelines = warehouses
    order, delete_mode = MODES[mode]
    pipeline = pipelines[mode]
    table = f"t_{mode}"
    _reset(wh, table)
    events = build_history(steps, replay_allowed=order != "kafka")
    records = [{**e.record, "offset": offset} for offset, e in enumerate(events)]
    table_config = pipeline.table(table)
    bounds = sorted({0, len(events), *[c for c in cuts if c < len(events)]})
    for lo, hi in zip(bounds, bounds[1:]):
        ingest(wh, pipeline, table, records[lo:hi])
        run = sync_one(wh, pipeline, table)
        assert run.events_read == hi - lo
        want = {
            key: (row["name"], str(row["amount"]))
            for key, row in expected_rows(records[:hi], table_config).items()
            if not row.get("_deleted")
        }
        where = " WHERE NOT _deleted" if delete_mode == "soft" else ""
        got = {
            (i, r): (n, str(a))
            for i, r, n, a in wh.query(f'SELECT id, region, name, amount FROM cdc."{table}"{where}')
        }
        assert got == want
        quarantined = set(wh.query("SELECT kafka_partition, kafka_offset FROM cdc.sync_quarantine"))
        assert quarantined == set(expected_quarantine(records[:hi], table_config))
        assert len(quarantined) == sum(e.op == "bad" for e in events[:hi])
    # Nothing new: nothing changes.
    snapshot = wh.query(f'SELECT * FROM cdc."{table}" ORDER BY 1, 2')
    assert sync_one(wh, pipeline, table).events_read == 0
    assert wh.query(f'SELECT * FROM cdc."{table}" ORDER BY 1, 2') == snapshot

"""Property: what `explain` says of a pending record is what the next CALL does with it.
Over random delivery histories (the generators of tests/test_property_cdc.py: restarts
that re-send a suffix, tied positions of compressed MySQL transactions, re-snapshots,
tombstone-only deletes, redundant tombstones, partition growth), cut into random batches:
before each sync every key is explained, and after it

- the record explain said would be applied for a key wrote what is stored for it (the
  stored row's, or the remembered delete's, `_kafka_partition` and `_kafka_offset`), and a
  key with none keeps what it had (but for a truncate, which removes its row and
  remembers it as deleted);
- the run log's counts of the call are the sums of explain's verdicts over the keys
  (upserted + deleted, stale, superseded, tombstones, quarantined; events read, with the
  truncate events, which have no key);
- explained again, the key's applied record says "applied".
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from sync.operations.explain import Origin, Outcome, explain_keys
from tests.delivery import batches, deliver, emit
from tests.helpers import ingest, sync_one
from tests.test_property_cdc import (
    KEYS,
    MODES,
    Warehouse,
    _reset,
    describe,
    draw_delivery,
    steps,
)

# Every mode whose quarantine is not replayed (a replay widens a column mid-test).
AGREEMENT_MODES = [name for name, mode in MODES.items() if not mode.replay]
HISTORIES = 100
# What the run log counts, by the verdicts it is the sum of.
COUNTED = {
    "applied": (Outcome.APPLIED, Outcome.TOMBSTONE_DELETE),
    "stale": (Outcome.STALE, Outcome.TRUNCATED),
    "superseded": (Outcome.SUPERSEDED,),
    "tombstones": (Outcome.REDUNDANT_TOMBSTONE, Outcome.TOMBSTONE),
    "quarantined": (Outcome.QUARANTINED,),
}


@pytest.fixture(scope="module")
def warehouse(pg_server_dsn):
    from sync.warehouse import connect
    from tests.helpers import fresh_database

    with fresh_database(pg_server_dsn, "prop_explain") as dsn:
        wh = connect(dsn)
        yield Warehouse(wh)
        wh.close()


def _key_args(key) -> list[str]:
    return [f"ID={key[0]}", f"REGION={key[1]}"]


def _held(wh, table: str, hard: bool) -> dict:
    """Each key's stored Kafka coordinates: (target row's, remembered delete's)."""

    def read(relation: str) -> dict:
        return {
            (i, r): (p, o) for i, r, p, o in wh.query(f'SELECT id, region, _kafka_partition, _kafka_offset FROM cdc."{relation}"')
        }

    rows, deleted = read(table), read(table + "__deleted") if hard else {}
    return {k: (rows.get(k), deleted.get(k)) for k in KEYS}


def check_agreement(wh, pipeline, table: str, hard: bool, records: list, cuts: list[int]) -> int:
    """Runs the batches, checking explain against each CALL; returns the records explained."""
    explained = 0
    for lo, hi in batches(records, cuts):
        ingest(wh, pipeline, table, records[lo:hi])
        explained_keys = explain_keys(wh, pipeline, table, [_key_args(k) for k in KEYS])
        pending = {k: [e for e in x.entries if e.pending] for k, x in zip(KEYS, explained_keys, strict=True)}
        before = _held(wh, table, hard)
        run = sync_one(wh, pipeline, table)
        after = _held(wh, table, hard)
        counts = {name: sum(e.outcome in outcomes for es in pending.values() for e in es) for name, outcomes in COUNTED.items()}
        logged = {
            "applied": run.upserted + run.deleted,
            "stale": run.stale,
            "superseded": run.superseded,
            "tombstones": run.tombstones,
            "quarantined": run.quarantined,
        }
        assert counts == logged, f"records {lo}..{hi - 1}: explain {counts}, run log {logged}"
        # A truncate event has a null key (Debezium PostgreSQL connector, truncate events):
        # no key's explanation lists it; the run log counts it as a truncate.
        truncates = sum(1 for r in records[lo:hi] if r["key"] is None)
        assert run.truncates == truncates
        assert sum(len(es) for es in pending.values()) + truncates == run.events_read == hi - lo
        again = dict(zip(KEYS, explain_keys(wh, pipeline, table, [_key_args(k) for k in KEYS]), strict=True))
        for key, entries in pending.items():
            applied = [e for e in entries if e.outcome in COUNTED["applied"]]
            assert len(applied) <= 1, (key, applied)
            if not applied:
                # A truncate (on_truncate = "delete") removes the key's row and remembers the
                # key as deleted at the truncate's position, by no record of its own.
                truncated = truncates and after[key][0] is None and after[key][1] in (before[key][1], (None, None))
                assert after[key] == before[key] or truncated, f"{key}: nothing would be applied, yet what is stored changed"
                continue
            (winner,) = applied
            coordinates = (winner.kafka_partition, winner.kafka_offset)
            assert coordinates in after[key], f"{key}: explain said {coordinates} would be applied; stored: {after[key]}"
            stream = [e for e in again[key].entries if e.origin == Origin.STREAM]
            assert not any(e.pending for e in stream)
            (record,) = [e for e in stream if (e.kafka_partition, e.kafka_offset) == coordinates]
            assert record.outcome == Outcome.APPLIED and not record.pending, record
        explained += hi - lo
    return explained


@pytest.mark.slow
@settings(max_examples=HISTORIES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mode_name=st.sampled_from(AGREEMENT_MODES),
    initial=st.lists(st.tuples(st.sampled_from(KEYS), st.integers(-9999, 9999)), max_size=3, unique_by=lambda t: t[0]),
    drawn=steps,
    data=st.data(),
)
def test_explain_agrees_with_what_the_procedure_does(warehouse, mode_name, initial, drawn, data):
    wh, mode = warehouse.wh, MODES[mode_name]
    pipeline = warehouse.pipeline(mode_name)
    table = f"t_{mode_name}"
    _reset(wh, table)
    history, connector, restarts, cuts = draw_delivery(data, mode, initial, drawn)
    delivery = deliver(emit(history, connector), connector, restarts)
    note(describe(history, connector, restarts, delivery, cuts))
    assert check_agreement(wh, pipeline, table, mode.delete_mode == "hard", delivery.records, cuts) == len(delivery.records)

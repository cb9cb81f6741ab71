"""Regression tests: a topic whose partition count grows.

Kafka's default partitioner sends a keyed record to `toPositive(murmur2(keyBytes)) %
numPartitions` (tests/kafka_partitioner.py), so after "kafka-topics --alter --partitions"
a key's later records land in another partition ("The default partitioner's mapping
logic ... changes when the partition count increases", KAFKA-20030), here a LOWER one
than its earlier records. Kafka orders records only within a partition ("Kafka only
provides a total order over records within a partition, not between different partitions
in a topic", Kafka documentation, Introduction); across partitions the record timestamp
is the evidence: CreateTime, "the timestamp ... assigned by the producer" when it sends
(`message.timestamp.type`, Kafka topic configuration), or LogAppendTime, the broker's
time at append. See docs/correctness.md, "Delivery semantics".
"""

from __future__ import annotations

import pytest

from sync.operations.quarantine import Selection, replay
from sync.operations.runner import deploy
from tests.helpers import feed, ingest, make_pipeline, sync_one
from tests.kafka_partitioner import json_key, partition_for
from tests.test_delivery_semantics import TS, envelope, pg_source, rows, setup, table_toml


def moved_key() -> tuple[int, int, int]:
    """A key whose partition goes DOWN when the topic grows from 3 to 4 partitions:
    (key, partition with 3, partition with 4)."""
    for key in range(1, 100):
        old, new = (partition_for(json_key({"id": key}), n) for n in (3, 4))
        if new < old:
            return key, old, new
    raise AssertionError("no key moves down")


KEY, OLD, NEW = moved_key()
COLUMNS = '{ name = "id", type = "integer" }, { name = "balance", type = "integer" }'


def at(record: dict, partition: int, ms: int) -> dict:
    """The record in `partition`, stamped (CreateTime) `ms` after TS."""
    return {**record, "partition": partition, "timestamp": TS + ms}


def unwrapped(key: int, balance: int, lsn: int, op: str) -> dict:
    """ExtractNewRecordState with add.fields=op,lsn,source.ts_ms and
    delete.tombstone.handling.mode=tombstone: no `__deleted` field, and a delete is the
    tombstone itself ("convert delete event to tombstone record", the SMT's documentation)."""
    value = {"id": key, "balance": balance, "note": None, "__op": op, "__lsn": lsn, "__source_ts_ms": TS + lsn}
    return {"key": {"id": key}, "value": value}


def tombstone(key: int) -> dict:
    return {"key": {"id": key}, "value": None}


@pytest.mark.parametrize("delete_mode", ["hard", "soft"])
def test_partition_increase_tombstone_only_delete_applies(wh, delete_mode):
    """The insert and update of the key are in its old partition; after the topic grew
    from 3 to 4 partitions its tombstone-only delete lands in a lower partition, in the
    same batch. The delete is the newest record of the key: it applies."""
    assert NEW < OLD
    p = setup(wh, table_toml("acc", format="debezium-unwrap", order_by="postgres-lsn", delete_mode=delete_mode))
    run = feed(
        wh,
        p,
        "acc",
        [
            at(unwrapped(KEY, 10, 100, "c"), OLD, 1),
            at(unwrapped(KEY, 20, 200, "u"), OLD, 2),
            at(tombstone(KEY), NEW, 3),
        ],
    )
    if delete_mode == "hard":
        assert rows(wh, "acc") == [], "the tombstone-only delete was lost"
    else:
        assert rows(wh, "acc", "id, balance, _deleted") == [(KEY, 20, True)], "the tombstone-only delete was lost"
    assert run.deleted == 1


def full(op: str, key: int, balance: int | None, lsn: int) -> dict:
    after = None if op == "d" else {"id": key, "balance": balance, "note": None}
    before = {"id": key, "balance": balance, "note": None} if op == "d" else None
    return envelope(op, key, after, before, pg_source(lsn, lsn - 10))


@pytest.mark.parametrize("cut", ["one batch", "a batch per record"])
def test_partition_increase_kafka_order_newer_update_wins(wh, cut):
    """order_by = "kafka": the insert is in the key's old partition, the update (1 ms
    later) in its new, lower one: the update is the newer record."""
    p = setup(wh, table_toml("acc", order_by="kafka"))
    records = [at(full("c", KEY, 10, 100), OLD, 1), at(full("u", KEY, 20, 200), NEW, 2)]
    for batch in [records] if cut == "one batch" else [[r] for r in records]:
        feed(wh, p, "acc", batch)
    assert rows(wh, "acc") == [(KEY, 20)], "the older insert in the higher partition won"


def test_partition_increase_kafka_order_newer_delete_wins(wh):
    """... and an update then a delete (with its tombstone) in the new partition delete it."""
    p = setup(wh, table_toml("acc", order_by="kafka"))
    run = feed(
        wh,
        p,
        "acc",
        [
            at(full("c", KEY, 10, 100), OLD, 1),
            at(full("u", KEY, 20, 200), NEW, 2),
            at(full("d", KEY, 20, 300), NEW, 3),
            at(tombstone(KEY), NEW, 3),
        ],
    )
    assert rows(wh, "acc") == [], "the older insert in the higher partition won over the delete"
    assert run.deleted == 1


def test_producer_clock_step_back_keeps_offset_order_within_a_partition(wh):
    """CreateTime is the producer's wall clock, which can step back (NTP): within a
    partition the offsets still decide. The key's insert (old partition, t+15) precedes
    its two updates in the new partition, the second stamped t+12 after a clock step."""
    p = setup(wh, table_toml("acc", order_by="kafka"))
    feed(
        wh,
        p,
        "acc",
        [
            at(full("c", KEY, 10, 100), OLD, 15),
            at(full("u", KEY, 20, 200), NEW, 20),
            at(full("u", KEY, 30, 300), NEW, 12),
        ],
    )
    assert rows(wh, "acc") == [(KEY, 30)]


def test_partition_increase_positions_decide_at_a_timestamp_tie(wh):
    """Producer timestamps are milliseconds: records of two partitions can tie. With a
    source order the positions decide, so a tie changes nothing for positioned events."""
    p = setup(wh, table_toml("acc", format="debezium-unwrap", order_by="postgres-lsn"))
    feed(wh, p, "acc", [at(unwrapped(KEY, 10, 100, "c"), OLD, 1), at(unwrapped(KEY, 20, 200, "u"), NEW, 1)])
    assert rows(wh, "acc") == [(KEY, 20)]


def test_partition_increase_kafka_order_timestamp_tie_takes_the_higher_partition(wh):
    """The documented limit: at a timestamp tie across partitions nothing tells which
    record is newer; the one in the higher partition (then the higher offset) is taken
    as the later one, whatever the batch."""
    p = setup(wh, table_toml("acc", order_by="kafka"))
    feed(wh, p, "acc", [at(full("c", KEY, 10, 100), OLD, 1), at(full("u", KEY, 20, 200), NEW, 1)])
    assert rows(wh, "acc") == [(KEY, 10)]


@pytest.mark.parametrize("newer", ["replayed", "stored"])
def test_partition_increase_quarantine_replay_compares_kafka_time(wh, newer):
    """order_by = "kafka": a quarantined record is replayed after the column is widened.
    Against the row stored from another partition, the Kafka timestamps decide: the
    replayed record applies when it is the newer one, and is stale when it is older."""

    def pipeline(width: int):
        note = f'{{ name = "note", type = "varchar({width})" }}'
        return make_pipeline(table_toml("acc", order_by="kafka", columns=f"{COLUMNS}, {note}"))

    narrow = pipeline(4)
    deploy(wh, narrow, "test")

    def event(op: str, note: str, lsn: int) -> dict:
        return envelope(op, KEY, {"id": KEY, "balance": lsn, "note": note}, None, pg_source(lsn, lsn - 10))

    long, short = event("c", "too long", 100), event("u", "ok", 200)
    if newer == "replayed":  # the insert (old partition) applies, the update (new one) waits
        records = [at(event("c", "ok", 100), OLD, 1), at(event("u", "too long", 200), NEW, 2)]
    else:  # the insert waits, the update applies
        records = [at(long, OLD, 1), at(short, NEW, 2)]
    ingest(wh, narrow, "acc", records)
    assert sync_one(wh, narrow, "acc").quarantined == 1
    for relation in ("acc", "acc__stage"):
        wh.execute(f'ALTER TABLE cdc."{relation}" ALTER COLUMN note TYPE varchar(16)')
    wide = pipeline(16)
    deploy(wh, wide, "test")
    result = replay(wh, wide, Selection("acc"))
    expected = (KEY, 200, "too long") if newer == "replayed" else (KEY, 200, "ok")
    assert rows(wh, "acc", "id, balance, note") == [expected]
    assert (result.run.upserted, result.run.stale) == ((1, 0) if newer == "replayed" else (0, 1))


def test_partition_increase_log_append_time(wh):
    """A topic with message.timestamp.type=LogAppendTime: the broker stamps each record
    when it appends it (Redshift's kafka_timestamp_type 'L'); the same order applies."""
    p = setup(wh, table_toml("acc", order_by="kafka"))
    records = [at(full("c", KEY, 10, 100), OLD, 1), at(full("u", KEY, 20, 200), NEW, 2)]
    feed(wh, p, "acc", [{**r, "timestamp_type": "L"} for r in records])
    assert wh.query('SELECT DISTINCT kafka_timestamp_type FROM cdc."acc__stream"') == [("L",)]
    assert rows(wh, "acc") == [(KEY, 20)]

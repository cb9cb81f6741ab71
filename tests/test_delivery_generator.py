"""The delivery generator (tests/delivery.py) and its model (tests/delivery_model.py) on
small hand-written histories: each Debezium behaviour they claim to reproduce, checked on
its own, so a generator that stops producing it fails here and not silently."""

from __future__ import annotations

import json

import pytest

from tests.delivery import (
    Change,
    Connector,
    History,
    Restart,
    deliver,
    emit,
    emitted_records,
    encode,
    final_state,
    partition_of,
)
from tests.delivery_model import DeliveryModel
from tests.helpers import make_pipeline

A, B, C = (1, "eu"), (2, "us"), (3, "eu")


def row(key, name="x", amount="1.00"):
    return {"ID": key[0], "REGION": key[1], "NAME": name, "AMOUNT": amount}


# insert A twice in one transaction, then a key change A -> B, then B deleted, then C written.
HISTORY = History(
    (
        (Change("write", A, row(A, "a")), Change("write", A, row(A, "b"))),
        (Change("move", A, row(B, "b")),),
        (Change("delete", B),),
        (Change("write", C, row(C, "c")),),
    )
)


def seq(record) -> list:
    value = record["value"]
    src = value if "__sequence" in value else value["source"]
    return json.loads(src.get("__sequence", src.get("sequence")))


def test_final_state_comes_from_the_history():
    assert final_state(HISTORY) == {C: row(C, "c")}
    moved = History(((Change("move", A, row(B, "a")),),), initial=(row(A, "a"),))
    assert final_state(moved) == {B: row(B, "a")}


def test_key_change_is_delete_tombstone_create():
    # DOC-PG L1121-1143: "A DELETE event. A tombstone event that specifies the old key for
    # the row. A CREATE event that provides the new primary key for the row."
    events = emit(HISTORY, Connector(source="postgres"))
    assert [(e.op, e.key) for e in events if e.txn == 1] == [("d", A), ("tombstone", A), ("c", B)]


def test_mysql_compressed_transaction_has_one_position():
    def positions(compressed):
        c = Connector(source="mysql", compressed=compressed)
        return [(e.txn, e.source["file"], e.source["pos"], e.source["row"]) for e in emit(HISTORY, c) if e.op != "tombstone"]

    tied = positions(True)
    first = [p[1:] for p in tied if p[0] == 0]
    assert len(first) == 2 and first[0] == first[1] and first[0][2] == 0
    assert len({p[1:] for p in tied if p[0] == 1}) == 1  # the key change: d and c tie too
    plain = [p[1:] for p in positions(False)]
    assert plain == sorted(plain) and len(set(plain)) == len(plain)


def test_mysql_rotation_restarts_pos_in_a_new_file():
    events = [e for e in emit(HISTORY, Connector(source="mysql", rotate=frozenset({2}))) if e.op != "tombstone"]
    before, after = events[-3].source, events[-2].source  # last change of txn 1, the delete of txn 2
    assert after["file"] > before["file"] and after["pos"] < before["pos"]


def test_postgres_sequence_is_last_commit_and_lsn():
    c = Connector(source="postgres")
    records = deliver(emit(HISTORY, c), c).records
    values = [r for r in records if r["value"] is not None]
    assert seq(values[0])[0] is None and seq(values[1])[0] is None  # a new connector: no last commit
    commits = [seq(r)[0] for r in values[2:]]
    assert commits[0] is not None and commits[0] == commits[1]  # d and c of the key change: one transaction
    lsns = [int(seq(r)[1]) for r in values]
    assert lsns == sorted(lsns) and int(commits[0]) > lsns[1]  # the previous commit follows its changes
    assert int(commits[-1]) > int(commits[0])


def test_postgres_resnapshot_reads_the_state_at_a_null_commit_above_everything():
    with pytest.raises(AssertionError, match="deletes"):
        emit(HISTORY, Connector(source="postgres", resnapshot_at=3, lost=1))  # txn 2, a delete, lost
    c = Connector(source="postgres", resnapshot_at=2)
    events = emit(HISTORY, c)
    reads = [e for e in events if e.op == "r"]
    assert [e.key for e in reads] == [B] and reads[0].after == row(B, "b")
    records = [encode(e, c) for e in events]
    read = next(v for k, v in records if v is not None and v["op"] == "r")
    s = json.loads(read["source"]["sequence"])
    assert s[0] is None and int(s[1]) == read["source"]["lsn"]
    earlier = [v for k, v in records[: events.index(reads[0])] if v is not None]
    assert all(int(x) < int(s[1]) for v in earlier for x in json.loads(v["source"]["sequence"]) if x is not None)
    after = [v for k, v in records[events.index(reads[0]) + 1 :] if v is not None]
    assert json.loads(after[0]["source"]["sequence"])[0] is None  # the first transaction streamed after it
    assert json.loads(after[-1]["source"]["sequence"])[0] is not None


def test_lost_transactions_are_not_streamed_but_read_by_the_snapshot():
    history = History(HISTORY.transactions + ((Change("write", C, row(C, "lost")),), (Change("write", A, row(A, "z")),)))
    events = emit(history, Connector(source="postgres", resnapshot_at=5, lost=1))
    assert not [e for e in events if e.txn == 4 and e.op != "r"]
    assert [e.after["NAME"] for e in events if e.op == "r"] == ["lost"]


def test_restart_resends_a_suffix_at_new_offsets():
    c = Connector(source="mysql", partitions=2)
    events = emit(HISTORY, c)
    once = deliver(events, c).records
    twice = deliver(events, c, [Restart(stop=5, resume=2)])
    assert twice.sent == [0, 1, 2, 3, 4, 2, 3, 4, 5, 6, 7]
    assert [(r["key"], r["value"]) for r in twice.records] == [(once[i]["key"], once[i]["value"]) for i in twice.sent]
    for p in range(2):
        offsets = [r["offset"] for r in twice.records if r["partition"] == p]
        assert offsets == list(range(len(offsets)))  # new offsets, never reused
    assert all(r["partition"] == partition_of((r["key"]["ID"], r["key"]["REGION"]), 2) for r in twice.records)


def test_restart_that_forgets_the_last_commit_nulls_the_resent_transaction_only():
    c = Connector(source="postgres", restart_null_commit=True)
    events = emit(HISTORY, c)
    d = deliver(events, c, [Restart(stop=6, resume=4)])  # resume at the key change's create (txn 1)
    assert d.sent[6:] == [4, 5, 6, 7]
    resent = d.records[6:]
    assert seq(resent[0])[0] is None  # the rest of txn 1
    assert seq(resent[1])[0] is not None  # txn 2
    assert seq(d.records[4])[0] is not None  # the first delivery of that event


def test_unwrap_modes_shape_deletes():
    # DOC-SMT: rewrite-with-tombstone: the delete is the before image + __deleted "true",
    # then the tombstone; tombstone: the delete becomes the tombstone, the connector's is dropped.
    for fmt, shapes in (
        ("unwrap-rewrite", ["true", None, "false"]),
        ("unwrap-tombstone", [None, "false"]),
        ("debezium", ["d", None, "c"]),
    ):
        c = Connector(source="postgres", format=fmt)
        events = [e for e in emitted_records(emit(HISTORY, c), c) if e.txn == 1]
        values = [encode(e, c)[1] for e in events]
        got = [None if v is None else v.get("__deleted", v.get("op")) for v in values]
        assert got == shapes, fmt
    c = Connector(source="postgres", format="unwrap-rewrite")
    rewrite = encode(emit(HISTORY, c)[2], c)[1]
    assert rewrite["__deleted"] == "true" and json.loads(rewrite["__sequence"])[1] == str(rewrite["__lsn"])


def test_replica_identity_default_before_images():
    c = Connector(source="postgres", replica_identity="default")
    events = emit(HISTORY, c)
    assert [e.before for e in events if e.op == "u"] == [None]
    (delete,) = [e.before for e in events if e.op == "d" and e.txn == 2]
    assert delete == {"ID": 2, "REGION": "us", "NAME": None, "AMOUNT": None}


def test_a_toasted_name_left_unchanged_by_an_update_is_the_placeholder_under_default_only():
    """Debezium PostgreSQL connector, "Toasted values": under REPLICA IDENTITY DEFAULT an
    unchanged TOAST value of an UPDATE "is not contained in the event" and the placeholder
    stands in; under FULL the values are "part of the before and after blocks"."""
    history = History(
        (
            (Change("write", A, row(A, "a", "1.00")),),
            (Change("write", A, row(A, "a", "2.00")),),  # NAME unchanged
            (Change("write", A, row(A, "b", "2.00")),),  # NAME changed
        )
    )
    names = lambda c: [e.after["NAME"] for e in emit(history, c) if e.op in ("c", "u")]  # noqa: E731
    assert names(Connector(source="postgres", replica_identity="default", toasted=True)) == [
        "a",
        "__debezium_unavailable_value",
        "b",
    ]
    assert names(Connector(source="postgres", replica_identity="full", toasted=True)) == ["a", "a", "b"]
    assert names(Connector(source="postgres", replica_identity="default")) == ["a", "a", "b"]


# ---- the model's rule, record by record ------------------------------------------------------


def _table(order: str, fmt: str = "debezium", delete_mode: str = "hard"):
    from tests.test_property_cdc import TABLE

    return make_pipeline(
        TABLE.format(mode="m", format=fmt, order=order, delete_mode=delete_mode, name_width=32, history="", truncates="")
    ).tables[0]


def _names(model):
    return {k: r["name"] for k, r in model.rows().items()}


def test_model_applies_ties_in_kafka_order_across_replays():
    c = Connector(source="mysql", compressed=True)
    events = emit(History(HISTORY.transactions[:1]), c)
    d = deliver(events, c, [Restart(stop=2, resume=0)])  # a, b, then a, b again
    model = DeliveryModel(_table("mysql-binlog"))
    names = [_names(model.add([r]))[A] for r in d.records]
    assert names == ["a", "b", "a", "b"]  # a replayed tie re-applies until its successor comes again


def test_model_ranks_a_null_commit_by_its_own_lsn():
    history = History(HISTORY.transactions + ((Change("write", C, row(C, "new")),),))
    c = Connector(source="postgres", resnapshot_at=4)
    records = deliver(emit(history, c), c).records
    model = DeliveryModel(_table("postgres-lsn")).add(records)
    assert _names(model) == {C: "new"}
    stale_replay = [r for r in records if r["value"] and r["value"]["op"] == "c" and r["key"]["ID"] == 3][:1]
    assert _names(model.add(stale_replay)) == {C: "new"}  # txn 3's [commit, X] < [null, Y] of txn 4


def test_model_tombstones_in_unwrap_modes():
    c = Connector(source="mysql", format="unwrap-rewrite")
    records = deliver(emit(HISTORY, c), c).records
    table = _table("mysql-binlog", "debezium-unwrap")
    assert DeliveryModel(table).add(records).rows().keys() == {C}
    # A tombstone delivered again after the key was re-created deletes it (a positionless
    # delete): it no longer follows its delete event in the partition.
    tomb = next(r for r in records if r["value"] is None)
    recreate = {
        "partition": tomb["partition"],
        "offset": 99,
        "key": tomb["key"],
        "value": {**row(A, "again"), "__op": "c", "__file": "mysql-bin.000009", "__pos": 4, "__row": 0, "__deleted": "false"},
    }
    model = DeliveryModel(table).add(records).add([recreate])
    assert A in model.rows()
    assert A not in model.add([{**tomb, "offset": 100}]).rows()


def test_model_fills_an_unchanged_toasted_name_from_the_live_row_and_quarantines_it_without_one():
    history = History(
        (
            (Change("write", A, row(A, "a", "1.00")),),
            (Change("write", A, row(A, "a", "2.00")),),
        )
    )
    c = Connector(source="postgres", replica_identity="default", toasted=True)
    records = deliver(emit(history, c), c).records
    model = DeliveryModel(_table("postgres-lsn")).add(records)
    assert {k: (r["name"], str(r["amount"])) for k, r in model.rows().items()} == {A: ("a", "2.00")}
    assert model.quarantine() == {}
    # The update alone (its insert never read): there is no earlier value to take.
    alone = DeliveryModel(_table("postgres-lsn")).add(records[1:])
    assert alone.rows() == {} and list(alone.quarantine().values()) == [("toast", "name")]


@pytest.mark.parametrize("timestamp_type", ["C", "L"])
def test_a_partition_appended_late_puts_a_keys_older_record_after_its_newer_one(timestamp_type):
    """After the topic grew from 1 to 3 partitions the key's later records go to another
    partition; the send of its first record, to partition 0, was retried and appended after
    them. Each partition keeps its order and offsets; a LogAppendTime is the append's."""
    key = next(k for k in ((i, r) for i in range(10) for r in ("eu", "us")) if partition_of(k, 3) != 0)
    history = History(tuple((Change("write", key, row(key, name)),) for name in ("a", "b", "c")))
    grown = Connector(source="postgres", partitions=1, grow_to=3, grow_at=1, timestamp_type=timestamp_type)
    in_order = deliver(emit(history, grown), grown)
    late = deliver(emit(history, grown), Connector(**{**grown.__dict__, "late": (0, 3, 0)}))
    assert [r["value"]["after"]["NAME"] for r in in_order.records] == ["a", "b", "c"]
    assert [r["value"]["after"]["NAME"] for r in late.records] == ["b", "c", "a"]
    assert late.sent == [1, 2, 0]
    assert [(r["partition"], r["offset"]) for r in late.records] == [
        (r["partition"], r["offset"]) for r in in_order.records[1:] + in_order.records[:1]
    ]
    stamps = [r["timestamp"] for r in late.records]
    assert stamps[2] == (stamps[1] if timestamp_type == "L" else in_order.records[0]["timestamp"])

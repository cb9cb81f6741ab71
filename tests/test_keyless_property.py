"""Property: a table without a primary key (`primary_key = []`) stays exact under Debezium's
at-least-once delivery. Whatever a connector delivers for a source history of inserts,
updates and deletes on a multiset of rows (identical rows included), spread over 1-3
partitions by the producer (null keys), with restarts that re-send a suffix at new
offsets and in other partitions, cut into any sync batches: after EVERY sync the target's
multiset of rows equals the source table's after what was delivered so far, computed from
the history alone (tests/keyless_delivery.py; "exactly-once delivery normally,
at-least-once during recovery", Debezium's PostgreSQL and MySQL connector documentation),
and at the end the source's final state.

A null key leaves the partition to the producer: "If neither key nor partition is present
a partition will be assigned in a round-robin fashion" (Kafka's ProducerRecord javadoc,
0.9); since KIP-480, "If no partition or key is present choose the sticky partition that
changes when the batch is full" (DefaultPartitioner; UniformStickyPartitioner: "Records
with the same key are not guaranteed to be sent to the same partition. See KIP-480 for
details about sticky partitioning."). `spread` draws both: a cycle of partitions, runs of
one partition. Kafka orders records within a partition only, so a refresh of the stream
may expose one partition's newer records before another partition's older one: `lags`
delays a partition's records by whole refreshes (tests/keyless_delivery.py `refreshes`),
and the late older event must apply. Between refreshes that exposed a prefix of the
delivery, the target equals the source after it; at the end, the source's final state.

One test per MODE (MySQL binlog order, PostgreSQL `sequence` order), 40 histories each
(`pytest tests/test_keyless_property.py -k mysql`).
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from sync.operations.runner import deploy
from sync.warehouse import connect
from tests.delivery import Connector, Restart
from tests.helpers import fresh_database, ingest, make_pipeline, sync_one
from tests.keyless_delivery import (
    KeylessChange,
    KeylessHistory,
    deliver_keyless,
    emit_keyless,
    frozen,
    refreshes,
    state_after,
)
from tests.test_property_cdc import _reset

TABLE = """
[[tables]]
name = "k_{mode}"
topic = "db.k_{mode}"
primary_key = []
order_by = "{order}"
replica_identity = "full"
columns = [
  {{ name = "SKU", type = "varchar(4)", target = "sku" }},
  {{ name = "QTY", type = "integer", target = "qty" }},
]
"""
MODES = {"mysql": "mysql-binlog", "postgres": "postgres-lsn"}
ROWS = st.fixed_dictionaries({"SKU": st.sampled_from(["a", "b"]), "QTY": st.sampled_from([1, 2, None])})
steps = st.lists(
    st.tuples(
        st.sampled_from(["insert", "insert", "delete", "update"]),
        st.integers(0, 50),  # which present row a delete or update takes
        ROWS,
        st.sampled_from([True, True, False]),  # the change starts a new transaction
    ),
    min_size=4,
    max_size=20,
)


def build_history(initial: list[dict], drawn) -> KeylessHistory:
    """The changes that apply: a delete or an update takes one of the rows present."""
    present = [dict(r) for r in initial]
    txs: list[list[KeylessChange]] = []
    for kind, pick, row, new_tx in drawn:
        if kind == "insert":
            change = KeylessChange("insert", None, dict(row))
            present.append(dict(row))
        elif not present:
            continue
        else:
            before = present.pop(pick % len(present))
            after = dict(row) if kind == "update" else None
            change = KeylessChange(kind, before, after)
            if after is not None:
                present.append(after)
        if new_tx or not txs:
            txs.append([])
        txs[-1].append(change)
    return KeylessHistory(tuple(tuple(t) for t in txs), tuple(initial))


@pytest.fixture(scope="module")
def keyless_warehouse(pg_server_dsn):
    with fresh_database(pg_server_dsn, "prop_keyless") as dsn:
        wh = connect(dsn)
        pipelines = {}
        for mode, order in MODES.items():
            pipelines[mode] = make_pipeline(TABLE.format(mode=mode, order=order))
            deploy(wh, pipelines[mode], "test")
        yield wh, pipelines
        wh.close()


def _target(wh, table: str) -> Counter:
    return Counter(frozen({"SKU": s, "QTY": q}) for s, q in wh.query(f'SELECT sku, qty FROM cdc."{table}"'))


def draw_restarts(data, emitted: int, snapshot: int) -> list[Restart]:
    """Up to two restarts. One that stops inside the initial snapshot (or right at its end,
    before the offsets said it completed) runs it again from its first read; any other
    resumes at or after the end of the snapshot."""
    restarts, start = [], 0
    for _ in range(data.draw(st.integers(0, 2), label="restarts")):
        stop = data.draw(st.integers(start, emitted), label="stop")
        in_snapshot = start == 0 and (stop < snapshot or (stop == snapshot and snapshot > 0))
        if in_snapshot and (stop < snapshot or data.draw(st.booleans(), label="snapshot again")):
            resume = 0
        else:
            resume = data.draw(st.integers(max(start, snapshot), stop), label="resume")
        restarts.append(Restart(stop, resume))
        start = resume
    return restarts


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(MODES))
@settings(max_examples=40)
@given(
    initial=st.lists(ROWS, max_size=4),
    drawn=steps,
    data=st.data(),
)
def test_keyless_delivery(keyless_warehouse, mode, initial, drawn, data):
    wh, pipelines = keyless_warehouse
    pipeline, table = pipelines[mode], f"k_{mode}"
    _reset(wh, table)
    snapshot = data.draw(st.booleans(), label="initial snapshot")
    history = build_history(initial if snapshot else [], drawn)
    connector = Connector(source=mode, partitions=data.draw(st.integers(1, 3), label="partitions"))
    if mode == "mysql":
        rotate = data.draw(st.lists(st.integers(0, len(history.transactions)), max_size=2), label="rotate")
        connector = Connector(source=mode, partitions=connector.partitions, rotate=frozenset(rotate))
    emitted = emit_keyless(history, connector, snapshot)
    restarts = draw_restarts(data, len(emitted), len(history.initial))
    spread = data.draw(st.lists(st.integers(0, 2), min_size=1, max_size=8), label="spread")
    delivery = deliver_keyless(emitted, connector, restarts, spread)
    records = delivery.records
    cuts = data.draw(st.lists(st.integers(1, max(len(records) - 1, 1)), min_size=1, max_size=6), label="cuts")
    lags = data.draw(st.lists(st.integers(0, 2), min_size=1, max_size=6), label="lags")
    note(f"history: {history}\nruns: {delivery.runs}\nsent: {delivery.sent}")
    seen: set[int] = set()
    for exposed in refreshes(delivery, emitted, cuts, lags):
        note(f"refresh: {[(records[i]['partition'], records[i]['offset']) for i in exposed]}")
        ingest(wh, pipeline, table, [records[i] for i in exposed])
        run = sync_one(wh, pipeline, table)
        assert run.events_read == len(exposed)
        assert run.quarantined == 0
        seen.update(exposed)
        if seen and seen == set(range(len(seen))):  # a prefix of the delivery
            reads, changes = delivery.state[len(seen) - 1]
            assert _target(wh, table) == state_after(history, reads, changes), f"after records 0..{len(seen) - 1}"
    assert _target(wh, table) == state_after(history), "final state differs from the source history"
    # Nothing new: nothing changes.
    before = wh.query(f'SELECT * FROM cdc."{table}" ORDER BY 1, 2, 3')
    assert sync_one(wh, pipeline, table).events_read == 0
    assert wh.query(f'SELECT * FROM cdc."{table}" ORDER BY 1, 2, 3') == before

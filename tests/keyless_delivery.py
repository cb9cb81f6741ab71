"""What a Debezium connector delivers for a source table WITHOUT a primary key, and the
source's true state, for the keyless delivery property (tests/test_keyless_property.py).

    KeylessHistory     transactions of inserts, deletes and updates on a multiset of rows
                       (identical rows allowed); `state_after` is the source table, a Counter
    emit_keyless(h, c) the change events, in order: the full envelope with full before
                       images (MySQL binlog_row_image=FULL, PostgreSQL REPLICA IDENTITY FULL),
                       a tombstone after each delete
    deliver_keyless(events, c, restarts, spread)
                       at-least-once delivery: null keys, so the producer spreads the
                       records over the partitions (`spread`), and restarts re-send a suffix
                       at new offsets

Positions, encoding and restarts are tests/delivery.py's (`_Positions`, `encode`,
`Restart`); what differs is the row identity: none. A row is its values.

The connectors' contract for such a table: PostgreSQL (Debezium's PostgreSQL connector,
"Replica identity"): "FULL - Emitted events for UPDATE and DELETE operations contain the
previous values of all columns in the table", while under DEFAULT "If a table does not
have a primary key, the connector does not emit UPDATE or DELETE events for that table".
MySQL: `binlog_row_image=FULL` (required by the connector): every row event carries the
whole before image. The key of a table without a key is null (DBZ-1163:
`keyFromColumnData` gives null), and "After ... a delete event, ... a tombstone event"
follows with the same (null) key and a null value.

A restart during the initial snapshot runs it again from its first read ("if the process
is interrupted due to connector failure, rebalancing, or other reasons, the process
restarts after the connector restarts", Debezium's connector documentation, "default
workflow ... to perform an initial snapshot"; "All read events contain the same LSN
position"), and the first read carries `source.snapshot = "first"` (SnapshotRecord.FIRST).

Not generated (the documented limits of keyless tables, docs/correctness.md): compressed
MySQL transactions (their changes share one position), PostgreSQL connectors that lose
the last commit LSN on restart.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tests.delivery import KAFKA_TS, Connector, Delivery, Event, Restart, _Positions, batches, encode, restarts_valid

Row = dict[str, Any]


def frozen(row: Row) -> tuple:
    return tuple(sorted(row.items()))


@dataclass(frozen=True)
class KeylessChange:
    kind: Literal["insert", "delete", "update"]
    before: Row | None = None
    after: Row | None = None


@dataclass(frozen=True)
class KeylessHistory:
    transactions: tuple[tuple[KeylessChange, ...], ...]
    initial: tuple[Row, ...] = ()

    def changes(self) -> list[KeylessChange]:
        return [c for tx in self.transactions for c in tx]


def apply_change(state: Counter, change: KeylessChange) -> None:
    """One change on the source multiset: a delete or update needs its before image there."""
    if change.before is not None:
        assert state[frozen(change.before)] > 0, change
        state[frozen(change.before)] -= 1
    if change.after is not None:
        state[frozen(change.after)] += 1
    state += Counter()  # drop zero counts


def state_after(history: KeylessHistory, reads: int | None = None, changes: int | None = None) -> Counter:
    """The source table after the first `reads` snapshot reads and `changes` changes (None:
    all): the TRUE state, from the history alone."""
    state = Counter(frozen(r) for r in history.initial[:reads])
    for change in history.changes()[:changes]:
        apply_change(state, change)
    return state


@dataclass(frozen=True)
class Emitted:
    event: Event
    reads: int  # snapshot reads up to and including this event
    changes: int  # source changes up to and including this event


def emit_keyless(history: KeylessHistory, connector: Connector, initial_snapshot: bool) -> list[Emitted]:
    """Every event the connector emits, in order: snapshot reads (one position), then each
    change (c, u, d; a tombstone after each d)."""
    assert connector.source in ("mysql", "postgres") and not connector.compressed
    assert initial_snapshot or not history.initial
    at = _Positions(connector)
    out: list[Emitted] = []
    reads = changes = 0
    if initial_snapshot:
        source = at.snapshot()
        last = len(history.initial)
        for row in history.initial:
            reads += 1
            # SnapshotRecord: FIRST for the first record, LAST for the last, TRUE between.
            marker = "first" if reads == 1 else "last" if reads == last else "true"
            out.append(Emitted(Event("r", (), None, dict(row), {**source, "snapshot": marker}, 0, None), reads, 0))
    elif connector.source == "postgres":
        at.last_commit = None  # the first transaction streamed by a new connector
    for txn, tx in enumerate(history.transactions):
        at.begin(txn)
        commit = at.last_commit
        for change in tx:
            changes += 1
            op = {"insert": "c", "delete": "d", "update": "u"}[change.kind]
            out.append(Emitted(Event(op, (), change.before, change.after, at.change(op), txn, commit), reads, changes))
            if op == "d":
                out.append(Emitted(Event("tombstone", (), None, None, {}, txn, commit), reads, changes))
        at.commit()
    return out


@dataclass
class KeylessDelivery(Delivery):
    # For each record: the (snapshot reads, changes) of the source delivered up to it.
    state: list[tuple[int, int]] = field(default_factory=list)


def deliver_keyless(
    emitted: Sequence[Emitted], connector: Connector, restarts: Sequence[Restart], spread: Sequence[int]
) -> KeylessDelivery:
    """At-least-once delivery with `restarts` (tests/delivery.py's `Restart`): record i goes
    to partition spread[i % len(spread)] % partitions (a null key: the producer's choice),
    with offsets per partition and a clock of 1 ms per record."""
    assert restarts_valid(restarts, len(emitted)), restarts
    runs, start = [], 0
    for r in restarts:
        runs.append((start, r.stop))
        start = r.resume
    runs.append((start, len(emitted)))
    offsets = [0] * connector.partitions
    out = KeylessDelivery([], [], runs, [])
    furthest = -1
    attempt_reads = 0  # reads of the snapshot as last (re-)started: a run from its first read starts it anew
    for first, end in runs:
        for i in range(first, end):
            if emitted[i].event.op == "r":
                attempt_reads = 1 if emitted[i].reads == 1 else max(attempt_reads, emitted[i].reads)
            p = spread[len(out.records) % len(spread)] % connector.partitions
            _, value = encode(emitted[i].event, connector)
            ts = {"timestamp": KAFKA_TS + len(out.records) + 1, "timestamp_type": "C"}
            out.records.append({"partition": p, "offset": offsets[p], **ts, "key": None, "value": value})
            out.sent.append(i)
            offsets[p] += 1
            furthest = max(furthest, i)
            out.state.append((attempt_reads, emitted[furthest].changes))
    return out


def refreshes(delivery: KeylessDelivery, emitted: Sequence[Emitted], cuts: Sequence[int], lags: Sequence[int]) -> list[list[int]]:
    """The records (indexes into `delivery.records`) each refresh of the stream exposes.
    The delivery is produced in batches cut at `cuts`; record i, produced in batch b, is
    exposed by refresh b + lags[i % len(lags)] (the last one at the latest), and never
    before the previous record of its partition: a partition may lag behind the others
    (Kafka orders records within a partition only), it never reorders itself. The
    snapshot's reads, and the records before the last of them, are exposed as produced
    (not generated: a skew across the start of a snapshot run again, docs/correctness.md)."""
    bounds = batches(delivery.records, cuts)
    produced = [b for b, (lo, hi) in enumerate(bounds) for _ in range(lo, hi)]
    reads = [i for i, sent in enumerate(delivery.sent) if emitted[sent].event.op == "r"]
    settled = reads[-1] if reads else -1
    exposed: list[list[int]] = [[] for _ in bounds]
    latest: dict[int, int] = {}  # partition: the refresh that exposed its last record so far
    for i, record in enumerate(delivery.records):
        lag = 0 if i <= settled else lags[i % len(lags)]
        at = max(min(produced[i] + lag, len(bounds) - 1), latest.get(record["partition"], 0))
        latest[record["partition"]] = at
        exposed[at].append(i)
    return exposed

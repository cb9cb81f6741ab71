"""A generator of what a Debezium connector really delivers for a source table's history.

Three layers, each a pure function, each with its knobs in plain sight:

    History            transactions of source changes; `final_state()` is the source's
                       TRUE final state, computed from the history alone
    emit(history, c)   the change events the connector emits, in order (`Connector` knobs:
                       source, format, partitions, compression, snapshots, ...)
    deliver(events, c, restarts)
                       at-least-once delivery: the Kafka records, with restarts that
                       re-send a suffix at new offsets

Debezium's contract, as the generator follows it (DOC-PG = debezium/debezium
documentation/modules/ROOT/pages/connectors/postgresql.adoc, DOC-MY = .../partials/modules/
all-connectors/shared-mariadb-mysql.adoc, DOC-SMT = .../pages/transformations/
event-flattening.adoc, all in the debezium/debezium repository):

- PostgreSQL `source.sequence`: "a JSON array of two strings ... The first value is always
  the last committed LSN, the second value is always the current LSN. Either value may be
  null" (DOC-PG "sequence"). `lastCommitLsn` is updated at each COMMIT, so a change of
  transaction T carries the commit LSN of the transaction streamed before T. A connector
  with no offsets (first start, or re-created after its replication slot was lost) has no
  last commit: its snapshot reads carry `[null, "<snapshot lsn>"]` and so does the first
  transaction it streams. On a plain restart the offset loader restores `lsn_commit`
  (`PostgresOffsetContext.Loader.load`, LAST_COMMIT_LSN_KEY); older versions did not pass
  it on to the source info, so the first transaction after a restart had a null first
  element: knob `restart_null_commit`.
- MySQL positions: `file`, `pos` (the position of the binlog event), `row` (the row within
  it) (DOC-MY "source" fields). Snapshot reads all carry the snapshot's file/pos with
  row 0 (DOC-MY snapshot steps). With `binlog_transaction_compression=ON` the rows of a
  transaction arrive inside one TRANSACTION_PAYLOAD event: every change of the transaction
  carries the same file/pos and row 0 [reported by users of the MySQL connector; see
  docs/correctness.md, "Delivery semantics"]; knob `compressed`. Knob `rotate`: binlog file rotations (pos restarts low).
- SQL Server, Db2 (`commit_lsn`, `change_lsn`) and Oracle LogMiner (`commit_scn`, `scn`,
  `txSeq`) emit committed transactions: every change carries its transaction's commit
  position. SQL Server: "The `event_serial_no` field differentiates events that have the
  same commit and change LSN": 2 for updates ("the update generates two events in the CDC
  change table"), and a primary-key change is "A _delete_ event ... and a _create_ event
  ... Both operations share the same commit and change LSN and their event numbers are `1`
  and `2`" (DOC-SQLSERVER = .../pages/connectors/sqlserver.adoc, _update_ events); Db2
  and Oracle log a key change once: both events carry one position. Snapshot reads carry
  the database's max LSN as `commit_lsn` and no change LSN or serial
  (`TxLogPosition.valueOf(maxLsn)`), or, for Oracle, "the same SCN position" and no
  `commit_scn` (DOC-ORACLE = .../pages/connectors/oracle.adoc). Oracle: consecutive
  changes of a transaction often share an SCN; `txSeq` is the change's index in its
  transaction (Debezium 3.2+). LSNs are written as `Lsn.toString()` does (lower-case hex
  bytes). Transactions do not interleave here: a
  row is changed by one transaction at a time, so per key the change positions grow with
  the commit order anyway. MariaDB writes MySQL's binlog fields (`mariadb-bin.*`).
- "After a key changes, Debezium generates ... A DELETE event. A tombstone event that
  specifies the old key for the row. A CREATE event that provides the new primary key"
  (DOC-MY L1529-1557; DOC-PG L1121-1143). After every delete the connector emits a
  tombstone with the same key (`tombstones.on.delete`, default true; DOC-PG L1235-1239).
- REPLICA IDENTITY DEFAULT (DOC-PG L738-757): an update's `before` is null, a delete's
  `before` holds the key columns only; knob `replica_identity` ("default" | "full").
  "REPLICA IDENTITY DEFAULT: When receiving an UPDATE event from the database, any
  unchanged TOAST column value that is not part of the replica identity is not contained
  in the event ... Debezium cannot safely provide the column value in this case and returns
  a placeholder value" (DOC-PG, "Toasted values"; `unavailable.value.placeholder`, default
  `__debezium_unavailable_value`); under FULL the values are "part of the before and after
  blocks ... as any other column". Knob `toasted`: NAME's values are TOASTed, so every update
  under DEFAULT that leaves NAME unchanged carries the placeholder for it; inserts, snapshot
  reads and updates that change NAME carry the value.
  MySQL needs `binlog_row_image=FULL`: full before images.
- ExtractNewRecordState (DOC-SMT): the value is the row itself plus the `add.fields`
  (`__op`, `__source_ts_ms`, and the position: `__lsn`, `__sequence` or `__file`,
  `__pos`, `__row`) and `__deleted`. `delete.tombstone.handling.mode`:
  `rewrite-with-tombstone`: a delete becomes the before image with `"__deleted": "true"`,
  and the tombstone follows; `tombstone` (the default since 2.5): the delete IS the
  tombstone (null value: no position, no source time) and the connector's own tombstone
  is dropped ("convert delete event to tombstone record and skip the following
  tombstone", ExtractNewRecordStateTest).
- Kafka: the key is the JSON object of the key columns (`schemas.enable=false`), sent to
  partition `toPositive(murmur2(keyBytes)) % numPartitions` (Kafka's default partitioner,
  tests/kafka_partitioner.py), so a partition holds a key's events in order while the
  partition count stays. Knob `grow_to`/`grow_at`: the topic grows and the producer maps
  the key's later records with the new count ("The default partitioner's mapping logic
  ... changes when the partition count increases", KAFKA-20030): they may land in
  another, lower or higher, partition. Each record carries a timestamp: CreateTime is the
  producer's clock when it sends (non-decreasing in send order; knob `clock`: 1 ms per
  record, or one ms per transaction, so records of other partitions tie), or
  LogAppendTime (`timestamp_type = "L"`), the broker's clock at append. Knob `late`: one
  partition's records over a window of the sends are appended after the other
  partitions' (a retried send, `delay_partition`), so after a growth a key's older
  records can be read after its newer ones, in the same batch or a sync later; each
  partition keeps its order, and its LogAppendTimes rise. Not generated: a CreateTime
  tie between two records of ONE key in two partitions (the growth falls between
  transactions when the clock ticks per transaction), a clock that steps back
  (tests/test_partition_increase.py pins both).
- At-least-once: "if the connector stops unexpectedly ... the connector restarts from the
  last recorded offset" and re-sends what follows (DOC-PG/DOC-MY "when things go wrong"):
  a restart re-sends the emitted events from any earlier event, mid-transaction included
  (MySQL offsets count the events and rows to skip), in order, at new Kafka offsets.

- Truncates (PostgreSQL, `on_truncate = "delete"` tables): "the connector emits a
  truncate event ... `op` `t`" with the source block and no row images, and a null key
  (DOC-PG, truncate events): Kafka's partitioner sends a null-keyed record to any
  partition (here partition 0). Skipped by default (`skipped.operations=t`): drawn only
  by the modes that configure them.

Not generated: incremental snapshots, several connectors on one topic, MySQL failovers.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from sync.debezium.events import lsn_text
from tests.cdc_model import UNAVAILABLE
from tests.kafka_partitioner import json_key, partition_for

KEY_FIELDS = ("ID", "REGION")
Key = tuple[int, str]
Row = dict[str, Any]

# ---- the source history ------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One row change in a source transaction. `kind`:
    - "write": insert `row` (its key absent) or update to `row` (its key present);
    - "delete": delete the row of `key`;
    - "move": a primary-key change: the row of `key` takes the key (and values) of `row`;
    - "truncate": every row is removed (`key` is NO_KEY)."""

    kind: Literal["write", "delete", "move", "truncate"]
    key: Key
    row: Row | None = None


# A truncate has no key; its change names this one.
NO_KEY: Key = (-1, "")


@dataclass(frozen=True)
class History:
    """Rows present before capture starts (`initial`: read by the initial snapshot, if
    any), then committed transactions, in commit order."""

    transactions: tuple[tuple[Change, ...], ...]
    initial: tuple[Row, ...] = ()


def key_of(row: Mapping[str, Any]) -> Key:
    return (row["ID"], row["REGION"])


def apply_change(state: dict[Key, Row], change: Change) -> None:
    """`change` applied to `state` (key -> row); a change that does not apply raises."""
    if change.kind == "write":
        assert change.row is not None and key_of(change.row) == change.key
        state[change.key] = dict(change.row)
    elif change.kind == "delete":
        del state[change.key]
    elif change.kind == "truncate":
        state.clear()
    else:
        assert change.row is not None and key_of(change.row) not in state
        del state[change.key]
        state[key_of(change.row)] = dict(change.row)


def state_after(history: History, transactions: int | None = None) -> dict[Key, Row]:
    """The source table after the first `transactions` transactions (all: the TRUE final
    state), from the history directly."""
    state = {key_of(r): dict(r) for r in history.initial}
    for tx in history.transactions[:transactions]:
        for change in tx:
            apply_change(state, change)
    return state


def final_state(history: History) -> dict[Key, Row]:
    return state_after(history)


# ---- the connector: emission -------------------------------------------------------------

Source = Literal["postgres", "mysql", "mariadb", "sqlserver", "oracle", "db2"]
BINLOG = ("mysql", "mariadb")
Format = Literal["debezium", "unwrap-rewrite", "unwrap-tombstone"]


@dataclass(frozen=True)
class Connector:
    """How the connector and its converter chain shape the events (the generator's knobs)."""

    source: Source = "mysql"
    format: Format = "debezium"
    partitions: int = 1
    initial_snapshot: bool = False  # `initial` rows are read as op "r" before streaming
    replica_identity: Literal["default", "full"] = "full"  # PostgreSQL only
    compressed: bool = False  # MySQL binlog_transaction_compression=ON
    rotate: frozenset[int] = frozenset()  # MySQL: transaction indexes that start a new binlog file
    # PostgreSQL: the connector is re-created (slot lost) before transaction `resnapshot_at`
    # (= the number of transactions: after the last);
    # the `lost` transactions before it are never streamed (their effect is in the snapshot).
    resnapshot_at: int | None = None
    lost: int = 0
    restart_null_commit: bool = False  # PostgreSQL: a restart forgets the last commit LSN
    # PostgreSQL, REPLICA IDENTITY DEFAULT: NAME's values are stored out of line (TOAST), so an
    # update that leaves NAME unchanged carries the placeholder for it.
    toasted: bool = False
    # The topic grows to `grow_to` partitions; the producer uses the new count from the
    # delivered record `grow_at` on (`clock = "transaction"`: from the first record of a
    # transaction or run at or after it).
    grow_to: int | None = None
    grow_at: int = 0
    # The record timestamp: "record": the producer's clock moves 1 ms per record; a
    # "transaction" (or run) is sent within one ms, so records of partitions tie.
    clock: Literal["record", "transaction"] = "record"
    timestamp_type: Literal["C", "L"] = "C"  # CreateTime (producer) or LogAppendTime (broker)
    # One partition appended late: its records sent as delivered records `late[0]` to
    # `late[1] - 1` become readable only after the other partitions' records sent up to
    # `late[1] - 1` (a retried send; see `delay_partition`). None: none.
    late: tuple[int, int, int] | None = None  # (first, end, partition)


@dataclass(frozen=True)
class Event:
    """One emitted change event, before encoding. `source` is the position block (the
    PostgreSQL `sequence` is rendered at encoding: `commit` is its first element)."""

    op: Literal["c", "u", "d", "r", "t", "tombstone"]
    key: Key
    before: Row | None
    after: Row | None
    source: dict[str, Any]
    txn: int  # index of the source transaction (snapshot reads: of the transaction they precede)
    commit: int | None = None  # PostgreSQL: last commit LSN (None: null in `sequence`)


@dataclass
class _Positions:
    """The connector's running position in the source log."""

    connector: Connector
    lsn: int = 34_000_000
    last_commit: int | None = None
    file: int = 3
    pos: int = 154
    ts_ms: int = 1_700_000_000_000
    tx_id: int = 600

    # SQL Server, Db2, Oracle: the LSN (SCN) the transaction commits at, known to every
    # change event of it (the connectors read committed changes); the change's index in it.
    tx_commit: int = 0
    tx_seq: int = 0
    last: dict[str, Any] = field(default_factory=dict)  # the latest change's position

    def __post_init__(self) -> None:
        # Positions that cross a part boundary soon: LSN parts carry into the next, SCNs
        # gain a digit (text that orders by length would break on both).
        if self.connector.source in ("sqlserver", "db2"):
            self.lsn = 0x27_00000758_0000 if self.connector.source == "sqlserver" else 0x27_00000758_0000000000000000
        elif self.connector.source == "oracle":
            self.lsn = 9_999_950

    def snapshot(self) -> dict[str, Any]:
        """The position every read of one snapshot carries: where the snapshot started."""
        self.ts_ms += 1000
        src = self.connector.source
        base = {"connector": _CONNECTOR[src], "snapshot": "true", "ts_ms": self.ts_ms}
        if src == "postgres":
            self.lsn += 64
            self.last_commit = None  # a connector with no offsets has no last commit
            return {**base, "txId": self.tx_id, "lsn": self.lsn}
        if src in BINLOG:
            return {**base, "file": self._file(), "pos": self.pos, "row": 0}
        if src == "oracle":  # the snapshot SCN; no commit SCN, no transaction
            return {**base, "scn": str(self.lsn), "commit_scn": None, "txSeq": None}
        # SQL Server, Db2: the database's max LSN (TxLogPosition.valueOf(maxLsn)), no change LSN
        return {**base, "commit_lsn": self._lsn(self.lsn), "change_lsn": None, **self._serial(None)}

    def begin(self, txn: int) -> None:
        self.ts_ms += 1000
        self.tx_id += 1
        c = self.connector
        if c.source in BINLOG:
            if txn in c.rotate:
                self.file += 1
                self.pos = 4
            self.pos += 70  # GTID/BEGIN events
            if c.compressed:
                self.pos += 30  # the TRANSACTION_PAYLOAD event, which holds every row
        elif c.source != "postgres":
            self.tx_commit = self.lsn + 40 * self._step()  # after each of its changes
            self.tx_seq = 0

    def change(self, op: str = "u", again: bool = False) -> dict[str, Any]:
        """The position of the next change event (`op` "c", "u" or "d"). `again`: the
        second event of one logged change (the create of a primary-key change): the same
        log record, for SQL Server, Oracle and Db2."""
        src = self.connector.source
        base = {"connector": _CONNECTOR[src], "snapshot": "false", "ts_ms": self.ts_ms}
        if src == "postgres":
            self.lsn += 56
            return {**base, "txId": self.tx_id, "lsn": self.lsn}
        if src in BINLOG:
            if not self.connector.compressed:
                self.pos += 90  # one rows event per change
            gtid = {"gtid": f"0-1-{self.tx_id}"} if src == "mariadb" else {}
            return {**base, **gtid, "file": self._file(), "pos": self.pos, "row": 0}
        if again:
            # "When a primary key is updated SQL Server emits two events ... Both operations
            # share the same commit and change LSN and their event numbers are 1 and 2".
            return {**self.last, **self._serial(2)}
        self.tx_seq += 1
        if src == "oracle":
            # Changes of one transaction often share an SCN: every other one here.
            self.lsn += self.tx_seq % 2
            self.last = {**base, "scn": str(self.lsn), "commit_scn": str(self.tx_commit), "txSeq": self.tx_seq}
        else:
            self.lsn += self._step()
            # "update events have the value set to 2 because the update generates two events
            # in the CDC change table" (the SQL Server page, event_serial_no)
            self.last = {**base, "commit_lsn": self._lsn(self.tx_commit), "change_lsn": self._lsn(self.lsn)}
            self.last.update(self._serial(2 if op == "u" else 1))
        return self.last

    def commit(self) -> None:
        src = self.connector.source
        if src == "postgres":
            self.lsn += 24
            self.last_commit = self.lsn
        elif src in BINLOG:
            self.pos += 31  # XID event
        else:
            self.lsn = self.tx_commit

    def _step(self) -> int:
        """LSN distance between changes: enough to carry into the middle part now and then."""
        return 0x3FFF if self.connector.source == "sqlserver" else 0x3FFF_FFFF_FFFF_FFFF if self.connector.source == "db2" else 1

    def _lsn(self, n: int) -> str:
        return lsn_text(n, 10 if self.connector.source == "sqlserver" else 16)

    def _serial(self, serial: int | None) -> dict[str, Any]:
        return {"event_serial_no": serial} if self.connector.source == "sqlserver" else {}

    def _file(self) -> str:
        return f"{self.connector.source}-bin.{self.file:06d}"


_CONNECTOR = {
    "postgres": "postgresql",
    "mysql": "mysql",
    "mariadb": "mariadb",
    "sqlserver": "sqlserver",
    "oracle": "oracle",
    "db2": "db2",
}
# The source fields that make a position, per connector (the `add.fields` of unwrap).
POSITION_FIELDS = {
    "mysql": ("file", "pos", "row"),
    "mariadb": ("file", "pos", "row"),
    "sqlserver": ("commit_lsn", "change_lsn", "event_serial_no"),
    "oracle": ("scn", "commit_scn", "txSeq"),
    "db2": ("commit_lsn", "change_lsn"),
}


def _unchanged_toasted(before: Row, after: Row) -> Row:
    """The after image an update of a TOASTed NAME sends: the placeholder where NAME did not change."""
    return {**after, "NAME": UNAVAILABLE} if after["NAME"] == before["NAME"] else after


def _change_events(
    change: Change, before: Row | None, at: _Positions, txn: int, commit: int | None, identity: str, toasted: bool = False
) -> list[Event]:
    def event(op: str, key: Key, b: Row | None, a: Row | None, again: bool = False) -> Event:
        return Event(op, key, b, a, at.change(op, again), txn, commit)  # type: ignore[arg-type]

    def delete_image(row: Row) -> Row:
        return row if identity == "full" else {f: (v if f in KEY_FIELDS else None) for f, v in row.items()}

    if change.kind == "truncate":
        return [event("t", NO_KEY, None, None)]
    if change.kind == "write":
        assert change.row is not None
        if before is None:
            return [event("c", change.key, None, change.row)]
        after = _unchanged_toasted(before, change.row) if toasted and identity == "default" else change.row
        return [event("u", change.key, before if identity == "full" else None, after)]
    assert before is not None
    out = [event("d", change.key, delete_image(before), None)]
    out.append(Event("tombstone", change.key, None, None, {}, txn, commit))
    if change.kind == "move":
        assert change.row is not None
        out.append(event("c", key_of(change.row), None, change.row, again=True))
    return out


def emit(history: History, connector: Connector) -> list[Event]:
    """Every event the connector emits for `history`, in emission order (one connector,
    no restarts: `deliver` adds those)."""
    c = connector
    assert c.initial_snapshot or not history.initial, "rows present before capture need the initial snapshot"
    identity = c.replica_identity if c.source == "postgres" else "full"
    at = _Positions(c)
    events: list[Event] = []
    state = {key_of(r): dict(r) for r in history.initial}

    def snapshot(txn: int) -> None:
        source = at.snapshot()
        for row in sorted(state.values(), key=key_of):
            events.append(Event("r", key_of(row), None, dict(row), dict(source), txn, None))

    if c.initial_snapshot:
        snapshot(0)
    elif c.source == "postgres":
        at.last_commit = None  # the first transaction streamed by a new connector
    for txn, tx in enumerate(history.transactions):
        unseen = c.resnapshot_at is not None and c.resnapshot_at - c.lost <= txn < c.resnapshot_at
        # A snapshot reads rows: deletes made while no slot existed reach no consumer.
        assert not unseen or all(ch.kind == "write" for ch in tx), "lost transactions with deletes"
        if txn == c.resnapshot_at:
            snapshot(txn)
        at.begin(txn)
        commit = at.last_commit
        for change in tx:
            before = state.get(change.key)
            if not unseen:
                events.extend(_change_events(change, before, at, txn, commit, identity, c.toasted))
            apply_change(state, change)
        at.commit()
    if c.resnapshot_at == len(history.transactions):
        snapshot(c.resnapshot_at)
    return events


# ---- encoding: the Kafka record of an event ----------------------------------------------


def partition_of(key: Key, partitions: int) -> int:
    """Kafka's default partitioner over the key's JsonConverter bytes."""
    return partition_for(json_key(dict(zip(KEY_FIELDS, key))), partitions)


def sequence(event: Event) -> str:
    """PostgreSQL `source.sequence`: JSON text of [last commit LSN, LSN] as strings."""
    return json.dumps([None if event.commit is None else str(event.commit), str(event.source["lsn"])], separators=(",", ":"))


def _position_fields(event: Event) -> dict[str, Any]:
    s = event.source
    if s["connector"] == "postgresql":
        return {"lsn": s["lsn"], "sequence": sequence(event)}
    return {name: s[name] for name in POSITION_FIELDS[s["connector"]]}


def encode(event: Event, connector: Connector) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The Kafka (key, value) of an event: value None is a tombstone; a truncate has no key."""
    key = None if event.op == "t" else dict(zip(KEY_FIELDS, event.key))
    if event.op == "tombstone":
        return key, None
    if connector.format == "debezium":
        source = {"version": "2.7.0.Final", "name": "dbserver1", "db": "inventory", "table": "t", **event.source}
        source.update(_position_fields(event))
        if connector.source in BINLOG:
            source["sequence"] = None
        value = {
            "before": event.before,
            "after": event.after,
            "source": source,
            "op": event.op,
            "ts_ms": event.source["ts_ms"] + 250,
            "transaction": None,
        }
        return key, value
    if event.op == "d" and connector.format == "unwrap-tombstone":
        return key, None  # the delete is converted to the tombstone (and the connector's is dropped)
    image = event.before if event.op == "d" else event.after
    assert image is not None
    meta = {"__" + name: v for name, v in _position_fields(event).items()}
    value = {
        **image,
        "__op": event.op,
        "__source_ts_ms": event.source["ts_ms"],
        **meta,
        "__deleted": "true" if event.op == "d" else "false",
    }
    return key, value


def emitted_records(events: Sequence[Event], connector: Connector) -> list[Event]:
    """The events that become Kafka records: in unwrap `tombstone` mode the connector's
    own tombstone after a delete is dropped (the delete itself became the tombstone)."""
    if connector.format != "unwrap-tombstone":
        return list(events)
    return [e for e in events if e.op != "tombstone"]


# ---- delivery: at-least-once, with restarts ---------------------------------------------


KAFKA_TS = 1_800_000_000_000  # the producer's clock (ms) before the first record


@dataclass(frozen=True)
class Restart:
    """The connector stops after sending emitted record `stop - 1` (of the emission list)
    and resumes from emitted record `resume` (<= stop): everything from there is sent
    again, at new offsets."""

    stop: int
    resume: int


@dataclass
class Delivery:
    records: list[dict[str, Any]]  # Kafka records in delivery order: partition, offset, key, value
    sent: list[int] = field(default_factory=list)  # for each record, its index in the emission list
    runs: list[tuple[int, int]] = field(default_factory=list)  # (first, end) emission index of each run


def restarts_valid(restarts: Sequence[Restart], emitted: int) -> bool:
    """Each run starts where the previous restart resumes and stops no earlier."""
    start = 0
    for r in restarts:
        if not start <= r.resume <= r.stop <= emitted:
            return False
        start = r.resume
    return True


def deliver(events: Sequence[Event], connector: Connector, restarts: Sequence[Restart] = ()) -> Delivery:
    """The Kafka records of at-least-once delivery of `events` (as emitted) with `restarts`;
    the last run goes to the end. Offsets count per partition, in delivery order."""
    events = emitted_records(events, connector)
    assert restarts_valid(restarts, len(events)), restarts
    runs: list[tuple[int, int]] = []
    start = 0
    for r in restarts:
        runs.append((start, r.stop))
        start = r.resume
    runs.append((start, len(events)))
    c = connector
    offsets = [0] * max(c.partitions, c.grow_to or 0)
    partitions, ms = c.partitions, 0
    out = Delivery([], [], runs)
    for n, (first, end) in enumerate(runs):
        forgets = n > 0 and c.restart_null_commit and c.source == "postgres"
        fresh_txn = events[first].txn if forgets and first < end else None
        for i in range(first, end):
            event = events[i]
            # A new ms: every record, or (clock "transaction") the first of a transaction or run.
            starts = i == first or event.txn != events[i - 1].txn
            ms += 1 if c.clock == "record" or starts else 0
            if c.grow_to is not None and len(out.records) >= c.grow_at and (c.clock == "record" or starts):
                partitions = c.grow_to
            if fresh_txn is not None and event.txn == fresh_txn and event.op != "r":
                event = replace(event, commit=None)
            key, value = encode(event, c)
            p = 0 if event.op == "t" else partition_of(event.key, partitions)
            timestamp = {"timestamp": KAFKA_TS + ms, "timestamp_type": c.timestamp_type}
            out.records.append({"partition": p, "offset": offsets[p], **timestamp, "key": key, "value": value})
            out.sent.append(i)
            offsets[p] += 1
    return delay_partition(out, c) if c.late is not None else out


def delay_partition(out: Delivery, c: Connector) -> Delivery:
    """`out` with the records of partition `c.late[2]` among delivered records
    `c.late[0]`..`c.late[1] - 1` appended after the other records up to `c.late[1] - 1`:
    the producer's send to that partition failed and was retried, while its sends to the
    other partitions succeeded ("retries ... may change the ordering of records" across
    partitions; within one, the idempotent producer keeps the send order: Kafka producer
    configs, `retries`, `enable.idempotence`). Offsets are unchanged (each partition
    keeps its order); a CreateTime stays the send time, a LogAppendTime becomes the time
    of the append, that of the last record sent before it.
    After a partition increase a key's older records may so be read after its newer ones
    in its new partition, a sync later (tests/test_history.py,
    `test_late_older_event_splits_an_interval_after_a_partition_increase`)."""
    first, end, partition = c.late  # type: ignore[misc]
    window = range(first, min(end, len(out.records)))
    held = [n for n in window if out.records[n]["partition"] == partition]
    others = [n for n in window if n not in held]
    if not held or not others:
        return out
    order = [n for n in range(len(out.records)) if n not in held]
    at = order.index(others[-1]) + 1
    order[at:at] = held
    appended = out.records[others[-1]]["timestamp"]

    def record(n: int) -> dict[str, Any]:
        r = out.records[n]
        return r | {"timestamp": max(r["timestamp"], appended)} if n in held and c.timestamp_type == "L" else r

    return Delivery([record(n) for n in order], [out.sent[n] for n in order], out.runs)


def batches(records: Sequence[Any], cuts: Iterable[int]) -> list[tuple[int, int]]:
    """(lo, hi) bounds of the batches `records` is cut into at `cuts` (any positions)."""
    bounds = sorted({0, len(records), *(c for c in cuts if 0 < c < len(records))})
    return list(zip(bounds, bounds[1:]))

"""The reference model of the rule the sync follows over Debezium's at-least-once delivery.

    DeliveryModel(table).add(records).rows() / .quarantine()

`records` are Kafka records (`partition`, `offset`, `key`, `value`) in DELIVERY order (any
interleaving of partitions; Kafka order within each), one `add` per sync batch. The model
takes a batch's records one at a time in Kafka order, as the sync ranks them: by Kafka time
(the newest timestamp of the partition up to the record), partition and offset
(docs/correctness.md, "Delivery semantics"). That is delivery order when a key's records
in two partitions are at least 1 ms apart (tests/delivery.py draws nothing else), also
when the topic's partition count grew and a key's later records are in another
partition; a partition appended late (a retried send) is read after newer records of
other partitions, and its records keep their earlier timestamps. Batch cuts then matter
only where a late record and a newer one of its key fall in different batches, and for
TOAST placeholders: the sync fills or quarantines only the record that wins its key in a
batch, so a placeholder superseded in its batch is not quarantined. Each
record is classified as in tests/cdc_model.py (`classify`: what is an upsert, a delete, a
tombstone, a quarantine, and the converted row); what this model adds is the ORDER rule,
written from Debezium's delivery contract (tests/delivery.py cites it), with none of the
old model's preconditions: positions may tie, may be partly null, may be absent, and
events may be delivered again after newer ones.

State per key: (stored position or None, row | soft-deleted row | absent). Per record:

- quarantined records change nothing (and are reported by `quarantine()`);
- a full-envelope tombstone changes nothing: every one follows a delete event of its key
  that carries the position (DOC-PG L1235-1239, DOC-MY L1660-1665);
- ExtractNewRecordState ("debezium-unwrap"): a tombstone whose previous record IN ITS
  PARTITION is a delete event (`__deleted = "true"`) of the same key is the
  `rewrite-with-tombstone` companion of that delete: it changes nothing. Any other
  tombstone is a delete without a position (`tombstone` mode: the delete itself);
- an event with position p, when the key's stored position s exists and p < s
  (STRICTLY older), is stale: it changes nothing. Otherwise (p >= s: ties apply, in
  Kafka order) it applies and the stored position becomes p;
- an event without a position (a tombstone-only delete) applies; the stored position
  stays (the newest seen for the key, or None);
- positions: PostgreSQL (`order_by = "postgres-lsn"`) compares (commit, lsn) of
  `sequence` = ["<last commit lsn>", "<lsn>"] numerically; a null commit part (a
  connector with no offsets: its snapshot and its first transaction) counts as the
  event's own lsn: [null, X] = (X, X), which puts a re-snapshot after everything streamed
  before it; `lsn` stands in for a missing second part. MySQL (`"mysql-binlog"`): (number
  of the binlog file, pos, row); MariaDB's connector writes the same fields. SQL Server
  (`"sqlserver-lsn"`): (commit LSN, change LSN, event_serial_no), LSNs as the numbers
  their hex bytes spell, a missing change LSN (snapshot rows) after every change of the
  commit, a missing serial as 0; Db2 (`"db2-lsn"`): (commit LSN, change LSN); Oracle (`"oracle-scn"`): (commit_scn, scn,
  txSeq), a missing commit_scn (snapshot rows) as the event's own scn. `"kafka"`: no
  positions: the last record of the key delivered wins;
- hard mode: a delete removes the row; soft mode: the row stays with `_deleted = True`,
  each value from the delete's before image where it is not null, else the row's last
  value (a key-only image, as REPLICA IDENTITY DEFAULT and tombstones give, keeps them).

Exactness. Outside the transient states below, the model's state is the source's state
after the furthest event delivered so far. Transient (the per-sync check follows the rule
above anyway): with `order_by = "kafka"`, any replay re-applies older values; a
replay of tied positions (a compressed MySQL transaction) re-applies the older change of
the tie until the newer one is re-delivered; a replayed tombstone-only delete deletes a
row that a later, already delivered event re-created, until that event is re-delivered;
a replay that starts between a rewrite delete and its tombstone makes the tombstone a
(redundant) positionless delete. Each ends when the re-sent suffix is delivered to its
end; after that the state equals the source's final state (tests/test_property_cdc.py
checks it against the history). One exception is known and not generated: with
`restart_null_commit` (a restart that forgets the last commit LSN), a second restart
that interrupts the first one's re-sent transaction can leave a change of it stored at
(X, X), above its own later re-delivery at (commit, X'): the older value stays (the
property test draws at most one restart with that knob).

Quarantine replay (`replay`): the quarantined records, once the configuration converts
them, in Kafka order, judged by what is stored: stale when older by position, or when the
position ties (or there is none) and the record is earlier in Kafka order than the record
that wrote what is stored (a replayed record was read before at its own offset). Exact
when no restart re-sent a record of the tie: a re-sent copy of the stored change is
stale and leaves the stored row's Kafka coordinates as they were, so a replay of a
re-sent EARLIER change of the tie (quarantined twice) applies its older values (not
generated: the replay modes of tests/test_property_cdc.py draw no restarts with
compression).

Truncates (`on_truncate = "delete"`, hard mode, with a position): every row stored below
the truncate's position is removed and every key stored below it is deleted at it (a
change between, re-sent or late, stays stale); keys stored at or after it stay. Exact when
every change before the truncate in source order is delivered before it (one partition
per key, no growth); a key first seen after the truncate, with an older change, applies.

Not modelled: truncates in soft mode, positionless upserts (PostgreSQL incremental-snapshot
reads), semantic types (`classify` raises `Unmodelled`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from sync.config import TableConfig
from tests.cdc_model import NOT_JSON, UNAVAILABLE, Unmodelled, classify, decode, source_block, unwrap_schema
from tests.cdc_model import position as source_position

Position = tuple[int, ...]


def _number(value: Any) -> int | None:
    if value is None:
        return None
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not (isinstance(text, str) and text.isdigit()):
        raise Unmodelled(f"position part {value!r}")
    return int(text)


def position(env: dict, table: TableConfig) -> Position | None:
    """The source position of a decoded event (None: it has none), per `order_by`: as
    tests/cdc_model.py reads it, except PostgreSQL's, with a null commit part counted as
    the event's own lsn."""
    if table.order_by != "postgres-lsn":
        return source_position(env, table)
    block = source_block(env, table)
    if block is None:
        return None
    src, prefix = block
    commit = change = None
    seq = src.get(prefix + "sequence")
    if seq is not None:
        parts = json.loads(seq)
        if not (isinstance(parts, list) and len(parts) == 2):
            raise Unmodelled(f"sequence {seq!r}")
        commit, change = _number(parts[0]), _number(parts[1])
    if change is None:
        change = _number(src.get(prefix + "lsn"))
    if change is None:
        return None
    return (change if commit is None else commit, change)


def kafka_coordinates(record: Mapping[str, Any]) -> tuple[Any, int, int]:
    """A record's (timestamp, partition, offset): what orders it in Kafka order."""
    return (record.get("timestamp"), int(record["partition"]), int(record["offset"]))


def kafka_earlier(a: tuple[Any, int, int], b: tuple[Any, int, int]) -> bool:
    """Kafka orders a partition by offset and nothing across partitions: there the
    producer's (or broker's) timestamp is the evidence, a tie or an unknown time left to the
    partition number (docs/correctness.md, partition increases)."""
    if a[1] == b[1]:
        return a[2] < b[2]
    if a[0] is not None and b[0] is not None and a[0] != b[0]:
        return a[0] < b[0]
    return a[1] < b[1]


class DeliveryModel:
    """The target table the rule yields for the records added so far (see the module)."""

    def __init__(self, table: TableConfig):
        self.table = table
        self._stored: dict[tuple, Position] = {}
        self._rows: dict[tuple, dict[str, Any]] = {}
        self._previous: dict[int, tuple[str, Any]] = {}  # partition -> (kind, key) of its last record
        self._quarantine: dict[tuple[int, int], tuple[str, str | None]] = {}
        self._quarantined: dict[tuple[int, int], Mapping[str, Any]] = {}  # the records, for `replay`
        # key -> Kafka (timestamp, partition, offset) of the record that wrote what is stored
        self._writer: dict[tuple, tuple[Any, int, int]] = {}
        self._kafka_time: dict[int, Any] = {}  # partition -> the newest timestamp read in it in this batch
        # key -> the placeholders quarantined in this batch, (coordinates, record, position) (None: a
        # replay, whose records stay in the quarantine)
        self._batch_toast: dict[tuple, list[tuple[tuple[int, int], Mapping[str, Any], Position | None]]] | None = {}

    def add(self, records: Iterable[Mapping[str, Any]]) -> DeliveryModel:
        """One sync's batch, in Kafka order (`_in_kafka_order`). A TOAST placeholder the
        model could not fill is quarantined unless a later record of its key in the batch
        applies: the sync fills only the record that wins its key (a superseded one is
        never applied), so such a placeholder is not quarantined there."""
        self._batch_toast, self._kafka_time = {}, {}
        for record in self._in_kafka_order(list(records)):
            self._add(record)
        return self

    def _in_kafka_order(self, batch: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """The batch as the sync ranks it: by each record's Kafka time (the newest timestamp
        of its partition up to it in the batch), partition and offset. It differs from delivery order
        where a partition was appended late (a retried send): its records keep their
        earlier timestamps. Records without a timestamp keep delivery order."""
        if any(r.get("timestamp") is None for r in batch):
            return batch
        keyed = []
        for record in batch:
            partition = int(record["partition"])
            newest = max(self._kafka_time.get(partition, record["timestamp"]), record["timestamp"])
            self._kafka_time[partition] = newest
            keyed.append(((newest, partition, int(record["offset"])), record))
        return [r for _, r in sorted(keyed, key=lambda kr: kr[0])]

    def _add(self, record: Mapping[str, Any]) -> None:
        partition = int(record["partition"])
        env = unwrap_schema(decode(record.get("value"))) if record.get("value") is not None else None
        if self.table.on_truncate == "delete" and isinstance(env, dict) and env.get("op") == "t":
            self._truncate(position(env, self.table))
            self._previous[partition] = ("other", None)
            return
        action, detail = classify(record, self.table)
        previous = self._previous.get(partition)
        if action == "quarantine":
            self._quarantine[(partition, int(record["offset"]))] = detail
            self._quarantined[(partition, int(record["offset"]))] = record
            self._previous[partition] = ("other", None)
            return
        if action == "skip":  # a full-envelope tombstone (or a truncate)
            self._previous[partition] = ("other", None)
            return
        key, row, _ = detail
        tombstone = record.get("value") is None
        self._previous[partition] = ("tombstone" if tombstone else action, key)
        if tombstone:
            if previous == ("delete", key):
                return  # the companion of the delete event just before it
            self._apply(key, "delete", row, record)
            self._settle(key, None)
            return
        env = unwrap_schema(decode(record.get("value")))
        assert env is not NOT_JSON and isinstance(env, dict)
        pos = position(env, self.table)
        stored = self._stored.get(key)
        if pos is not None and stored is not None and pos < stored:
            return  # stale: strictly older than what is stored
        if not self._filled(key, row, record):
            return
        if pos is not None:
            self._stored[key] = pos
        self._apply(key, action, row, record)
        self._settle(key, pos)

    def _settle(self, key: tuple, applied: Position | None) -> None:
        """A record of `key` at position `applied` (None: a tombstone, ranked after what
        precedes it) was applied: the placeholders of the key the batch quarantined so far
        rank below it in the sync's batch (by position, then Kafka order) and are superseded,
        not quarantined; one at a newer position ranks above it and takes its values, as the
        sync fills the winner from the batch's older events."""
        for coords, record, at in (self._batch_toast or {}).pop(key, []):
            del self._quarantine[coords], self._quarantined[coords]
            if applied is not None and at is not None and at > applied:
                previous = dict(self._previous)  # what each partition's last record was stays
                self._add(record)
                self._previous = previous

    def _truncate(self, at: Position | None) -> None:
        """A truncate at position `at` (hard mode): every row stored below it (or without a
        position) is removed, and every key stored below it is deleted at it, so what lies
        between stays stale; what is stored at or after it stays."""
        if at is None or self.table.delete_mode != "hard":
            raise Unmodelled("a truncate without a position, or in soft mode")
        for key in list(self._rows):
            if self._stored.get(key) is None or self._stored[key] < at:
                del self._rows[key]
                self._stored[key] = at
        for key, stored in self._stored.items():
            if stored < at:
                self._stored[key] = at

    def _filled(self, key: tuple, row: dict[str, Any], record: Mapping[str, Any]) -> bool:
        """An unchanged (TOAST) value takes the key's live row's; with no live row to take it
        from (none, or a soft-deleted one) the record is quarantined (False)."""
        missing = [c for c, v in row.items() if v == UNAVAILABLE]
        if not missing:
            return True
        live = self._rows.get(key)
        if live is None or live.get("_deleted"):
            coords = (int(record["partition"]), int(record["offset"]))
            self._quarantine[coords] = ("toast", missing[0])
            self._quarantined[coords] = record
            if self._batch_toast is not None:
                value = unwrap_schema(decode(record.get("value")))
                self._batch_toast.setdefault(key, []).append((coords, record, position(value, self.table)))
            return False
        row.update({c: live[c] for c in missing})
        return True

    def replay(self, table: TableConfig) -> DeliveryModel:
        """`quarantine replay` of every quarantined record, once `table` (the fixed
        configuration) converts them: in Kafka order, each judged by what is stored. A
        record read before at its own offset is stale when its position is older than the
        stored one, or ties with it (none: order_by = "kafka") and its offset is earlier in
        Kafka order than the record that wrote what is stored; else it applies."""
        self.table = table
        self._batch_toast = None
        waiting, self._quarantined = self._quarantined, {}
        by_kafka_order = lambda c: (kafka_coordinates(waiting[c])[0] or 0, *c)  # noqa: E731
        for coords in sorted(waiting, key=by_kafka_order):
            record = waiting[coords]
            action, detail = classify(record, table)
            if action == "quarantine":
                self._quarantined[coords] = record
                continue
            key, row, _ = detail
            env = unwrap_schema(decode(record.get("value")))
            pos = position(env, table)
            stored, writer = self._stored.get(key), self._writer.get(key)
            if pos is not None and stored is not None and pos < stored:
                continue
            if (pos is None or pos == stored) and writer is not None and kafka_earlier(kafka_coordinates(record), writer):
                continue
            if not self._filled(key, row, record):
                continue
            if pos is not None:
                self._stored[key] = pos
            self._apply(key, action, row, record)
        return self

    def _apply(self, key: tuple, action: str, row: dict[str, Any], record: Mapping[str, Any]) -> None:
        self._writer[key] = kafka_coordinates(record)
        soft = self.table.delete_mode == "soft"
        if action == "upsert":
            self._rows[key] = {**row, "_deleted": False} if soft else dict(row)
        elif not soft:
            self._rows.pop(key, None)
        else:
            last = self._rows.get(key, {})
            kept = {c.target_name: v for c, v in zip(self.table.key_columns, key)}
            for col in self.table.value_columns:
                value = row.get(col.target_name)
                kept[col.target_name] = last.get(col.target_name) if value is None else value
            self._rows[key] = {**kept, "_deleted": True}

    def rows(self) -> dict[tuple, dict[str, Any]]:
        """{key tuple: {target column: value}} (plus `_deleted` in soft mode)."""
        return {k: dict(v) for k, v in self._rows.items()}

    def quarantine(self) -> dict[tuple[int, int], tuple[str, str | None]]:
        return dict(self._quarantine)

    def waiting(self) -> list[tuple[int, int]]:
        """The quarantined records no replay has applied yet."""
        return list(self._quarantined)

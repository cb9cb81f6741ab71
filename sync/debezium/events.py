"""Builders of Debezium change events, shaped like the MySQL, MariaDB, PostgreSQL, SQL
Server, Db2 and Oracle connectors' output, for the demo, the tests and the benchmarks.
Each builder returns the Kafka record as `ingest` reads it: {"partition", "key", "value"}
(offsets are assigned on ingest unless given)."""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Any


@dataclass
class MySqlSource:
    """A MySQL (or MariaDB: `connector = "mariadb"`) binlog position generator: every
    event gets the next (file, pos, row)."""

    connector: str = "mysql"
    server: str = "salesdb"
    db: str = "salesdb"
    table: str = "CUSTOMER"
    file_number: int = 3
    pos: int = 154
    ts_ms: int = 1_700_000_000_000
    snapshot_pos: tuple[int, int] | None = None

    def next(self, snapshot: bool = False) -> dict[str, Any]:
        if snapshot:
            # All rows of an initial snapshot share one position, row 0.
            if self.snapshot_pos is None:
                self.snapshot_pos = (self.file_number, self.pos)
            file_number, pos = self.snapshot_pos
        else:
            self.pos += 100
            self.ts_ms += 1000
            file_number, pos = self.file_number, self.pos
        return {
            "version": "2.7.0.Final",
            "connector": self.connector,
            "name": self.server,
            "ts_ms": self.ts_ms,
            "snapshot": "true" if snapshot else "false",
            "db": self.db,
            "sequence": None,
            "table": self.table,
            "server_id": 223344,
            "gtid": None,
            "file": f"{self.connector}-bin.{file_number:06d}",
            "pos": pos,
            "row": 0,
            "thread": None if snapshot else 7,
            "query": None,
        }


@dataclass
class PostgresSource:
    """A PostgreSQL WAL position generator (source.sequence = [last commit lsn, lsn])."""

    db: str = "salesdb"
    schema: str = "public"
    table: str = "customer"
    lsn: int = 34_000_000
    commit_lsn: int = 33_999_000
    ts_ms: int = 1_700_000_000_000
    tx_id: int = 600

    def next(self) -> dict[str, Any]:
        self.lsn += 56
        self.ts_ms += 1000
        self.tx_id += 1
        source = {
            "version": "2.7.0.Final",
            "connector": "postgresql",
            "name": "pg",
            "ts_ms": self.ts_ms,
            "snapshot": "false",
            "db": self.db,
            "sequence": json.dumps([str(self.commit_lsn), str(self.lsn)]),
            "schema": self.schema,
            "table": self.table,
            "txId": self.tx_id,
            "lsn": self.lsn,
            "xmin": None,
        }
        self.commit_lsn = self.lsn + 8
        return source


def lsn_text(value: int, size: int) -> str:
    """An LSN as Debezium's SQL Server and Db2 connectors write it (`Lsn.toString()`):
    lower-case hex of each of its `size` bytes, ':' after bytes 4 and 8."""
    digits = f"{value:0{size * 2}x}"
    return f"{digits[:8]}:{digits[8:16]}:{digits[16:]}"


@dataclass
class _CommitOrderSource:
    """Positions of the connectors that emit committed transactions (SQL Server, Db2,
    Oracle): every change knows its transaction's commit position. Each event is its own
    transaction, unless `begin()` ... `commit()` group several."""

    server: str = "server1"  # the topic prefix, `name` in the source block
    db: str = ""
    schema: str = ""
    table: str = ""
    ts_ms: int = 1_700_000_000_000
    at: int = 0  # the log position reached
    tx_commit: int | None = None  # the open transaction's commit position
    tx_seq: int = 0
    snapshot_at: int | None = None
    step = 1  # log distance between changes

    def begin(self) -> None:
        self.tx_commit = self.at + 1000 * self.step
        self.tx_seq = 0

    def commit(self) -> None:
        assert self.tx_commit is not None, "no open transaction"
        self.at, self.tx_commit = self.tx_commit, None

    def _change(self) -> tuple[int, int, int]:
        """(commit, change position, index in the transaction) of the next change."""
        auto = self.tx_commit is None
        if auto:
            self.begin()
        self.at += self.step
        self.tx_seq += 1
        self.ts_ms += 1000
        commit, change, seq = self.tx_commit, self.at, self.tx_seq
        if auto:
            self.commit()
        return commit, change, seq  # type: ignore[return-value]

    def _block(self, connector: str, version: str, snapshot: bool, **positions: Any) -> dict[str, Any]:
        """The source block: what every relational connector writes, then its positions."""
        return {
            "version": version,
            "connector": connector,
            "name": self.server,
            "ts_ms": self.ts_ms,
            "snapshot": "true" if snapshot else "false",
            "db": self.db,
            "sequence": None,
            "schema": self.schema,
            "table": self.table,
            **positions,
        }

    def _snapshot_position(self) -> int:
        if self.snapshot_at is None:
            self.snapshot_at = self.at
        return self.snapshot_at


@dataclass
class SqlServerSource(_CommitOrderSource):
    """SQL Server CDC positions: `commit_lsn`, `change_lsn` (10-byte LSNs as text) and
    `event_serial_no` (2 for an update: "the update generates two events in the CDC change
    table"; Debezium's SQL Server connector page, `event_serial_no`)."""

    server: str = "server1"
    db: str = "testDB"
    schema: str = "dbo"
    table: str = "customers"
    at: int = 0x27_00000758_0003
    step = 0x3FFF  # parts carry over now and then

    def next(self, snapshot: bool = False, op: str = "c") -> dict[str, Any]:
        if snapshot:  # TxLogPosition.valueOf(maxLsn): no change LSN, no serial
            commit, change, serial = self._snapshot_position(), None, None
        else:
            commit, change, _ = self._change()
            serial = 2 if op == "u" else 1
        return self._block(
            "sqlserver",
            "2.7.0.Final",
            snapshot,
            change_lsn=None if change is None else lsn_text(change, 10),
            commit_lsn=lsn_text(commit, 10),
            event_serial_no=serial,
        )


@dataclass
class Db2Source(_CommitOrderSource):
    """Db2 ASN capture positions: `commit_lsn`, `change_lsn` (16-byte LSNs as text)."""

    server: str = "myconnector"
    db: str = "mydatabase"
    schema: str = "MYSCHEMA"
    table: str = "CUSTOMERS"
    at: int = 0x27_00000758_0000000000000003
    step = 0x3FFF_FFFF_FFFF_FFFF

    def next(self, snapshot: bool = False, op: str = "c") -> dict[str, Any]:
        commit, change = (self._snapshot_position(), None) if snapshot else self._change()[:2]
        return self._block(
            "db2",
            "2.7.0.Final",
            snapshot,
            change_lsn=None if change is None else lsn_text(change, 16),
            commit_lsn=lsn_text(commit, 16),
        )


@dataclass
class OracleSource(_CommitOrderSource):
    """Oracle LogMiner positions: `scn` of the change, `commit_scn` of its transaction,
    `txSeq` (the change's index in its transaction, Debezium 3.2+). Changes of one
    transaction share an SCN in pairs, as consecutive statements often do."""

    server: str = "server1"
    db: str = "ORCLPDB1"
    schema: str = "DEBEZIUM"
    table: str = "CUSTOMERS"
    at: int = 9_999_990  # SCNs gain a digit soon

    def _change(self) -> tuple[int, int, int]:
        commit, change, seq = super()._change()
        if seq % 2 == 0:  # the second of a pair reads at the first's SCN
            change -= 1
        return commit, change, seq

    def next(self, snapshot: bool = False, op: str = "c") -> dict[str, Any]:
        if snapshot:  # the snapshot SCN; no commit SCN, no transaction
            commit, scn, seq = None, self._snapshot_position(), None
        else:
            commit, scn, seq = self._change()
        return self._block(
            "oracle",
            "3.2.0.Final",
            snapshot,
            txId=None if snapshot else f"6.28.{commit}",
            scn=str(scn),
            commit_scn=None if commit is None else str(commit),
            txSeq=seq,
        )


@dataclass
class ChangeStream:
    """Produces the Kafka records of one table's topic: the full envelope, optionally with
    the schemas.enable=true wrapper."""

    key_fields: list[str]
    source: Any = field(default_factory=MySqlSource)
    partitions: int = 1
    with_schema: bool = False

    def _partition(self, key: dict[str, Any]) -> int:
        return zlib.crc32(json.dumps(key, sort_keys=True).encode()) % self.partitions if self.partitions > 1 else 0

    def _key(self, row: dict[str, Any]) -> dict[str, Any]:
        return {k: row[k] for k in self.key_fields}

    def _wrap(self, payload: Any) -> Any:
        if not self.with_schema or payload is None:
            return payload
        return {"schema": {"type": "struct", "name": "envelope", "optional": False, "fields": []}, "payload": payload}

    def _record(self, key: dict[str, Any], value: Any) -> dict[str, Any]:
        key_msg = {"schema": {"type": "struct", "fields": []}, "payload": key} if self.with_schema else key
        return {"partition": self._partition(key), "key": key_msg, "value": self._wrap(value)}

    def _source(self, op: str, snapshot: bool = False) -> dict[str, Any]:
        if isinstance(self.source, PostgresSource):
            return self.source.next()
        if isinstance(self.source, MySqlSource):
            return self.source.next(snapshot=snapshot)
        return self.source.next(snapshot=snapshot, op=op)

    def _event(self, op: str, before: Any, after: Any, snapshot: bool = False) -> dict[str, Any]:
        source = self._source(op, snapshot)
        return {"before": before, "after": after, "source": source, "op": op, "ts_ms": source["ts_ms"] + 250, "transaction": None}

    def snapshot(self, row: dict[str, Any]) -> dict[str, Any]:
        return self._record(self._key(row), self._event("r", None, row, snapshot=True))

    def insert(self, row: dict[str, Any]) -> dict[str, Any]:
        return self._record(self._key(row), self._event("c", None, row))

    def update(self, before: dict[str, Any] | None, after: dict[str, Any]) -> dict[str, Any]:
        return self._record(self._key(after), self._event("u", before, after))

    def delete(self, before: dict[str, Any]) -> dict[str, Any]:
        return self._record(self._key(before), self._event("d", before, None))

    def tombstone(self, key_row: dict[str, Any]) -> dict[str, Any]:
        return self._record(self._key(key_row), None)

    def truncate(self) -> dict[str, Any]:
        return {"partition": 0, "key": None, "value": self._wrap(self._event("t", None, None))}


def write_jsonl(records: list[dict[str, Any]], path: Any) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec, separators=(",", ":")) + "\n")

"""Builders of Debezium change events, shaped like the MySQL and PostgreSQL connectors'
output, for the demo, the tests and the benchmarks. Each builder returns the Kafka
record as `ingest` reads it: {"partition", "key", "value"} (offsets are assigned on ingest
unless given)."""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Any


@dataclass
class MySqlSource:
    """A MySQL binlog position generator: every event gets the next (file, pos, row)."""

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
            "connector": "mysql",
            "name": self.server,
            "ts_ms": self.ts_ms,
            "snapshot": "true" if snapshot else "false",
            "db": self.db,
            "sequence": None,
            "table": self.table,
            "server_id": 223344,
            "gtid": None,
            "file": f"mysql-bin.{file_number:06d}",
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

    def _source(self, snapshot: bool = False) -> dict[str, Any]:
        return self.source.next(snapshot=snapshot) if isinstance(self.source, MySqlSource) else self.source.next()

    def _event(self, op: str, before: Any, after: Any, snapshot: bool = False) -> dict[str, Any]:
        source = self._source(snapshot)
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

"""The local stream: what Redshift streaming ingestion does, for the embedded warehouse.

`ingest` appends one "refresh" of Kafka records to a table's stream relation, in one
transaction, with one `refresh_time`, exactly the columns the streaming MV has on
Redshift. Input is JSON lines: our own record shape or `kcat -J` output.

Nothing is dropped: a record whose value is not JSON keeps its raw bytes (and the
procedure quarantines it); a line that is not a record at all is ingested as a raw value
too, and counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sync.config import ConfigError, Pipeline
from sync.local import copy_binary
from sync.local.json_members import members
from sync.local.values import ParsedValue, dumps_exact, loads_exact, parse_value, parsed_json, plain_json
from sync.sql import schemas
from sync.sql.names import HEARTBEAT_STREAM, REFRESH_HISTORY, table_names
from sync.warehouse import Warehouse, WarehouseError

# The status SYS_MV_REFRESH_HISTORY gives an incremental refresh (SVL_MV_REFRESH_STATUS).
REFRESHED = "Refresh successfully updated MV incrementally"
BIGINT_MAX = 2**63 - 1  # the stream's partition and offset columns
TIMESTAMP_MIN_MS, TIMESTAMP_MAX_MS = -62_135_596_800_000, 253_402_300_799_999  # 0001-01-01 .. 9999-12-31
RECORD_KEYS = {"partition", "offset", "timestamp", "key", "value", "headers", "timestamp_type"}
# kafka_timestamp_type as Redshift's streaming relation writes it: C = CreateTime (set by
# the producer), L = LogAppendTime (set by the broker), U = none.
TIMESTAMP_TYPES = ("C", "L", "U")
KCAT_KEYS = {
    "topic",
    "partition",
    "offset",
    "tstype",
    "ts",
    "broker",
    "key",
    "payload",
    "headers",
    "key_schema_id",
    "value_schema_id",
}


@dataclass
class KafkaRecord:
    partition: int
    offset: int | None
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None
    headers: Any = None
    lineno: int | None = None  # the input line it came from
    timestamp_type: str = "C"  # the stream's kafka_timestamp_type (TIMESTAMP_TYPES)
    stored: ParsedValue | None = None  # the value's stored form, when the line's parse gave it
    key_stored: ParsedValue | None = None  # the key's


@dataclass
class IngestResult:
    table: str
    records: int = 0
    unparseable_values: int = 0
    tombstones: int = 0
    malformed_lines: list[int | None] = field(default_factory=list)  # numbers of the lines that were not records
    partitions: dict[int, tuple[int, int]] = field(default_factory=dict)  # partition -> (first, last offset)
    refresh_time: datetime | None = None


def _int_or_none(obj: dict, name: str, lineno: int) -> int | None:
    value = obj.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= BIGINT_MAX:
        raise ValueError(f"line {lineno}: {name!r} must be an integer from 0 to {BIGINT_MAX}, got {value!r}")
    return value


def parse_line(line: bytes, lineno: int) -> tuple[KafkaRecord, bool]:
    """One input line -> (record, well_formed). A line that is not a record wrapper is
    taken whole as the record's value (so nothing on it is lost)."""
    try:
        text = line.decode("utf-8")
        walked = members(text)  # the object and the text of each value; else the plain parse
        obj, texts = walked if walked is not None else (loads_exact(text), {})
    except (UnicodeDecodeError, ValueError, RecursionError):
        return KafkaRecord(0, None, None, None, line, lineno=lineno), False
    if isinstance(obj, dict) and ("value" in obj or "payload" in obj) and (set(obj) <= RECORD_KEYS or set(obj) <= KCAT_KEYS):
        kcat = "payload" in obj
        partition = _int_or_none(obj, "partition", lineno) or 0
        offset = _int_or_none(obj, "offset", lineno)
        timestamp = obj.get("ts" if kcat else "timestamp")
        if timestamp is not None and (
            isinstance(timestamp, bool) or not isinstance(timestamp, int) or not TIMESTAMP_MIN_MS <= timestamp <= TIMESTAMP_MAX_MS
        ):
            raise ValueError(f"line {lineno}: timestamp must be epoch milliseconds (years 1-9999), got {timestamp!r}")
        timestamp_type = "C" if kcat else obj.get("timestamp_type", "C")
        if not (isinstance(timestamp_type, str) and timestamp_type in TIMESTAMP_TYPES):
            raise ValueError(f"line {lineno}: timestamp_type must be one of {', '.join(TIMESTAMP_TYPES)}, got {timestamp_type!r}")
        name = "payload" if kcat else "value"
        value, key, key_stored = obj.get(name), *parsed_json(obj.get("key"))
        plain = plain_json(value, *texts[name]) if name in texts else None
        # The value as the line wrote it when jsonb stores that alike, else written out again.
        raw, stored = (plain.encode("utf-8"), ParsedValue(plain, None)) if plain is not None else parsed_json(value)
        record = KafkaRecord(partition, offset, timestamp, key, raw, obj.get("headers"), lineno, timestamp_type)
        record.stored, record.key_stored = stored, key_stored
        return record, True
    return KafkaRecord(0, None, None, None, line, lineno=lineno), isinstance(obj, dict)


Progress = Callable[[int, int], None]  # (records read, bytes read so far)
PROGRESS_EVERY = 1000  # records between two progress calls
COPY_CHUNK = 1 << 20  # bytes of rows sent to the server at once


def read_records(path: Path, progress: Progress | None = None) -> Iterator[tuple[KafkaRecord, bool]]:
    """The file's records; `progress` hears how far the reading is, every PROGRESS_EVERY
    records and at the end."""
    records = consumed = 0
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            consumed += len(line)
            line = line.rstrip(b"\r\n")
            if not line.strip():
                continue
            yield parse_line(line, lineno)
            records += 1
            if progress is not None and records % PROGRESS_EVERY == 0:
                progress(records, consumed)
    if progress is not None:
        progress(records, consumed)


def stream_of(pipeline: Pipeline, table_name: str | None) -> tuple[str, str, str]:
    """(schema, relation, label) of a table's stream, or (None) of the heartbeat topic's."""
    if table_name is not None:
        names = table_names(pipeline, pipeline.table(table_name))
        return names.schema, names.stream, table_name
    if pipeline.heartbeat is None:
        raise ConfigError("the pipeline file has no [heartbeat] section: there is no heartbeat stream to ingest into")
    return pipeline.schema, HEARTBEAT_STREAM, f"the heartbeat ({pipeline.heartbeat.topic})"


def ingest_records(
    wh: Warehouse, pipeline: Pipeline, table_name: str | None, records: Iterable[tuple[KafkaRecord, bool]]
) -> IngestResult:
    """One refresh of `records` into a table's stream (None: the heartbeat topic's)."""
    if wh.dialect.streaming_ingestion:
        raise WarehouseError(
            "ingest writes the local stream relation of the embedded warehouse; on Redshift the streaming "
            "materialized view reads the topic itself (REFRESH MATERIALIZED VIEW, or AUTO REFRESH YES)"
        )
    schema, name, label = stream_of(pipeline, table_name)
    if not wh.relation_exists(schema, name):
        raise WarehouseError(
            f"{schema}.{name}, the stream of {label}, does not exist in this database: run `redshift-sync deploy` first"
        )
    d = wh.dialect
    stream = d.qualified(schema, name)
    result = IngestResult(label)
    with wh.transaction():
        # Serialises writers so offsets and refresh_time increase with commit order;
        # readers (the procedure) are not blocked.
        wh.execute(f"LOCK TABLE {stream}{d.lock_mode}")
        rows = wh.query(f"SELECT kafka_partition, MAX(kafka_offset) FROM {stream} GROUP BY kafka_partition")
        next_offset = {int(p): int(o) + 1 for p, o in rows}
        refresh_time = wh.scalar(f"SELECT {d.now()}")
        result.refresh_time = refresh_time
        refreshed = copy_binary.timestamp(refresh_time)
        rows = bytearray(copy_binary.HEADER)
        with wh.copy_from(
            f"COPY {stream} ({', '.join(schemas.names(schemas.STREAM))}) FROM STDIN (FORMAT binary)", queued=True
        ) as copy:
            for record, well_formed in records:
                if not well_formed:
                    result.malformed_lines.append(record.lineno)
                offset = record.offset
                if offset is None:
                    offset = next_offset.get(record.partition, 0)
                next_offset[record.partition] = max(next_offset.get(record.partition, 0), offset + 1)
                value = record.stored if record.stored is not None else parse_value(record.value)
                key = record.key_stored if record.key_stored is not None else parse_value(record.key)
                rows += copy_binary.lead(len(schemas.STREAM), record.partition, offset, record.timestamp_type)
                rows += refreshed if record.timestamp_ms is None else copy_binary.timestamp_ms(record.timestamp_ms)
                rows += copy_binary.data(record.key)
                rows += copy_binary.jsonb(None if record.headers is None else dumps_exact(record.headers))
                rows += refreshed
                rows += copy_binary.jsonb(value.payload)
                rows += copy_binary.data(value.raw)
                rows += copy_binary.jsonb(key.payload)
                if len(rows) >= COPY_CHUNK:
                    copy.write(rows)
                    rows = bytearray()
                result.records += 1
                result.unparseable_values += value.raw is not None
                result.tombstones += record.value is None
                first, last = result.partitions.get(record.partition, (offset, offset))
                result.partitions[record.partition] = (min(first, offset), max(last, offset))
            copy.write(rows + copy_binary.TRAILER)
        if wh.relation_exists(schema, REFRESH_HISTORY):  # a refresh, also one that read nothing
            values = ", ".join(["%s"] * len(schemas.REFRESH_HISTORY))
            wh.execute(
                f"INSERT INTO {d.qualified(schema, REFRESH_HISTORY)} ({', '.join(schemas.names(schemas.REFRESH_HISTORY))}) "
                f"VALUES ({values})",
                (schema, name, REFRESHED, refresh_time),
            )
    return result


def check_events_file(path: Path) -> None:
    """Stop before anything connects when `path` is not a file to read."""
    if path.is_dir():
        raise FileNotFoundError(f"events file {str(path)!r} is a folder: give one JSON-lines file")
    if not path.exists():
        raise FileNotFoundError(f"events file {str(path)!r} not found")


def ingest_file(
    wh: Warehouse, pipeline: Pipeline, table_name: str | None, path: Path, progress: Progress | None = None
) -> IngestResult:
    """The file's records into the table's stream relation (None: the heartbeat's)."""
    check_events_file(path)
    return ingest_records(wh, pipeline, table_name, read_records(path, progress))

"""Part 4: `ingest`, the local stand-in for the stream, against a raw COPY of the same
records. The events file holds full Debezium envelopes (MySQL binlog order, 4 partitions);
ingest parses every line, keeps each value as jsonb (or raw bytes) and appends one
refresh; the raw COPY writes the rows that ingest stored, already built, into an empty
unlogged table of the same columns. Each run is committed and then removed (TRUNCATE),
since ingest runs its own transaction."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.baselines import SCHEMA
from benchmarks.measure import Measurement
from benchmarks.workload import TABLE, reset
from sync.debezium.events import ChangeStream, MySqlSource, write_jsonl
from sync.local.stream import ingest_file

if TYPE_CHECKING:
    from benchmarks.phases import Bench

RAW_TABLE = f'{SCHEMA}."ingest_raw_copy"'
COLUMNS = (
    "kafka_partition, kafka_offset, kafka_timestamp_type, kafka_timestamp, kafka_key, "
    "kafka_headers, refresh_time, payload, raw_value, key_payload"
)


def write_events(path: Path, records: int) -> int:
    """`records` change events of the benchmark table (a third of them updates), as
    `ingest` reads them; returns the file's size in bytes."""
    stream = ChangeStream(["customer_id"], MySqlSource(table="customer"), partitions=4)
    events = []
    for i in range(records):
        row = {"customer_id": f"C{i % (records // 3 + 1):08d}", "name": f"customer {i}", "segment": "BUILDING", "credit": i}
        events.append(stream.update(row, row) if i % 3 == 2 else stream.insert(row))
    write_jsonl(events, path)
    return path.stat().st_size


def ingest(b: Bench) -> None:
    n = b.sizes.ingest_records
    with tempfile.TemporaryDirectory(prefix="rs-bench-ingest-") as tmp:
        path = Path(tmp) / "events.jsonl"
        size = write_events(path, n)
        b.progress(f"ingest: {n:,} records ({size / 1e6:,.1f} MB) against a raw COPY of the same rows")
        reset(b.wh, b.rel)
        ingest_file(b.wh, b.pipeline, TABLE, path)
        # jsonb columns as their text: what ingest hands COPY, to be parsed by the server again
        as_text = COLUMNS.replace("kafka_headers", "kafka_headers::text").replace("payload", "payload::text")
        rows = b.wh.query(f"SELECT {as_text} FROM {b.rel.stream}")
        b.wh.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        b.wh.execute(f"DROP TABLE IF EXISTS {RAW_TABLE}")
        b.wh.execute(f"CREATE UNLOGGED TABLE {RAW_TABLE} (LIKE {b.rel.stream})")

        def raw_copy() -> None:
            with b.wh.transaction(), b.wh.copy_from(f"COPY {RAW_TABLE} ({COLUMNS}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)

        runs = {"ingest": Measurement(), "raw_copy": Measurement()}
        for rep in range(b.sizes.repeats):
            for name, fn in (("ingest", lambda: ingest_file(b.wh, b.pipeline, TABLE, path)), ("raw_copy", raw_copy)):
                b.wh.execute(f"TRUNCATE {b.rel.stream}, {RAW_TABLE}")
                b.wh.execute("VACUUM ANALYZE")
                b.progress(f"ingest: {name}, run {rep + 1} of {b.sizes.repeats}")
                runs[name].add(*b.clock.time(fn))
        b.wh.execute(f"DROP TABLE {RAW_TABLE}")
        reset(b.wh, b.rel)
    for name, m in runs.items():
        b.record(f"ingest.{name}", m, n, unit="records")
    b.figures["ingest.megabytes_per_second"] = size / 1e6 / b.figures["ingest.ingest.seconds"]
    b.ratio("ingest.ratio_ingest_copy", "ingest.ingest", "ingest.raw_copy")

"""Workloads built inside the database with SQL (generate_series + jsonb_build_object), so
millions of rows cost seconds, not Python loops.

The table is the example pipeline's `customer` (MySQL binlog order, hard deletes). Keys are
`C` + 9 digits. Target rows carry binlog positions of file 2; batch events use later files,
so every event of a batch is newer than what the target holds.

A batch of N events: by `j % 20`, 60 % updates of existing keys, 25 % inserts of new keys,
15 % deletes of other existing keys. Updates draw from a pool of 0.3 N slots; with the
`j % 20` split they land on 0.18 N distinct keys, so an updated key changes about 3.3
times within the batch. The existing keys are spread over the whole key range. Events go to
`PARTITIONS` Kafka partitions by key, with increasing offsets per partition.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sync.config import Pipeline, TableConfig
from sync.sql.dialect import quote_ident
from sync.sql.names import table_names
from sync.warehouse import Warehouse

REPO = Path(__file__).resolve().parent.parent
PIPELINE = REPO / "examples" / "salesdb" / "pipeline.toml"
TABLE = "customer"
PARTITIONS = 4
STRIDE = 1_000_003  # prime: spreads pool slots over the key range (coprime with the sizes used)
SEGMENTS = "ARRAY['BUILDING','AUTOMOBILE','MACHINERY','HOUSEHOLD','FURNITURE']"
BASE_TS_MS = 1_700_000_000_000


@dataclass(frozen=True)
class Relations:
    """Quoted names of the benchmarked table's relations."""

    target: str
    stream: str
    stage: str
    watermark: str
    deleted: str
    procedure: str


def relations(pipeline: Pipeline, table: TableConfig) -> Relations:
    n = table_names(pipeline, table)
    qual = lambda name: f"{quote_ident(n.schema)}.{quote_ident(name)}"  # noqa: E731
    return Relations(qual(n.target), qual(n.stream), qual(n.stage), qual(n.watermark), qual(n.deleted_keys), qual(n.procedure))


def key_sql(expr: str) -> str:
    return f"('C' || lpad(({expr})::text, 9, '0'))"


def position_sql(file_number: str, pos: str) -> str:
    """The procedure's MySQL position text: file.pos.row, each zero-padded to 20."""
    return f"(lpad(({file_number})::text, 20, '0') || '.' || lpad(({pos})::text, 20, '0') || '.' || lpad('0', 20, '0'))"


def fill_target_sql(rel: Relations, rows: int) -> str:
    """M current rows, as a previous sync would have left them."""
    return (
        f"INSERT INTO {rel.target} (customer_id, name, mktsegment, _source_ts, _source_pos,\n"
        "  _kafka_partition, _kafka_offset, _synced_at)\n"
        f"SELECT {key_sql('i')}, 'Customer ' || i, ({SEGMENTS})[1 + i % 5],\n"
        "       TIMESTAMP '2023-11-01' + i * INTERVAL '1 millisecond',\n"
        f"       {position_sql('2', 'i')}, i % {PARTITIONS}, i, now()\n"
        f"FROM generate_series(1, {int(rows)}) AS i"
    )


def batch_events_sql(rel: Relations, events: int, target_rows: int, file_number: int) -> str:
    """Append one refresh of `events` Debezium change events (full envelope, MySQL source
    block) to the stream relation, continuing each partition's offsets."""
    n, m = int(events), int(target_rows)
    pool = max(1, (n * 3) // 10)
    key = (
        f"CASE WHEN j % 20 < 12 THEN 1 + ((j % {pool})::bigint * {STRIDE}) % {m}\n"
        f"          WHEN j % 20 < 17 THEN {m} + 1 + j\n"
        f"          ELSE 1 + (({pool} + j)::bigint * {STRIDE}) % {m} END"
    )
    row = lambda suffix: (  # noqa: E731
        f"jsonb_build_object('CUST_ID', e.id, 'NAME', 'Customer ' || e.k{suffix}, 'MKTSEGMENT', ({SEGMENTS})[1 + (e.k + e.j) % 5])"
    )
    after_suffix = " || ' v' || e.j"
    return (
        "WITH g AS (\n"
        "  SELECT j, CASE WHEN j % 20 < 12 THEN 'u' WHEN j % 20 < 17 THEN 'c' ELSE 'd' END AS op,\n"
        f"         {key} AS k\n"
        f"  FROM generate_series(0, {n - 1}) AS j\n"
        "), e AS (\n"
        f"  SELECT g.j, g.op, g.k, {key_sql('g.k')} AS id, g.k % {PARTITIONS} AS p,\n"
        f"         {BASE_TS_MS} + {file_number}::bigint * 1000000000 + g.j AS ts_ms\n"
        "  FROM g\n"
        "), last AS (\n"
        f"  SELECT kafka_partition, MAX(kafka_offset) AS o FROM {rel.stream} GROUP BY kafka_partition\n"
        ")\n"
        f"INSERT INTO {rel.stream} (kafka_partition, kafka_offset, kafka_timestamp_type, kafka_timestamp,\n"
        "  kafka_key, kafka_headers, refresh_time, payload, raw_value, key_payload)\n"
        "SELECT e.p,\n"
        "       COALESCE(last.o, -1) + ROW_NUMBER() OVER (PARTITION BY e.p ORDER BY e.j),\n"
        "       'C', TIMESTAMP 'epoch' + (e.ts_ms + 300) * INTERVAL '1 millisecond',\n"
        "       convert_to(jsonb_build_object('CUST_ID', e.id)::text, 'UTF8'), NULL,\n"
        "       clock_timestamp()::timestamp,\n"
        "       jsonb_build_object(\n"
        f"         'before', CASE WHEN e.op <> 'c' THEN {row('')} END,\n"
        f"         'after', CASE WHEN e.op <> 'd' THEN {row(after_suffix)} END,\n"
        "         'source', jsonb_build_object('version', '2.7.0.Final', 'connector', 'mysql', 'name', 'salesdb',\n"
        "           'ts_ms', e.ts_ms, 'snapshot', 'false', 'db', 'salesdb', 'sequence', NULL, 'table', 'CUSTOMER',\n"
        f"           'server_id', 223344, 'gtid', NULL, 'file', 'mysql-bin.' || lpad('{file_number}', 6, '0'),\n"
        "           'pos', 154 + e.j * 100, 'row', 0, 'thread', 7, 'query', NULL),\n"
        "         'op', e.op, 'ts_ms', e.ts_ms + 250, 'transaction', NULL),\n"
        "       NULL, jsonb_build_object('CUST_ID', e.id)\n"
        "FROM e LEFT JOIN last ON last.kafka_partition = e.p"
    )


def mark_applied_sql(rel: Relations) -> str:
    """Set the watermark to the end of the stream, as if every retained record had been
    applied by earlier runs (the state the empty-sync measurement needs)."""
    return (
        f"INSERT INTO {rel.watermark} (kafka_partition, last_offset, last_refresh_time, updated_at)\n"
        f"SELECT kafka_partition, MAX(kafka_offset), MAX(refresh_time), now() FROM {rel.stream} GROUP BY kafka_partition\n"
        "ON CONFLICT (kafka_partition) DO UPDATE SET last_offset = EXCLUDED.last_offset,\n"
        "  last_refresh_time = EXCLUDED.last_refresh_time, updated_at = EXCLUDED.updated_at"
    )


def load(wh: Warehouse, rel: Relations, target_rows: int, events: int) -> None:
    """An empty pipeline table filled with a target of `target_rows` rows and one refresh
    of `events` events in the stream, vacuumed and analyzed."""
    reset(wh, rel)
    wh.execute(fill_target_sql(rel, target_rows))
    wh.execute(batch_events_sql(rel, events, target_rows, file_number=3))
    wh.execute("VACUUM ANALYZE")


def reset(wh: Warehouse, rel: Relations) -> None:
    """Empty every relation of the benchmarked table (between workloads, not between repeats)."""
    wh.execute(f"TRUNCATE {rel.target}, {rel.stream}, {rel.stage}, {rel.watermark}, {rel.deleted}")

"""The approaches the generated procedure is measured against. Benchmark baselines, not
product code: each is written from its description, on the same table and workload.

(b) the seed-blog pattern (README, "the usual procedure"): rank by Debezium `ts_ms` over the
    stream, watermark = the target's max(refresh_time), TRUNCATE + DELETE + INSERT;
(c) a JDBC-sink-style per-row apply: INSERT ... ON CONFLICT DO UPDATE / DELETE per event,
    sent from Python in batches of 500 (psycopg executemany, pipelined);
(d) the apply floor: the batch's final rows, already shredded and deduplicated in a plain
    table, applied with DELETE ... USING + INSERT: the least work any merge must do;
(e) a raw COPY of the batch's rows into an empty unlogged table;
(f) the decode floor: one INSERT ... SELECT that reads the batch's events from the stream
    and writes them typed into an empty unlogged table (no ranking, no merge): the least
    any in-warehouse design must spend before it can merge anything.
"""

from __future__ import annotations

import json

from benchmarks.workload import Relations
from sync.warehouse import Warehouse

SCHEMA = '"bench"'
SEED_TARGET = f"{SCHEMA}.seed_customer"
SEED_STAGE = f"{SCHEMA}.seed_customer_stg"
SEED_PROCEDURE = f"{SCHEMA}.seed_sync_customer"
FLOOR = f"{SCHEMA}.floor_customer"
COPY_SINK = f"{SCHEMA}.copy_sink"
DECODED = f"{SCHEMA}.decoded"
DATA_COLUMNS = ("customer_id", "name", "mktsegment")


def shredded_sql(rel: Relations) -> str:
    """Every event of the stream as a typed row (op, data columns, metadata), in plain SQL."""
    pad = lambda e: f"lpad(COALESCE({e}, ''), 20, '0')"  # noqa: E731
    src = "s.payload -> 'source'"
    file_number = f"substring({src} ->> 'file' from '([0-9]+)$')"
    pos, row = f"{src} ->> 'pos'", f"{src} ->> 'row'"
    position = f"{pad(file_number)} || '.' || {pad(pos)} || '.' || {pad(row)}"
    return (
        "SELECT s.payload ->> 'op' AS op,\n"
        "       COALESCE(s.payload -> 'after' ->> 'CUST_ID', s.payload -> 'before' ->> 'CUST_ID') AS customer_id,\n"
        "       s.payload -> 'after' ->> 'NAME' AS name,\n"
        "       s.payload -> 'after' ->> 'MKTSEGMENT' AS mktsegment,\n"
        f"       TIMESTAMP 'epoch' + ({src} ->> 'ts_ms')::bigint * INTERVAL '1 millisecond' AS _source_ts,\n"
        f"       {position} AS _source_pos,\n"
        "       s.kafka_partition AS _kafka_partition, s.kafka_offset AS _kafka_offset\n"
        f"FROM {rel.stream} s"
    )


def digest_sql(table: str) -> str:
    """Row count and an order-independent hash of the data columns of a target table."""
    return (
        "SELECT COUNT(*), COALESCE(SUM(hashtext(customer_id || '|' || COALESCE(name, '') || '|' "
        f"|| COALESCE(mktsegment, ''))::bigint), 0) FROM {table}"
    )


# ---- (b) the seed-blog pattern ---------------------------------------------------------


def prepare_seed(wh: Warehouse, rel: Relations) -> None:
    """Its own target (data columns + refresh_time, same primary key) holding the same rows,
    its staging table, and its procedure."""
    wh.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    wh.execute(f"DROP TABLE IF EXISTS {SEED_TARGET}, {SEED_STAGE}")
    wh.execute(
        f"CREATE TABLE {SEED_TARGET} (customer_id varchar(64) PRIMARY KEY, name varchar(256), "
        "mktsegment varchar(64), refresh_time timestamp)"
    )
    wh.execute(f"INSERT INTO {SEED_TARGET} SELECT customer_id, name, mktsegment, TIMESTAMP '2000-01-01' FROM {rel.target}")
    wh.execute(
        f"CREATE TABLE {SEED_STAGE} (customer_id varchar(64), name varchar(256), mktsegment varchar(64), "
        "ts_ms bigint, op varchar(8), record_rank bigint, refresh_time timestamp)"
    )
    after = lambda f: f"payload -> 'after' ->> '{f}'"  # noqa: E731
    key = "COALESCE(payload -> 'after' ->> 'CUST_ID', payload -> 'before' ->> 'CUST_ID')"
    wh.execute(
        f"CREATE OR REPLACE PROCEDURE {SEED_PROCEDURE}() LANGUAGE plpgsql AS $$\n"
        "DECLARE v_last timestamp;\n"
        "BEGIN\n"
        "  -- Watermark: the newest refresh_time found in the target.\n"
        f"  SELECT COALESCE(MAX(refresh_time), TIMESTAMP '1900-01-01') INTO v_last FROM {SEED_TARGET};\n"
        f"  TRUNCATE {SEED_STAGE};\n"
        "  -- Newer records, ranked per key by Debezium processing time (ts_ms).\n"
        f"  INSERT INTO {SEED_STAGE}\n"
        f"  SELECT {key}, {after('NAME')}, {after('MKTSEGMENT')}, (payload ->> 'ts_ms')::bigint, payload ->> 'op',\n"
        f"         RANK() OVER (PARTITION BY {key} ORDER BY (payload ->> 'ts_ms')::bigint DESC), refresh_time\n"
        f"  FROM {rel.stream} WHERE refresh_time > v_last;\n"
        f"  DELETE FROM {SEED_TARGET} t USING {SEED_STAGE} s WHERE t.customer_id = s.customer_id;\n"
        f"  INSERT INTO {SEED_TARGET}\n"
        f"  SELECT customer_id, name, mktsegment, refresh_time FROM {SEED_STAGE} WHERE record_rank = 1 AND op <> 'd';\n"
        "END $$"
    )


def run_seed(wh: Warehouse) -> None:
    wh.execute(f"CALL {SEED_PROCEDURE}()")


# ---- (c) per-row upserts ---------------------------------------------------------------


def fetch_events(wh: Warehouse, rel: Relations) -> list[tuple[int, int, str]]:
    """The batch as a sink consumer receives it: (partition, offset, JSON text of the
    value), in partition then offset order. Decoding the JSON is part of the timed apply."""
    return wh.query(f"SELECT kafka_partition, kafka_offset, payload::text FROM {rel.stream} ORDER BY 1, 2")


def run_per_row(wh: Warehouse, rel: Relations, events: list[tuple[int, int, str]], batch: int) -> None:
    """Each event is decoded and becomes one statement; runs of the same statement within
    a batch go to the server in one pipelined executemany."""
    upsert = (
        f"INSERT INTO {rel.target} (customer_id, name, mktsegment, _source_ts, _kafka_partition, _kafka_offset, _synced_at)\n"
        "VALUES (%s, %s, %s, TIMESTAMP 'epoch' + %s * INTERVAL '1 millisecond', %s, %s, clock_timestamp())\n"
        "ON CONFLICT (customer_id) DO UPDATE SET name = EXCLUDED.name, mktsegment = EXCLUDED.mktsegment,\n"
        "  _source_ts = EXCLUDED._source_ts, _kafka_partition = EXCLUDED._kafka_partition,\n"
        "  _kafka_offset = EXCLUDED._kafka_offset, _synced_at = EXCLUDED._synced_at"
    )
    delete = f"DELETE FROM {rel.target} WHERE customer_id = %s"
    for start in range(0, len(events), batch):
        runs: list[tuple[str, list[tuple]]] = []
        for partition, offset, text in events[start : start + batch]:
            value = json.loads(text)
            if value["op"] == "d":
                sql, params = delete, (value["before"]["CUST_ID"],)
            else:
                row = value["after"]
                sql = upsert
                params = (row["CUST_ID"], row["NAME"], row["MKTSEGMENT"], value["source"]["ts_ms"], partition, offset)
            if runs and runs[-1][0] == sql:
                runs[-1][1].append(params)
            else:
                runs.append((sql, [params]))
        wh.execute_batches(runs)


# ---- (d) the apply floor -----------------------------------------------------------------


def prepare_floor(wh: Warehouse, rel: Relations) -> None:
    """The final row of every key in the batch, shredded and deduplicated, in a plain table."""
    wh.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    wh.execute(f"DROP TABLE IF EXISTS {FLOOR}")
    wh.execute(
        f"CREATE TABLE {FLOOR} AS\n"
        f"SELECT DISTINCT ON (customer_id) * FROM ({shredded_sql(rel)}) x\n"
        "ORDER BY customer_id, _source_pos DESC"
    )
    wh.execute(f"ANALYZE {FLOOR}")


def run_floor(wh: Warehouse, rel: Relations) -> None:
    cols = "customer_id, name, mktsegment, _source_ts, _source_pos, _kafka_partition, _kafka_offset"
    wh.execute(f"DELETE FROM {rel.target} t USING {FLOOR} f WHERE t.customer_id = f.customer_id")
    wh.execute(f"INSERT INTO {rel.target} ({cols}, _synced_at)\nSELECT {cols}, clock_timestamp() FROM {FLOOR} WHERE op <> 'd'")


# ---- (e) raw COPY ----------------------------------------------------------------------


def prepare_copy(wh: Warehouse, rel: Relations) -> bytes:
    """The batch's rows (one per event, typed) in COPY text format, and an empty sink."""
    wh.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    wh.execute(f"DROP TABLE IF EXISTS {COPY_SINK}")
    wh.execute(f"CREATE UNLOGGED TABLE {COPY_SINK} AS SELECT * FROM ({shredded_sql(rel)}) x WITH NO DATA")
    return wh.copy_out(f"COPY ({shredded_sql(rel)}) TO STDOUT")


def run_copy(wh: Warehouse, data: bytes) -> None:
    with wh.copy_from(f"COPY {COPY_SINK} FROM STDIN") as copy:
        copy.write(data)


# ---- (f) the decode floor ----------------------------------------------------------------


def prepare_decode(wh: Warehouse, rel: Relations) -> None:
    """An empty unlogged table of the decoded events' types."""
    wh.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    wh.execute(f"DROP TABLE IF EXISTS {DECODED}")
    wh.execute(f"CREATE UNLOGGED TABLE {DECODED} AS SELECT * FROM ({shredded_sql(rel)}) x WITH NO DATA")


def run_decode(wh: Warehouse, rel: Relations) -> None:
    wh.execute(f"INSERT INTO {DECODED}\n{shredded_sql(rel)}")

"""The backfill of a query-based topic (format = "row", order_by = "column:<field>"): it
reads the topic's rows (the S3 sink archive, plain snapshots) and gives each the position
the stream gives it, so the handover to the stream compares like with like."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from pyspark.sql import functions as F

from backfill.normalise import column_position as spark_position
from sync.config import parse_pipeline
from sync.local.stream import ingest_file
from sync.operations.backfill import run_backfill
from sync.operations.runner import deploy, sync
from sync.sql.dialect import PostgresDialect
from sync.sql.envelope import column_position
from sync.warehouse import connect
from tests.helpers import EXAMPLES, fresh_database

pytestmark = pytest.mark.spark
EXAMPLE = EXAMPLES / "jdbc_pagila"
META = "_source_ts, _source_pos, _kafka_partition, _kafka_offset"


def _pipeline():
    import tomllib

    return parse_pipeline(tomllib.loads((EXAMPLE / "pipeline.toml").read_text()))


# Order column values as a topic may carry them, the garbage a topic may carry besides.
VALUES = [
    1487151930000,
    0,
    7,
    -5,
    1.5,
    1e3,
    10**19,
    10**20,
    10**21,
    "123",
    "2021-08-13T00:43:38.508Z",
    "2021-08-13 00:43:38",
    "2021-08-13T00:43:38.123456789",
    "2021-08-13T00:43:38.5",
    "2021-08-13T00:43:38+02:00",
    "2021-08-13",
    "2021-08-13 00:43:38\n",
    "1487151930000\n",
    " 42",
    "soon",
    "",
    None,
    True,
    {"ms": 1},
    [1],
]


def test_the_backfill_computes_the_position_the_sql_computes(wh, spark):
    """One rule in two engines: the SQL's `column_position` on the warehouse, the Spark
    job's on the same JSON values."""
    d = PostgresDialect()
    docs = [json.dumps({"v": v}) for v in VALUES]
    sql = f"SELECT {column_position(d, d.json_get_text('x.doc', 'v'))} FROM (SELECT CAST(%s AS jsonb) AS doc) x"
    expected = [wh.scalar(sql, (doc,)) for doc in docs]
    df = spark.createDataFrame([(i, doc) for i, doc in enumerate(docs)], "i int, doc string")
    text = F.from_json("doc", "v string")["v"]
    got = [r.p for r in df.select("i", spark_position(text).alias("p")).orderBy("i").collect()]
    assert got == expected
    assert expected[0] == "00000001487151930000" and expected[10] == "20210813004338508000"
    assert all(p is None or (len(p) == 20 and p.isdigit()) for p in expected)


def test_the_topic_archive_gives_the_same_table_as_the_stream(pg_server_dsn, spark, tmp_path):
    """The example's messages (re-polled windows, a tie, a late copy, a tombstone, a bad
    time), once through ingest + incremental_sync, once through the backfill: the same
    winners, values, positions and rejects."""
    events = tmp_path / "address.jsonl"
    events.write_text("".join((EXAMPLE / "events" / f).read_text() for f in ("address-1.jsonl", "address-2.jsonl")))
    pipeline = _pipeline()
    results = []
    for label in ("stream", "backfill"):
        with fresh_database(pg_server_dsn, f"row_{label}_{id(tmp_path) % 100000}") as dsn:
            wh = connect(dsn)
            try:
                deploy(wh, pipeline, "test")
                if label == "stream":
                    ingest_file(wh, pipeline, "address", events)
                    sync(wh, pipeline, ["address"])
                    rejects = sorted(r for (r,) in wh.query("SELECT reason FROM pagila.sync_quarantine"))
                else:
                    result = run_backfill(
                        wh, pipeline, "address", str(events), "debezium", spark=spark, rejects_dir=tmp_path / "rj"
                    )
                    rejects = sorted(r["reason"] for r in result.rejects_sample)
                target = wh.query(
                    f"SELECT address_id, address2, district, phone, last_update, {META} FROM pagila.address ORDER BY 1"
                )
                results.append((target, rejects))
            finally:
                wh.close()
    assert [r[0] for r in results[0][0]] == [100, 101, 102, 104]
    assert results[0][1] == ["field last_update does not convert from io.debezium.time.Timestamp to timestamp"]
    assert results[1] == results[0]


T0, T1, T2 = 1487151930000, 1628815418508, 1628815420117


def _ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).replace(tzinfo=None)


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_snapshot_rows_hand_over_to_the_stream_by_the_column(wh, spark, tmp_path, fmt):
    """The stream holds 100 at T1 and 101 at T0. A snapshot (JSON rows in the topic's
    encoding, or Parquet with a timestamp column) holds 100 at T0 (older: the stream's row
    stays), 101 at T0 with other values (the same position: the stream's row stays), 102
    (new: loaded) and 104 at T2, newer than the stream's T1 (replaces it)."""
    pipeline = _pipeline()
    deploy(wh, pipeline, "test")
    stream = tmp_path / "stream.jsonl"
    rows = [(100, "stream", T1), (101, "stream", T0), (104, "stream", T1)]
    stream.write_text("".join(json.dumps({"value": _address(*r)}) + "\n" for r in rows))
    ingest_file(wh, pipeline, "address", stream)
    sync(wh, pipeline, ["address"])

    snapshot = [(100, "snapshot", T0), (101, "snapshot", T0), (102, "snapshot", T0), (104, "snapshot", T2)]
    path = tmp_path / f"snapshot.{fmt}"
    if fmt == "json":
        path.write_text("".join(json.dumps(_address(*r)) + "\n" for r in snapshot))
    else:
        df = spark.createDataFrame(
            [{**_address(*r), "last_update": _ms(r[2])} for r in snapshot],
            "address_id int, address string, address2 string, district string, city_id int, postal_code string, "
            "phone string, last_update timestamp_ntz",
        )
        df.write.parquet(str(path))
    result = run_backfill(wh, pipeline, "address", str(path), fmt, snapshot_time=datetime(2021, 8, 14), spark=spark)
    assert result.rejected == 0
    assert wh.query("SELECT address_id, address2, _source_pos FROM pagila.address ORDER BY 1") == [
        (100, "stream", f"{T1:020d}"),
        (101, "stream", f"{T0:020d}"),
        (102, "snapshot", f"{T0:020d}"),
        (104, "snapshot", f"{T2:020d}"),
    ]


def _address(address_id: int, address2: str, last_update: int) -> dict:
    return {
        "address_id": address_id,
        "address": f"{address_id} Main St",
        "address2": address2,
        "district": "Tete",
        "city_id": 534,
        "postal_code": "71986",
        "phone": "817248913162",
        "last_update": last_update,
    }

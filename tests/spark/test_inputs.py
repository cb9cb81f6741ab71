"""Snapshot inputs: Debezium events (same result as the SQL path), the S3 sink layout
read from S3 (moto) with exact offsets, semantic types, and rejected rows."""

from __future__ import annotations

import gzip
import json
from datetime import date, datetime
from decimal import Decimal

import pytest

from sync.debezium.events import ChangeStream
from sync.local.stream import ingest_file
from sync.operations.backfill import run_backfill
from sync.operations.runner import deploy, sync
from tests.helpers import EXAMPLES, fresh_database, make_pipeline

pytestmark = pytest.mark.spark
EVENTS = EXAMPLES / "salesdb" / "events"
META = "_source_ts, _source_pos, _kafka_partition, _kafka_offset"


def _generated_events() -> str:
    """Two partitions, the schemas.enable wrapper, updates, a delete and a re-insert."""
    from sync.debezium.events import MySqlSource

    cs = ChangeStream(["CUST_ID"], MySqlSource(), partitions=2, with_schema=True)
    rows = [{"CUST_ID": f"G{i}", "NAME": f"n{i}", "MKTSEGMENT": "S"} for i in range(6)]
    records = [cs.insert(r) for r in rows]
    records += [cs.update(None, {**r, "NAME": r["NAME"] + "+"}) for r in rows[::2]]
    records += [cs.delete(rows[1]), cs.tombstone(rows[1]), cs.delete(rows[2]), cs.insert({**rows[2], "NAME": "back"})]
    return "".join(json.dumps(r) + "\n" for r in records)


@pytest.mark.parametrize(
    ("table", "files", "columns"),
    [
        ("customer", ["customer-1.jsonl", "customer-2.jsonl", "customer-3.jsonl"], "customer_id, name, mktsegment"),
        ("orders", ["orders-1.jsonl"], "order_id, customer_id, status, total, placed_at, _deleted"),
        ("customer", [], "customer_id, name, mktsegment"),
    ],
    ids=["customer", "orders", "generated-wrapped-2-partitions"],
)
def test_debezium_events_give_the_same_table_as_the_stream(
    pg_server_dsn, spark, tmp_path, example_pipeline, table, files, columns
):
    """The same events, once through ingest + incremental_sync and once through the
    backfill: same winners, same values, same metadata, same rejects."""
    from sync.warehouse import connect

    pipeline = example_pipeline
    events = tmp_path / "events.jsonl"
    events.write_text("".join((EVENTS / f).read_text() for f in files) if files else _generated_events())
    results = []
    for label in ("stream", "backfill"):
        with fresh_database(pg_server_dsn, f"eq_{label}_{table}_{id(tmp_path) % 100000}") as dsn:
            wh = connect(dsn)
            try:
                deploy(wh, pipeline, "test")
                if label == "stream":
                    ingest_file(wh, pipeline, table, events)
                    sync(wh, pipeline, [table])
                    rejects = sorted(r for (r,) in wh.query("SELECT reason FROM cdc.sync_quarantine"))
                else:
                    result = run_backfill(wh, pipeline, table, str(events), "debezium", spark=spark, rejects_dir=tmp_path / "rj")
                    rejects = sorted(r["reason"] for r in result.rejects_sample)
                results.append((wh.query(f"SELECT {columns}, {META} FROM cdc.{table} ORDER BY 1"), rejects))
            finally:
                wh.close()
    assert results[0][0], "the scenario must load rows"
    assert results[1] == results[0]


UNWRAP = make_pipeline(
    """
[[tables]]
name = "items"
topic = "pg.public.items"
format = "debezium-unwrap"
order_by = "mysql-binlog"
primary_key = ["id"]
columns = [
  { name = "id", type = "integer" },
  { name = "label", type = "varchar(8)" },
  { name = "price", type = "decimal(10,2)" },
]
"""
)


def test_unwrapped_events_latest_by_position_with_deletes(wh, spark, tmp_path):
    deploy(wh, UNWRAP, "test")

    def ev(i, label, price, pos, deleted="false"):
        return {
            "id": i,
            "label": label,
            "price": price,
            "__deleted": deleted,
            "__file": "mysql-bin.000003",
            "__pos": pos,
            "__row": 0,
            "__source_ts_ms": 1_700_000_000_000 + pos,
        }

    lines = [
        {"schema": {"type": "struct"}, "payload": ev(1, "new", "2.50", 300)},  # later LSN, earlier in the file
        ev(1, "old", "1.00", 200),
        ev(2, "two", 3, 210),
        ev(2, "two", 3, 400, deleted="true"),
        ev(3, "three", "12345678.125", 220),
    ]
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    result = run_backfill(wh, UNWRAP, "items", str(path), "debezium", spark=spark)
    assert wh.query('SELECT id, label, price, _source_pos FROM cdc."items" ORDER BY 1') == [
        (1, "new", Decimal("2.50"), f"{3:020d}.{300:020d}.{0:020d}"),
        (3, "three", Decimal("12345678.13"), f"{3:020d}.{220:020d}.{0:020d}"),
    ]
    assert wh.query('SELECT id, _source_ts FROM cdc."items__deleted"') == [(2, datetime(2023, 11, 14, 22, 13, 20, 400000))]
    assert (result.loaded, result.deleted, result.rejected) == (2, 1, 0)


def test_s3_sink_layout_recovers_every_offset(deployed, spark, s3_server):
    wh, pipeline = deployed
    topic = "salesdb.salesdb.CUSTOMER"
    cs = ChangeStream(["CUST_ID"])
    files = {(0, 0): 3, (0, 3): 4, (1, 0): 2, (1, 2): 1}  # (partition, start offset) -> records
    expected = {}
    for (part, start), n in files.items():
        lines = []
        for i in range(n):
            key = f"K{part}-{start + i}"
            expected[key] = (part, start + i)
            lines.append(json.dumps(cs.insert({"CUST_ID": key, "NAME": "n", "MKTSEGMENT": "m"})["value"]))
        body = ("\n".join(lines) + "\n").encode()
        name = f"topics/{topic}/partition={part}/{topic}+{part}+{start:010d}.json"
        if start:  # some files gzip-compressed, as the sink writes them with compression enabled
            body, name = gzip.compress(body), name + ".gz"
        s3_server.put_object(Bucket="lake", Key=f"cdc/{name}", Body=body)
    result = run_backfill(wh, pipeline, "customer", "s3://lake/cdc/", "s3-sink", spark=spark)
    got = {k: (p, o) for k, p, o in wh.query('SELECT customer_id, _kafka_partition, _kafka_offset FROM cdc."customer"')}
    assert got == expected
    assert result.loaded == 10


def test_download_takes_the_folder_or_the_object_the_url_names(s3_server, tmp_path):
    from sync.aws import s3

    for key in ("snap/part-0.parquet", "snap/p=1/part-1.parquet", "snap-old/part-9.parquet", "one.json"):
        s3_server.put_object(Bucket="lake", Key=key, Body=key.encode())
    assert s3.download_prefix(s3.client(), "s3://lake/snap", tmp_path / "a") == 2
    assert sorted(str(p.relative_to(tmp_path / "a")) for p in (tmp_path / "a").rglob("*.parquet")) == [
        "p=1/part-1.parquet",
        "part-0.parquet",
    ]
    assert s3.download_prefix(s3.client(), "s3://lake/one.json", tmp_path / "b") == 1
    assert (tmp_path / "b" / "one.json").read_bytes() == b"one.json"
    with pytest.raises(FileNotFoundError, match="no objects under s3://lake/sna"):
        s3.download_prefix(s3.client(), "s3://lake/sna", tmp_path / "c")


def test_staging_upload_manifest_and_cleanup(s3_server, tmp_path):
    from sync.aws import s3

    parts = []
    for i in range(3):
        p = tmp_path / f"part-0000{i}.parquet"
        p.write_bytes(b"x" * (10 + i))
        parts.append(p)
    staged = s3.upload_for_copy(s3.client(), parts, "s3://lake/staging/customer/")
    manifest = json.loads(s3_server.get_object(Bucket="lake", Key="staging/customer/manifest.json")["Body"].read())
    assert manifest["entries"] == [
        {"url": f"s3://lake/staging/customer/part-0000{i}.parquet", "mandatory": True, "meta": {"content_length": 10 + i}}
        for i in range(3)
    ]
    assert staged.manifest_url == "s3://lake/staging/customer/manifest.json"
    s3.delete_keys(s3.client(), staged.bucket, staged.keys)
    assert s3.list_objects(s3.client(), "s3://lake/staging/") == []


SEMANTIC = make_pipeline(
    """
[[tables]]
name = "typed"
topic = "db.typed"
primary_key = ["id"]
columns = [
  { name = "id", type = "bigint" },
  { name = "d", type = "date", semantic = "io.debezium.time.Date" },
  { name = "ts", type = "timestamp", semantic = "io.debezium.time.Timestamp" },
  { name = "ts6", type = "timestamp", semantic = "io.debezium.time.MicroTimestamp" },
  { name = "zts", type = "timestamptz", semantic = "io.debezium.time.ZonedTimestamp" },
  { name = "amount", type = "decimal(8,2)" },
  { name = "flag", type = "boolean" },
  { name = "note", type = "varchar(4)" },
  { name = "price", type = "decimal(10,2)", semantic = "org.apache.kafka.connect.data.Decimal", scale = 2 },
  { name = "at", type = "time", semantic = "io.debezium.time.MicroTime" },
]
"""
)


def test_semantic_types_and_rejects(wh, spark, tmp_path):
    deploy(wh, SEMANTIC, "test")
    good = {
        "id": 1,
        "d": 19439,
        "ts": 1679581805123,
        "ts6": 1679581805123456,
        "zts": "2023-03-23T22:00:10.123456Z",
        "amount": "10.255",
        "flag": 1,
        "note": "é",
        "price": "C+o=",
        "at": 36803000000,
    }
    bad = [
        {**good, "id": 2, "amount": "1000000.00"},  # 7 integer digits do not fit decimal(8,2)
        {**good, "id": 3, "note": "ééé"},  # 6 bytes: varchar lengths are bytes
        {**good, "id": 4, "flag": 2},
        {**good, "id": 6, "flag": "true"},  # text is not a boolean, as in the SQL path
        {**good, "id": 7, "price": 40.5},  # a JSON number is not Connect Decimal bytes: the SQL quarantines it too
        {**good, "id": 8, "price": "not base64!"},
        {**good, "id": 5, "d": "soon"},
        {**good, "id": None},
    ]
    good_too = {**good, "id": 9, "amount": 12.5, "flag": True, "note": None}  # JSON boolean and numbers
    path = tmp_path / "typed.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in [good, good_too, *bad]))
    result = run_backfill(
        wh, SEMANTIC, "typed", str(path), "json", datetime(2024, 1, 1), spark=spark, rejects_dir=tmp_path / "rejects"
    )
    wh.execute("SET TIME ZONE 'UTC'")
    times = (
        date(2023, 3, 23),
        datetime(2023, 3, 23, 14, 30, 5, 123000),
        datetime(2023, 3, 23, 14, 30, 5, 123456),
        "2023-03-23 22:00:10.123456+00",
    )
    assert wh.query('SELECT id, d, ts, ts6, zts::text, amount, flag, note, price, at::text FROM cdc."typed" ORDER BY 1') == [
        (1, *times, Decimal("10.26"), True, "é", Decimal("30.50"), "10:13:23"),
        (9, *times, Decimal("12.50"), True, None, Decimal("30.50"), "10:13:23"),
    ]
    assert result.rejected == 8
    reasons = sorted(
        json.loads(line)["reason"] for f in (tmp_path / "rejects").glob("*.json") for line in f.read_text().splitlines()
    )
    assert reasons == [
        "field amount does not convert to decimal(8,2)",
        "field d does not convert from io.debezium.time.Date to date",
        "field flag does not convert to boolean",
        "field flag does not convert to boolean",
        "field note does not convert to varchar(4)",
        "field price does not convert from org.apache.kafka.connect.data.Decimal to decimal(10,2)",
        "field price does not convert from org.apache.kafka.connect.data.Decimal to decimal(10,2)",
        "primary key field id is missing or not a bigint",
    ]
    # The sample shown by the CLI: five of the written rejects, every field present (a flat
    # snapshot has no Kafka position, so those are None).
    assert len(result.rejects_sample) == 5
    for sample in result.rejects_sample:
        assert (sample["_kafka_partition"], sample["_kafka_offset"]) == (None, None)
        assert sample["reason"] in reasons and json.loads(sample["record"]) in [good, good_too, *bad]

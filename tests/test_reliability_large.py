"""Large batches: one sync over a million pending records, and a table of 200 columns."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from sync.local.stream import ingest_file
from sync.operations.runner import deploy, status, sync
from tests.cdc_model import TopicModel
from tests.helpers import make_pipeline
from tests.reliability_support import account_table, normalised, reliability_counts, target_rows, write_jsonl  # noqa: F401

MILLION = 1_000_000
KEYS = 100_000


def _peak_rss_mb(pid: int) -> float | None:
    """Peak resident memory of a server backend (Linux), for the figures."""
    status_file = Path(f"/proc/{pid}/status")
    if not status_file.exists():
        return None
    for line in status_file.read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return None


@pytest.mark.slow
def test_one_sync_over_a_million_pending_records(wh, reliability_counts):
    pipeline = make_pipeline(account_table())
    table = pipeline.tables[0]
    deploy(wh, pipeline, "test")
    # Ten events per key, written by SQL for speed. Odd keys: the latest position is the
    # last offset. Even keys: positions run against the offsets, so the FIRST offset is
    # the newest change, and only source ordering gets them right.
    wh.execute(
        """
        INSERT INTO cdc."account__stream" (kafka_partition, kafka_offset, kafka_timestamp_type, kafka_timestamp,
                                           refresh_time, payload, key_payload)
        SELECT i %% 4, i / 4, 'C', TIMESTAMP '2026-01-01', TIMESTAMP '2026-01-01',
               jsonb_build_object(
                 'op', 'u', 'before', NULL,
                 'after', jsonb_build_object('ID', i %% %(keys)s, 'NAME', 'n' || i, 'BALANCE', (i %% 1000) / 100.0,
                                             'ACTIVE', i %% 3 = 0),
                 'source', jsonb_build_object('file', 'mysql-bin.000001', 'row', 0, 'ts_ms', 1700000000000 + i,
                                              'pos', CASE WHEN i %% 2 = 0 THEN 10000000 - i ELSE i END)),
               jsonb_build_object('ID', i %% %(keys)s)
        FROM generate_series(0, %(n)s - 1) AS i
        """,
        {"keys": KEYS, "n": MILLION},
    )
    (pending,) = status(wh, pipeline)
    assert pending.pending == MILLION  # what `status` shows before the long call
    backend = int(wh.scalar("SELECT pg_backend_pid()"))
    started = time.perf_counter()
    (run,) = sync(wh, pipeline, [table.name])
    elapsed = time.perf_counter() - started
    assert run.status == "ok", run.error
    assert (run.events_read, run.upserted, run.superseded) == (MILLION, KEYS, MILLION - KEYS)
    wrong = wh.scalar(
        "SELECT COUNT(*) FROM cdc.\"account\" WHERE name <> 'n' || CASE WHEN id %% 2 = 0 THEN id ELSE %s + id END",
        (MILLION - KEYS,),
    )
    assert wrong == 0
    assert wh.scalar('SELECT COUNT(*) FROM cdc."account"') == KEYS
    (after,) = status(wh, pipeline)
    assert after.pending == 0
    reliability_counts["large batch: events in one sync"] = MILLION
    reliability_counts["large batch: seconds"] = round(elapsed, 1)
    peak = _peak_rss_mb(backend)
    if peak is not None:
        reliability_counts["large batch: peak backend memory MB"] = round(peak)


def test_a_table_of_200_columns(wh, tmp_path, reliability_counts):
    types = ["bigint", "varchar(20)", "decimal(12,3)", "boolean", "double", "smallint", "integer"]
    columns = ",\n".join(f'  {{ name = "C{i:03d}", type = "{types[i % len(types)]}" }}' for i in range(1, 200))
    pipeline = make_pipeline(
        '[[tables]]\nname = "wide"\ntopic = "db.wide"\nprimary_key = ["ID"]\norder_by = "mysql-binlog"\n'
        f'columns = [\n  {{ name = "ID", type = "bigint", target = "id" }},\n{columns}\n]\n'
    )
    table = pipeline.tables[0]
    assert len(table.columns) == 200
    deploy(wh, pipeline, "test")
    rng = random.Random(200)

    def value(i: int):
        kind = types[i % len(types)]
        if rng.random() < 0.1:
            return None
        return {
            "bigint": rng.randint(-(2**40), 2**40),
            "varchar(20)": f"v{rng.randint(0, 10**6)}'x",
            "decimal(12,3)": round(rng.uniform(-1e6, 1e6), 3),
            "boolean": rng.random() < 0.5,
            "double": rng.uniform(-1e9, 1e9),
            "smallint": rng.randint(-32768, 32767),
            "integer": rng.randint(-(2**31), 2**31 - 1),
        }[kind]

    records = []
    for n in range(300):
        key = rng.randrange(50)
        after = {"ID": key, **{f"C{i:03d}": value(i) for i in range(1, 200)}}
        op = "d" if rng.random() < 0.1 else "u"
        event = {
            "op": op,
            "before": after if op == "d" else None,
            "after": None if op == "d" else after,
            "source": {"file": "mysql-bin.000002", "pos": 100 + n, "row": 0},
        }
        records.append({"partition": 0, "offset": n, "key": {"ID": key}, "value": event})
    ingest_file(wh, pipeline, "wide", write_jsonl(records, tmp_path / "wide.jsonl"))
    (run,) = sync(wh, pipeline, ["wide"])
    assert run.status == "ok", run.error
    assert run.quarantined == 0
    assert target_rows(wh, pipeline, table) == normalised(TopicModel(table).add(records).rows())
    reliability_counts["histories checked"] += 1

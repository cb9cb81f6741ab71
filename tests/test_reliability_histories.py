"""Random histories, synced in random batch splits, end exactly as the reference model says;
and replays (a recreated stream re-read from offset 0, a connector re-emitting a suffix at
new offsets, a lost watermark) change nothing."""

from __future__ import annotations

import random

import pytest

from sync.local.stream import ingest_file
from sync.operations.runner import deploy, sync
from sync.sql.dialect import quote_ident
from sync.sql.names import table_names
from tests.cdc_model import expected_rows
from tests.helpers import make_pipeline
from tests.reliability_support import (  # noqa: F401 (reliability_counts is a fixture)
    History,
    account_table,
    assert_consistent,
    normalised,
    reliability_counts,
    target_rows,
    write_jsonl,
)

MODES = [("hard", "mysql-binlog"), ("soft", "mysql-binlog"), ("hard", "kafka"), ("soft", "kafka")]


def _setup(wh, delete_mode: str, order_by: str):
    pipeline = make_pipeline(account_table(delete_mode=delete_mode, order_by=order_by))
    deploy(wh, pipeline, "test")
    return pipeline, pipeline.tables[0]


def _ingest(wh, pipeline, records, tmp_path, name="batch.jsonl"):
    return ingest_file(wh, pipeline, "account", write_jsonl(records, tmp_path / name))


def _sync_ok(wh, pipeline):
    (run,) = sync(wh, pipeline, ["account"])
    assert run.status == "ok", run.error
    return run


@pytest.mark.parametrize("delete_mode,order_by", MODES)
@pytest.mark.parametrize("seed", range(3))
def test_history_in_random_batches_matches_the_model(wh, tmp_path, delete_mode, order_by, seed, reliability_counts):
    pipeline, table = _setup(wh, delete_mode, order_by)
    history = History(seed, keys=40)
    rng = random.Random(seed)
    for _ in range(6):
        _ingest(wh, pipeline, history.events(rng.randint(1, 120)), tmp_path)
        # Sometimes two refreshes land before a sync, sometimes a sync finds nothing new.
        if rng.random() < 0.7:
            _sync_ok(wh, pipeline)
            assert_consistent(wh, pipeline, table, history.records)
    _sync_ok(wh, pipeline)
    assert assert_consistent(wh, pipeline, table, history.records) == len(history.records)
    reliability_counts["histories checked"] += 1


def _applied_history(wh, tmp_path, delete_mode, order_by, seed=7):
    pipeline, table = _setup(wh, delete_mode, order_by)
    history = History(seed, keys=30)
    for _ in range(3):
        _ingest(wh, pipeline, history.events(150), tmp_path)
        _sync_ok(wh, pipeline)
    before = target_rows(wh, pipeline, table)
    assert before == normalised(expected_rows(history.records, table))
    return pipeline, table, history, before


@pytest.mark.parametrize("delete_mode", ["hard", "soft"])
def test_recreated_stream_rereads_the_topic_from_offset_zero(wh, tmp_path, delete_mode, reliability_counts):
    pipeline, table, history, before = _applied_history(wh, tmp_path, delete_mode, "mysql-binlog")
    n = table_names(pipeline, table)
    # A recreated streaming MV starts empty and re-reads every record, offsets unchanged.
    wh.execute(f"DELETE FROM {quote_ident(n.schema)}.{quote_ident(n.stream)}")
    _ingest(wh, pipeline, history.records, tmp_path)
    run = _sync_ok(wh, pipeline)
    assert (run.events_read, run.upserted, run.deleted, run.quarantined) == (0, 0, 0, 0)
    assert target_rows(wh, pipeline, table) == before
    reliability_counts["histories checked"] += 1


@pytest.mark.parametrize("delete_mode", ["hard", "soft"])
@pytest.mark.parametrize("order_by", ["mysql-binlog", "kafka"])
def test_connector_restart_re_emits_a_suffix_at_new_offsets(wh, tmp_path, delete_mode, order_by, reliability_counts):
    pipeline, table, history, before = _applied_history(wh, tmp_path, delete_mode, order_by)
    # At-least-once delivery: a restarted connector re-sends its last events; Kafka gives
    # them new offsets after the ones already applied.
    suffix = [dict(r) for r in history.records[-120:]]
    for r in suffix:
        r["offset"] = history.next_offset[r["partition"]]
        history.next_offset[r["partition"]] += 1
    _ingest(wh, pipeline, suffix, tmp_path)
    run = _sync_ok(wh, pipeline)
    assert run.events_read == len(suffix)
    if order_by != "kafka":
        # With a source order, every re-sent event is recognised as already applied.
        assert run.upserted == run.deleted == 0
    assert target_rows(wh, pipeline, table) == before
    assert normalised(expected_rows(history.records + suffix, table)) == before
    reliability_counts["histories checked"] += 1


@pytest.mark.parametrize("delete_mode", ["hard", "soft"])
def test_lost_watermark_replays_everything_without_regressing(wh, tmp_path, delete_mode, reliability_counts):
    pipeline, table, history, before = _applied_history(wh, tmp_path, delete_mode, "mysql-binlog")
    n = table_names(pipeline, table)
    wh.execute(f"DELETE FROM {quote_ident(n.schema)}.{quote_ident(n.watermark)}")
    run = _sync_ok(wh, pipeline)
    assert run.events_read == len(history.records)
    assert run.upserted == run.deleted == 0
    assert target_rows(wh, pipeline, table) == before
    reliability_counts["histories checked"] += 1

"""The backfill takes a key's latest event as the procedure does when the topic's
partition count grew between its records (tests/test_partition_increase.py): offsets
within a partition, the record timestamp across partitions ("Kafka only provides a total
order over records within a partition, not between different partitions in a topic",
Kafka documentation, Introduction)."""

from __future__ import annotations

import json

import pytest

from sync.operations.backfill import run_backfill
from sync.operations.runner import deploy
from tests.helpers import make_pipeline
from tests.test_partition_increase import KEY, NEW, OLD, at, full

pytestmark = pytest.mark.spark

KAFKA_ORDER = make_pipeline(
    '[[tables]]\nname = "acc"\ntopic = "topic.acc"\nprimary_key = ["id"]\norder_by = "kafka"\n'
    'columns = [{ name = "id", type = "integer" }, { name = "balance", type = "integer" }, '
    '{ name = "note", type = "varchar(64)" }]\n'
)


@pytest.mark.parametrize("step_back", [False, True], ids=["clock-forward", "clock-step-back"])
def test_backfill_partition_increase_kafka_order_newer_update_wins(wh, spark, tmp_path, step_back):
    """Record lines with partition, offset and timestamp: the insert in the key's old
    partition, two updates in its new, lower one (the second stamped earlier when the
    producer's clock stepped back: the offsets decide within a partition)."""
    deploy(wh, KAFKA_ORDER, "test")
    later = 12 if step_back else 30
    records = [
        at(full("c", KEY, 10, 100), OLD, 15),
        at(full("u", KEY, 20, 200), NEW, 20),
        at(full("u", KEY, 30, 300), NEW, later),
    ]
    offsets = {OLD: 0, NEW: 0}
    lines = []
    for r in records:
        lines.append({**r, "offset": offsets[r["partition"]]})
        offsets[r["partition"]] += 1
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    run_backfill(wh, KAFKA_ORDER, "acc", str(path), "debezium", spark=spark)
    assert wh.query('SELECT id, balance, _kafka_partition, _kafka_offset FROM cdc."acc"') == [(KEY, 30, NEW, 1)]

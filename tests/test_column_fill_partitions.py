"""A column added with `revision` + `deploy` after the topic's partition count grew.

"If data is partitioned by `hash(key) % number_of_partitions`, the default partitioner's
mapping logic changes when the partition count increases. This means that messages with
the same key may be routed to different partitions after the expansion, potentially
affecting message ordering guarantees for existing keys" (Apache Kafka documentation,
Basic Kafka Operations, "Modifying topics"; KAFKA-20030). Here the key's later records land
in a LOWER partition than its earlier ones (tests/kafka_partitioner.py, 3 to 4 partitions),
and "Kafka only provides a total order over records within a partition, not between
different partitions in a topic" (Kafka documentation, Introduction): across partitions
the record timestamp is the evidence (CreateTime, "the timestamp ... assigned by the
producer", `message.timestamp.type`). The fill takes, for each stored row, the value of the
newest record of its key at or before the row's position, "newest" and "before" as the
procedure judges them; never the older record because its partition number is higher.
"""

from __future__ import annotations

import pytest

from sync.operations.runner import status
from tests.helpers import feed
from tests.test_column_fill_toast import TABLE, WITH_BODY, U, change, deployed, revised
from tests.test_delivery_semantics import envelope, mysql_source, rows, table_toml
from tests.test_partition_increase import COLUMNS, KEY, NEW, OLD, at

MYSQL = table_toml("acc", order_by="mysql-binlog", columns=COLUMNS)
MYSQL_NOTE = table_toml("acc", order_by="mysql-binlog", columns=COLUMNS + ', { name = "note", type = "varchar(64)" }')
KAFKA_ORDER = ('order_by = "postgres-lsn"', 'order_by = "kafka"')


@pytest.mark.parametrize("cut", ["one batch", "a batch per record"])
def test_added_column_fill_takes_the_newer_tied_change_from_the_lower_partition(tmp_path, monkeypatch, database_dsn, wh, cut):
    """One compressed MySQL transaction ("with binlog_transaction_compression=ON every change
    of a MySQL transaction carries the same file/pos and row = 0", docs/correctness.md)
    spans the partition increase: the insert in the key's old partition, the update 1 ms
    later in its new, lower one. The update wrote the row; the fill must take its note, not
    the insert's (the older record, in the higher partition)."""
    monkeypatch.chdir(tmp_path)
    cfg, pipeline = deployed(tmp_path, database_dsn, MYSQL)
    inserted = {"id": KEY, "balance": 10, "note": "inserted"}
    updated = {"id": KEY, "balance": 20, "note": "updated"}
    records = [
        at(envelope("c", KEY, inserted, None, mysql_source(1041)), OLD, 1),
        at(envelope("u", KEY, updated, inserted, mysql_source(1041)), NEW, 2),
    ]
    for batch in [records] if cut == "one batch" else [[r] for r in records]:
        feed(wh, pipeline, "acc", batch)
    assert rows(wh, "acc") == [(KEY, 20)]  # the procedure: the update is the newer change

    revised(cfg, tmp_path, MYSQL_NOTE, "acc note")
    assert rows(wh, "acc", "id, balance, note") == [(KEY, 20, "updated")], "the fill took the older record's value"


def test_added_column_fill_reads_the_value_before_a_placeholder_in_the_higher_partition(tmp_path, monkeypatch, database_dsn, wh):
    """order_by = "kafka", Debezium's PostgreSQL connector (REPLICA IDENTITY DEFAULT): the
    insert carries the body in the key's old partition; after the increase an update of
    the title carries the unchanged TOASTed body as `__debezium_unavailable_value` in the
    new, lower partition, 1 ms later, and writes the row. The body is the insert's, which
    is before that record in Kafka order: the fill knows it (it is not unknown)."""
    monkeypatch.chdir(tmp_path)
    cfg, pipeline = deployed(tmp_path, database_dsn, TABLE.replace(*KAFKA_ORDER))
    feed(wh, pipeline, "doc", [at(change("c", KEY, 100, "A"), OLD, 1), at(change("u", KEY, 200, U, title="t2"), NEW, 2)])
    assert rows(wh, "doc", "id, title") == [(KEY, "t2")]

    pipeline, _ = revised(cfg, tmp_path, WITH_BODY.replace(*KAFKA_ORDER), "doc body")
    assert rows(wh, "doc", "id, title, body") == [(KEY, "t2", "A")], "the value before the placeholder was not found"
    assert status(wh, pipeline)[0].unknown_values == []

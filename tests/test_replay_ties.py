"""`quarantine replay` of a record whose position ties with the row stored for its key.

Positions tie where the source gives several changes one position: a compressed MySQL
transaction ("with binlog_transaction_compression=ON every change of a MySQL transaction
carries the same file/pos and row = 0", docs/correctness.md, "Delivery semantics"), or two
polls of a JDBC source connector that read the same timestamp ("values are monotonically
incrementing, but not necessarily unique", JDBC Source Connector configuration, `mode`).
Among tied records only Kafka order tells which came later ("Messages sent by a producer to
a particular topic partition will be appended in the order they are sent", Apache Kafka
documentation, Guarantees). A replayed record was read once before, at its own offset: when
that offset is earlier than the offset of the record that wrote the stored row, the replay
is older than the row and must be stale, whatever its values (docs/operations.md:
"A replayed record older than the row stored for its key is counted stale and not applied").
"""

from __future__ import annotations

from sync.operations.quarantine import Selection, replay
from sync.operations.runner import deploy
from tests.helpers import feed, make_pipeline
from tests.test_delivery_semantics import TS, envelope, mysql_source

LONG = "a note longer than four"


def _widened(wh, toml: str, table: str, column: str):
    """Deployed with `column` as varchar(4), then widened to varchar(64) on the target and
    the stage, and the procedure regenerated for it (what a widening revision does)."""
    narrow = make_pipeline(toml.replace("varchar(64)", "varchar(4)"))
    deploy(wh, narrow, "test")

    def widen():
        for relation in (table, f"{table}__stage"):
            wh.execute(f'ALTER TABLE cdc."{relation}" ALTER COLUMN "{column}" TYPE varchar(64)')
        wide = make_pipeline(toml)
        deploy(wh, wide, "test")
        return wide

    return narrow, widen


MYSQL_TABLE = """
[[tables]]
name = "acc"
topic = "topic.acc"
primary_key = ["id"]
order_by = "mysql-binlog"
columns = [{ name = "id", type = "integer" }, { name = "balance", type = "integer" }, { name = "note", type = "varchar(64)" }]
"""


def test_replay_at_tied_position_is_stale_mysql_compressed_txn(wh):
    """One compressed transaction (every change at file 3, pos 1041, row 0): key 1 is
    inserted with a note too long for the column (quarantined), then updated (applied);
    key 2 is inserted, updated with a long note (quarantined), then deleted (applied). The
    replays are earlier in Kafka order than what wrote the stored row and the deleted key."""
    narrow, widen = _widened(wh, MYSQL_TABLE, "acc", "note")
    pos = mysql_source(1041)
    row = lambda key, balance, note: {"id": key, "balance": balance, "note": note}  # noqa: E731
    run = feed(
        wh,
        narrow,
        "acc",
        [
            envelope("c", 1, row(1, 10, LONG), None, pos),
            envelope("u", 1, row(1, 20, "ok"), row(1, 10, LONG), pos),
            envelope("c", 2, row(2, 5, "ok"), None, pos),
            envelope("u", 2, row(2, 6, LONG), row(2, 5, "ok"), pos),
            envelope("d", 2, None, row(2, 6, LONG), pos),
        ],
    )
    assert (run.quarantined, run.upserted, run.deleted) == (2, 1, 1)
    wide = widen()
    result = replay(wh, wide, Selection("acc"))
    assert result.replayed == 2 and result.quarantined_again == []
    assert (result.run.upserted, result.run.deleted, result.run.stale) == (0, 0, 2)
    assert wh.query('SELECT id, balance, note FROM cdc."acc" ORDER BY 1') == [(1, 20, "ok")]


ROW_TABLE = """
[[tables]]
name = "item"
topic = "db.item"
format = "row"
primary_key = ["id"]
order_by = "column:updated_at"
columns = [
  { name = "id", type = "integer" },
  { name = "name", type = "varchar(64)" },
  { name = "updated_at", type = "timestamp", semantic = "io.debezium.time.Timestamp" },
]
"""


def test_replay_at_tied_position_is_stale_row_topic(wh):
    """Two polls read row 1 at the same `updated_at`: the first read (a name too long for
    the column) is quarantined, the second (a later write in the same millisecond) applied."""
    narrow, widen = _widened(wh, ROW_TABLE, "item", "name")
    poll = lambda name: {"key": {"id": 1}, "value": {"id": 1, "name": name, "updated_at": 1000}}  # noqa: E731
    feed(wh, narrow, "item", [poll(LONG)])
    run = feed(wh, narrow, "item", [poll("ok")])
    assert run.upserted == 1
    wide = widen()
    result = replay(wh, wide, Selection("item"))
    assert result.replayed == 1 and (result.run.upserted, result.run.stale) == (0, 1)
    assert wh.query('SELECT id, name FROM cdc."item"') == [(1, "ok")]
    # A later poll at the same timestamp still applies: it is later in Kafka order.
    run = feed(wh, wide, "item", [poll("later")])
    assert run.upserted == 1 and wh.query('SELECT id, name FROM cdc."item"') == [(1, "later")]


def test_replay_at_tied_position_is_judged_by_kafka_time_across_partitions(wh):
    """Kafka orders nothing across partitions; there the record's timestamp is the evidence
    (tests/delivery_model.py, `kafka_earlier`), as the ranking and the Kafka-order replay
    rule judge it. One compressed transaction: key 1 is inserted with a note too long for
    the column (quarantined) on partition 1 at time T, then updated on partition 0 at T + 1
    s (applied). The replayed insert is earlier in Kafka order than the update that wrote
    the stored row, though its partition number is higher: it stays stale."""
    narrow, widen = _widened(wh, MYSQL_TABLE, "acc", "note")
    pos = mysql_source(1041)
    row = lambda key, balance, note: {"id": key, "balance": balance, "note": note}  # noqa: E731
    run = feed(
        wh,
        narrow,
        "acc",
        [
            {**envelope("c", 1, row(1, 10, LONG), None, pos, partition=1), "timestamp": TS},
            {**envelope("u", 1, row(1, 20, "ok"), row(1, 10, LONG), pos, partition=0), "timestamp": TS + 1000},
        ],
    )
    assert (run.quarantined, run.upserted) == (1, 1)
    result = replay(wh, widen(), Selection("acc"))
    assert result.replayed == 1 and result.quarantined_again == []
    assert (result.run.upserted, result.run.stale) == (0, 1)
    assert wh.query('SELECT id, balance, note FROM cdc."acc" ORDER BY 1') == [(1, 20, "ok")]

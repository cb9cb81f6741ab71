"""History mode (history = true): every version of every row, by source position, under
real delivery. Each test feeds the records a connector delivers (shaped as in
tests/test_delivery_semantics.py, after Debezium's documentation) and reads the history
table; docs/correctness.md, "History mode", lists the rules.

Kafka orders records "within a partition, not between different partitions" (Kafka
documentation, Introduction); Debezium delivers "exactly-once delivery normally,
at-least-once during recovery" (PostgreSQL connector documentation): a restart re-sends
what follows the last committed offset."""

from __future__ import annotations

import pytest

from benchmarks import profile
from sync.config import ConfigError
from sync.debezium.events import lsn_text
from tests.helpers import feed, ingest, make_pipeline
from tests.test_delivery_semantics import TS, envelope, mysql_source, pg_source, rows, setup, table_toml, tombstone
from tests.test_partition_increase import KEY, NEW, OLD, at, unwrapped


def history_toml(name: str, deletes: str = "close", **options: str) -> str:
    return table_toml(name, **options).replace("columns = ", f'history = {{ deletes = "{deletes}" }}\ncolumns = ', 1)


def versions(wh, table: str, columns: str = "id, balance") -> list[tuple]:
    """The history in version order: the columns, then _op, _valid_from_pos, _valid_to_pos, _is_current."""
    return wh.query(
        f'SELECT {columns}, _op, _valid_from_pos, _valid_to_pos, _is_current FROM cdc."{table}__history"\n'
        "ORDER BY id, _valid_from_pos ASC NULLS FIRST, _kafka_timestamp ASC NULLS FIRST, _kafka_partition, _kafka_offset"
    )


def pos(wh, table: str, balance: int) -> str:
    (p,) = wh.query(f'SELECT _valid_from_pos FROM cdc."{table}__history" WHERE balance = {balance}')[0]
    return p


def row(key: int, balance: int) -> dict:
    return {"id": key, "balance": balance, "note": None}


def pg(op: str, key: int, balance: int, lsn: int, partition: int = 0) -> dict:
    return envelope(op, key, row(key, balance), None, pg_source(lsn, lsn - 10), partition)


def test_history_on_a_table_without_primary_key_is_refused():
    toml = history_toml("acc", order_by="postgres-lsn").replace('primary_key = ["id"]', "primary_key = []")
    with pytest.raises(ConfigError, match="history: a table without a primary key cannot keep a history"):
        make_pipeline(toml)


def test_history_in_kafka_order_is_refused():
    with pytest.raises(ConfigError, match="order_by = 'kafka' cannot keep an exact history.*'mysql-binlog'"):
        make_pipeline(history_toml("acc"))


@pytest.mark.parametrize(
    "table, message",
    [
        ("other", "history table 'other' is already the name of a table or of another history"),
        ("acc", "history table 'acc' is already the name of a table or of another history"),
        ("other__stage", "a name the generator uses for its own objects"),
        ("sync_run_log", "a name the generator uses for its own objects"),
    ],
)
def test_a_history_table_name_that_another_relation_has_is_refused(table, message):
    """`history = { table = "orders" }` on customer generated orders' target twice (`CREATE
    TABLE IF NOT EXISTS` kept whichever came first) and every later sync failed on a column
    the other table lacks; the file is refused instead, naming the clash."""
    acc = history_toml("acc", order_by="postgres-lsn").replace(
        'history = { deletes = "close" }', f'history = {{ table = "{table}" }}'
    )
    with pytest.raises(ConfigError, match=message):
        make_pipeline(acc + table_toml("other"))


def test_a_history_setting_that_is_no_table_says_what_to_write():
    with pytest.raises(ConfigError, match=r"history = 'yes': write true, false or \{ table = "):
        make_pipeline(history_toml("acc", order_by="postgres-lsn").replace('history = { deletes = "close" }', 'history = "yes"'))


def test_late_older_event_splits_an_interval_after_a_partition_increase(wh):
    """The topic grew from 3 to 4 partitions: the key's update at lsn 300 went to its new
    partition and was read first; its update at lsn 200, in the old partition, was
    appended late (a producer retry) and is read a sync later. It is inserted in its
    place: the version before it now ends at 200, the one after it keeps its start."""
    p = setup(wh, history_toml("acc", format="debezium-unwrap", order_by="postgres-lsn"))
    feed(wh, p, "acc", [at(unwrapped(KEY, 10, 100, "c"), OLD, 1), at(unwrapped(KEY, 30, 300, "u"), NEW, 3)])
    before = versions(wh, "acc")
    assert [v[:3] for v in before] == [(KEY, 10, "c"), (KEY, 30, "u")]
    run = feed(wh, p, "acc", [at(unwrapped(KEY, 20, 200, "u"), OLD, 2)])
    assert run.stale == 1, "the current state keeps the newer row"
    after = versions(wh, "acc")
    p100, p200, p300 = (pos(wh, "acc", b) for b in (10, 20, 30))
    assert after == [
        (KEY, 10, "c", p100, p200, False),
        (KEY, 20, "u", p200, p300, False),
        (KEY, 30, "u", p300, None, True),
    ]
    starts = wh.query('SELECT balance, _valid_from, _valid_to FROM cdc."acc__history" ORDER BY balance')
    assert starts[0][2] == starts[1][1] and starts[1][2] == starts[2][1], "the interval was not split at the late event"


def test_redelivered_suffix_adds_nothing(wh):
    """A restart re-sends the events from lsn 200 on, at new offsets, after the history
    holds them: no version is added or changed."""
    p = setup(wh, history_toml("acc", order_by="postgres-lsn"))
    events = [pg("c", 1, 10, 100), pg("u", 1, 20, 200), pg("u", 1, 30, 300), pg("c", 2, 5, 400)]
    feed(wh, p, "acc", events)
    before = versions(wh, "acc")
    assert len(before) == 4
    run = feed(wh, p, "acc", events[1:])
    assert run.stale == 2 and versions(wh, "acc") == before
    # re-sent within one batch together with a new event: only the new one is a version
    feed(wh, p, "acc", [*events[2:], *events[2:], pg("u", 1, 40, 500)])
    assert [v[1] for v in versions(wh, "acc") if v[0] == 1] == [10, 20, 30, 40]


def test_tie_within_a_transaction_keeps_kafka_order(wh):
    """binlog_transaction_compression=ON: every change of a MySQL transaction carries the
    same file/pos and row 0. Its changes are versions in Kafka order, as the current-state
    merge orders them, in one batch and across batches; the earlier ones last no time."""
    p = setup(wh, history_toml("acc", order_by="mysql-binlog"))
    tx = [envelope(op, 1, row(1, b), None, mysql_source(1041)) for op, b in (("c", 0), ("u", 100), ("u", 250))]
    feed(wh, p, "acc", tx[:2])
    feed(wh, p, "acc", tx[2:])
    (tie,) = {v[3] for v in versions(wh, "acc")}
    assert versions(wh, "acc") == [
        (1, 0, "c", tie, tie, False),
        (1, 100, "u", tie, tie, False),
        (1, 250, "u", tie, None, True),
    ]
    feed(wh, p, "acc", tx)  # the transaction re-sent
    assert len(versions(wh, "acc")) == 3


@pytest.mark.parametrize("cut", [None, 3], ids=["one batch", "change back in the next batch"])
def test_change_back_within_a_compressed_transaction_is_a_version(wh, cut):
    """binlog_transaction_compression=ON: one transaction changes the row, changes it
    again and changes it back, all at one file/pos, row 0. The change back repeats the
    first change's values but is no copy of it: no restart re-sent anything (a re-sent
    copy repeats the run of versions before it, `test_tie_within_a_transaction_keeps_kafka_order`).
    It is the transaction's third version, and the current one, as in the target."""
    p = setup(wh, history_toml("acc", order_by="mysql-binlog"))
    insert = envelope("c", 1, row(1, 0), None, mysql_source(900))
    tx = [envelope("u", 1, row(1, b), None, mysql_source(1041)) for b in (100, 200, 100)]
    events = [insert, *tx]
    for lo, hi in [(0, cut), (cut, None)] if cut else [(0, None)]:
        feed(wh, p, "acc", events[lo:hi])
    p900, tie = versions(wh, "acc")[0][3], versions(wh, "acc")[1][3]
    assert versions(wh, "acc") == [
        (1, 0, "c", p900, tie, False),
        (1, 100, "u", tie, tie, False),
        (1, 200, "u", tie, tie, False),
        (1, 100, "u", tie, None, True),
    ]
    assert rows(wh, "acc") == [(1, 100)]


def test_resent_compressed_transaction_adds_nothing_after_later_changes(wh):
    """A restart re-sends a compressed transaction's two updates of key 1 (one file/pos)
    after the transaction that followed it (key 2, at another position) was sent: the
    re-sent updates repeat the versions before them, and the change at another position
    between them in the partition shows the restart ("the connector restarts from the
    last recorded offset", Debezium MySQL connector documentation). No version is added."""
    p = setup(wh, history_toml("acc", order_by="mysql-binlog"))
    tx = [envelope("u", 1, row(1, b), None, mysql_source(1041)) for b in (100, 200)]
    later = envelope("c", 2, row(2, 5), None, mysql_source(1300))
    feed(wh, p, "acc", [envelope("c", 1, row(1, 0), None, mysql_source(900)), *tx, later])
    before = versions(wh, "acc")
    feed(wh, p, "acc", [*tx, later])
    assert versions(wh, "acc") == before
    feed(wh, p, "acc", [*tx[1:], later, envelope("u", 1, row(1, 300), None, mysql_source(1400))])
    assert [v[1] for v in versions(wh, "acc") if v[0] == 1] == [0, 100, 200, 300]


@pytest.mark.parametrize("first", ["update", "insert"])
def test_a_resent_run_of_a_compressed_transaction_cut_by_a_batch_adds_nothing(wh, first):
    """The transaction at pos 7000 (key 1 created and updated) and the next one (key 2, at
    7050) were sent; a restart re-sends from inside the first, and a sync runs while only
    part of the re-sent run has arrived (its first record: an update, or the create).
    The record at another position between the originals and the copy in their partition
    shows the restart, as it does when the whole re-sent run arrives in one batch: the
    copies add no version, in either batch, and `history rebuild` finds the same history."""
    p = setup(wh, history_toml("acc", order_by="mysql-binlog"))
    tx = [
        envelope("c", 1, row(1, 1), None, mysql_source(7000)),
        envelope("u", 1, row(1, 2), row(1, 1), mysql_source(7000)),
        envelope("u", 1, row(1, 3), row(1, 2), mysql_source(7000)),
    ]
    later = envelope("c", 2, row(2, 5), None, mysql_source(7050))
    feed(wh, p, "acc", [*tx, later])
    resent = tx[1:] if first == "update" else tx
    feed(wh, p, "acc", resent[:1])
    assert [v[1] for v in versions(wh, "acc") if v[0] == 1] == [1, 2, 3]
    feed(wh, p, "acc", [*resent[1:], later])
    assert [v[1:4] for v in versions(wh, "acc")] == [
        (1, "c", *versions(wh, "acc")[0][3:4]),
        (2, "u", *versions(wh, "acc")[1][3:4]),
        (3, "u", *versions(wh, "acc")[2][3:4]),
        (5, "c", *versions(wh, "acc")[3][3:4]),
    ]
    assert [v[-1] for v in versions(wh, "acc")] == [False, False, True, True]


def test_toast_placeholder_takes_the_previous_versions_value(wh):
    """PostgreSQL sends an unchanged TOASTed value as `__debezium_unavailable_value`
    (Debezium PostgreSQL connector, "toasted values"): every version takes the value of the
    version before it, in the batch and across batches, also when an older event that
    holds the value arrives after the placeholder."""
    p = setup(wh, history_toml("acc", order_by="postgres-lsn"))
    placeholder = "__debezium_unavailable_value"

    def ev(op, balance, note, lsn):
        return envelope(op, 1, {"id": 1, "balance": balance, "note": note}, None, pg_source(lsn, lsn - 10))

    feed(wh, p, "acc", [ev("c", 1, "long text", 100), ev("u", 2, placeholder, 200), ev("u", 3, placeholder, 300)])
    assert versions(wh, "acc", "id, balance, note") == [
        (1, 1, "long text", "c", *versions(wh, "acc")[0][3:]),
        (1, 2, "long text", "u", *versions(wh, "acc")[1][3:]),
        (1, 3, "long text", "u", *versions(wh, "acc")[2][3:]),
    ]
    feed(wh, p, "acc", [ev("u", 4, placeholder, 400), ev("u", 6, placeholder, 500)])
    # an older event with a new value arrives late: the placeholders after it take it
    feed(wh, p, "acc", [ev("u", 5, "rewritten", 350)])
    notes = [(v[1], v[2]) for v in versions(wh, "acc", "id, balance, note")]
    assert notes == [(1, "long text"), (2, "long text"), (3, "long text"), (5, "rewritten"), (4, "rewritten"), (6, "rewritten")]


@pytest.mark.parametrize("cut", [None, 2], ids=["one batch", "two batches"])
def test_a_resent_toast_placeholder_update_adds_no_version(wh, cut):
    """A restart re-sends an update whose TOASTed value is the placeholder, at a new offset
    (PostgreSQL connector: "at-least-once during recovery"). In one batch the merge fills
    the newer copy's placeholder from the stored value and not the older one's: the two
    are still one change (one LSN), one version."""
    p = setup(wh, history_toml("acc", order_by="postgres-lsn"))
    placeholder = "__debezium_unavailable_value"

    def ev(op, balance, note, lsn):
        return envelope(op, 1, {"id": 1, "balance": balance, "note": note}, None, pg_source(lsn, lsn - 10))

    records = [ev("c", 1, "long text", 100), ev("u", 2, placeholder, 200), ev("u", 2, placeholder, 200)]
    for batch in (records[:cut], records[cut:]) if cut else (records,):
        feed(wh, p, "acc", batch)
    assert [v[:4] + v[-1:] for v in versions(wh, "acc", "id, balance, note")] == [
        (1, 1, "long text", "c", False),
        (1, 2, "long text", "u", True),
    ]


@pytest.mark.parametrize("stored", ["deleted", "live"])
def test_a_late_toast_placeholder_before_the_stored_state_takes_the_previous_versions_value(wh, stored):
    """An update whose unchanged TOASTed value is the placeholder (PostgreSQL connector,
    "toasted values"), read late from a lagging partition, lies before what is stored for
    its key: a delete, or a newer row. It is stale for the current state, and a version of
    the history with the value of the version before it, not quarantined for want of a
    value (the key's delete) nor given the newer row's."""
    p = setup(wh, history_toml("acc", order_by="postgres-lsn"))
    placeholder = "__debezium_unavailable_value"

    def ev(op, balance, note, lsn, partition=0):
        image = {"id": 1, "balance": balance, "note": note}
        return envelope(op, 1, None if op == "d" else image, image if op == "d" else None, pg_source(lsn, lsn - 10), partition)

    last = [ev("d", 30, "Z", 400), tombstone(1)] if stored == "deleted" else [ev("u", 40, "W", 400)]
    feed(wh, p, "acc", [ev("c", 10, "X", 100), ev("u", 30, "Z", 300), *last])
    run = feed(wh, p, "acc", [ev("u", 35, placeholder, 350, partition=1)])
    assert (run.quarantined, run.stale) == (0, 1)
    late = [v for v in versions(wh, "acc", "id, balance, note") if v[1] == 35]
    assert [v[:4] for v in late] == [(1, 35, "Z", "u")], versions(wh, "acc", "id, balance, note")
    at_400 = "_op = 'd'" if stored == "deleted" else "balance = 40"
    (after,) = wh.query(f'SELECT _valid_from_pos FROM cdc."acc__history" WHERE {at_400}')[0]
    assert late[0][5] == after, "the late version does not end where the stored state begins"


def test_a_late_event_before_a_truncate_gives_its_closing_marker_its_values(wh):
    """A truncate's marker holds the values of the version it closes (docs/correctness.md).
    A truncate has no key, so it may land on any partition ("ordering is guaranteed only for
    topics that use a single partition", Debezium, truncate events): the key's update at lsn
    550 is read a sync after the truncate at 600. It is inserted before the marker, which
    now closes it and takes its values, as if the events had come in order."""
    p = setup(wh, history_toml("acc", order_by="postgres-lsn", on_truncate="delete"))
    trunc = {"partition": 0, "key": None, "value": {"source": pg_source(600, 590), "op": "t", "ts_ms": TS}}
    feed(wh, p, "acc", [pg("c", 2, 100, 110, partition=1), pg("u", 2, 400, 410, partition=1), trunc])
    feed(wh, p, "acc", [pg("u", 2, 550, 550, partition=1)])
    in_order = [(2, 100, "c"), (2, 400, "u"), (2, 550, "u"), (2, 550, "t")]
    assert [v[:3] for v in versions(wh, "acc")] == in_order
    assert rows(wh, "acc") == []


@pytest.mark.parametrize("cut", [None, 1, 2, 3], ids=["one batch", "cut 1", "cut 2", "cut 3"])
def test_each_truncate_of_a_batch_closes_the_versions_open_before_it(wh, cut):
    """The PostgreSQL connector emits a truncate event per TRUNCATE, each at its own LSN
    (Debezium, truncate events), and the table is empty after each: two in one batch close
    what was open before each, as they do in two batches."""
    p = setup(wh, history_toml("acc", order_by="postgres-lsn", on_truncate="delete"))

    def trunc(lsn: int) -> dict:
        return {"partition": 0, "key": None, "value": {"source": pg_source(lsn, lsn - 10), "op": "t", "ts_ms": TS}}

    records = [pg("c", 1, 10, 100), trunc(200), pg("c", 2, 20, 250), trunc(300)]
    for batch in (records[:cut], records[cut:]) if cut else (records,):
        feed(wh, p, "acc", batch)
    held = [(v[0], v[1], v[2], v[5]) for v in versions(wh, "acc")]
    assert held == [(1, 10, "c", False), (1, 10, "t", False), (2, 20, "c", False), (2, 20, "t", False)]
    ends = wh.query('SELECT id, _op, _valid_from_pos, _valid_to_pos FROM cdc."acc__history" ORDER BY id, _valid_from_pos')
    (marker_1,) = [e for e in ends if e[0] == 1 and e[1] == "t"]
    (created_1,) = [e for e in ends if e[0] == 1 and e[1] == "c"]
    (marker_2,) = [e for e in ends if e[0] == 2 and e[1] == "t"]
    assert created_1[3] == marker_1[2] < marker_2[2], "key 1 is not closed by the first truncate"
    assert rows(wh, "acc") == []


def test_toast_placeholder_with_no_earlier_version_is_quarantined_not_a_version(wh):
    """A placeholder with no earlier value anywhere (no version, no stored row) is not
    applied (quarantined, never a silent NULL) and is no version either."""
    p = setup(wh, history_toml("acc", order_by="postgres-lsn"))
    ev = envelope("u", 1, {"id": 1, "balance": 1, "note": "__debezium_unavailable_value"}, None, pg_source(100, 90))
    run = feed(wh, p, "acc", [ev])
    assert run.quarantined == 1 and versions(wh, "acc") == []


@pytest.mark.parametrize("deletes", ["close", "tombstone"])
def test_tombstone_only_delete_closes_the_version(wh, deletes):
    """delete.tombstone.handling.mode=tombstone: the delete IS the tombstone (no position,
    no source time). It closes the last version at its Kafka time, ranked at the newest
    position before it; "tombstone": the delete is a version of its own, current."""
    p = setup(wh, history_toml("acc", deletes, format="debezium-unwrap", order_by="postgres-lsn"))
    feed(wh, p, "acc", [at(unwrapped(1, 10, 100, "c"), 0, 1), at(unwrapped(1, 20, 200, "u"), 0, 2)])
    feed(wh, p, "acc", [at(tombstone(1), 0, 3)])
    hist = versions(wh, "acc")
    p200 = hist[1][3]
    assert [v[2] for v in hist] == ["c", "u", "d"]
    assert hist[1] == (1, 20, "u", p200, p200, False), "the tombstone did not close the last version"
    assert hist[2][3] == p200 and hist[2][5] is (deletes == "tombstone")
    (closed,) = wh.query('SELECT _valid_to FROM cdc."acc__history" WHERE balance = 20')[0]
    assert closed.timestamp() * 1000 == pytest.approx(TS + 3), "closed at the tombstone's Kafka time"


def test_real_tombstone_stays_when_its_resent_copy_follows_the_recreated_row(wh):
    """delete.tombstone.handling.mode=tombstone: the key is updated (lsn 200), deleted (the
    tombstone, no position) and created again (lsn 300). A restart re-sends the update, the
    tombstone and the create ("the connector restarts from the last recorded offset"): the
    re-sent tombstone now follows the re-created row and ranks at its position, yet it is
    the copy right after the re-sent update, so the first tombstone was a real delete and
    keeps its version. The re-sent tombstone, followed by the re-sent create, the batch's
    last record, waits for the record after it (a marker, no version); the next record,
    no tombstone, removes it."""
    p = setup(wh, history_toml("acc", format="debezium-unwrap", order_by="postgres-lsn"))
    events = [unwrapped(1, 10, 100, "c"), unwrapped(1, 20, 200, "u"), tombstone(1), unwrapped(1, 30, 300, "c")]
    feed(wh, p, "acc", [at(r, 0, n) for n, r in enumerate([*events, *events[1:]], 1)])
    kept = [(10, "c"), (20, "u"), (None, "d"), (30, "c")]
    assert [(v[1], v[2]) for v in versions(wh, "acc")] == [*kept, (None, "p")]
    feed(wh, p, "acc", [at(unwrapped(1, 40, 400, "u"), 0, 8)])
    assert [(v[1], v[2]) for v in versions(wh, "acc")] == [*kept, (40, "u")]


@pytest.mark.parametrize("deletes", ["close", "tombstone"])
def test_a_tombstone_resent_twice_with_the_create_after_it_is_no_delete(wh, deletes):
    """The key is created (lsn 100), deleted (a tombstone) and created again (lsn 300); two
    restarts each re-send the tombstone and the create. Each re-sent tombstone follows the
    re-created row, and the first is followed by a copy that a tombstone follows: but a
    later copy follows that tombstone too, so the last copy decides, and the batch ends on
    it. No delete after the re-created row: the tombstones wait (a marker), and the next
    record, no tombstone, removes them (found by the property test's pg_unwrap_tombstone_history)."""
    p = setup(wh, history_toml("acc", deletes, format="debezium-unwrap", order_by="postgres-lsn"))
    run = [tombstone(1), unwrapped(1, 30, 300, "c")]
    feed(wh, p, "acc", [at(r, 0, n) for n, r in enumerate([unwrapped(1, 10, 100, "c"), *run, *run, *run], 1)])
    kept = [(10, "c"), (None, "d"), (30, "c")]
    assert [(v[1], v[2]) for v in versions(wh, "acc") if v[2] != "p"] == kept
    feed(wh, p, "acc", [at(unwrapped(1, 40, 400, "u"), 0, 9)])
    assert [(v[1], v[2]) for v in versions(wh, "acc")] == [*kept, (40, "u")]


def test_truncate_closes_every_open_version(wh):
    """A truncate (op 't', on_truncate = 'delete') ends every key's open version at its
    position; a key written after it opens a new one. Re-delivered, it adds nothing."""
    p = setup(wh, history_toml("acc", order_by="postgres-lsn", on_truncate="delete"))
    trunc = {"partition": 0, "key": None, "value": {"source": pg_source(300, 290), "op": "t", "ts_ms": TS}}
    feed(wh, p, "acc", [pg("c", 1, 10, 100), pg("c", 2, 20, 200)])
    feed(wh, p, "acc", [trunc, pg("c", 2, 21, 400)])
    hist = versions(wh, "acc")
    t = [v for v in hist if v[2] == "t"]
    assert [(v[0], v[3]) for v in t] == [(1, t[0][3]), (2, t[0][3])]
    assert [v[5] for v in hist] == [False, False, False, False, True]
    assert hist[0][4] == t[0][3] and hist[2][4] == t[0][3], "a version stayed open across the truncate"
    feed(wh, p, "acc", [trunc])
    assert versions(wh, "acc") == hist


@pytest.mark.parametrize("deletes", ["close", "tombstone"])
def test_delete_then_recreate(wh, deletes):
    """A delete closes the key's version; the key created again opens a new one."""
    p = setup(wh, history_toml("acc", deletes, order_by="postgres-lsn"))
    delete = envelope("d", 1, None, row(1, 10), pg_source(200, 190))
    feed(wh, p, "acc", [pg("c", 1, 10, 100), delete])
    feed(wh, p, "acc", [pg("c", 1, 11, 300)])
    hist = versions(wh, "acc")
    p100, p200, p300 = (v[3] for v in hist)
    closed_to = p200 if deletes == "close" else p300
    assert hist == [
        (1, 10, "c", p100, p200, False),
        (1, 10, "d", p200, closed_to, False),
        (1, 11, "c", p300, None, True),
    ]


@pytest.mark.parametrize("deletes", ["close", "tombstone"])
def test_batch_after_the_stored_versions_closes_each_keys_current_version(wh, deletes):
    """Every event of the second batch follows the stored versions of its key (the common
    case, which takes the shorter path of docs/correctness.md, "History mode"): a key's
    current version ends where its first event begins, the first in Kafka order of a
    compressed transaction's tied changes; a delete (in "tombstone" form, current) ends
    where the key is created again; a new key's version opens; nothing else changes."""
    p = setup(wh, history_toml("acc", deletes, order_by="mysql-binlog"))
    first = [
        envelope("c", 1, row(1, 0), None, mysql_source(900)),
        envelope("c", 2, row(2, 5), None, mysql_source(910)),
        envelope("d", 2, None, row(2, 5), mysql_source(920)),
    ]
    feed(wh, p, "acc", first)
    tx = [envelope("u", 1, row(1, b), None, mysql_source(1041)) for b in (100, 200)]
    later = [envelope("u", 1, row(1, 300), None, mysql_source(1050)), envelope("c", 2, row(2, 6), None, mysql_source(1100))]
    feed(wh, p, "acc", [*tx, *later, envelope("c", 3, row(3, 7), None, mysql_source(1200))])
    hist = versions(wh, "acc")
    p900, tie, _, p1050, p910, p920, p1100, p1200 = (v[3] for v in hist)
    assert hist == [
        (1, 0, "c", p900, tie, False),
        (1, 100, "u", tie, tie, False),
        (1, 200, "u", tie, p1050, False),
        (1, 300, "u", p1050, None, True),
        (2, 5, "c", p910, p920, False),
        (2, 5, "d", p920, p920 if deletes == "close" else p1100, False),
        (2, 6, "c", p1100, None, True),
        (3, 7, "c", p1200, None, True),
    ]
    times = wh.query(
        'SELECT id, balance, _op, _valid_from, _valid_to FROM cdc."acc__history" ORDER BY id, _valid_from_pos, _kafka_offset'
    )
    assert times[0][4] == times[1][3], "the current version did not end where the key's first event begins"
    assert rows(wh, "acc") == [(1, 300), (2, 6), (3, 7)]


def lsn_source(connector: str, commit: int, change: int | None) -> dict:
    """A SQL Server or Db2 source block: `commit_lsn`, `change_lsn` as `Lsn.toString()`
    writes them (10 and 16 bytes), SQL Server's `event_serial_no` (2 for an update). A
    snapshot read: "change_lsn": null, "event_serial_no": null (the SQL Server page's
    schema change example)."""
    size = 10 if connector == "sqlserver" else 16
    src = {
        "connector": connector,
        "ts_ms": TS + commit % 1000,
        "snapshot": "false" if change is not None else "true",
        "commit_lsn": lsn_text(commit, size),
        "change_lsn": None if change is None else lsn_text(change, size),
    }
    return src | ({"event_serial_no": None if change is None else 2} if connector == "sqlserver" else {})


@pytest.mark.parametrize("connector", ["sqlserver", "db2"])
def test_resnapshot_read_follows_the_changes_of_its_commit(wh, connector):
    """SQL Server and Db2: a connector re-created without offsets snapshots at the
    database's max LSN ("Read the maximum log sequence number (LSN) position in the
    server's transaction log"; the read events carry it as `commit_lsn`, with no
    `change_lsn`): the commit LSN of the newest captured transaction, whose changes the
    read holds; streaming then starts after that commit ("LSN should be increased for the
    first run only immediately after snapshot completion", `incrementLsn`, the connectors'
    streaming sources). The key changed twice in that commit: its read is the version
    after both, not before them."""
    order = "sqlserver-lsn" if connector == "sqlserver" else "db2-lsn"
    p = setup(wh, history_toml("acc", order_by=order))
    commit, later = 0x27_00000758_0100, 0x27_00000758_0200

    def ev(op: str, balance: int, commit: int, change: int | None) -> dict:
        return envelope(op, 1, row(1, balance), row(1, balance - 1) if op == "u" else None, lsn_source(connector, commit, change))

    changes = [ev("c", 10, commit, commit - 0x20), ev("u", 20, commit, commit - 0x10)]
    feed(wh, p, "acc", changes)
    # the connector re-created: the snapshot reads the row, then streams the next commit
    feed(wh, p, "acc", [ev("r", 20, commit, None), ev("u", 30, later, later - 0x10)])
    assert [(v[1], v[2]) for v in versions(wh, "acc")] == [(10, "c"), (20, "u"), (20, "r"), (30, "u")]
    assert [v[5] for v in versions(wh, "acc")] == [False, False, False, True]


def test_a_delete_and_its_tombstone_leave_a_newer_batch_on_the_short_path(wh):
    """Debezium follows a delete with a tombstone by default ("tombstones.on.delete ...
    Controls whether a delete event is followed by a tombstone event", PostgreSQL connector
    properties), and a tombstone carries no source block, so no position. The tombstone is
    no version: a batch newer than every stored version of its keys takes the short path
    (each key's current version closed at its first event) with a delete in it, as without
    one, instead of recomputing every interval of its keys. Which statements the call runs is
    read from the instrumented copy of the procedure that benchmarks.profile times."""
    columns = '{ name = "id", type = "integer" }, { name = "balance", type = "integer" }'
    p = setup(wh, history_toml("acc", order_by="postgres-lsn", columns=columns))

    def event(op: str, key: int, balance: int, lsn: int) -> dict:
        image = {"id": key, "balance": balance}
        return envelope(op, key, None if op == "d" else image, image if op == "d" else None, pg_source(lsn, lsn - 10))

    feed(wh, p, "acc", [event("c", 1, 10, 100), event("c", 2, 5, 150)])
    ingest(wh, p, "acc", [event("u", 1, 20, 300), event("d", 2, 5, 350), tombstone(2)])
    ran = [step.sql for step in profile.profile_call(wh, p, "acc")]
    assert any(s.startswith('UPDATE "cdc"."acc__history" h SET _valid_to = f._valid_from') for s in ran), ran
    assert not any("LEAD(x._valid_from)" in s for s in ran), "the full recompute ran"
    feed(wh, p, "acc", [])  # the batch the profiled call rolled back
    created, updated, kept, deleted = versions(wh, "acc")
    assert [v[:3] for v in (created, updated, kept, deleted)] == [(1, 10, "c"), (1, 20, "u"), (2, 5, "c"), (2, 5, "d")]
    assert created[4] == updated[3] and updated[4] is None and updated[5]  # ends where the update begins
    assert kept[4] == deleted[3] == deleted[4] and not kept[5] and not deleted[5]  # the delete closes the key


def test_a_batch_older_than_another_keys_stored_version_keeps_the_short_path(wh):
    """Kafka keeps order "within a partition, not between different partitions" (Kafka
    documentation, Introduction), and a sync reads what each partition holds when it runs:
    a batch cut while partition 0 lagged read key 2's create at lsn 300 (partition 1) but
    not key 1's update at lsn 200 (partition 0), which the next batch brings beside key 2's
    update at lsn 400. Each key's events follow every stored version of that key, so the
    batch takes the short path, although its oldest event (200) precedes key 2's stored
    version (300): the recompute is decided per key, not by the batch's oldest position."""
    columns = '{ name = "id", type = "integer" }, { name = "balance", type = "integer" }'
    p = setup(wh, history_toml("acc", order_by="postgres-lsn", columns=columns))

    def event(op: str, key: int, balance: int, lsn: int, partition: int) -> dict:
        return envelope(op, key, {"id": key, "balance": balance}, None, pg_source(lsn, lsn - 10), partition)

    feed(wh, p, "acc", [event("c", 1, 10, 100, 0), event("c", 2, 5, 300, 1)])
    ingest(wh, p, "acc", [event("u", 1, 20, 200, 0), event("u", 2, 6, 400, 1)])
    ran = [step.sql for step in profile.profile_call(wh, p, "acc")]
    assert not any("LEAD(x._valid_from)" in s for s in ran), "the full recompute ran"
    assert any(s.startswith('UPDATE "cdc"."acc__history" h SET _valid_to = f._valid_from') for s in ran), ran
    feed(wh, p, "acc", [])  # the batch the profiled call rolled back
    p100, p200, p300, p400 = (pos(wh, "acc", b) for b in (10, 20, 5, 6))
    assert versions(wh, "acc") == [
        (1, 10, "c", p100, p200, False),
        (1, 20, "u", p200, None, True),
        (2, 5, "c", p300, p400, False),
        (2, 6, "u", p400, None, True),
    ]


def test_a_late_event_before_a_placeholder_filled_in_its_own_batch_gives_it_its_value(wh):
    """A placeholder (`__debezium_unavailable_value`: "toasted values" of the Debezium
    PostgreSQL connector) takes the previous version's value. The current-state merge filled
    the batch's newest event from the event before it in the batch and dropped its mark;
    the history stored the version without it, so a change that arrived later between the
    two (a producer retry, or a partition read late: Kafka orders records only within a
    partition) left the version the value it had replaced."""
    p = setup(wh, history_toml("acc", order_by="postgres-lsn"))
    placeholder = "__debezium_unavailable_value"

    def ev(op, balance, note, lsn):
        return envelope(op, 1, {"id": 1, "balance": balance, "note": note}, None, pg_source(lsn, lsn - 10))

    feed(wh, p, "acc", [ev("c", 1, "long text", 100), ev("u", 2, placeholder, 200)])
    feed(wh, p, "acc", [ev("u", 4, "late text", 150)])
    assert [(v[1], v[2], v[-1]) for v in versions(wh, "acc", "id, balance, note")] == [
        (1, "long text", False),
        (4, "late text", False),
        (2, "late text", True),
    ]


def test_a_batch_after_a_stored_toast_placeholder_keeps_the_short_path(wh):
    """PostgreSQL sends an unchanged TOASTed value as `__debezium_unavailable_value`
    (Debezium PostgreSQL connector, "toasted values"), so most updates of a row with a
    large column store a version that holds a placeholder, filled from the version before
    it. A later batch of newer changes of that key changes no stored version but the
    current one: it takes the short path, as it would without the placeholder (before,
    any stored placeholder of a batch key sent the batch to the full recompute, and on a
    table whose rows all carry one, every batch). A late event before the placeholder
    still recomputes, and the placeholder takes the late event's value."""
    p = setup(wh, history_toml("acc", order_by="postgres-lsn"))
    placeholder = "__debezium_unavailable_value"

    def ev(op, balance, note, lsn):
        return envelope(op, 1, {"id": 1, "balance": balance, "note": note}, None, pg_source(lsn, lsn - 10))

    feed(wh, p, "acc", [ev("c", 1, "long text", 100)])
    feed(wh, p, "acc", [ev("u", 2, placeholder, 200)])  # filled from the stored row
    ingest(wh, p, "acc", [ev("u", 3, "new text", 300)])
    ran = [step.sql for step in profile.profile_call(wh, p, "acc")]
    assert not any("LEAD(x._valid_from)" in s for s in ran), "the full recompute ran"
    feed(wh, p, "acc", [])  # the batch the profiled call rolled back
    feed(wh, p, "acc", [ev("u", 4, "late text", 150)])  # before the placeholder: recomputed
    assert [(v[1], v[2], v[-1]) for v in versions(wh, "acc", "id, balance, note")] == [
        (1, "long text", False),
        (4, "late text", False),
        (2, "late text", False),
        (3, "new text", True),
    ]


def test_history_without_toastable_columns_is_exact_on_the_short_path_and_after_a_late_event(wh):
    """A table without TOAST-able columns: batches newer than every stored version of their
    keys close each key's current version at its first event (the short path); a late
    event (a producer retry: Kafka orders records only within a partition), or a
    re-delivered one ("at-least-once during recovery"), lies at or before a stored version
    of its key, and the key's intervals are recomputed: the late event splits the interval
    it falls into, the copy adds nothing."""
    columns = '{ name = "id", type = "integer" }, { name = "balance", type = "integer" }'
    p = setup(wh, history_toml("acc", order_by="postgres-lsn", columns=columns))

    def event(op: str, key: int, balance: int, lsn: int) -> dict:
        return envelope(op, key, {"id": key, "balance": balance}, None, pg_source(lsn, lsn - 10))

    feed(wh, p, "acc", [event("c", 1, 10, 100), event("u", 1, 20, 300), event("c", 2, 5, 150)])
    feed(wh, p, "acc", [event("u", 1, 30, 400), event("u", 2, 6, 450)])  # newer than every stored version
    p100, p300, p400, p150, p450 = (pos(wh, "acc", b) for b in (10, 20, 30, 5, 6))
    assert versions(wh, "acc") == [
        (1, 10, "c", p100, p300, False),
        (1, 20, "u", p300, p400, False),
        (1, 30, "u", p400, None, True),
        (2, 5, "c", p150, p450, False),
        (2, 6, "u", p450, None, True),
    ]
    run = feed(wh, p, "acc", [event("u", 1, 25, 350)])  # late: before the stored version at 400
    assert run.stale == 1
    p350 = pos(wh, "acc", 25)
    feed(wh, p, "acc", [event("u", 1, 30, 400), event("u", 1, 40, 500)])  # a re-sent copy, then news
    p500 = pos(wh, "acc", 40)
    assert versions(wh, "acc") == [
        (1, 10, "c", p100, p300, False),
        (1, 20, "u", p300, p350, False),
        (1, 25, "u", p350, p400, False),
        (1, 30, "u", p400, p500, False),
        (1, 40, "u", p500, None, True),
        (2, 5, "c", p150, p450, False),
        (2, 6, "u", p450, None, True),
    ]
    assert rows(wh, "acc") == [(1, 40), (2, 6)]


def test_postgresql_closes_a_version_in_place_without_a_new_index_entry(wh):
    """The history table keeps a fifth of each page free on PostgreSQL (`history_storage`):
    a version a later batch closes changes no indexed column (`_valid_to`, `_valid_to_pos`,
    `_is_current`), so it is a heap-only tuple, "the new version of the row is stored on
    the same page ... no new index entries are needed" (PostgreSQL documentation, Heap-Only
    Tuples (HOT))."""
    p = setup(wh, history_toml("acc", order_by="postgres-lsn"))
    feed(wh, p, "acc", [pg("c", key, 10, 1000 + key) for key in range(1, 401)])
    # A batch closes one version in ten, as a batch touches a few of the versions a page holds.
    feed(wh, p, "acc", [pg("u", key, 20, 2000 + key) for key in range(1, 401, 10)])
    wh.execute("SELECT pg_stat_force_next_flush()")
    ((options, updated, hot),) = wh.query(
        "SELECT c.reloptions, s.n_tup_upd, s.n_tup_hot_upd FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid"
        " WHERE s.schemaname = 'cdc' AND s.relname = 'acc__history'"
    )
    assert options == ["fillfactor=80"]
    assert updated == hot == 40, (updated, hot)

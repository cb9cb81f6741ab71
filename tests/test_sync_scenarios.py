"""incremental_sync_<table>() on a real PostgreSQL: the acceptance scenarios of the core."""

from __future__ import annotations

import threading

from sync.debezium.events import ChangeStream, MySqlSource
from sync.operations.runner import deploy, status, sync
from tests.helpers import ingest, make_pipeline, sync_one

CUSTOMER = """
[[tables]]
name = "customer"
topic = "salesdb.salesdb.CUSTOMER"
primary_key = ["CUST_ID"]
order_by = "mysql-binlog"
distkey = "customer_id"
columns = [
  { name = "CUST_ID", type = "varchar(64)", target = "customer_id" },
  { name = "NAME", type = "varchar(256)" },
  { name = "MKTSEGMENT", type = "varchar(64)" },
]
"""

TARGET = 'SELECT customer_id, name, mktsegment FROM cdc."customer" ORDER BY 1'


def _setup(wh, toml=CUSTOMER):
    pipeline = make_pipeline(toml)
    deploy(wh, pipeline, "test")
    return pipeline


def _row(i, name=None, seg="BUILDING"):
    return {"CUST_ID": f"C{i}", "NAME": name or f"name {i}", "MKTSEGMENT": seg}


def test_mysql_history_in_batches_ends_as_the_source(wh):
    p = _setup(wh)
    cs = ChangeStream(["CUST_ID"], MySqlSource())
    ingest(wh, p, "customer", [cs.snapshot(_row(1)), cs.snapshot(_row(2))])
    assert sync_one(wh, p, "customer").upserted == 2
    ingest(wh, p, "customer", [cs.insert(_row(3)), cs.update(_row(3), _row(3, "three"))])
    ingest(wh, p, "customer", [cs.update(_row(3, "three"), _row(3, "THREE")), cs.delete(_row(1)), cs.tombstone(_row(1))])
    run = sync_one(wh, p, "customer")
    assert (run.events_read, run.upserted, run.deleted, run.tombstones, run.superseded) == (5, 1, 1, 1, 2)
    ingest(wh, p, "customer", [cs.insert(_row(1, "back again"))])
    sync_one(wh, p, "customer")
    expected = [("C1", "back again", "BUILDING"), ("C2", "name 2", "BUILDING"), ("C3", "THREE", "BUILDING")]
    assert wh.query(TARGET) == expected

    again = sync_one(wh, p, "customer")
    assert (again.events_read, again.upserted, again.deleted) == (0, 0, 0)
    assert again.watermark_before == again.watermark_after == "0:7"
    assert wh.query(TARGET) == expected
    assert wh.scalar("SELECT COUNT(*) FROM cdc.sync_run_log WHERE table_name = 'customer'") == 4


def test_redelivered_records_change_nothing(wh):
    p = _setup(wh)
    cs = ChangeStream(["CUST_ID"], MySqlSource())
    history = [cs.insert(_row(1)), cs.update(_row(1), _row(1, "v2")), cs.insert(_row(2)), cs.delete(_row(2))]
    ingest(wh, p, "customer", history)
    sync_one(wh, p, "customer")
    before = wh.query('SELECT * FROM cdc."customer" ORDER BY 1')
    assert [r[:2] for r in before] == [("C1", "v2")]

    # The same events again at new offsets (a restarted connector), then the same offsets
    # again (a re-created streaming MV re-reading the topic from offset 0).
    ingest(wh, p, "customer", history)
    run = sync_one(wh, p, "customer")
    assert run.events_read == 4 and run.upserted == 0 and run.deleted == 0 and run.stale == 2
    ingest(wh, p, "customer", [{**r, "offset": i} for i, r in enumerate(history)])
    assert sync_one(wh, p, "customer").events_read == 0
    assert wh.query('SELECT * FROM cdc."customer" ORDER BY 1') == before
    # A deleted key stays deleted when its older insert is replayed.
    assert wh.scalar('SELECT COUNT(*) FROM cdc."customer__deleted" WHERE customer_id = %s', ("C2",)) == 1


def test_an_event_older_than_the_stored_position_is_not_applied(wh):
    p = _setup(wh)
    cs = ChangeStream(["CUST_ID"], MySqlSource())
    old = cs.update(_row(1), _row(1, "old"))
    new = cs.update(_row(1, "old"), _row(1, "new"))
    ingest(wh, p, "customer", [new])
    sync_one(wh, p, "customer")
    ingest(wh, p, "customer", [old])  # arrives later in Kafka, but is older at the source
    run = sync_one(wh, p, "customer")
    assert run.stale == 1 and run.upserted == 0
    assert wh.query(TARGET) == [("C1", "new", "BUILDING")]
    # Within one batch the source position decides too, whatever the Kafka order.
    first = cs.update(_row(1, "new"), _row(1, "first"))
    second = cs.update(_row(1, "first"), _row(1, "second"))
    ingest(wh, p, "customer", [second, first])
    run = sync_one(wh, p, "customer")
    assert (run.upserted, run.superseded) == (1, 1)
    assert wh.query(TARGET) == [("C1", "second", "BUILDING")]


def test_ties_in_kafka_order_resolve_to_one_row(wh):
    toml = CUSTOMER.replace('order_by = "mysql-binlog"', 'order_by = "kafka"')
    p = _setup(wh, toml)
    cs = ChangeStream(["CUST_ID"], MySqlSource(), partitions=1)
    # Two events with the same ts_ms and the same source position: ROW_NUMBER, never RANK.
    a, b = cs.insert(_row(7, "a")), cs.update(_row(7, "a"), _row(7, "b"))
    b["value"]["ts_ms"] = a["value"]["ts_ms"]
    b["value"]["source"] = a["value"]["source"]
    ingest(wh, p, "customer", [a, b])
    sync_one(wh, p, "customer")
    assert wh.query(TARGET) == [("C7", "b", "BUILDING")]


def test_bad_records_are_quarantined_and_the_rest_applies(wh):
    p = _setup(wh)
    cs = ChangeStream(["CUST_ID"], MySqlSource())
    no_key = cs.insert({"CUST_ID": None, "NAME": "x", "MKTSEGMENT": "y"})
    too_long = cs.insert(_row(9, "n" * 300))
    records = [
        cs.insert(_row(1)),
        {"partition": 0, "key": None, "value": "{not json"},
        no_key,
        {"partition": 0, "key": None, "value": {"op": "x", "after": {}}},
        too_long,
        cs.insert(_row(2)),
    ]
    ingest(wh, p, "customer", records)
    run = sync_one(wh, p, "customer")
    assert (run.upserted, run.quarantined) == (2, 4)
    assert [r[0] for r in wh.query(TARGET)] == ["C1", "C2"]
    got = wh.query(
        "SELECT kafka_offset, reason, convert_from(raw_value, 'UTF8'), payload IS NOT NULL FROM cdc.sync_quarantine ORDER BY 1"
    )
    assert got == [
        (1, "value is not valid JSON", "{not json", False),
        (2, "primary key field CUST_ID is missing or not a varchar(64)", None, True),
        (3, 'unknown op "x"', None, True),
        (4, "field NAME does not convert to varchar(256)", None, True),
    ]
    (st,) = [s for s in status(wh, p) if s.table == "customer"]
    assert st.quarantined == 4 and dict(st.quarantine_reasons)["value is not valid JSON"] == 1


def test_two_syncs_at_once_apply_every_event_once(database_dsn):
    from sync.warehouse import connect

    wh = connect(database_dsn)
    p = _setup(wh)
    cs = ChangeStream(["CUST_ID"], MySqlSource(), partitions=3)
    events = [cs.insert(_row(i)) for i in range(3000)] + [cs.update(_row(i), _row(i, "upd")) for i in range(0, 3000, 2)]
    ingest(wh, p, "customer", events)
    results = []
    start = threading.Barrier(2)

    def worker():
        conn = connect(database_dsn)
        start.wait()
        results.extend(sync(conn, p, ["customer"]))
        conn.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.status == "ok" for r in results)
    reads = sorted(r.events_read for r in results)
    assert reads == [0, len(events)], "one call applies the batch, the other waits and finds nothing new"
    assert wh.scalar('SELECT COUNT(*) FROM cdc."customer"') == 3000
    assert wh.scalar("SELECT COUNT(*) FROM cdc.\"customer\" WHERE name = 'upd'") == 1500
    assert wh.scalar("SELECT SUM(events_read) FROM cdc.sync_run_log") == len(events)
    wh.close()

"""Property: a query-based topic (format = "row", order_by = "column:updated_at") fed the
way the Confluent JDBC source connector feeds it ends equal to the source table's state as
the connector last polled it, and no sync ever moves a row back to an older version.

The connector, as its documentation describes it (JDBC Source Connector for Confluent
Platform): `mode=timestamp` polls `WHERE updated_at > <last offset>` ordered by the
column, whose values are "monotonically incrementing, but not necessarily unique";
`timestamp.delay.interval.ms` and restarts from an older committed offset re-poll an
overlapping window ("At least once delivery"), and a poll may re-read rows at exactly the
last offset. Drawn here: rows of 3 keys written over time (several writes in one
millisecond, to one row or to several), polls whose window reaches back 0-3 ms before the
last offset, records sent twice (a producer retry), a topic of 1-3 partitions, keyed by
the row's id (ValueToKey) or not keyed (the connector's default), messages with or without
the schemas wrapper, and any cut of the records into sync batches.

Without a Kafka key, two versions of one row may land on different partitions, where only
the column orders them: there the draw keeps one row's writes in distinct milliseconds
(docs/debezium.md, "Query-based topics": ties need one partition per key).
"""

from __future__ import annotations

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from sync.operations.runner import deploy
from sync.warehouse import connect
from tests.helpers import fresh_database, ingest, make_pipeline, sync_one

TABLE = """
[[tables]]
name = "polled"
topic = "db.polled"
format = "row"
primary_key = ["id"]
order_by = "column:updated_at"
columns = [
  { name = "id", type = "integer" },
  { name = "name", type = "varchar(16)" },
  { name = "updated_at", type = "timestamp", semantic = "io.debezium.time.Timestamp" },
]
"""
SCHEMA = {
    "type": "struct",
    "name": "polled",
    "optional": False,
    "fields": [
        {"type": "int32", "optional": False, "field": "id"},
        {"type": "string", "optional": True, "field": "name"},
        {
            "type": "int64",
            "optional": False,
            "name": "org.apache.kafka.connect.data.Timestamp",
            "version": 1,
            "field": "updated_at",
        },
    ],
}
KEYS = range(3)

steps = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.sampled_from(KEYS), st.integers(0, 2)),  # key, ms since the last write
        st.tuples(st.just("poll"), st.integers(0, 3), st.booleans()),  # reach back (ms), re-send a record
    ),
    min_size=4,
    max_size=30,
)


def polls(drawn, keyed: bool) -> tuple[list[tuple[dict, bool]], dict]:
    """The connector's messages ((row, re-sent) in poll order) and the table as last polled."""
    clock, offset, names = 1_600_000_000_000, None, 0
    table: dict[int, dict] = {}
    messages: list[tuple[dict, bool]] = []
    last_polled: dict[int, dict] = {}
    for step in drawn:
        if step[0] == "write":
            _, key, dt = step
            clock += dt
            if not keyed and key in table and table[key]["updated_at"] == clock:
                clock += 1  # unkeyed: one row's versions in distinct milliseconds
            names += 1
            table[key] = {"id": key, "name": f"v{names}", "updated_at": clock}
            continue
        _, back, resend = step
        low = None if offset is None else offset - back
        read = sorted(
            (r for r in table.values() if low is None or r["updated_at"] >= low), key=lambda r: (r["updated_at"], r["id"])
        )
        for i, row in enumerate(read):
            messages.append((dict(row), resend and i == 0))
            last_polled[row["id"]] = dict(row)
        if read:
            offset = read[-1]["updated_at"]
    return messages, last_polled


@pytest.fixture(scope="module")
def warehouse(pg_server_dsn):
    with fresh_database(pg_server_dsn, "prop_row_topics") as dsn:
        wh = connect(dsn)
        pipeline = make_pipeline(TABLE)
        deploy(wh, pipeline, "test")
        yield wh, pipeline
        wh.close()


def _target(wh) -> dict[int, tuple[str, int]]:
    sql = "SELECT id, name, CAST(EXTRACT(EPOCH FROM updated_at) * 1000 AS bigint) FROM cdc.polled"
    return {i: (n, ms) for i, n, ms in wh.query(sql)}


@settings(max_examples=60)
@given(
    drawn=steps,
    keyed=st.booleans(),
    partitions=st.integers(1, 3),
    data=st.data(),
)
def test_re_polled_windows_end_at_the_last_polled_state(warehouse, drawn, keyed, partitions, data):
    wh, pipeline = warehouse
    for suffix in ("", "__stream", "__stage", "__watermark", "__deleted", "__quarantine", "__drift"):
        wh.execute(f'TRUNCATE cdc."polled{suffix}"')
    wh.execute("TRUNCATE cdc.sync_run_log")

    messages, last_polled = polls(drawn, keyed)
    records = []
    first = data.draw(st.integers(0, partitions - 1))
    for n, (row, resend) in enumerate(messages):
        # Keyed: the key's partition; not keyed: round robin (the Kafka producer's
        # partitioner for records without a key before the sticky one of Kafka 2.4).
        partition = row["id"] % partitions if keyed else (first + n) % partitions
        wrapped = data.draw(st.booleans())
        value = {"schema": SCHEMA, "payload": row} if wrapped else row
        record = {"partition": partition, "key": {"id": row["id"]} if keyed else None, "value": value}
        records += [record, record] if resend else [record]
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(len(records), 1)), max_size=4))))
    note(f"keyed={keyed} partitions={partitions} cuts={cuts}")
    for r in records:
        note(f"p{r['partition']} {r['value'].get('payload', r['value'])}")

    seen: dict[int, int] = {}
    for lo, hi in zip([0, *cuts], [*cuts, len(records)]):
        if lo >= hi:
            continue
        ingest(wh, pipeline, "polled", records[lo:hi])
        run = sync_one(wh, pipeline, "polled")
        assert run.quarantined == 0
        for key, (_, ms) in _target(wh).items():
            assert ms >= seen.get(key, ms), f"row {key} moved back from {seen[key]} to {ms}"
            seen[key] = ms
    assert _target(wh) == {k: (r["name"], r["updated_at"]) for k, r in last_polled.items()}

"""Property: a column added after its values were streamed across TOAST placeholders is
filled with the source's value wherever a retained record carries it, and every other row
is counted as unknown (never a silent NULL), also after later placeholder updates.

The outside contract: Debezium's PostgreSQL connector sends an unchanged TOASTed value as
`__debezium_unavailable_value` ("Handling unchanged Postgres TOAST values", Debezium blog,
2019-10-08); an insert and a change of the value carry it in full, and a NULL is never
TOASTed. With REPLICA IDENTITY DEFAULT a delete's `before` holds only the key. A restart
re-sends a suffix at new offsets ("at-least-once during recovery"), and the topic's
retention drops its oldest records. The topic's partition count may grow from 3 to 4 at
any point of the delivery: Kafka's default partitioner maps a key to `hash(key) %
number_of_partitions`, so "messages with the same key may be routed to different
partitions after the expansion" (Kafka documentation, "Modifying topics";
tests/kafka_partitioner.py). The table orders by LSN or, where Kafka order decides
(`order_by = "kafka"`), by the record timestamps across partitions. The expected state is the source's, from the history
alone: a row's value is known when a retained record of its key (a re-sent copy included)
carries it; a row whose writing record is no longer retained is not counted
(docs/operations.md).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.operations.runner import deploy
from sync.operations.unknown_values import unknown_values
from sync.sql.column_fill import column_fill_sql
from sync.warehouse import connect
from tests.helpers import fresh_database, ingest, make_pipeline, sync_one
from tests.kafka_partitioner import json_key, partition_for
from tests.test_column_fill_toast import TABLE, WITH_BODY, U, change
from tests.test_delivery_semantics import TS
from tests.test_property_cdc import _middle_first

KEYS = (2, 3, 5)  # 3 to 4 partitions: key 2 moves down (1 to 0), key 3 up (0 to 3), key 5 down (2 to 1)
steps = st.lists(
    st.tuples(st.sampled_from(["body", "title", "title", "delete"]), st.sampled_from(KEYS), st.sampled_from(["a", "b", None])),
    min_size=1,
    max_size=14,
)


def history(drawn, state: dict, lsn: int) -> tuple[list[dict], int]:
    """The connector's records for the drawn changes, from `state` (key -> body) on."""
    records = []
    for kind, key, body in drawn:
        lsn += 10
        if kind == "delete":
            if key in state:
                del state[key]
                records.append({"partition": 0, "key": {"id": key}, "value": _delete(key, lsn)})
            continue
        if key not in state or kind == "body":
            op = "u" if key in state else "c"
            state[key] = body
            records.append(change(op, key, lsn, body))
        else:  # another column changed: an unchanged TOASTed value is the placeholder
            records.append(change("u", key, lsn, U if state[key] is not None else None, title=f"t{lsn}"))
    return records, lsn


def _place(records: list[dict], first: int, grow: int, offsets: dict[int, int]) -> None:
    """Kafka coordinates of `records`, the delivery's records `first`.. on: the partition
    Kafka's default partitioner picks (3 partitions before the delivery's record `grow`, 4
    from it on), the next offset of that partition, and a CreateTime 1 ms after the record
    before."""
    for i, r in enumerate(records, start=first):
        r["partition"] = partition_for(json_key(r["key"]), 3 if i < grow else 4)
        r["offset"] = offsets[r["partition"]] = offsets.get(r["partition"], -1) + 1
        r["timestamp"] = TS + i


def _delete(key: int, lsn: int) -> dict:
    record = change("d", key, lsn, None)["value"]
    return {**record, "before": {"id": key}, "after": None}


@pytest.fixture(scope="module")
def warehouse(pg_server_dsn):
    with fresh_database(pg_server_dsn, "prop_column_fill") as dsn:
        wh = connect(dsn)
        yield wh
        wh.close()


def _reset(wh) -> None:
    wh.execute("DROP VIEW IF EXISTS cdc.sync_quarantine, cdc.sync_schema_drift")
    for relation in ("doc", "doc__stream", "doc__stage", "doc__watermark", "doc__deleted", "doc__quarantine", "doc__drift"):
        if wh.relation_exists("cdc", relation):
            wh.execute(f'DROP TABLE cdc."{relation}"')
    wh.execute("DROP TABLE IF EXISTS cdc.sync_run_log")


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(first=steps, later=steps, data=st.data())
def test_added_column_holds_every_known_value_and_counts_the_rest(warehouse, first, later, data):
    wh = warehouse
    _reset(wh)
    order = data.draw(st.sampled_from(['order_by = "postgres-lsn"', 'order_by = "kafka"']), label="order")
    narrow = make_pipeline(TABLE.replace('order_by = "postgres-lsn"', order))
    wide = make_pipeline(WITH_BODY.replace('order_by = "postgres-lsn"', order))
    deploy(wh, narrow, "test")
    state: dict = {}
    records, lsn = history(first, state, 0)
    resume = data.draw(_middle_first(0, len(records)), label="a restart resumes at (the end: none)")
    delivered = [dict(r) for r in records + records[resume:]]
    grow = data.draw(_middle_first(0, len(delivered)), label="the partition count grows at (the end: never)")
    offsets: dict[int, int] = {}
    _place(delivered, 0, grow, offsets)
    for batch in (delivered[: len(records)], delivered[len(records) :]):  # the re-sent suffix: a later batch
        if batch:
            ingest(wh, narrow, "doc", batch)
            sync_one(wh, narrow, "doc")
    # Retention (by time) drops the oldest records.
    kept = data.draw(_middle_first(0, len(delivered)), label="records dropped by retention")
    for r in delivered[:kept]:
        wh.execute(
            'DELETE FROM cdc."doc__stream" WHERE kafka_partition = %s AND kafka_offset = %s', (r["partition"], r["offset"])
        )
    retained = delivered[kept:]

    # The revision: the column on the target and the stage, the fill, the procedure for it.
    for relation in ("doc", "doc__stage"):
        wh.execute(f'ALTER TABLE cdc."{relation}" ADD COLUMN body varchar(65535)')
    table = wide.table("doc")
    wh.execute(column_fill_sql(wh.dialect.bind_schema("cdc"), wide, table, table.column_by_any_name("body")))
    deploy(wh, wide, "test")

    def carries(r: dict, key: int) -> bool:
        after = r["value"].get("after")
        return r["key"] == {"id": key} and after is not None and after.get("body") != U

    known = {k for k in state if any(carries(r, k) for r in retained)}
    expected = {k: (v if k in known else None) for k, v in state.items()}
    assert dict(wh.query('SELECT id, body FROM cdc."doc"')) == expected
    # The record that wrote each row: with LSNs the first delivery of its key's last change
    # (a re-sent copy is stale); in Kafka order its key's last delivery. When retention kept it.
    writers = records if order.endswith('"postgres-lsn"') else delivered
    last = {r["key"]["id"]: i for i, r in enumerate(writers)}
    written = {k for k in state if last[k] >= kept}
    unknown = {k for k in written if k not in known and state[k] is not None}
    assert [(u.column, u.rows) for u in unknown_values(wh, wide, "doc")] == ([("body", len(unknown))] if unknown else [])

    # Later changes: placeholders keep what is stored; a carried value makes it known.
    more, _ = history(later, state, lsn)
    known |= {k for k in KEYS if any(carries(r, k) for r in more)}
    written |= {k for k in KEYS if any(r["key"] == {"id": k} for r in more)}
    _place(more, len(delivered), grow, offsets)
    ingest(wh, wide, "doc", more)
    sync_one(wh, wide, "doc")
    expected = {k: (v if k in known else None) for k, v in state.items()}
    assert dict(wh.query('SELECT id, body FROM cdc."doc"')) == expected
    unknown = {k for k in written if k in state and k not in known and state[k] is not None}
    assert [(u.column, u.rows) for u in unknown_values(wh, wide, "doc")] == ([("body", len(unknown))] if unknown else [])

"""Ordering by source position: a re-delivered older event never overwrites a newer one,
neither in the batch that carries it nor in a later one. Scenario tests plus a property
test against a plain-Python model (the newest delivered source position per key wins)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sync.operations.runner import deploy
from tests.helpers import feed, make_pipeline
from tests.test_debezium_envelopes import rows

TABLES = (
    '[[tables]]\nname = "hard"\ntopic = "hard"\nprimary_key = ["id"]\norder_by = "mysql-binlog"\n'
    'columns = [{ name = "id", type = "integer" }, { name = "v", type = "integer" }]\n'
    '[[tables]]\nname = "soft"\ntopic = "soft"\nprimary_key = ["id"]\norder_by = "postgres-lsn"\ndelete_mode = "soft"\n'
    'columns = [{ name = "id", type = "integer" }, { name = "v", type = "integer" }]\n'
)


def event(table: str, key: int, value: int | None, pos: int) -> dict[str, Any]:
    """A full-envelope event at source position `pos` (value None: a delete)."""
    if table == "hard":  # MySQL: file number, position, row; files roll over
        source = {"file": f"mysql-bin.{pos // 7 + 1}", "pos": (pos % 7) * 1000 + 4, "row": pos % 3}
    else:  # PostgreSQL: sequence [last commit lsn, lsn]; lsn alone is not a total order
        source = {"sequence": json.dumps([str(pos * 100), str(pos * 100 + 7)]), "lsn": pos * 100 + 7}
    source["ts_ms"] = 1_700_000_000_000 + pos
    row = {"id": key, "v": value}
    payload = (
        {"before": None, "after": row, "op": "u", "source": source}
        if value is not None
        else {"before": {"id": key, "v": None}, "after": None, "op": "d", "source": source}
    )
    return {"partition": key % 2, "key": {"id": key}, "value": payload}


def state(wh, table: str) -> dict[int, int]:
    where = " WHERE NOT _deleted" if table == "soft" else ""
    return dict(wh.query(f'SELECT id, v FROM cdc."{table}"{where}'))


def test_replayed_older_events_are_stale(wh):
    pipeline = make_pipeline(TABLES)
    deploy(wh, pipeline, "test")
    for table in ("hard", "soft"):
        first = [event(table, 1, 10, 1), event(table, 1, 11, 5), event(table, 2, 20, 2), event(table, 2, None, 6)]
        feed(wh, pipeline, table, first)
        assert state(wh, table) == {1: 11}, table
        # a restarted connector re-delivers all four, after a newer event of key 1
        run = feed(wh, pipeline, table, [event(table, 1, 12, 9), *first])
        assert state(wh, table) == {1: 12}, table
        run = feed(wh, pipeline, table, first)
        assert run.stale == 2 and state(wh, table) == {1: 12}, table
        # binlog files compare by number, not text: mysql-bin.10 is after mysql-bin.9
        run = feed(wh, pipeline, table, [event(table, 3, 30, 63), event(table, 3, 31, 60)])
        assert state(wh, table)[3] == 30, table


histories = st.lists(st.tuples(st.integers(1, 3), st.one_of(st.none(), st.integers(0, 99))), min_size=1, max_size=8)
FLAT = (
    '[[tables]]\nname = "flat"\ntopic = "flat"\nformat = "debezium-unwrap"\nprimary_key = ["id"]\n'
    'order_by = "postgres-lsn"\ncolumns = [{ name = "id", type = "integer" }, { name = "v", type = "integer" }]\n'
)


def flat_event(key: int, value: int | None, pos: int) -> dict[str, Any]:
    """ExtractNewRecordState with deletes as tombstones only: no position on a delete."""
    if value is None:
        return {"partition": key % 2, "key": {"id": key}, "value": None}
    return {"partition": key % 2, "key": {"id": key}, "value": {"id": key, "v": value, "__lsn": pos * 100, "__deleted": "false"}}


def newest_state(delivered: list[tuple[int, int | None, int]]) -> dict[int, int]:
    """The model: per key, the delivered event with the highest source position wins."""
    newest: dict[int, tuple[int, int | None]] = {}
    for key, value, pos in delivered:
        if key not in newest or pos > newest[key][0]:
            newest[key] = (pos, value)
    return {k: v for k, (_, v) in newest.items() if v is not None}


@settings(max_examples=120, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=histories, data=st.data())
def test_property_replays_never_regress(wh, history, data):
    """Events of a history, delivered in batches with older events re-delivered: after
    every sync each key holds the state of its newest delivered event. Positioned events
    are replayed anywhere; with tombstone-only deletes (no position to compare) replays
    are what a restarted connector sends: everything from an earlier offset on."""
    pipeline = make_pipeline(TABLES + FLAT)
    if not wh.relation_exists("cdc", "hard"):
        deploy(wh, pipeline, "test")
    for table in ("hard", "soft", "flat"):
        for obj in (table, f"{table}__stream", f"{table}__watermark", f"{table}__stage"):
            wh.execute(f'DELETE FROM cdc."{obj}"')
    for table in ("hard", "flat"):
        wh.execute(f'DELETE FROM cdc."{table}__deleted"')

    events = [(key, value, pos) for pos, (key, value) in enumerate(history, start=1)]
    delivered: list[tuple[int, int | None, int]] = []
    delivered_flat: list[tuple[int, int | None, int]] = []
    cut = 0
    while cut < len(events):
        step = data.draw(st.integers(1, len(events) - cut), label="batch size")
        fresh = events[cut : cut + step]
        cut += step
        # Fresh events keep their source order (Debezium emits in order); re-delivered
        # older events land anywhere in between.
        batch = list(fresh)
        for replay in data.draw(st.lists(st.sampled_from(events[:cut]), max_size=3), label="replays"):
            batch.insert(data.draw(st.integers(0, len(batch)), label="at"), replay)
        delivered += batch
        restart = data.draw(st.integers(0, len(delivered_flat)), label="restart from")
        flat_batch = delivered_flat[restart:] + fresh
        delivered_flat += flat_batch
        for table in ("hard", "soft"):
            feed(wh, pipeline, table, [event(table, k, v, p) for k, v, p in batch])
            assert state(wh, table) == newest_state(delivered), (table, delivered)
        feed(wh, pipeline, "flat", [flat_event(k, v, p) for k, v, p in flat_batch])
        assert dict(wh.query('SELECT id, v FROM cdc."flat"')) == newest_state(delivered_flat), delivered_flat
    assert rows(wh, "hard", "id, v") == sorted(newest_state(delivered).items())


def test_tombstone_after_a_replay_still_deletes(wh):
    from tests.test_debezium_envelopes import table_toml, tombstone, unwrap

    pipeline = make_pipeline(table_toml("flat", format="debezium-unwrap", order_by="postgres-lsn"))
    deploy(wh, pipeline, "test")
    feed(wh, pipeline, "flat", [unwrap(1, "a", op="c", lsn=10), unwrap(1, "b", lsn=20)])
    # a re-delivered older event, then the tombstone that followed the newest one
    run = feed(wh, pipeline, "flat", [unwrap(1, "a", op="c", lsn=10), tombstone(1)])
    assert rows(wh, "flat") == [] and run.deleted == 1
    # the delete is remembered at the newest position stored before it: older replays stay
    # stale; a re-sent copy of that newest event applies again (the tombstone has no
    # position to tell it from a later write), and the tombstone re-sent after it deletes
    # again, as a restart re-sends a suffix in order
    assert wh.scalar('SELECT _source_pos FROM cdc."flat__deleted"').endswith("20")
    run = feed(wh, pipeline, "flat", [unwrap(1, "a", op="c", lsn=10)])
    assert rows(wh, "flat") == [] and run.stale == 1
    feed(wh, pipeline, "flat", [unwrap(1, "b", lsn=20)])
    run = feed(wh, pipeline, "flat", [tombstone(1)])
    assert rows(wh, "flat") == [] and run.deleted == 1
    # replays on both sides of a tombstone, all older than the stored row: it still deletes
    feed(wh, pipeline, "flat", [unwrap(2, "a", op="c", lsn=10), unwrap(2, "b", lsn=30)])
    run = feed(wh, pipeline, "flat", [unwrap(2, "a", op="c", lsn=10), tombstone(2), unwrap(2, "x", lsn=20)])
    assert rows(wh, "flat") == [] and run.deleted == 1

"""Property: tables sharing a topic end up exactly as if each had read a topic of its own.

Random histories of a MySQL database routed whole into one topic by the topic routing SMT
(records shaped as in tests/routing_smt.py: the value untouched, the original topic added
to the key): inserts, updates and deletes (each followed by its tombstone) of two
configured tables and one no route selects, spread over one to three partitions, with
ingests and the two tables' syncs interleaved at random. After a last sync of both, each
target equals the reference model (tests/cdc_model.py, written from the procedure
contract) fed with that table's records alone, selected in Python by the `source` block as
Debezium writes it; the records of the unselected table are counted once, by the first
table of the topic, and never reach a target.
"""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.debezium.events import ChangeStream, MySqlSource
from sync.operations.runner import deploy
from sync.warehouse import Warehouse, connect
from tests.cdc_model import expected_rows
from tests.helpers import fresh_database, ingest, make_pipeline, sync_one
from tests.routing_smt import rerouted
from tests.test_routing import WHOLE_DATABASE

TABLES = {"customers": "customer", "orders": "orders"}  # source table -> pipeline table
UNSELECTED = "audit_log"


@pytest.fixture(scope="module")
def warehouse(pg_server_dsn):
    with fresh_database(pg_server_dsn, "prop_routing") as dsn:
        wh = connect(dsn)
        pipeline = make_pipeline(WHOLE_DATABASE)
        deploy(wh, pipeline, "pipeline.toml")
        yield wh, pipeline
        wh.close()


def _reset(wh: Warehouse) -> None:
    relations = ["customer__stream", "sync_run_log"]
    relations += [
        f"{t}{s}" for t in TABLES.values() for s in ("", "__stage", "__watermark", "__deleted", "__quarantine", "__drift")
    ]
    wh.execute("TRUNCATE " + ", ".join(f'cdc."{r}"' for r in relations))


change = st.tuples(
    st.sampled_from([*TABLES, UNSELECTED]),
    st.sampled_from(["upsert", "upsert", "delete"]),
    st.integers(1, 4),
    st.integers(0, 99),
)
step = st.one_of(change, st.sampled_from(["ingest", "sync customer", "sync orders"]))


def _history(steps: list, partitions: int) -> tuple[list[list[dict]], list[tuple[str, str]]]:
    """The refreshes to ingest and the actions, with each record's partition and offset set."""
    source = MySqlSource(server="shop", db="shop")
    streams = {t: ChangeStream(["id"], source) for t in (*TABLES, UNSELECTED)}
    live: set[tuple[str, int]] = set()
    offsets = [0] * partitions
    batches: list[list[dict]] = [[]]
    actions: list[tuple[str, str]] = []

    def emit(record: dict, table: str) -> None:
        record = rerouted(record, f"shop.shop.{table}")
        partition = zlib.crc32(repr(sorted(record["key"].items())).encode()) % partitions
        record.update(partition=partition, offset=offsets[partition])
        offsets[partition] += 1
        batches[-1].append(record)

    for s in steps:
        if isinstance(s, str):
            actions.append(("ingest", "") if s == "ingest" else ("sync", s.split()[1]))
            if s == "ingest":
                batches.append([])
            continue
        table, kind, i, v = s
        source.table = table
        cs = streams[table]
        row = {"id": i, "name": f"n{v}"} if table == "customers" else {"id": i, "total": v}
        if kind == "upsert":
            emit(cs.update(None, row) if (table, i) in live else cs.insert(row), table)
            live.add((table, i))
        elif (table, i) in live:
            emit(cs.delete(row), table)
            emit(cs.tombstone(row), table)
            live.discard((table, i))
    return batches, actions


@settings(max_examples=25)
@given(steps=st.lists(step, min_size=1, max_size=30), partitions=st.integers(1, 3))
def test_tables_sharing_a_topic_end_as_if_each_had_its_own(warehouse, steps, partitions):
    wh, pipeline = warehouse
    _reset(wh)
    batches, actions = _history(steps, partitions)
    pending = iter(batches)
    for action, table in actions:
        if action == "ingest":
            batch = next(pending)
            if batch:
                ingest(wh, pipeline, "customer", batch)
        else:
            sync_one(wh, pipeline, table)
    rest = [r for batch in pending for r in batch]
    if rest:
        ingest(wh, pipeline, "customer", rest)
    for table in TABLES.values():
        sync_one(wh, pipeline, table)

    records = [r for batch in batches for r in batch]
    for source_table, table in TABLES.items():
        own = [r for r in records if r["value"] is not None and r["value"]["source"]["table"] == source_table]
        config = pipeline.table(table)
        expected = {k: tuple(row[c.target_name] for c in config.columns) for k, row in expected_rows(own, config).items()}
        stored = wh.query(f'SELECT {", ".join(c.target_name for c in config.columns)} FROM cdc."{table}"')
        assert {(r[0],): tuple(r) for r in stored} == expected, table
    unselected = sum(1 for r in records if r["value"] is not None and r["value"]["source"]["table"] == UNSELECTED)
    counted = wh.scalar("SELECT COALESCE(SUM(events), 0) FROM cdc.customer__drift WHERE kind = 'unmatched'")
    assert int(counted) == unselected
    assert wh.scalar("SELECT COUNT(*) FROM cdc.orders__drift") == 0

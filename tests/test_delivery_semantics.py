"""Regression tests: Debezium's real delivery, one test per failure seen with it.

Each test feeds messages shaped like the connectors' output (field names and encodings
from Debezium's documentation, quoted where a rule depends on it) through `ingest` and
`sync`, the functions the CLI commands call, and checks the target against the source's
state. See docs/correctness.md, "Delivery semantics".
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sync.config import Pipeline
from sync.operations.runner import deploy, status
from sync.warehouse import Warehouse
from tests.helpers import feed, make_pipeline

TS = 1_700_000_000_000  # source.ts_ms of the first change


def table_toml(name: str, *, columns: str | None = None, key: str = "id", **options: str) -> str:
    extra = "".join(f'{k} = "{v}"\n' for k, v in options.items())
    columns = (
        columns
        or '{ name = "id", type = "integer" }, { name = "balance", type = "integer" }, { name = "note", type = "varchar(64)" }'
    )
    return f'[[tables]]\nname = "{name}"\ntopic = "topic.{name}"\nprimary_key = ["{key}"]\n{extra}columns = [{columns}]\n'


def setup(wh: Warehouse, toml: str) -> Pipeline:
    pipeline = make_pipeline(toml)
    deploy(wh, pipeline, "test")
    return pipeline


def rows(wh: Warehouse, table: str, columns: str = "id, balance") -> list[tuple]:
    return wh.query(f'SELECT {columns} FROM cdc."{table}" ORDER BY 1')


# ---- message builders, shaped as the connectors write them --------------------------------


def pg_source(lsn: int, commit: int | None, *, snapshot: str = "false") -> dict[str, Any]:
    """PostgreSQL `source`: "sequence ... the first value is always the last committed LSN,
    the second value is always the current LSN. Either value may be null." (Debezium
    PostgreSQL connector documentation, source metadata)."""
    return {
        "version": "2.7.0.Final",
        "connector": "postgresql",
        "name": "pg",
        "ts_ms": TS + lsn,
        "snapshot": snapshot,
        "db": "shop",
        "sequence": json.dumps([None if commit is None else str(commit), str(lsn)]),
        "schema": "public",
        "table": "accounts",
        "txId": 700 + lsn // 100,
        "lsn": lsn,
        "xmin": None,
    }


def mysql_source(pos: int, row: int = 0, file: str = "mysql-bin.000003") -> dict[str, Any]:
    return {
        "version": "2.7.0.Final",
        "connector": "mysql",
        "name": "my",
        "ts_ms": TS + pos,
        "snapshot": "false",
        "db": "shop",
        "sequence": None,
        "table": "accounts",
        "server_id": 223344,
        "gtid": None,
        "file": file,
        "pos": pos,
        "row": row,
        "thread": 12,
        "query": None,
    }


def envelope(op: str, key: int, after: dict | None, before: dict | None, source: dict, partition: int = 0) -> dict:
    return {
        "partition": partition,
        "key": {"id": key},
        "value": {"before": before, "after": after, "source": source, "op": op, "ts_ms": source["ts_ms"] + 5},
    }


def unwrap_row(key: int, balance: int | None, lsn: int, *, op: str = "u", deleted: bool = False, partition: int = 0) -> dict:
    """ExtractNewRecordState with add.fields=op,lsn,source.ts_ms and
    delete.tombstone.handling.mode=rewrite-with-tombstone: "__deleted" is the string
    "true"/"false" (DefaultDeleteHandlingStrategy)."""
    value = {
        "id": key,
        "balance": balance,
        "note": None,
        "__op": op,
        "__lsn": lsn,
        "__source_ts_ms": TS + lsn,
        "__deleted": "true" if deleted else "false",
    }
    return {"partition": partition, "key": {"id": key}, "value": value}


def tombstone(key: Any, partition: int = 0) -> dict:
    return {"partition": partition, "key": key if not isinstance(key, int) else {"id": key}, "value": None}


# ---- 1. a re-delivered tombstone ------------------------------------------------------------


@pytest.mark.parametrize("cut", ["same batch", "tombstone in the next batch"])
def test_redelivered_tombstone_does_not_delete_a_live_row(wh, cut):
    """rewrite-with-tombstone: every tombstone follows the delete event of its key (which
    carries the position), so it adds nothing; a restart re-sends from lsn 200."""
    p = setup(wh, table_toml("acc", format="debezium-unwrap", order_by="postgres-lsn"))
    feed(
        wh,
        p,
        "acc",
        [
            unwrap_row(1, 10, 100, op="c"),
            unwrap_row(1, None, 200, op="d", deleted=True),
            tombstone(1),
            unwrap_row(1, 30, 300, op="c"),
        ],
    )
    assert rows(wh, "acc") == [(1, 30)]
    resent = [unwrap_row(1, None, 200, op="d", deleted=True), tombstone(1)]
    if cut == "same batch":
        run = feed(wh, p, "acc", resent)
    else:
        feed(wh, p, "acc", resent[:1])
        assert rows(wh, "acc") == [(1, 30)]
        run = feed(wh, p, "acc", resent[1:])
    assert rows(wh, "acc") == [(1, 30)], "the re-sent tombstone deleted a live row"
    assert run.deleted == 0
    run = feed(wh, p, "acc", [unwrap_row(1, 30, 300, op="c")])
    assert rows(wh, "acc") == [(1, 30)] and run.stale == 1


# ---- 2. tied positions across a batch boundary ----------------------------------------------


def test_tied_positions_keep_kafka_order_across_batches(wh):
    """binlog_transaction_compression=ON: every change of the transaction carries the same
    file/pos and row 0; Kafka order is the order among them."""
    p = setup(wh, table_toml("acc", order_by="mysql-binlog"))
    tx = [
        envelope("c", 1, {"id": 1, "balance": 0, "note": None}, None, mysql_source(1041)),
        envelope("u", 1, {"id": 1, "balance": 100, "note": None}, {"id": 1, "balance": 0, "note": None}, mysql_source(1041)),
        envelope("u", 1, {"id": 1, "balance": 250, "note": None}, {"id": 1, "balance": 100, "note": None}, mysql_source(1041)),
    ]
    feed(wh, p, "acc", tx[:2])
    assert rows(wh, "acc") == [(1, 100)]
    run = feed(wh, p, "acc", tx[2:])
    assert rows(wh, "acc") == [(1, 250)], "the later change of the transaction was taken for stale"
    assert run.upserted == 1 and run.stale == 0
    # A restart re-sends the transaction. An exact copy of the stored change is stale; a
    # re-sent earlier change of the transaction cannot be told from a later one (same
    # position), so it applies until the rest of the re-sent transaction arrives: the end
    # state is the source's (docs/correctness.md, "Delivery semantics").
    run = feed(wh, p, "acc", tx[2:])
    assert rows(wh, "acc") == [(1, 250)] and run.stale == 1
    feed(wh, p, "acc", tx[:1])
    assert rows(wh, "acc") == [(1, 0)]
    run = feed(wh, p, "acc", tx[1:])
    assert rows(wh, "acc") == [(1, 250)] and run.upserted == 1


# ---- 3. a re-created PostgreSQL connector's snapshot ----------------------------------------


def test_recreated_postgres_connector_snapshot_is_applied(wh):
    """A connector re-created after its slot was lost starts with no offset: its snapshot
    reads carry sequence [null, "<lsn>"], and so does its first streamed transaction."""
    p = setup(wh, table_toml("acc", order_by="postgres-lsn"))
    a = {"id": 1, "balance": 10, "note": None}
    feed(
        wh,
        p,
        "acc",
        [envelope("c", 1, a, None, pg_source(85_000, 80_000)), envelope("c", 2, {**a, "id": 2}, None, pg_source(85_100, 80_000))],
    )
    snap = [
        envelope("r", 1, {**a, "balance": 11}, None, pg_source(90_000, None, snapshot="true")),
        envelope("r", 2, {**a, "id": 2, "balance": 22}, None, pg_source(90_000, None, snapshot="last")),
    ]
    run = feed(wh, p, "acc", snap)
    assert rows(wh, "acc") == [(1, 11), (2, 22)], "the snapshot was ranked below the stored positions"
    assert run.stale == 0
    # the first streamed transaction after it has no last commit LSN either
    run = feed(wh, p, "acc", [envelope("u", 1, {**a, "balance": 12}, None, pg_source(90_100, None))])
    assert rows(wh, "acc") == [(1, 12), (2, 22)] and run.stale == 0
    # then the commit LSN of that transaction comes first, and orders after it
    run = feed(wh, p, "acc", [envelope("u", 2, {**a, "id": 2, "balance": 23}, None, pg_source(90_200, 90_150))])
    assert rows(wh, "acc") == [(1, 12), (2, 23)] and run.stale == 0


# ---- 4. truncates ordered by source position ------------------------------------------------


def test_truncate_is_ordered_by_source_position_not_kafka_time(wh):
    """A truncate has no key: "ordering is guaranteed only for topics that use a single
    partition" (Debezium, truncate events). Positions order it against row events."""
    p = setup(wh, table_toml("acc", order_by="postgres-lsn", on_truncate="delete"))
    a = {"id": 1, "balance": 10, "note": None}
    trunc = {"partition": 0, "key": None, "value": {"source": pg_source(200, 150), "op": "t", "ts_ms": TS}}
    # an insert at lsn 100 on partition 1 and a truncate at lsn 200 on partition 0, same millisecond
    run = feed(
        wh,
        p,
        "acc",
        [{**envelope("c", 1, a, None, pg_source(100, 50), partition=1), "timestamp": TS}, {**trunc, "timestamp": TS}],
    )
    assert rows(wh, "acc") == [], "the insert before the truncate survived it"
    assert run.truncates == 1
    # an insert at lsn 300 synced before a truncate at lsn 200 arrives stays
    feed(wh, p, "acc", [envelope("c", 2, {**a, "id": 2}, None, pg_source(300, 250), partition=1)])
    feed(wh, p, "acc", [{**trunc, "timestamp": TS}])
    assert rows(wh, "acc") == [(2, 10)], "a truncate wiped a newer row"
    # a replay of the insert at 100 stays stale: the truncate removed it at lsn 200
    run = feed(wh, p, "acc", [envelope("c", 1, a, None, pg_source(100, 50), partition=1)])
    assert rows(wh, "acc") == [(2, 10)] and run.stale == 1


def test_a_truncate_outranks_the_older_delete_remembered_for_a_key(wh):
    """A key deleted at lsn 400 is remembered there. Its re-create at lsn 500 and a truncate
    at lsn 600 then arrive in one batch: the truncate voids the create. Debezium delivers
    "at-least-once during recovery" (PostgreSQL connector documentation): a restart re-sends
    the create at a new offset. It precedes the truncate, so it stays stale; the remembered
    delete at 400 alone would let it back in. So would a late change between the two of a
    key deleted before and absent from the truncate's batch."""
    p = setup(wh, table_toml("acc", order_by="postgres-lsn", on_truncate="delete"))
    a, b = {"id": 1, "balance": 10, "note": None}, {"id": 2, "balance": 20, "note": None}
    trunc = {"partition": 1, "key": None, "value": {"source": pg_source(600, 590), "op": "t", "ts_ms": TS}}
    feed(
        wh,
        p,
        "acc",
        [
            envelope("c", 1, a, None, pg_source(100, 90)),
            envelope("d", 1, None, a, pg_source(400, 390)),
            tombstone(1),
            envelope("c", 2, b, None, pg_source(110, 105)),
            envelope("d", 2, None, b, pg_source(410, 405)),
        ],
    )
    feed(wh, p, "acc", [envelope("c", 1, {**a, "balance": 50}, None, pg_source(500, 490)), trunc])
    assert rows(wh, "acc") == []
    run = feed(wh, p, "acc", [envelope("c", 1, {**a, "balance": 50}, None, pg_source(500, 490))])  # re-sent
    assert rows(wh, "acc") == [] and run.stale == 1, "the truncate's row came back"
    run = feed(wh, p, "acc", [envelope("c", 2, {**b, "balance": 55}, None, pg_source(550, 540))])  # late
    assert rows(wh, "acc") == [] and run.stale == 1, "a change before the truncate came back"


# ---- 5. a tombstone after its delete, in a later batch --------------------------------------


def test_tombstone_in_a_later_batch_keeps_the_deleted_key_record(wh):
    p = setup(wh, table_toml("acc", format="debezium-unwrap", order_by="postgres-lsn"))
    feed(wh, p, "acc", [unwrap_row(1, 10, 100, op="c"), unwrap_row(1, None, 200, op="d", deleted=True)])
    record = wh.query('SELECT _source_pos, _source_ts FROM cdc."acc__deleted"')
    assert record[0][0] is not None and record[0][1] is not None
    feed(wh, p, "acc", [tombstone(1)])
    assert wh.query('SELECT _source_pos, _source_ts FROM cdc."acc__deleted"') == record
    # so an older replay stays stale
    run = feed(wh, p, "acc", [unwrap_row(1, 10, 100, op="c")])
    assert rows(wh, "acc") == [] and run.stale == 1


# ---- 6. source.ts_ms out of range -----------------------------------------------------------


def test_out_of_range_source_time_is_quarantined_not_a_failed_call(wh):
    p = setup(wh, table_toml("acc", order_by="mysql-binlog"))
    bad = envelope("c", 1, {"id": 1, "balance": 1, "note": None}, None, {**mysql_source(500), "ts_ms": 1_700_000_000_000_000_000})
    good = envelope("c", 2, {"id": 2, "balance": 2, "note": None}, None, mysql_source(600))
    run = feed(wh, p, "acc", [bad, good])
    assert run.quarantined == 1 and rows(wh, "acc") == [(2, 2)]
    reason = wh.scalar('SELECT reason FROM cdc."sync_quarantine"')
    assert "ts_ms" in reason
    run = feed(wh, p, "acc", [envelope("u", 2, {"id": 2, "balance": 3, "note": None}, None, mysql_source(700))])
    assert rows(wh, "acc") == [(2, 3)]


# ---- 7. a table named like a generated alias ------------------------------------------------

ALIASES = ["s", "t", "x", "y", "w", "e", "f", "c", "p", "m", "r", "b", "k", "u", "a", "x0", "p0"]


@pytest.mark.parametrize("name", ALIASES)
def test_table_named_like_a_generated_alias_syncs(wh, name):
    columns = '{ name = "id", type = "integer" }, { name = "balance", type = "integer" }, { name = "note", type = "varchar(64)" }'
    toml = table_toml(name, columns=columns, format="debezium-unwrap", order_by="postgres-lsn", on_truncate="delete")
    toml += table_toml(name + "_soft", columns=columns, order_by="postgres-lsn", delete_mode="soft").replace(
        f"topic.{name}_soft", f"topic.{name}.soft"
    )
    p = setup(wh, toml)
    run = feed(
        wh,
        p,
        name,
        [
            unwrap_row(1, 10, 100, op="c"),
            unwrap_row(2, 20, 110, op="c"),
            unwrap_row(1, None, 120, op="d", deleted=True),
            tombstone(1),
            tombstone(2),
            {
                "partition": 0,
                "key": {"id": 3},
                "value": {"id": 3, "balance": 30, "note": "__debezium_unavailable_value", "__lsn": 130, "__deleted": "false"},
            },
        ],
    )
    assert run.status == "ok" and rows(wh, name) == []
    feed(
        wh,
        p,
        name + "_soft",
        [
            envelope("c", 1, {"id": 1, "balance": 1, "note": "x"}, None, pg_source(100, 50)),
            envelope("d", 1, None, {"id": 1, "balance": None, "note": None}, pg_source(110, 105)),
        ],
    )
    assert rows(wh, name + "_soft", "id, balance, note, _deleted") == [(1, 1, "x", True)]


# ---- 8. a key over the PostgreSQL index limit -----------------------------------------------


def test_key_longer_than_the_index_limit_is_quarantined(wh):
    p = setup(
        wh,
        table_toml("docs", key="path", columns='{ name = "path", type = "varchar(8000)" }, { name = "size", type = "integer" }'),
    )
    import random

    long_key = "".join(random.Random(7).choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(3000))
    run = feed(
        wh,
        p,
        "docs",
        [
            {
                "partition": 0,
                "key": {"path": long_key},
                "value": {"op": "c", "after": {"path": long_key, "size": 1}, "source": mysql_source(1)},
            },
            {
                "partition": 0,
                "key": {"path": "/a"},
                "value": {"op": "c", "after": {"path": "/a", "size": 2}, "source": mysql_source(2)},
            },
        ],
    )
    assert run.quarantined == 1 and rows(wh, "docs", "path, size") == [("/a", 2)]
    assert "primary key is longer" in wh.scalar('SELECT reason FROM cdc."sync_quarantine"')


# ---- 9. a TOAST placeholder with no known value ---------------------------------------------


def test_toast_placeholder_without_a_known_value_is_quarantined(wh):
    """ "Unchanged TOASTed columns arrive as "__debezium_unavailable_value"" (Debezium
    PostgreSQL connector, toasted values): with no stored row and no earlier event in the
    batch, the value is unknown."""
    p = setup(wh, table_toml("acc", order_by="postgres-lsn"))
    update = envelope("u", 7, {"id": 7, "balance": 70, "note": "__debezium_unavailable_value"}, None, pg_source(100, 50))
    run = feed(wh, p, "acc", [update])
    assert run.quarantined == 1 and run.upserted == 0 and rows(wh, "acc") == []
    reason, payload = wh.query('SELECT reason, payload FROM cdc."sync_quarantine"')[0]
    assert "TOAST placeholder" in reason and "note" in reason and payload["after"]["id"] == 7
    (st,) = status(wh, p)
    assert st.quarantined == 1


# ---- 10. primitive Kafka keys ---------------------------------------------------------------


def test_primitive_kafka_key_tombstone_deletes(wh):
    """ExtractField$Key (a common key transform) makes the Kafka key the bare id."""
    p = setup(wh, table_toml("acc", format="debezium-unwrap", order_by="postgres-lsn"))
    feed(wh, p, "acc", [{**unwrap_row(1, 10, 100, op="c"), "key": 1}, {**unwrap_row(2, 20, 110, op="c"), "key": 2}])
    run = feed(wh, p, "acc", [tombstone(1) | {"key": 1}])
    assert run.deleted == 1 and rows(wh, "acc") == [(2, 20)]


# ---- 10. zoned text in a plain timestamp column ---------------------------------------------


def test_zoned_text_in_a_timestamp_column_is_taken_at_utc(wh):
    """Debezium's ZonedTimestamp is ISO 8601 text with Z or an offset; declared as a plain
    `timestamp` without `semantic`, the offset must not be dropped."""
    columns = '{ name = "id", type = "integer" }, { name = "at", type = "timestamp" }'
    p = setup(wh, table_toml("ev", columns=columns, order_by="mysql-binlog"))
    values = ["2023-03-23T22:00:10.123456Z", "2023-03-23T22:00:10+02:00", "2023-03-23 22:00:10", "2023-03-23"]
    feed(wh, p, "ev", [envelope("c", i, {"id": i, "at": v}, None, mysql_source(100 + i)) for i, v in enumerate(values)])
    got = [str(r[1]) for r in rows(wh, "ev", "id, at")]
    assert got == ["2023-03-23 22:00:10.123456", "2023-03-23 20:00:10", "2023-03-23 22:00:10", "2023-03-23 00:00:00"]

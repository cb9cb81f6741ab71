"""The source orders of the SQL Server, Oracle, Db2 and MariaDB connectors, on PostgreSQL:
the connector pages' own example events (tests/data/debezium_docs/, provenance in its
README) ordered as their positions say, and per connector the scenarios a restarted
connector produces: ordering within and across transactions, replays, snapshot then
stream, deletes, primary-key changes. Expectations come from Debezium's documentation:

- SQL Server (connectors/sqlserver.adoc, "update events"): "The `event_serial_no` field
  differentiates events that have the same commit and change LSN. ... _update_ events
  have the value set to `2` ... When a primary key is updated SQL Server emits two events.
  A _delete_ event ... and a _create_ event ... Both operations share the same commit and
  change LSN and their event numbers are `1` and `2`, respectively."
- Db2 (connectors/db2.adoc, "How Debezium Db2 connectors read change-data tables"): the
  connector "orders the change events according to the commit LSN and change LSN for each
  event. This ensures that the connector emits the change events in the order in which
  the table changes occurred."
- Oracle (connectors/oracle.adoc, source fields): "`commit_scn` ... describes the SCN of
  the transaction commit that the change event participates within"; `scn` is the
  change's; `txSeq` (int64, Debezium 3.2+, OracleSourceInfoStructMaker) the change's index
  in its transaction.
- MariaDB (connectors/mariadb.adoc, shared with MySQL): `file`, `pos`, `row` of the binlog.
- All: "If the connector stops for any reason ... When the connector restarts, it ...
  continues streaming from where it left off" after the last committed offset, so what
  follows it is delivered again (at-least-once).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from sync.config import parse_pipeline
from sync.debezium.events import ChangeStream, Db2Source, MySqlSource, OracleSource, SqlServerSource
from sync.debezium.infer import infer_block
from sync.operations.runner import deploy
from tests.helpers import EXAMPLES, feed

DOCS = Path(__file__).parent / "data" / "debezium_docs"
PIPELINE = EXAMPLES / "relational_sources" / "pipeline.toml"


def doc_event(name: str) -> dict[str, Any]:
    return json.loads((DOCS / f"{name}.json").read_text())


@pytest.fixture
def pipeline(wh):
    import tomllib

    p = parse_pipeline(tomllib.loads(PIPELINE.read_text()))
    deploy(wh, p, "examples/relational_sources/pipeline.toml")
    return p


def table_rows(wh, table: str) -> list[tuple]:
    return wh.query(f'SELECT * FROM sources."{table}" ORDER BY 1')


def record(key_field: str, value: dict[str, Any]) -> dict[str, Any]:
    payload = value.get("payload", value)
    image = payload["after"] or payload["before"]
    return {"partition": 0, "key": {key_field: image[key_field]}, "value": value}


# ---- the pages' example events -----------------------------------------------------------


DOC_TABLES = [("sqlserver", "sqlserver_customers", "id"), ("db2", "db2_customers", "ID"), ("mariadb", "mariadb_customers", "id")]


@pytest.mark.parametrize(("connector", "table", "key"), DOC_TABLES)
def test_doc_events_in_reverse_kafka_order_end_deleted(wh, pipeline, connector, table, key):
    """The page's create, update and delete of customer 1005 (1004 for MariaDB), at
    increasing positions, delivered newest first in one batch: the delete is newest,
    whatever Kafka order says; the create and update after it are superseded, and stale
    when they come again."""
    events = [doc_event(f"{connector}-{op}") for op in ("delete", "update", "create")]
    run = feed(wh, pipeline, table, [record(key, e) for e in events])
    assert run.superseded == 2 and table_rows(wh, table) == []
    run = feed(wh, pipeline, table, [record(key, e) for e in events[1:]])
    assert (run.stale, run.superseded) == (1, 1) and table_rows(wh, table) == []


@pytest.mark.parametrize(("connector", "table", "key"), DOC_TABLES)
def test_doc_update_then_create_keeps_the_update(wh, pipeline, connector, table, key):
    """The page's update delivered before its create: the update's values stay (SQL Server
    and Db2: john's email becomes noreply@example.org; MariaDB: Anne becomes Anne Marie)."""
    update, create = doc_event(f"{connector}-update"), doc_event(f"{connector}-create")
    feed(wh, pipeline, table, [record(key, update)])
    run = feed(wh, pipeline, table, [record(key, create)])
    image = update["after"]
    assert run.stale == 1 and [r[:4] for r in table_rows(wh, table)] == [tuple(image.values())]


def test_oracle_doc_events_order_by_scn(wh, pipeline):
    """The Oracle page's delete example is at SCN 2122184, below its create (2122185) and
    update (2125544): by source position the delete came first, so customer 1004 stays,
    with the update's email, whatever the Kafka order."""
    events = [doc_event(f"oracle-{op}") for op in ("update", "create", "delete")]
    run = feed(wh, pipeline, "oracle_customers", [record("ID", e) for e in events])
    assert run.superseded == 2
    assert [r[:4] for r in table_rows(wh, "oracle_customers")] == [(1004, "Anne", "Kretchmar", "anne@example.com")]
    assert table_rows(wh, "oracle_customers")[0][5] == f"{2125544:020d}.{2125544:020d}.{0:020d}"


def test_sqlserver_doc_snapshot_source_is_older_than_streamed_changes(wh, pipeline):
    """A snapshot read carries the page's snapshot source block ("change_lsn": null,
    "commit_lsn": "00000025:00000d98:00a2", "event_serial_no": null; sqlserver.adoc,
    schema change topic example): below the streamed create at 00000027:00000758:0005,
    which therefore wins when the read is replayed after it."""
    create = doc_event("sqlserver-create")
    snapshot_source = {**create["payload"]["source"], "snapshot": "true", "change_lsn": None}
    snapshot_source.update(commit_lsn="00000025:00000d98:00a2", event_serial_no=None)
    read = {**create["payload"], "op": "r", "source": snapshot_source, "after": {**create["payload"]["after"], "email": "old"}}
    feed(wh, pipeline, "sqlserver_customers", [record("id", create), record("id", read)])
    assert [r[3] for r in table_rows(wh, "sqlserver_customers")] == ["john.doe@example.org"]


# ---- generated histories per connector ---------------------------------------------------


def _source(connector: str):
    return {
        "sqlserver": SqlServerSource,
        "db2": Db2Source,
        "oracle": OracleSource,
        "mariadb": lambda: MySqlSource(connector="mariadb", server="mariadb-server-1", db="inventory", table="customers"),
    }[connector]()


TABLES = {
    "sqlserver": "sqlserver_customers",
    "db2": "db2_customers",
    "oracle": "oracle_customers",
    "mariadb": "mariadb_customers",
}
CONNECTORS = list(TABLES)


def _stream(connector: str) -> tuple[ChangeStream, str]:
    key = "ID" if connector in ("oracle", "db2") else "id"
    return ChangeStream([key], _source(connector), partitions=2), key


def _row(key: str, i: int, email: str) -> dict[str, Any]:
    names = ("ID", "FIRST_NAME", "LAST_NAME", "EMAIL") if key == "ID" else ("id", "first_name", "last_name", "email")
    return dict(zip(names, (i, f"f{i}", f"l{i}", email)))


def _emails(wh, connector: str) -> dict[int, str]:
    return {r[0]: r[3] for r in table_rows(wh, TABLES[connector])}


@pytest.mark.parametrize("connector", CONNECTORS)
def test_snapshot_then_stream_then_replay_of_both(wh, pipeline, connector):
    cs, key = _stream(connector)
    snapshot = [cs.snapshot(_row(key, i, f"s{i}")) for i in (1, 2, 3)]
    feed(wh, pipeline, TABLES[connector], snapshot)
    stream = [cs.update(_row(key, 1, "s1"), _row(key, 1, "u1")), cs.delete(_row(key, 2, "s2")), cs.tombstone(_row(key, 2, ""))]
    feed(wh, pipeline, TABLES[connector], stream)
    assert _emails(wh, connector) == {1: "u1", 3: "s3"}
    # A connector restarted without its offsets' last flush sends the snapshot and the
    # stream again: nothing changes (the newest re-sent event of each key is stale, the
    # others are superseded by it).
    run = feed(wh, pipeline, TABLES[connector], snapshot + stream)
    assert _emails(wh, connector) == {1: "u1", 3: "s3"} and (run.stale, run.superseded) == (3, 2)


@pytest.mark.parametrize("connector", CONNECTORS)
def test_changes_within_and_across_transactions_replayed_in_later_batches(wh, pipeline, connector):
    """Two updates of one row in one transaction, then a second transaction; a restart
    re-sends from the first update, one record per batch: every re-sent change is stale
    (Oracle: the two updates share an SCN; `txSeq` orders them)."""
    cs, key = _stream(connector)
    table = TABLES[connector]
    feed(wh, pipeline, table, [cs.insert(_row(key, 1, "a"))])
    begin = getattr(cs.source, "begin", None)
    if begin:
        begin()
    tx = [cs.update(None, _row(key, 1, "b")), cs.update(None, _row(key, 1, "c"))]
    if begin:
        cs.source.commit()
    later = [cs.update(None, _row(key, 1, "d"))]
    feed(wh, pipeline, table, tx + later)
    assert _emails(wh, connector) == {1: "d"}
    for rec in tx + later:
        run = feed(wh, pipeline, table, [rec])
        assert run.stale == 1 and _emails(wh, connector) == {1: "d"}
    # Within the transaction: the second update stored, then the first re-sent.
    feed(wh, pipeline, table, [cs.update(None, _row(key, 2, "x"))])
    if begin:
        begin()
    pair = [cs.update(None, _row(key, 2, "first")), cs.update(None, _row(key, 2, "second"))]
    if begin:
        cs.source.commit()
    feed(wh, pipeline, table, pair[1:])
    run = feed(wh, pipeline, table, pair[:1])
    assert run.stale == 1 and _emails(wh, connector)[2] == "second"


@pytest.mark.parametrize("connector", CONNECTORS)
def test_delete_then_replayed_insert_stays_deleted(wh, pipeline, connector):
    cs, key = _stream(connector)
    table = TABLES[connector]
    insert = cs.insert(_row(key, 7, "a"))
    feed(wh, pipeline, table, [insert, cs.delete(_row(key, 7, "a")), cs.tombstone(_row(key, 7, ""))])
    run = feed(wh, pipeline, table, [insert])
    assert run.stale == 1 and _emails(wh, connector) == {}


@pytest.mark.parametrize("connector", CONNECTORS)
def test_primary_key_change_and_its_replay(wh, pipeline, connector):
    """A key change arrives as a delete of the old key, a tombstone and a create of the
    new key. SQL Server: both share the commit and change LSN, serials 1 and 2; Oracle
    and Db2: one logged change, one position."""
    cs, key = _stream(connector)
    table = TABLES[connector]
    feed(wh, pipeline, table, [cs.insert(_row(key, 1, "a"))])
    delete, tombstone, create = cs.delete(_row(key, 1, "a")), cs.tombstone(_row(key, 1, "")), cs.insert(_row(key, 9, "a"))
    if connector != "mariadb":
        create["value"]["source"] = {**delete["value"]["source"]}
        if connector == "sqlserver":
            create["value"]["source"]["event_serial_no"] = 2
    feed(wh, pipeline, table, [delete, tombstone, create])
    assert _emails(wh, connector) == {9: "a"}
    run = feed(wh, pipeline, table, [delete, tombstone, create])
    assert run.stale == 2 and _emails(wh, connector) == {9: "a"}


# ---- positions as text: fixed width, one case, total ---------------------------------------


def _sqlserver(commit: str, change: str | None, serial: Any, email: str) -> dict[str, Any]:
    source = {"connector": "sqlserver", "ts_ms": 1, "commit_lsn": commit, "change_lsn": change, "event_serial_no": serial}
    return record("id", {"before": None, "after": _row("id", 1, email), "op": "u", "source": source})


def test_sqlserver_lsn_hex_digits_order_as_bytes(wh, pipeline):
    """LSNs are hex ("00000027:00000758:0003"): 0a > 09 and f > a; upper-case hex is the
    same LSN as lower-case (Lsn.valueOf parses either); serial 2 follows serial 1."""
    t = "sqlserver_customers"
    feed(wh, pipeline, t, [_sqlserver("00000027:0000000a:0001", "00000027:0000000a:0000", 1, "a")])
    feed(wh, pipeline, t, [_sqlserver("00000027:00000009:ffff", "00000027:00000009:fff0", 1, "older")])
    assert _emails(wh, "sqlserver") == {1: "a"}
    feed(wh, pipeline, t, [_sqlserver("00000027:0000000A:0001", "00000027:0000000A:0000", "2", "serial 2")])
    assert _emails(wh, "sqlserver") == {1: "serial 2"}
    run = feed(wh, pipeline, t, [_sqlserver("00000027:0000000a:0001", "00000027:0000000a:0000", 1, "serial 1")])
    assert run.stale == 1 and _emails(wh, "sqlserver") == {1: "serial 2"}


def test_oracle_scn_gaining_a_digit_is_newer(wh, pipeline):
    def ev(scn: str, email: str) -> dict[str, Any]:
        source = {"connector": "oracle", "ts_ms": 1, "scn": scn, "commit_scn": scn, "txSeq": 1}
        return record("ID", {"before": None, "after": _row("ID", 1, email), "op": "u", "source": source})

    feed(wh, pipeline, "oracle_customers", [ev("10000000", "new")])
    run = feed(wh, pipeline, "oracle_customers", [ev("9999999", "old")])
    assert run.stale == 1 and _emails(wh, "oracle") == {1: "new"}


@pytest.mark.parametrize(
    ("table", "source"),
    [
        ("sqlserver_customers", {"commit_lsn": "not an lsn", "change_lsn": "00000027", "event_serial_no": "x" * 300}),
        ("sqlserver_customers", {"commit_lsn": {"nested": 1}, "change_lsn": 5, "event_serial_no": [1]}),
        ("oracle_customers", {"scn": "-1", "commit_scn": "1e9", "txSeq": "many"}),
        ("oracle_customers", {"scn": "123456789012345678901234567890"}),
        ("db2_customers", {"commit_lsn": "00000027:00000758:00000000000000000", "change_lsn": True}),
    ],
)
def test_garbage_positions_do_not_fail_the_call(wh, pipeline, table, source):
    """Every position expression is total: a source block with garbage where the position
    should be gives no position (the event ranks by Kafka order), never a failed CALL."""
    key = "ID" if table != "sqlserver_customers" else "id"
    value = {"before": None, "after": _row(key, 1, "g"), "op": "c", "source": {"ts_ms": 1, **source}}
    run = feed(wh, pipeline, table, [{"partition": 0, "key": {key: 1}, "value": value}])
    assert run.upserted == 1 and table_rows(wh, table)[0][5] is None


# ---- infer -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("connector", "order", "key"),
    [
        ("sqlserver", "sqlserver-lsn", "id"),
        ("oracle", "oracle-scn", "ID"),
        ("db2", "db2-lsn", "ID"),
        ("mariadb", "mysql-binlog", "id"),
    ],
)
def test_infer_takes_the_order_from_the_pages_create_event(tmp_path, connector, order, key):
    """The page's create event, with its `{"schema", "payload"}` wrapper: the connector
    comes from `source.connector`, or (Oracle's example has none) from the source schema's
    name, `io.debezium.connector.oracle.Source`."""
    sample = tmp_path / "sample.jsonl"
    sample.write_text(json.dumps(doc_event(f"{connector}-create")) + "\n")
    block = infer_block(sample, f"{connector}_customers", "topic.customers", [key])
    assert f'order_by = "{order}"' in block
    assert f'{{ name = "{key}", type = "integer"' in block


# ---- recovery ------------------------------------------------------------------------------


@pytest.mark.parametrize("connector", ["sqlserver", "oracle", "db2"])
def test_reset_positions_after_the_source_database_is_restored(wh, pipeline, connector):
    """A source database restored from a backup (Oracle: opened with RESETLOGS) logs its
    new changes at positions below what was already delivered from the lost log: every
    new event looks older than the stored row and is stale, until `reset-positions`
    clears the stored positions."""
    from sync.operations.recovery import reset_positions

    table = TABLES[connector]
    cs, key = _stream(connector)
    feed(wh, pipeline, table, [cs.insert(_row(key, 1, "before restore"))])
    restored, _ = _stream(connector)  # the restored database's log: positions start over lower
    restored.source.at -= 10 * restored.source.step
    assert feed(wh, pipeline, table, [restored.update(None, _row(key, 1, "after restore"))]).stale == 1
    reset = reset_positions(wh, pipeline, table, apply=True)
    assert reset.target_rows == 1
    feed(wh, pipeline, table, [restored.update(None, _row(key, 1, "after restore"))])
    assert _emails(wh, connector) == {1: "after restore"}


POSITION_FIELDS = {
    "sqlserver_customers": ("id", ("commit_lsn", "change_lsn", "event_serial_no"), r"[0-9A-F]{20}\.[0-9A-F]{20}\.[0-9]{20}"),
    "oracle_customers": ("ID", ("commit_scn", "scn", "txSeq"), r"[0-9]{20}\.[0-9]{20}\.[0-9]{20}"),
    "db2_customers": ("ID", ("commit_lsn", "change_lsn"), r"[0-9A-F]{64}"),
}


def _fuzz_values():
    from hypothesis import strategies as st

    # (NUL characters and lone surrogates make a record that jsonb cannot store: quarantined
    # before any position is read, tests/test_fuzz_events.py)
    text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30)
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        text,
        st.sampled_from(["", " 1", "1e3", "-5", "NULL", "'); DROP TABLE x; --", "x" * 70_000]),
    )
    json_values = st.recursive(
        scalars, lambda inner: st.lists(inner, max_size=2) | st.dictionaries(text, inner, max_size=2), max_leaves=4
    )
    lsn = st.from_regex(r"[0-9a-fA-F]{8}:[0-9a-fA-F]{8}:[0-9a-fA-F]{4}([0-9a-fA-F]{12})?", fullmatch=True)
    return st.one_of(json_values, lsn, st.from_regex(r"[0-9]{1,22}", fullmatch=True))


@pytest.mark.parametrize("table", list(POSITION_FIELDS))
def test_any_json_where_the_position_is_never_fails_the_call(wh, pipeline, table):
    """Any JSON in the position fields (numbers, text, objects, LSN-like text with either
    case, 21-digit SCNs): every record applies, and each stored position is NULL or has
    the order's fixed layout."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    key, fields, layout = POSITION_FIELDS[table]

    @settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(st.lists(st.fixed_dictionaries({f: _fuzz_values() for f in fields}), min_size=1, max_size=20))
    def check(sources):
        wh.execute(f'TRUNCATE sources."{table}", sources."{table}__deleted"')
        records = [
            {"partition": 0, "key": {key: i}, "value": {"op": "c", "after": _row(key, i, "e"), "source": src}}
            for i, src in enumerate(sources)
        ]
        run = feed(wh, pipeline, table, records)
        assert run.upserted == len(records) and run.quarantined == 0
        for (pos,) in wh.query(f'SELECT _source_pos FROM sources."{table}"'):
            assert pos is None or re.fullmatch(layout, pos), pos

    check()


# ---- interleaved transactions ------------------------------------------------------------

INTERLEAVED = {
    # (a change of the transaction that commits first, at the higher change position; a
    # change of the transaction that began earlier and commits last)
    "sqlserver": (
        {"commit_lsn": "00000027:00000850:0001", "change_lsn": "00000027:00000800:0002", "event_serial_no": 2},
        {"commit_lsn": "00000027:00000900:0001", "change_lsn": "00000027:00000700:0002", "event_serial_no": 2},
    ),
    "db2": (
        {"commit_lsn": "00000027:00000850:0001", "change_lsn": "00000027:00000800:0002"},
        {"commit_lsn": "00000027:00000900:0001", "change_lsn": "00000027:00000700:0002"},
    ),
    "oracle": (
        {"scn": "2200000", "commit_scn": "2250000", "txSeq": 1},
        {"scn": "2100000", "commit_scn": "2300000", "txSeq": 1},
    ),
}


@pytest.mark.parametrize(("connector", "table", "key"), [*DOC_TABLES[:2], ("oracle", "oracle_customers", "ID")])
def test_interleaved_transactions_order_by_commit_then_change(wh, pipeline, connector, table, key):
    """Two transactions change one row: the first made its change at a higher position but
    commits first; the second began earlier and commits last, so its change is the row's
    final state. Debezium orders by commit first (Db2 page: "orders the change events
    according to the commit LSN and change LSN"; SQL Server: `commit_lsn`, then
    `change_lsn`; Oracle: `commit_scn`, "the SCN of the transaction commit that the change
    event participates within"). Delivered last-committed first, then the other replayed:
    the replay is stale. Ordered by change position it would win."""
    first_fields, last_fields = INTERLEAVED[connector]
    create, update = (doc_event(f"{connector}-{op}") for op in ("create", "update"))
    create, update = create.get("payload", create), update.get("payload", update)
    last = {**update, "source": {**update["source"], **last_fields}}
    first = {**create, "op": "u", "source": {**create["source"], **first_fields}}
    feed(wh, pipeline, table, [record(key, last)])
    run = feed(wh, pipeline, table, [record(key, first)])
    assert run.stale == 1, run
    assert [r[:4] for r in table_rows(wh, table)] == [tuple(update["after"].values())]

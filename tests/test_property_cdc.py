"""Property: whatever Debezium delivers for a source history (restarts that re-send a
suffix, tied positions, partly null positions, re-snapshots, tombstone-only deletes, a
partition appended late after the topic grew), cut
into any sync batches, the target after every sync equals the delivery model
(tests/delivery_model.py) over the records delivered so far, and at the end it equals the
SOURCE's true final state, computed from the history alone (the outside contract:
"exactly-once delivery normally, at-least-once during recovery", Debezium's PostgreSQL
and MySQL connector documentation; the behaviours are listed in docs/correctness.md,
"Delivery semantics").

Histories are small (<= 25 changes on 6 keys of a composite key) and drawn with their
connector (tests/delivery.py), 40 per mode. One test per MODE; run one with `-k`, e.g.
`pytest tests/test_property_cdc.py -k pg_resnapshot`. A mode names the table's
`order_by`, `format` (the unwrap tombstone mode is the connector's) and `delete_mode`,
and the generator's knobs (`Knobs`): restarts, compression, re-snapshots.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import Decimal

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from sync.operations.quarantine import Selection, replay
from sync.operations.runner import deploy
from sync.warehouse import connect
from tests.delivery import (
    KAFKA_TS,
    NO_KEY,
    Change,
    Connector,
    History,
    Restart,
    batches,
    deliver,
    emit,
    emitted_records,
    final_state,
    key_of,
)
from tests.delivery_model import DeliveryModel
from tests.helpers import fresh_database, ingest, make_pipeline, sync_one
from tests.history_model import history_sequences, interval_problems, is_subsequence, true_sequences, weak_problems

TABLE = """
[[tables]]
name = "t_{mode}"
topic = "db.t_{mode}"
primary_key = ["ID", "REGION"]
format = "{format}"
order_by = "{order}"
delete_mode = "{delete_mode}"{history}{truncates}
columns = [
  {{ name = "ID", type = "integer", target = "id" }},
  {{ name = "REGION", type = "varchar(8)", target = "region" }},
  {{ name = "NAME", type = "varchar({name_width})" }},
  {{ name = "AMOUNT", type = "decimal(10,2)" }},
]
"""


@dataclass(frozen=True)
class Knobs:
    """What the generator may draw for a mode (True: may, "always": must)."""

    restarts: int = 2  # at most this many restarts
    compressed: bool | str = True  # MySQL binlog_transaction_compression
    # PostgreSQL: the connector re-created after its slot is lost; SQL Server, Oracle, Db2:
    # re-created without offsets (snapshot at the database's current LSN/SCN)
    resnapshot: bool | str = True
    initial_snapshot: bool = True
    restart_null_commit: bool = True  # PostgreSQL, with at most one restart (see delivery_model)
    grow: bool | str = True  # the topic's partition count grows (keys re-hashed)
    toasted: bool | str = True  # PostgreSQL, REPLICA IDENTITY DEFAULT: NAME is TOASTed (placeholders)
    truncates: bool = False  # PostgreSQL: TRUNCATE in the history (the table: on_truncate = "delete")
    late: bool | str = False  # a partition's records appended late (a retried send: delivery.delay_partition)


@dataclass(frozen=True)
class Mode:
    source: str | None  # delivery.Source; None: "postgres" or "mysql" (order_by = "kafka")
    order: str
    format: str  # delivery.Format
    delete_mode: str = "hard"
    knobs: Knobs = Knobs()
    # NAME is varchar(3) until the history is delivered (longer names are quarantined), then
    # widened, and the quarantine replayed (`quarantine replay`).
    replay: bool = False
    history: str | None = None  # history = true, with this choice for deletes ("close", "tombstone")


BASELINE = Knobs(restarts=0, compressed=False, resnapshot=False, initial_snapshot=False, restart_null_commit=False, grow=False)
GROW = Knobs(grow="always")
LATE = Knobs(grow="always", late="always")
MODES = {
    "kafka_debezium": Mode(None, "kafka", "debezium"),
    "kafka_unwrap_rewrite": Mode(None, "kafka", "unwrap-rewrite"),
    "kafka_unwrap_tombstone": Mode(None, "kafka", "unwrap-tombstone", "soft"),
    "pg_debezium": Mode("postgres", "postgres-lsn", "debezium"),
    "pg_debezium_soft": Mode("postgres", "postgres-lsn", "debezium", "soft"),
    "pg_unwrap_rewrite": Mode("postgres", "postgres-lsn", "unwrap-rewrite"),
    "pg_unwrap_tombstone": Mode("postgres", "postgres-lsn", "unwrap-tombstone"),
    "pg_resnapshot": Mode("postgres", "postgres-lsn", "debezium", knobs=Knobs(resnapshot="always")),
    "mysql_debezium": Mode("mysql", "mysql-binlog", "debezium"),
    "mysql_unwrap_rewrite": Mode("mysql", "mysql-binlog", "unwrap-rewrite", "soft"),
    "mysql_unwrap_tombstone": Mode("mysql", "mysql-binlog", "unwrap-tombstone"),
    "mysql_compressed": Mode("mysql", "mysql-binlog", "debezium", knobs=Knobs(compressed="always")),
    "mariadb_debezium": Mode("mariadb", "mysql-binlog", "debezium"),
    # Replays that tie with the stored row (a compressed transaction), or precede it in
    # Kafka order. No restarts with compression (a known limit: tests/delivery_model.py).
    "mysql_compressed_replay": Mode(
        "mysql", "mysql-binlog", "debezium", knobs=Knobs(restarts=0, compressed="always"), replay=True
    ),
    "pg_debezium_replay": Mode("postgres", "postgres-lsn", "debezium", knobs=Knobs(restart_null_commit=False), replay=True),
    "kafka_debezium_replay": Mode(None, "kafka", "debezium", knobs=Knobs(compressed=False), replay=True),
    "sqlserver_debezium": Mode("sqlserver", "sqlserver-lsn", "debezium"),
    "oracle_unwrap_rewrite": Mode("oracle", "oracle-scn", "unwrap-rewrite", "soft"),
    "db2_unwrap_tombstone": Mode("db2", "db2-lsn", "unwrap-tombstone"),
    # The topic's partition count grows mid-history: a key's later records in another partition.
    "kafka_grow": Mode(None, "kafka", "debezium", knobs=GROW),
    "kafka_unwrap_tombstone_grow": Mode(None, "kafka", "unwrap-tombstone", knobs=GROW),
    "pg_unwrap_tombstone_grow": Mode("postgres", "postgres-lsn", "unwrap-tombstone", "soft", knobs=GROW),
    # What the sync handled before delivery behaviours were modelled: no restarts, no ties,
    # no re-snapshots, the full envelope.
    "pg_baseline": Mode("postgres", "postgres-lsn", "debezium", knobs=BASELINE),
    # TRUNCATE among the changes: restarts re-send what precedes it after it.
    "pg_truncate": Mode("postgres", "postgres-lsn", "debezium", knobs=Knobs(truncates=True)),
    "mysql_baseline": Mode("mysql", "mysql-binlog", "debezium", knobs=BASELINE),
    # History mode (a history table besides the target), in both forms of deletes. A restart
    # that forgets the last commit LSN (older PostgreSQL connectors) re-sends events at
    # other positions: not modelled for history (docs/correctness.md, "History mode").
    "pg_history": Mode("postgres", "postgres-lsn", "debezium", knobs=Knobs(restart_null_commit=False), history="close"),
    "pg_unwrap_tombstone_history": Mode(
        "postgres", "postgres-lsn", "unwrap-tombstone", "soft", knobs=Knobs(restart_null_commit=False), history="tombstone"
    ),
    "mysql_compressed_history": Mode("mysql", "mysql-binlog", "debezium", knobs=Knobs(compressed="always"), history="close"),
    "mysql_unwrap_rewrite_history": Mode("mysql", "mysql-binlog", "unwrap-rewrite", history="tombstone"),
    "sqlserver_history": Mode("sqlserver", "sqlserver-lsn", "debezium", "soft", history="close"),
    "oracle_history_grow": Mode("oracle", "oracle-scn", "unwrap-rewrite", knobs=GROW, history="close"),
    "pg_resnapshot_history": Mode(
        "postgres", "postgres-lsn", "debezium", knobs=Knobs(resnapshot="always", restart_null_commit=False), history="close"
    ),
    "db2_unwrap_tombstone_history": Mode("db2", "db2-lsn", "unwrap-tombstone", history="close"),
    # A partition appended late (a retried send) after the topic grew: a key's older records
    # are read after its newer ones, in this batch or a later one; in history mode also with
    # TOAST placeholders. Full envelope only: with unwrapped records a growth can send a
    # delete's companion tombstone to another partition, where it deletes as a
    # tombstone-only delete does, ranked in Kafka order, exact only when no older record
    # is read after it (docs/correctness.md).
    "pg_history_late": Mode(
        "postgres", "postgres-lsn", "debezium", knobs=replace(LATE, restart_null_commit=False), history="close"
    ),
    "mysql_late": Mode("mysql", "mysql-binlog", "debezium", "soft", knobs=replace(LATE, compressed=False)),
    "mysql_compressed_late": Mode("mysql", "mysql-binlog", "debezium", knobs=replace(LATE, compressed="always")),
    "sqlserver_history_late": Mode("sqlserver", "sqlserver-lsn", "debezium", "soft", knobs=LATE, history="close"),
    "mysql_history_late": Mode("mysql", "mysql-binlog", "debezium", knobs=replace(LATE, compressed=False), history="tombstone"),
}
KEYS = [(i, r) for i in range(3) for r in ("eu", "us")]

# ---- drawing histories and deliveries ---------------------------------------------------

steps = st.lists(
    st.tuples(
        st.sampled_from(["write", "write", "write", "delete", "move"]),
        st.sampled_from(KEYS),
        st.sampled_from(KEYS),
        st.text(alphabet="abxy é'", max_size=4),
        st.integers(min_value=-9999, max_value=9999),
        st.sampled_from([True, True, False]),  # the change starts a new transaction
    ),
    min_size=6,  # fewer leave little to deliver
    max_size=25,
)


def _row(key, name: str, cents: int) -> dict:
    return {"ID": key[0], "REGION": key[1], "NAME": name, "AMOUNT": str(Decimal(cents).scaleb(-2))}


def build_history(initial, drawn, truncates: Sequence[int] = ()) -> History:
    """The changes that apply (a write inserts or updates, a delete needs the key, a move
    needs the key and a free target key), grouped into transactions; a TRUNCATE, a
    transaction of its own, before each drawn step of `truncates`."""
    rows = [_row(k, "init", c) for k, c in initial]
    state = {key_of(r): r for r in rows}
    txs: list[list[Change]] = []
    for step, (kind, key, other, name, cents, new_tx) in enumerate(drawn):
        if step in truncates:
            txs.append([Change("truncate", NO_KEY)])
            state.clear()
            new_tx = True
        if kind == "write":
            change = Change("write", key, _row(key, name, cents))
        elif key not in state:
            continue
        elif kind == "delete":
            change = Change("delete", key)
        elif other in state:
            continue
        else:
            change = Change("move", key, {**state[key], "ID": other[0], "REGION": other[1]})
        if new_tx or not txs:
            txs.append([])
        txs[-1].append(change)
        if change.kind == "write":
            state[key] = change.row
        else:
            del state[key]
            if change.kind == "move":
                state[other] = change.row
    return History(tuple(tuple(t) for t in txs), tuple(rows))


def _middle_first(lo: int, hi: int):
    """An integer in lo..hi, drawn middle first: hypothesis favours the first choices, and
    the interesting points (a re-snapshot, a restart) have history on both sides."""
    mid = (lo + hi) // 2
    return st.sampled_from(sorted(range(lo, hi + 1), key=lambda i: (abs(i - mid), i)))


def _maybe(data, knob) -> bool:
    return knob == "always" or (bool(knob) and data.draw(st.booleans()))


def draw_connector(data, mode: Mode, history: History, initial_snapshot: bool) -> Connector:
    knobs = mode.knobs
    source = mode.source or data.draw(st.sampled_from(["postgres", "mysql"]))
    n = len(history.transactions)
    c = Connector(
        source=source,
        format=mode.format,
        partitions=data.draw(st.integers(1, 3)),
        initial_snapshot=initial_snapshot,
    )
    if source in ("mysql", "mariadb"):
        return Connector(
            **{
                **c.__dict__,
                # MariaDB compresses events one by one (log_bin_compress): positions stay apart
                "compressed": source == "mysql" and _maybe(data, knobs.compressed),
                "rotate": frozenset(data.draw(st.lists(st.integers(0, n), max_size=2))),
            }
        )
    resnapshot_at = lost = None
    if _maybe(data, knobs.resnapshot):
        resnapshot_at = data.draw(_middle_first(0, n))
        # Transactions lost with the slot are never streamed: the snapshot reads their
        # effect, which cannot tell a consumer about deletes (no key to read).
        quiet = 0
        while quiet < resnapshot_at and all(ch.kind == "write" for ch in history.transactions[resnapshot_at - quiet - 1]):
            quiet += 1
        lost = data.draw(st.integers(0, quiet))
    c = Connector(**{**c.__dict__, "resnapshot_at": resnapshot_at, "lost": lost or 0})
    if source != "postgres":
        return c
    identity = data.draw(st.sampled_from(["default", "full"]))
    return Connector(
        **{
            **c.__dict__,
            "replica_identity": identity,
            "restart_null_commit": knobs.restart_null_commit and data.draw(st.booleans()),
            "toasted": identity == "default" and _maybe(data, knobs.toasted),
        }
    )


def draw_kafka(data, knobs: Knobs, connector: Connector, emitted: int) -> Connector:
    """The topic and the producer: the partition count may grow at a drawn record, the
    clock ticks per record or per transaction, CreateTime or LogAppendTime."""
    grow = _maybe(data, knobs.grow)
    return replace(
        connector,
        grow_to=connector.partitions + data.draw(st.integers(1, 2)) if grow else None,
        grow_at=data.draw(_middle_first(0, emitted)) if grow else 0,
        clock=data.draw(st.sampled_from(["record", "transaction"])),
        timestamp_type=data.draw(st.sampled_from(["C", "L"])),
    )


def draw_restarts(data, knobs: Knobs, connector: Connector, emitted: int) -> list[Restart]:
    limit = 1 if connector.restart_null_commit else knobs.restarts
    restarts, start = [], 0
    for _ in range(data.draw(st.integers(0, limit))):
        stop = data.draw(_middle_first(start, emitted))
        resume = data.draw(_middle_first(start, stop))
        restarts.append(Restart(stop, resume))
        start = resume
    return restarts


# ---- the warehouse ------------------------------------------------------------------------


class Warehouse:
    """One database with one deployed table per mode (deployed on first use); each
    example starts from empty tables (`reset`), which is what a fresh deployment has."""

    def __init__(self, wh):
        self.wh = wh
        self.pipelines: dict = {}

    def __repr__(self) -> str:
        return "Warehouse()"

    def pipeline(self, mode_name: str, wide: bool = False):
        """The mode's pipeline (deployed on first use); `wide`: NAME as varchar(32) in a
        replay mode (not deployed)."""
        m = MODES[mode_name]
        fmt = "debezium" if m.format == "debezium" else "debezium-unwrap"
        width = 3 if m.replay and not wide else 32
        history = f'\nhistory = {{ deletes = "{m.history}" }}' if m.history else ""
        truncates = '\non_truncate = "delete"' if m.knobs.truncates else ""
        toml = TABLE.format(
            mode=mode_name,
            format=fmt,
            order=m.order,
            delete_mode=m.delete_mode,
            name_width=width,
            history=history,
            truncates=truncates,
        )
        if wide:
            return make_pipeline(toml)
        if mode_name not in self.pipelines:
            pipeline = make_pipeline(toml)
            deploy(self.wh, pipeline, "test")
            self.pipelines[mode_name] = pipeline
        return self.pipelines[mode_name]

    def set_name_width(self, mode_name: str, table: str, width: int):
        """NAME of the target and the stage as varchar(`width`), and the procedure for it."""
        for relation in (table, f"{table}__stage"):
            self.wh.execute(f'ALTER TABLE cdc."{relation}" ALTER COLUMN name TYPE varchar({width})')
        pipeline = self.pipeline(mode_name, wide=True) if width == 32 else self.pipeline(mode_name)
        deploy(self.wh, pipeline, "test")
        return pipeline


@pytest.fixture(scope="module")
def warehouse(pg_server_dsn):
    with fresh_database(pg_server_dsn, "prop_delivery") as dsn:
        wh = connect(dsn)
        yield Warehouse(wh)
        wh.close()


def _reset(wh, table: str) -> None:
    for suffix in ("", "__stream", "__stage", "__watermark", "__deleted", "__quarantine", "__drift", "__history"):
        if wh.relation_exists("cdc", table + suffix):
            wh.execute(f'TRUNCATE cdc."{table}{suffix}"')
    wh.execute("TRUNCATE cdc.sync_run_log")


def _target(wh, table: str, soft: bool) -> dict:
    deleted = ", _deleted" if soft else ", false"
    return {(i, r): (n, str(a), d) for i, r, n, a, d in wh.query(f'SELECT id, region, name, amount{deleted} FROM cdc."{table}"')}


def _model_rows(model: DeliveryModel) -> dict:
    return {k: (r["name"], str(r["amount"]), r.get("_deleted", False)) for k, r in model.rows().items()}


def _source_rows(history: History) -> dict:
    return {k: (r["NAME"], str(Decimal(r["AMOUNT"])), False) for k, r in final_state(history).items()}


def _comparable(rows: dict, connector: Connector) -> dict:
    """`rows` as the current state is exact for them. A late record older than an update
    with a TOAST placeholder, read a sync after it, leaves the placeholder the value it
    took (docs/correctness.md; `test_toast_limits.py`): NAME is not compared then (the
    history is exact there, `check_history`)."""
    if not (connector.toasted and connector.late):
        return rows
    return {k: v[1:] for k, v in rows.items()}


def _position(value) -> str:
    src = value.get("source", value)
    get = lambda name: src.get(name, src.get("__" + name))  # noqa: E731
    if get("sequence") is not None:
        return f"seq={get('sequence')}"
    if get("file") is not None:
        return f"{get('file')[-2:]}/{get('pos')}/{get('row')}"
    if get("commit_lsn") is not None:
        return f"lsn={get('commit_lsn')}/{get('change_lsn')}/{get('event_serial_no')}"
    if get("scn") is not None:
        return f"scn={get('commit_scn')}/{get('scn')}/{get('txSeq')}"
    return ""


def describe(history, connector, restarts, delivery, cuts) -> str:
    """A failing example in words: the history, the connector, and each delivered record."""
    lines = [
        f"connector: {connector}",
        f"restarts: {restarts}",
        f"runs (emitted first, end): {delivery.runs}",
        f"batches (delivered lo, hi): {batches(delivery.records, cuts)}",
    ]
    lines += [f"initial rows: {list(history.initial)}"] if history.initial else []
    for n, tx in enumerate(history.transactions):
        lines.append(
            f"txn {n}: "
            + "; ".join(
                f"{c.kind} {c.key}" + (f" -> {key_of(c.row)} {c.row['NAME']!r} {c.row['AMOUNT']}" if c.row else "") for c in tx
            )
        )
    lines.append(f"source final state: {final_state(history)}")
    for i, (r, sent) in enumerate(zip(delivery.records, delivery.sent)):
        v = r["value"]
        what = (
            "tombstone"
            if v is None
            else (
                f"{v.get('op', v.get('__op'))}{' deleted' if v.get('__deleted') == 'true' else ''} "
                f"{(v.get('after') or v.get('before') or v).get('NAME')!r} {_position(v)}"
            )
        )
        at = f"p{r['partition']}@{r['offset']} t+{r['timestamp'] - KAFKA_TS}{r['timestamp_type']}"
        key = tuple(r["key"].values()) if r["key"] is not None else None
        lines.append(f"  #{i} {at} emitted #{sent} key {key}: {what}")
    return "\n".join(lines)


def check_history(
    wh, table: str, deletes: str, history: History, connector: Connector, complete: bool, current: dict | None = None
) -> None:
    """The history table against the source's TRUE sequence of states per key: a
    subsequence of it while records are still to come, equal to it once all are synced;
    intervals joined end to start. `current` (restarts that re-sent records of compressed
    transactions: the target's live rows as states): once all are synced, every true
    version is there, in order, and the last one is the target's (`weak_problems`)."""
    relation = f'cdc."{table}__history"'
    held, true = history_sequences(wh, relation), true_sequences(history, connector)
    assert interval_problems(wh, relation, deletes) == []
    if current is not None:
        assert not complete or weak_problems(held, true, current) == []
        return
    for key, states in held.items():
        # A restart that re-sends a tombstone-only delete deletes the key until the records
        # re-sent after it arrive, in the history as in the current state (docs/correctness.md).
        settled = states[:-1] if states[-1] is None and not complete else states
        assert is_subsequence(settled, true.get(key, [])), f"history of {key}: {states}, source: {true.get(key)}"
    if complete:
        assert held == true, "history differs from the source's sequence of states"


def _check_history(wh, table: str, mode: Mode, history: History, connector: Connector, restarts, complete: bool, soft: bool):
    """`check_history` after a sync; restarts that re-send records of compressed
    transactions: the weaker property."""
    live = {k: (n, Decimal(a)) for k, (n, a, deleted) in _target(wh, table, soft).items() if not deleted}
    current = live if connector.compressed and restarts else None
    check_history(wh, table, mode.history, history, connector, complete=complete, current=current)


def draw_delivery(
    data, mode: Mode, initial, drawn, compressed_restarts: bool = False
) -> tuple[History, Connector, list[Restart], list[int]]:
    """A source history of the mode (its initial rows only with an initial snapshot), its
    connector, the connector's restarts and the batch cuts. `compressed_restarts`: in a
    history mode, restarts also with compressed transactions."""
    snapshot = mode.knobs.initial_snapshot and data.draw(st.booleans(), label="initial snapshot")
    truncates = (
        data.draw(st.lists(st.integers(1, len(drawn) - 1), min_size=1, max_size=2), label="truncates")
        if mode.knobs.truncates
        else []
    )
    history = build_history(initial if snapshot else [], drawn, truncates)
    connector = draw_connector(data, mode, history, snapshot)
    emitted = len(emitted_records(emit(history, connector), connector))
    connector = draw_kafka(data, mode.knobs, connector, emitted)
    # A restart within a compressed transaction's records re-sends changes no record tells
    # from the transaction changing a key back and forth (docs/correctness.md, "History mode").
    no_restarts = mode.history and connector.compressed and not compressed_restarts
    restarts = [] if no_restarts else draw_restarts(data, mode.knobs, connector, emitted)
    connector = draw_late(data, mode.knobs, connector, deliver(emit(history, connector), connector, restarts).records)
    cuts = data.draw(st.lists(st.integers(1, max(emitted - 1, 1)), max_size=4), label="cuts")
    return history, connector, restarts, cuts


def draw_late(data, knobs: Knobs, connector: Connector, records: list) -> Connector:
    """A partition appended late over a window of the delivered `records` (the partition
    of the window's first record, so that it holds one)."""
    if not records or not _maybe(data, knobs.late):
        return connector
    first = data.draw(_middle_first(0, len(records) - 1), label="late from")
    end = data.draw(st.integers(first + 1, len(records)), label="late to")
    return replace(connector, late=(first, end, records[first]["partition"]))


# ---- the property -----------------------------------------------------------------------------


def check_delivery(
    wh,
    pipeline,
    table: str,
    mode: Mode,
    history: History,
    connector: Connector,
    restarts: list[Restart],
    cuts: list[int],
    report=note,
    widen=None,
) -> None:
    """`widen` (replay modes): widens NAME and returns the pipeline for it; the quarantine
    is then replayed."""
    delivery = deliver(emit(history, connector), connector, restarts)
    records = delivery.records
    report(describe(history, connector, restarts, delivery, cuts))
    config = pipeline.table(table)
    soft = mode.delete_mode == "soft"
    model = DeliveryModel(config)
    for lo, hi in batches(records, cuts):
        ingest(wh, pipeline, table, records[lo:hi])
        run = sync_one(wh, pipeline, table)
        assert run.events_read == hi - lo
        model.add(records[lo:hi])
        assert _comparable(_target(wh, table, soft), connector) == _comparable(_model_rows(model), connector), (
            f"after records {lo}..{hi - 1}"
        )
        assert set(wh.query("SELECT kafka_partition, kafka_offset FROM cdc.sync_quarantine")) == set(model.quarantine())
        # Complete: every record delivered, none waiting in the quarantine for a replay.
        complete = hi == len(records) and not model.quarantine()
        if mode.history:
            _check_history(wh, table, mode, history, connector, restarts, complete, soft)
    if widen is not None:
        pipeline = widen()
        result = replay(wh, pipeline, Selection(table))
        assert result.replayed == len(model.quarantine()) and result.quarantined_again == []
        model.replay(pipeline.table(table))
        assert _target(wh, table, soft) == _model_rows(model), "after the quarantine replay"
    elif model.quarantine():
        # A TOAST placeholder read before any value of its column (its key's older records in
        # a partition appended late, read a sync after it) waits in the quarantine: the
        # operator's `quarantine replay` applies it once the value is known.
        waiting = set(model.quarantine())
        result = replay(wh, pipeline, Selection(table))
        model.replay(config)
        assert result.replayed == len(waiting)
        assert sum(n for _, n in result.quarantined_again) == len(model.waiting())
        assert _comparable(_target(wh, table, soft), connector) == _comparable(_model_rows(model), connector), "after the replay"
        if mode.history:
            _check_history(wh, table, mode, history, connector, restarts, not model.waiting(), soft)
    # The outside contract: once the last re-sent suffix is delivered to its end, the
    # target is the source's final state (soft mode: its live rows).
    live = {k: v for k, v in _target(wh, table, soft).items() if not v[2]}
    assert _comparable(live, connector) == _comparable(_source_rows(history), connector), "final state differs from the source"
    # Nothing new: nothing changes.
    before = wh.query(f'SELECT * FROM cdc."{table}" ORDER BY 1, 2')
    assert sync_one(wh, pipeline, table).events_read == 0
    assert wh.query(f'SELECT * FROM cdc."{table}" ORDER BY 1, 2') == before


@pytest.mark.slow
@pytest.mark.parametrize("mode_name", list(MODES))
@settings(max_examples=int(os.environ.get("PROPERTY_EXAMPLES", 40)))
@given(
    initial=st.lists(st.tuples(st.sampled_from(KEYS), st.integers(-9999, 9999)), max_size=3, unique_by=lambda t: t[0]),
    drawn=steps,
    data=st.data(),
)
def test_delivery(warehouse, mode_name, initial, drawn, data):
    wh, mode = warehouse.wh, MODES[mode_name]
    pipeline = warehouse.pipeline(mode_name)
    table = f"t_{mode_name}"
    _reset(wh, table)
    widen = None
    if mode.replay:
        pipeline = warehouse.set_name_width(mode_name, table, 3)
        widen = lambda: warehouse.set_name_width(mode_name, table, 32)  # noqa: E731
    history, connector, restarts, cuts = draw_delivery(data, mode, initial, drawn, compressed_restarts=True)
    check_delivery(wh, pipeline, table, mode, history, connector, restarts, cuts, widen=widen)


# ---- named deliveries: the smallest case of each behaviour ---------------------------------


def _w(key, name: str, cents: int = 100) -> Change:
    return Change("write", key, _row(key, name, cents))


A, B = (1, "eu"), (2, "us")
MOVES = (1, "us")  # Kafka's partitioner: partition 2 of 3, partition 0 of 4
EXAMPLES = {
    # MySQL binlog_transaction_compression: both changes carry one file/pos, row 0; the
    # second arrives in the next batch and must still apply (a tie is not older).
    "compressed_tie_across_batches": (
        "mysql_compressed",
        History(((_w(A, "a"), _w(A, "b")),)),
        Connector(source="mysql", compressed=True),
        [],
        [1],
    ),
    # The connector resumes at a rewrite delete's tombstone after the key was re-created:
    # the tombstone deletes (no position), the re-sent create must bring the row back.
    "resent_tombstone_then_resent_create": (
        "mysql_unwrap_rewrite",
        History(((_w(A, "a"),), (Change("delete", A),), (_w(A, "again"),))),
        Connector(source="mysql", format="unwrap-rewrite"),
        [Restart(stop=4, resume=2)],
        [5],
    ),
    "resent_tombstone_only_delete_then_resent_create": (
        "mysql_unwrap_tombstone",
        History(((_w(A, "a"),), (Change("delete", A),), (_w(A, "again"),))),
        Connector(source="mysql", format="unwrap-tombstone"),
        [Restart(stop=3, resume=1)],
        [4],
    ),
    # A re-created PostgreSQL connector reads [null, S]: S is above everything streamed
    # before, so the snapshot's value (written while no slot existed) wins.
    "resnapshot_after_lost_update": (
        "pg_resnapshot",
        History(((_w(B, "b"),), (_w(A, "a"),), (_w(A, "lost"),))),
        Connector(source="postgres", resnapshot_at=3, lost=1),
        [],
        [],
    ),
    # ... and so does the first transaction it streams, [null, X].
    "first_transaction_after_resnapshot": (
        "pg_resnapshot",
        History(((_w(B, "b"),), (_w(A, "a"),), (_w(A, "after"),))),
        Connector(source="postgres", resnapshot_at=2),
        [],
        [3],
    ),
    # Oracle: two changes of one transaction at one SCN; the replay of the first arrives
    # after the second is stored: txSeq (the index in the transaction) makes it older.
    "oracle_scn_tie_replayed_across_batches": (
        "oracle_unwrap_rewrite",
        History(((_w(A, "a"), _w(A, "b")),)),
        Connector(source="oracle", format="unwrap-rewrite"),
        [Restart(stop=2, resume=0)],
        [3],
    ),
    # SQL Server: a primary-key change is a delete and a create that share both LSNs
    # (event_serial_no 1 and 2); a replay of the key's earlier update is stale.
    "sqlserver_key_change_replayed": (
        "sqlserver_debezium",
        History(((_w(A, "a"),), (_w(A, "b"),), (Change("move", A, _row(B, "b", 100)),))),
        Connector(source="sqlserver"),
        [Restart(stop=5, resume=1)],
        [4, 6],
    ),
    # Db2 re-created without offsets: the snapshot reads at the current max LSN, above
    # everything streamed before (a lost update included).
    "db2_resnapshot_after_lost_update": (
        "db2_unwrap_tombstone",
        History(((_w(B, "b"),), (_w(A, "a"),), (_w(A, "lost"),))),
        Connector(source="db2", format="unwrap-tombstone", resnapshot_at=3, lost=1),
        [],
        [],
    ),
    # The topic grows from 3 to 4 partitions before the tombstone-only delete, which lands
    # in a lower partition than the key's insert and update, in the same batch: it deletes.
    "partition_increase_tombstone_only_delete": (
        "pg_unwrap_tombstone_grow",
        History(((_w(MOVES, "a"),), (_w(MOVES, "b"),), (Change("delete", MOVES),))),
        Connector(source="postgres", format="unwrap-tombstone", partitions=3, grow_to=4, grow_at=2),
        [],
        [],
    ),
    # Kafka order: the update in the lower, new partition is newer than the insert.
    "partition_increase_kafka_order": (
        "kafka_grow",
        History(((_w(MOVES, "a"),), (_w(MOVES, "b"),))),
        Connector(source="postgres", partitions=3, grow_to=4, grow_at=1),
        [],
        [],
    ),
    # A restart re-sends older events at higher offsets: they are stale.
    "replayed_suffix_is_stale": (
        "pg_debezium",
        History(((_w(A, "a"),), (_w(A, "b"),), (Change("delete", A),))),
        Connector(source="postgres"),
        [Restart(stop=4, resume=0)],
        [2, 5],
    ),
    # PostgreSQL under REPLICA IDENTITY DEFAULT with a TOASTed NAME: updates that leave NAME
    # unchanged carry the placeholder (the current state keeps the stored NAME, each history
    # version the one before it), a restart re-sends them after their successors, and the
    # batch cuts fall between a placeholder and the change that set its value.
    "toasted_name_resent_across_cuts": (
        "pg_history",
        History(((_w(A, "a", 100),), (_w(A, "a", 200),), (_w(A, "b", 200),), (_w(A, "b", 300), _w(B, "c")), (_w(B, "c", 5),))),
        Connector(source="postgres", replica_identity="default", toasted=True),
        [Restart(stop=4, resume=1)],
        [1, 3, 6],
    ),
    # The topic grows and the key's update (a TOAST placeholder for NAME) goes to the new
    # partition; the old partition's send of its create is retried and appended late, so
    # the update is read first, in the same batch: the batch's create gives the
    # placeholder its value (the sync ranks a batch by position), nothing is quarantined.
    "late_create_fills_a_placeholder_read_before_it": (
        "pg_history_late",
        History(((_w(MOVES, "m", 0),), (_w(MOVES, "m", 1),))),
        Connector(source="postgres", replica_identity="default", toasted=True, grow_to=3, grow_at=1, late=(0, 2, 0)),
        [],
        [],
    ),
    # The same under LogAppendTime: the brokers' append times put the create, appended late,
    # after the update in Kafka order too; the sync ranks a key's batch by position first, so
    # the update still wins and takes the create's values.
    "late_create_after_a_placeholder_in_kafka_order_too": (
        "pg_history_late",
        History(((_w(MOVES, "m", 0),), (_w(MOVES, "m", 1),), (_w(B, "b", 2),))),
        Connector(
            source="postgres", replica_identity="default", toasted=True, grow_to=3, grow_at=1, late=(0, 3, 0), timestamp_type="L"
        ),
        [],
        [],
    ),
    # The same, with the create read a sync after the update: the placeholder has no value
    # yet and is quarantined (no version); `quarantine replay` then applies it over the
    # create, a version after it.
    "late_create_a_sync_after_a_placeholder_then_a_replay": (
        "pg_history_late",
        History(((_w(MOVES, "m", 0),), (_w(MOVES, "m", 1),))),
        Connector(source="postgres", replica_identity="default", toasted=True, grow_to=3, grow_at=1, late=(0, 2, 0)),
        [],
        [1],
    ),
    # Two restarts: the second re-sends an update with a TOAST placeholder after the key's
    # tombstone-only delete (ranked at that update's position), then the delete again; the
    # key is re-created in the batch. The re-sent update is superseded in its batch: it is
    # neither applied nor quarantined, and adds no version (a copy).
    "resent_placeholder_after_a_tombstone_superseded_in_its_batch": (
        "pg_unwrap_tombstone_history",
        History(((_w(A, "a", 0),), (_w(A, "a", 1),), (Change("delete", A),), (_w(A, "b", 2),))),
        Connector(source="postgres", format="unwrap-tombstone", replica_identity="default", toasted=True),
        [Restart(stop=3, resume=1)],
        [],
    ),
    # A key deleted, re-created and truncated; the create and the truncate come in one batch,
    # which voids the create. A restart re-sends the create alone in the next batch (then the
    # truncate): it precedes the truncate, so it stays stale (the delete remembered before
    # the truncate is deleted at it).
    "truncate_voids_a_create_a_restart_resends": (
        "pg_truncate",
        History(((_w(A, "a"),), (Change("delete", A),), (_w(A, "b"),), (Change("truncate", NO_KEY),))),
        Connector(source="postgres"),
        [Restart(5, 3)],
        [3, 5, 6],
    ),
}


@pytest.mark.parametrize("example", list(EXAMPLES))
def test_delivery_example(warehouse, example):
    mode_name, history, connector, restarts, cuts = EXAMPLES[example]
    mode = MODES[mode_name]
    pipeline = warehouse.pipeline(mode_name)
    table = f"t_{mode_name}"
    _reset(warehouse.wh, table)
    check_delivery(warehouse.wh, pipeline, table, mode, history, connector, restarts, cuts, report=print)


# ---- the weaker history check can fail -----------------------------------------------------

S1, S2, S3 = ("a", Decimal("1.00")), ("b", Decimal("2.00")), ("c", Decimal("3.00"))


@pytest.mark.parametrize(
    ("held", "current", "problem"),
    [
        ({A: [S1, S2, S1, S2, S3]}, {A: S3}, None),  # re-sent changes back and forth: extra versions
        ({A: [S1, S3]}, {A: S3}, "lacks or reorders"),  # a true version missing
        ({A: [S2, S1, S3]}, {A: S3}, "lacks or reorders"),  # two true versions swapped
        ({A: [S1, S2, S3, S2]}, {A: S3}, "ends at"),  # the last version is not the target's
        ({A: [S1, S2, S3]}, {}, "ends at"),  # the target deleted the key, the history did not
    ],
)
def test_the_weak_history_check_finds_a_missing_or_reordered_version(held, current, problem):
    problems = weak_problems(held, {A: [S1, S2, S3]}, current)
    assert (problems == []) if problem is None else any(problem in p for p in problems), problems

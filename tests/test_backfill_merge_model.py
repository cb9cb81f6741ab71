"""The merge rule against a plain-Python reference model (hypothesis, real PostgreSQL).

State the stream left (target rows, remembered deletes, each with a source time and maybe
a position; a tombstone-only delete with only its Kafka timestamp) plus one stage row per
key -> the table after the merge. Run twice: the second run must change nothing.

A second test draws whole stream histories (tombstone-only deletes, rows without source
times, Kafka timestamps at or after the commit, snapshot times tied to commit times) and
checks the contract itself: whatever the stream did after the snapshot survives it, and
reconcile explains every difference the merge leaves."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sync.operations.backfill import merge_stage
from sync.operations.reconcile import compare_rows, warehouse_rows
from sync.sql.backfill_merge import BackfillSql
from sync.sql.buckets import ReconcileSql, row_checksum
from sync.sql.dialect import dialect_for
from sync.sql.handover import Stamp

T0 = datetime(2024, 1, 1)
KEYS = ["K0", "K1", "K2"]
keys = st.sampled_from(KEYS)  # few keys, few times: overlaps and ties are common
ts = st.none() | st.integers(0, 2).map(lambda m: T0 + timedelta(minutes=m))
pos = st.none() | st.integers(0, 2).map(lambda p: f"{p:020d}")
held = st.tuples(ts, pos)
deleted_held = st.tuples(ts, pos, ts)  # source time, position, Kafka timestamp
stream_state = st.dictionaries(
    keys,
    st.one_of(st.tuples(st.just("row"), st.text("ab", max_size=3), held), st.tuples(st.just("deleted"), st.none(), deleted_held)),
)
stage_rows = st.dictionaries(keys, st.tuples(st.text("xy", max_size=3), ts, pos, st.booleans()), min_size=1)


def newer(held_ts, held_pos, s_ts, s_pos, held_kafka_ts=None) -> bool:
    """The held row is at least as new as the snapshot row. Positions compare when both
    have one; else times, where a delete without a source time is dated by its Kafka
    timestamp (no earlier than its commit). An unknown time keeps the held row."""
    if s_pos is not None and held_pos is not None:
        return s_pos <= held_pos
    held_time = held_ts if held_ts is not None else held_kafka_ts
    return held_time is None or s_ts is None or held_time >= s_ts


def model(state: dict, stage: dict) -> tuple[dict, dict, dict]:
    """-> target, remembered deletes, and the merge's counts."""
    target = {k: (v[1], *v[2]) for k, v in state.items() if v[0] == "row"}
    deleted = {k: v[2] for k, v in state.items() if v[0] == "deleted"}
    counts = dict.fromkeys(("kept_newer", "kept_deleted", "loaded", "deleted"), 0) | {"staged": len(stage)}
    for k, (name, s_ts, s_pos, is_delete) in stage.items():
        if k in target and newer(target[k][1], target[k][2], s_ts, s_pos):
            counts["kept_newer"] += 1
            continue
        if k in deleted and newer(deleted[k][0], deleted[k][1], s_ts, s_pos, deleted[k][2]):
            counts["kept_deleted"] += 1
            continue
        target.pop(k, None)
        deleted.pop(k, None)
        if is_delete:
            deleted[k] = (s_ts, s_pos, None)
            counts["deleted"] += 1
        else:
            target[k] = (name, s_ts, s_pos)
            counts["loaded"] += 1
    return target, deleted, counts


def load_state(wh, state: dict) -> None:
    """key -> ("row", name, source ts, position) or ("deleted", None, source ts, position, Kafka ts)."""
    for t in ("customer", "customer__deleted"):
        wh.execute(f'DELETE FROM cdc."{t}"')
    for k, (kind, name, h_ts, h_pos, *kafka_ts) in state.items():
        if kind == "row":
            wh.execute(
                "INSERT INTO cdc.customer (customer_id, name, _source_ts, _source_pos) VALUES (%s, %s, %s, %s)",
                (k, name, h_ts, h_pos),
            )
        else:
            wh.execute(
                "INSERT INTO cdc.customer__deleted (customer_id, _source_ts, _source_pos, _kafka_timestamp) "
                "VALUES (%s, %s, %s, %s)",
                (k, h_ts, h_pos, *kafka_ts),
            )


def fresh_stage(wh, pipeline) -> BackfillSql:
    sql = BackfillSql(dialect_for("postgres", "cdc"), pipeline, pipeline.table("customer"))
    wh.execute(sql.drop_stage_table())
    wh.execute(sql.stage_table())
    return sql


def merge(wh, sql: BackfillSql, stage: dict) -> dict[str, int]:
    """key -> (name, source ts, position, is delete) into the stage, then the merge."""
    with wh.transaction():
        wh.execute(sql.lock())
        for k, (name, s_ts, s_pos, is_delete) in stage.items():
            wh.execute(
                "INSERT INTO cdc.customer__backfill (customer_id, name, _source_ts, _source_pos, _delete) "
                "VALUES (%s, %s, %s, %s, %s)",
                (k, name, s_ts, s_pos, is_delete),
            )
        return merge_stage(wh, sql)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])  # tables reset per example
@given(stream_state, stage_rows)
def test_merge_matches_the_model(deployed, state, stage):
    wh, pipeline = deployed
    sql = fresh_stage(wh, pipeline)
    load_state(wh, {k: (kind, name, *h) for k, (kind, name, h) in state.items()})

    def run_merge() -> dict[str, int]:
        return merge(wh, sql, stage)

    counts = run_merge()
    expected_target, expected_deleted, expected_counts = model(state, stage)
    assert counts == expected_counts
    got_target = {k: (n, t, p) for k, n, t, p in wh.query("SELECT customer_id, name, _source_ts, _source_pos FROM cdc.customer")}
    got_deleted = {
        k: (t, p, kt)
        for k, t, p, kt in wh.query("SELECT customer_id, _source_ts, _source_pos, _kafka_timestamp FROM cdc.customer__deleted")
    }
    assert (got_target, got_deleted) == (expected_target, expected_deleted)
    before = wh.query("SELECT * FROM cdc.customer ORDER BY 1"), wh.query("SELECT * FROM cdc.customer__deleted ORDER BY 1")
    again = run_merge()  # idempotent: every row is now held at least as new
    assert again["kept_newer"] + again["kept_deleted"] == len(stage) and again["loaded"] == again["deleted"] == 0
    assert (
        wh.query("SELECT * FROM cdc.customer ORDER BY 1"),
        wh.query("SELECT * FROM cdc.customer__deleted ORDER BY 1"),
    ) == before
    assert wh.scalar("SELECT COUNT(*) FROM cdc.customer__backfill") == 0


def unexplained(wh, pipeline, stage: dict, snapshot_time: datetime) -> list:
    """The differences reconcile, comparing `stage` (the snapshot's live rows) with the
    warehouse over the name column, does not explain: it must explain what the merge left."""
    table = pipeline.table("customer")
    names = [table.column_by_any_name("name")]
    rec = ReconcileSql(dialect_for("postgres", "cdc"), pipeline, table, 1, names)
    checksum = f'SELECT {row_checksum(rec.d, names, "v")} FROM (SELECT CAST(%s AS varchar(256)) AS "name") v'
    snap = {k: (wh.scalar(checksum, (name,)), Stamp(pos, ts)) for k, (name, ts, pos, _) in stage.items()}
    diffs = compare_rows(snap, warehouse_rows(wh, rec, [0]), snapshot_time, True)
    return [d for d in diffs if not d.explained]


# ---- whole histories: the contract itself ---------------------------------------------
# A commit: key, delete?, commit minute, whether the event carries its source time (an
# unwrap row without add.fields, or a tombstone-only delete, does not), and how many
# minutes after the commit Kafka stamped it.
commit = st.tuples(keys, st.booleans(), st.integers(0, 4), st.booleans(), st.integers(0, 2))


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(commit, max_size=8), st.integers(0, 4), st.lists(keys, max_size=3))
def test_no_snapshot_undoes_what_the_stream_did_after_it(deployed, history, snapshot_minute, extra_keys):
    """The stream applied every commit of `history` (in commit order); a snapshot taken at
    `snapshot_minute` (ties with commits are common) holds the rows alive then. After the
    merge, every key the stream changed after the snapshot shows the stream's state, the
    others show the snapshot's, and a second identical merge changes nothing."""
    wh, pipeline = deployed
    history = sorted(history, key=lambda c: c[2])
    at = lambda minute: T0 + timedelta(minutes=minute)  # noqa: E731
    state: dict = {}
    truth_at_snapshot: dict = {}
    last_commit: dict = {}
    for i, (k, is_delete, minute, has_ts, lag) in enumerate(history):
        source_ts = at(minute) if has_ts else None
        state[k] = ("deleted", None, source_ts, None, at(minute + lag)) if is_delete else ("row", f"v{i}", source_ts, None)
        last_commit[k] = minute
        if minute <= snapshot_minute:
            truth_at_snapshot.pop(k, None)
            if not is_delete:
                truth_at_snapshot[k] = f"v{i}"
    for k in extra_keys:
        if k not in last_commit:  # a key the retained stream never carried
            truth_at_snapshot[k] = f"old-{k}"
    load_state(wh, state)
    sql = fresh_stage(wh, pipeline)
    stage = {k: (name, at(snapshot_minute), None, False) for k, name in truth_at_snapshot.items()}
    merge(wh, sql, stage)

    rows = dict(wh.query("SELECT customer_id, name FROM cdc.customer"))
    deleted = {k for (k,) in wh.query("SELECT customer_id FROM cdc.customer__deleted")}
    for k in KEYS:
        if k in last_commit and last_commit[k] > snapshot_minute:
            kind, name = state[k][0], state[k][1]
            if kind == "deleted":
                assert k not in rows and k in deleted, f"{k}: deleted after the snapshot, brought back"
            else:
                assert rows.get(k) == name, f"{k}: written after the snapshot, overwritten"
        elif k in truth_at_snapshot and k not in last_commit:
            assert rows.get(k) == truth_at_snapshot[k], f"{k}: only the snapshot has it, not loaded"
        elif k in last_commit:  # the stream's last change is at or before the snapshot
            stream_name = state[k][1]
            assert rows.get(k) in (stream_name, truth_at_snapshot.get(k)), f"{k}: neither the stream's nor the snapshot's"

    assert not unexplained(wh, pipeline, stage, at(snapshot_minute)), "reconcile pages on a correct handover"

    before = wh.query("SELECT * FROM cdc.customer ORDER BY 1"), wh.query("SELECT * FROM cdc.customer__deleted ORDER BY 1")
    merge(wh, sql, stage)
    after = wh.query("SELECT * FROM cdc.customer ORDER BY 1"), wh.query("SELECT * FROM cdc.customer__deleted ORDER BY 1")
    assert after == before, "a second identical backfill changed the table"

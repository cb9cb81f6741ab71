"""The merge rule against a plain-Python reference model (hypothesis, real PostgreSQL).

State the stream left (target rows, remembered deletes, each with a source time and maybe
a position) plus one stage row per key -> the table after the merge. Run twice: the
second run must change nothing."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sync.backfill import merge_stage
from sync.runner import deploy
from sync.sql.backfill_merge import BackfillSql
from sync.sql.dialects import get_dialect

T0 = datetime(2024, 1, 1)
keys = st.sampled_from(["K0", "K1", "K2"])  # few keys, few times: overlaps and ties are common
ts = st.none() | st.integers(0, 2).map(lambda m: T0 + timedelta(minutes=m))
pos = st.none() | st.integers(0, 2).map(lambda p: f"{p:020d}")
held = st.tuples(ts, pos)
stream_state = st.dictionaries(keys, st.one_of(st.tuples(st.just("row"), st.text("ab", max_size=3), held),
                                               st.tuples(st.just("deleted"), st.none(), held)))
stage_rows = st.dictionaries(
    keys, st.tuples(st.text("xy", max_size=3), ts.filter(lambda v: v is not None), pos, st.booleans()), min_size=1
)


def newer(held_ts, held_pos, s_ts, s_pos) -> bool:
    if s_pos is not None and held_pos is not None:
        return s_pos <= held_pos
    return held_ts is not None and held_ts >= s_ts


def model(state: dict, stage: dict) -> tuple[dict, dict, dict]:
    """-> target, remembered deletes, and the merge's counts."""
    target = {k: (v[1], *v[2]) for k, v in state.items() if v[0] == "row"}
    deleted = {k: v[2] for k, v in state.items() if v[0] == "deleted"}
    counts = dict.fromkeys(("kept_newer", "kept_deleted", "loaded", "deleted"), 0) | {"staged": len(stage)}
    for k, (name, s_ts, s_pos, is_delete) in stage.items():
        if k in target and newer(target[k][1], target[k][2], s_ts, s_pos):
            counts["kept_newer"] += 1
            continue
        if k in deleted and newer(*deleted[k], s_ts, s_pos):
            counts["kept_deleted"] += 1
            continue
        target.pop(k, None)
        deleted.pop(k, None)
        if is_delete:
            deleted[k] = (s_ts, s_pos)
            counts["deleted"] += 1
        else:
            target[k] = (name, s_ts, s_pos)
            counts["loaded"] += 1
    return target, deleted, counts


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])  # tables reset per example
@given(stream_state, stage_rows)
def test_merge_matches_the_model(deployed, state, stage):
    wh, pipeline = deployed
    table = pipeline.table("customer")
    sql = BackfillSql(get_dialect("postgres", "cdc"), pipeline, table)
    wh.execute(sql.drop_stage_table())
    wh.execute(sql.stage_table())
    for t in ("customer", "customer__deleted"):
        wh.execute(f'DELETE FROM cdc."{t}"')
    for k, (kind, name, (h_ts, h_pos)) in state.items():
        if kind == "row":
            wh.execute("INSERT INTO cdc.customer (customer_id, name, _source_ts, _source_pos) VALUES (%s, %s, %s, %s)",
                       (k, name, h_ts, h_pos))
        else:
            wh.execute("INSERT INTO cdc.customer__deleted (customer_id, _source_ts, _source_pos) VALUES (%s, %s, %s)",
                       (k, h_ts, h_pos))

    def run_merge() -> dict[str, int]:
        with wh.transaction():
            wh.execute(sql.lock())
            for k, (name, s_ts, s_pos, is_delete) in stage.items():
                wh.execute(
                    "INSERT INTO cdc.customer__backfill (customer_id, name, _source_ts, _source_pos, _delete) "
                    "VALUES (%s, %s, %s, %s, %s)", (k, name, s_ts, s_pos, is_delete),
                )
            return merge_stage(wh, sql)

    counts = run_merge()
    expected_target, expected_deleted, expected_counts = model(state, stage)
    assert counts == expected_counts
    got_target = {k: (n, t, p) for k, n, t, p in wh.query("SELECT customer_id, name, _source_ts, _source_pos FROM cdc.customer")}
    got_deleted = {k: (t, p) for k, t, p in wh.query("SELECT customer_id, _source_ts, _source_pos FROM cdc.customer__deleted")}
    assert (got_target, got_deleted) == (expected_target, expected_deleted)
    before = wh.query("SELECT * FROM cdc.customer ORDER BY 1"), wh.query("SELECT * FROM cdc.customer__deleted ORDER BY 1")
    again = run_merge()  # idempotent: every row is now held at least as new
    assert again["kept_newer"] + again["kept_deleted"] == len(stage) and again["loaded"] == again["deleted"] == 0
    assert (wh.query("SELECT * FROM cdc.customer ORDER BY 1"), wh.query("SELECT * FROM cdc.customer__deleted ORDER BY 1")) == before
    assert wh.scalar("SELECT COUNT(*) FROM cdc.customer__backfill") == 0

"""The benchmark harness at its smallest sizes: it runs end to end on a real PostgreSQL,
every approach leaves the same rows, and the JSON names every figure. Times are never
asserted (they depend on the machine)."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.__main__ import run
from benchmarks.profile import instrumented, procedure_sql, procedure_statements
from benchmarks.report import TARGETS
from benchmarks.sizes import QUICK
from benchmarks.workload import PIPELINE, TABLE
from sync.config import load_pipeline


@pytest.mark.slow
def test_quick_run_writes_every_figure(database_dsn, tmp_path, capsys):
    out = tmp_path / "results.json"
    run(["--quick", "--dsn", database_dsn, "--out", str(out)])

    doc = json.loads(out.read_text())
    figures = doc["figures"]
    missing = [name for name in doc["expected_figures"] if name not in figures]
    assert not missing, f"figures missing from the JSON: {missing}"
    assert all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in figures.values())
    assert {
        "incremental.ratio_a_b",
        "incremental.ratio_a_c",
        "incremental.ratio_a_d",
        "incremental.ratio_a_e",
        "scaling.ratio_largest_smallest",
        "empty_sync.seconds",
    } <= set(figures)
    for m in QUICK.scaling_targets:
        assert f"scaling.target_{m}.generated_procedure.seconds" in figures
    # Part 3 either ran or says why it did not.
    assert ("backfill.seconds" in figures) != ("backfill" in doc["skipped"])

    assert [t["figure"] for t in doc["targets"]] == [t.figure for t in TARGETS]
    for reported, target in zip(doc["targets"], TARGETS):
        value = figures.get(target.figure)
        assert reported["value"] == pytest.approx(value, abs=1e-6)  # the JSON keeps 6 decimals
        assert reported["met"] == (None if value is None else target.met(value))
    printed_targets = printed_table = capsys.readouterr().out
    assert printed_targets.count(" met\n") + printed_targets.count(" MISSED\n") + printed_targets.count(" not measured\n") == len(
        TARGETS
    )
    for approach in ("generated_procedure", "seed_blog_pattern", "per_row_upsert", "apply_floor", "raw_copy"):
        assert {f"incremental.{approach}.seconds", f"incremental.{approach}.events_per_second"} <= set(figures)
    assert {"empty_sync.max_seconds", "scaling.floor_ratio_largest_smallest"} <= set(figures)
    assert doc["inputs"]["events"] == QUICK.events and doc["inputs"]["quick"] is True
    assert doc["machine"]["logical_cpus"] and doc["versions"]["postgresql"]
    assert all(len(m["runs"]) >= 1 for m in doc["measurements"].values())
    # Where the procedure's time goes: its statements, slowest first, shares adding up.
    breakdown = doc["breakdown"]
    assert any(row["statement"].startswith('INSERT INTO "cdc"."customer__stage"') for row in breakdown)
    assert [row["seconds"] for row in breakdown] == sorted((row["seconds"] for row in breakdown), reverse=True)
    assert math.isclose(sum(row["share"] for row in breakdown), 1.0, abs_tol=0.01)
    # The baselines did the same work as the procedure: same rows afterwards.
    assert any("left the same rows" in note for note in doc["notes"]), doc["notes"]
    # The history phase shows the spread of its pairs of calls besides the ratio of medians.
    assert any(note.startswith("history: the ratio of each pair of calls ran from") for note in doc["notes"]), doc["notes"]

    assert "(a) incremental_sync_customer()" in printed_table and "a/c =" in printed_table


@pytest.mark.parametrize("value, met", [(0.049, True), (0.050, False), (0.051, False)])
def test_the_empty_sync_target_is_strictly_under_50_ms(value, met):
    (target,) = [t for t in TARGETS if t.figure == "empty_sync.seconds"]
    assert target.met(value) is met


@pytest.mark.parametrize("value, met", [(0.32, True), (0.33, True), (0.34, False)])
def test_ratio_targets_are_at_most_their_limit(value, met):
    (target,) = [t for t in TARGETS if t.figure == "incremental.ratio_a_c"]
    assert target.met(value) is met


def test_refuses_a_database_that_is_not_scratch(wh, database_dsn):
    wh.execute("CREATE SCHEMA bench")
    with pytest.raises(SystemExit, match="bench already exists"):
        run(["--quick", "--dsn", database_dsn])


def test_profile_times_every_statement_of_one_real_call(database_dsn, capsys):
    from benchmarks.profile import main as profile_main

    results = profile_main(["--events", "200", "--target-rows", "1000", "--dsn", database_dsn])
    # Every statement of the body, in order, except those behind an IF this batch skips
    # (ANALYZE of a small stage, the bound of a bounded run, positionless ranking, TOAST fill
    # and its quarantine, drift, quarantine and replay).
    _, texts = instrumented(procedure_sql(load_pipeline(PIPELINE)[0], TABLE), "cdc")
    stage = 'UPDATE "cdc"."customer__stage"'
    guarded = (
        "ANALYZE",
        f"{stage} s SET _rank_pos",
        f"{stage} SET _source_pos",
        f'{stage} s SET "name"',
        f'{stage} s SET "mktsegment"',
        'INSERT INTO "cdc"."customer__drift"',
        'INSERT INTO "cdc"."customer__quarantine"',
        "SELECT x.refresh_time, x.kafka_partition",
        "v_until_time := COALESCE",
        f"{stage} s SET _action = 'quarantine'",
        f"{stage} s SET _rn = CASE WHEN s._action = 'delete'",  # the TOAST step's unknown values
        f"{stage} s SET _action = 'stale' FROM (SELECT r.*",  # a replayed record at a tied position
        "v_until_time := TIMESTAMP '1900-01-01",
        'UPDATE "cdc"."customer__quarantine"',
        "GET DIAGNOSTICS v_set_aside",  # records the TOAST step set aside, counted
        "v_quarantined := v_quarantined",
    )
    expected = [" ".join(t.split())[:90] for t in texts[1:] if not t.startswith(guarded)]
    assert [r.label for r in results] == expected
    assert expected[0].startswith("LOCK TABLE") and expected[-2].startswith('INSERT INTO "cdc"."sync_run_log"')
    assert expected[-1].startswith('DELETE FROM "cdc"."customer__stage"')
    assert all(r.seconds >= 0 for r in results) and sum(r.seconds for r in results) > 0
    assert "one call, timestamped after each statement" in capsys.readouterr().out


def test_profile_explains_every_data_statement_of_the_procedure(database_dsn, capsys):
    from benchmarks.profile import main as profile_main

    results = profile_main(["--events", "200", "--target-rows", "1000", "--dsn", database_dsn, "--explain"])
    data = [" ".join(t.split())[:90] for t in procedure_statements(load_pipeline(PIPELINE)[0], TABLE)]
    assert [r.label for r in results] == data
    assert data[0].startswith('INSERT INTO "cdc"."customer__stage"')
    assert any(label.startswith('DELETE FROM "cdc"."customer" USING') for label in data)
    assert all(r.plan and r.seconds >= 0 for r in results)
    assert "statements (EXPLAIN ANALYZE" in capsys.readouterr().out

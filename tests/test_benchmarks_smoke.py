"""The benchmark harness at its smallest sizes: it runs end to end on a real PostgreSQL,
every approach leaves the same rows, and the JSON names every figure. Times are never
asserted (they depend on the machine)."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.__main__ import run
from benchmarks.report import TARGETS
from benchmarks.sizes import QUICK


@pytest.mark.slow
def test_quick_run_writes_every_figure(database_dsn, tmp_path, capsys):
    out = tmp_path / "results.json"
    run(["--quick", "--dsn", database_dsn, "--out", str(out)])

    doc = json.loads(out.read_text())
    figures = doc["figures"]
    missing = [name for name in doc["expected_figures"] if name not in figures]
    assert not missing, f"figures missing from the JSON: {missing}"
    assert all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in figures.values())
    assert {"incremental.ratio_a_b", "incremental.ratio_a_c", "incremental.ratio_a_d", "incremental.ratio_a_e",
            "scaling.ratio_largest_smallest", "empty_sync.seconds"} <= set(figures)
    for m in QUICK.scaling_targets:
        assert f"scaling.target_{m}.generated_procedure.seconds" in figures
    # Part 3 either ran or says why it did not.
    assert ("backfill.seconds" in figures) != ("backfill" in doc["skipped"])

    assert [t["figure"] for t in doc["targets"]] == [t.figure for t in TARGETS]
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

    printed = capsys.readouterr().out
    assert "(a) incremental_sync_customer()" in printed and "a/c =" in printed


def test_refuses_a_database_that_is_not_scratch(wh, database_dsn):
    wh.execute("CREATE SCHEMA bench")
    with pytest.raises(SystemExit, match="bench already exists"):
        run(["--quick", "--dsn", database_dsn])


def test_profile_times_every_statement_of_one_real_call(database_dsn, capsys):
    from benchmarks.profile import main as profile_main

    results = profile_main(["--events", "200", "--target-rows", "1000", "--dsn", database_dsn])
    labels = [r.label for r in results]
    assert any(label.startswith('INSERT INTO "cdc"."customer__stage"') for label in labels)
    assert any(label.startswith('DELETE FROM "cdc"."customer" USING') for label in labels)
    assert any(label.startswith('INSERT INTO "cdc"."sync_run_log"') for label in labels)
    assert all(r.seconds >= 0 for r in results)
    assert "one call, timestamped after each statement" in capsys.readouterr().out


def test_profile_explains_every_data_statement_of_the_procedure(database_dsn, capsys):
    from benchmarks.profile import main as profile_main

    results = profile_main(["--events", "200", "--target-rows", "1000", "--dsn", database_dsn, "--explain"])
    labels = [r.label for r in results]
    assert labels[0].startswith('INSERT INTO "cdc"."customer__stage"')
    assert any(label.startswith('DELETE FROM "cdc"."customer" USING') for label in labels)
    assert any(label.startswith('INSERT INTO "cdc"."customer" (') for label in labels)
    assert all(r.plan and r.seconds >= 0 for r in results)
    assert "statements (EXPLAIN ANALYZE" in capsys.readouterr().out

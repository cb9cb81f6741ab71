"""`doctor --verify`: the scenarios behind docs/redshift.md, run on the warehouse at hand.
On the embedded PostgreSQL (here) every row PostgreSQL can exercise is verified; the rest
are reported as not applicable, with the reason; a scenario that does not hold is reported
as failed with the engine's words, and the run goes on."""

from __future__ import annotations

import json
import re

import pytest

from sync.operations.verify import Scenario, Verdict, verify
from sync.operations.verify_scenarios import SCENARIOS
from sync.warehouse import connect
from tests.helpers import REPO


def _doc_rows() -> set[int]:
    text = (REPO / "docs" / "redshift.md").read_text()
    table = text.split("## Differences the generated SQL relies on", 1)[1].split("\n## ", 1)[0]
    return {int(n) for n in re.findall(r"^\| (\d+) \|", table, re.M)}


def test_every_row_of_the_redshift_page_has_one_scenario():
    assert sorted(s.row for s in SCENARIOS) == sorted(_doc_rows())


@pytest.fixture(scope="module")
def report(pg_server_dsn):
    return verify(lambda: connect(pg_server_dsn), SCENARIOS, lambda _: None)


def test_the_rows_postgresql_can_exercise_are_verified(report):
    verdicts = {o.row: o.verdict for o in report.outcomes}
    assert report.failed == []
    # PostgreSQL has no VARCHAR limit on JSON text, no case folding setting, enforced keys,
    # no COPY from S3 and no distribution styles: rows 2, 8, 11, 13 and 15.
    assert {r for r, v in verdicts.items() if v is Verdict.NOT_APPLICABLE} == {2, 8, 11, 13, 15}
    assert all(o.detail for o in report.outcomes if o.verdict is Verdict.NOT_APPLICABLE)
    assert report.engine == "postgres" and report.isolation_level
    assert "TimeZone" in report.settings


def test_a_scenario_that_does_not_hold_is_reported_failed_and_the_run_goes_on(pg_server_dsn):
    def broken(s):
        s.deploy('[[tables]]\nname = "t"\ntopic = "x.y.t"\nprimary_key = ["id"]\ncolumns = [{ name = "id", type = "integer" }]\n')
        s.wh.execute(f"SELECT no_such_column FROM {s.name('t')}")

    scenarios = [Scenario(99, "broken on purpose", broken), SCENARIOS[0]]
    report = verify(lambda: connect(pg_server_dsn), scenarios, lambda _: None)
    first, second = report.outcomes
    assert first.verdict is Verdict.FAILED and "no_such_column" in first.detail
    assert second.verdict is Verdict.VERIFIED
    # Every scratch schema is dropped, failed or not.
    wh = connect(pg_server_dsn)
    try:
        assert wh.scalar("SELECT COUNT(*) FROM pg_namespace WHERE nspname LIKE 'redshift_sync_verify_%'") == 0
    finally:
        wh.close()


def test_doctor_through_the_cli_before_and_after_deploy(database_dsn, tmp_path):
    from tests.test_cli import PIPELINE, run

    common = ["--config", str(PIPELINE), "--dsn", database_dsn]
    before = run("doctor", "--json", *common)
    assert before.returncode == 1, before.stderr
    checks = {c["name"]: c for c in json.loads(before.stdout)["checks"]}
    assert checks["warehouse"]["state"] == "ok" and checks["isolation level"]["state"] == "ok"
    assert checks["deployed revision"]["state"] == "failed"
    assert "redshift-sync deploy" in checks["deployed revision"]["detail"]

    assert run("deploy", *common).returncode == 0
    report = tmp_path / "verify.json"
    after = run("doctor", "--verify", "--report", str(report), *common)
    assert after.returncode == 0, after.stdout + after.stderr
    assert "12 verified, 0 failed, 5 not applicable" in after.stdout
    rows = {o["row"]: o["verdict"] for o in json.loads(report.read_text())["outcomes"]}
    assert sorted(rows) == sorted(_doc_rows())

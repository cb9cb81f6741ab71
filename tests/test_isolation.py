"""Record isolation: a record that makes the engine raise is found by bisection,
quarantined with the engine's error, and everything else applies in the same run.

The engine is made to raise on one chosen record the way a real deployment would meet
it: a constraint the warehouse enforces (a CHECK on the target) that the generated SQL
knows nothing about. Through the CLI (`sync`, then `status`) on a real PostgreSQL.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.operations.isolation import CallFailed, is_data_error, isolate
from sync.operations.runner import deploy
from tests.cli_runs import run_cli
from tests.helpers import make_pipeline, pipeline_toml

TOML = """
[[tables]]
name = "acc"
topic = "shop.public.accounts"
primary_key = ["id"]
order_by = "postgres-lsn"
columns = [{ name = "id", type = "integer" }, { name = "balance", type = "integer" }]
"""


# ---- the search, over a model of a table whose records may fail -----------------------------


class Topic:
    """Pending records, some failing; `call(n)` applies the first n unless one fails."""

    def __init__(self, size: int, failing: set[int]):
        self.pending = list(range(size))
        self.failing = failing
        self.applied: list[int] = []
        self.quarantined: list[int] = []
        self.calls = 0
        self.broken = False  # the procedure itself fails, whatever it reads

    def call(self, n: int) -> None:
        self.calls += 1
        if self.broken:
            raise CallFailed("division by zero")
        prefix = self.pending[:n]
        bad = [r for r in prefix if r in self.failing]
        if bad:
            raise CallFailed(f"value {bad[0]} violates check constraint")
        self.applied += prefix
        del self.pending[:n]

    def quarantine_first(self, error: str) -> None:
        self.quarantined.append(self.pending.pop(0))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 300).flatmap(lambda n: st.tuples(st.just(n), st.sets(st.integers(0, n - 1), max_size=5))))
def test_bisection_quarantines_exactly_the_failing_records_and_applies_the_rest(case):
    size, failing = case
    topic = Topic(size, failing)
    with pytest.raises(CallFailed) if failing else _nothing():
        topic.call(size)
    if not failing:
        return
    result = isolate(topic.call, lambda: len(topic.pending), topic.quarantine_first)
    assert result.gave_up is None
    assert topic.quarantined == sorted(failing)
    assert topic.applied == [r for r in range(size) if r not in failing]
    assert topic.pending == []
    # logarithmic: about two calls per halving, per failing record
    assert result.calls <= 1 + len(failing) * (2 * size.bit_length() + 3)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_a_procedure_that_fails_whatever_it_reads_isolates_nothing():
    topic = Topic(50, set())
    topic.broken = True
    result = isolate(topic.call, lambda: len(topic.pending), topic.quarantine_first)
    assert result.gave_up and "no record read, so not because of a record" in result.gave_up
    assert topic.quarantined == [] and topic.calls == 1


def test_an_error_every_record_has_is_not_isolated_record_by_record():
    topic = Topic(50, set(range(50)))
    result = isolate(topic.call, lambda: len(topic.pending), topic.quarantine_first)
    assert result.gave_up and "not one record's fault" in result.gave_up
    assert len(topic.quarantined) <= 10


@pytest.mark.parametrize(
    ("message", "sqlstate", "data"),
    [
        ('new row for relation "acc" violates check constraint "no_13"', "23514", True),
        ("value too long for type character varying(8)", "22001", True),
        ("index row size 3056 exceeds btree version 4 maximum 2704 for index", "54000", True),
        ("Invalid digit, Value 'x', Pos 0, Type: Integer", "XX000", True),
        ("Invalid digit, Value 'x', Pos 0, Type: Integer", None, True),  # the Data API gives no SQLSTATE
        ("could not serialize access due to concurrent update", "40001", False),
        ("1023 Serializable isolation violation on table", None, False),
        ("canceling statement due to lock timeout", "55P03", False),
        ('relation "cdc.acc__stage" does not exist', "42P01", False),
        ("server closed the connection unexpectedly", None, False),
    ],
)
def test_data_errors_are_told_from_conflicts_and_missing_objects(message, sqlstate, data):
    assert is_data_error(message, sqlstate) is data


# ---- through the CLI, on the embedded engine ------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args)


def event(i: int, balance: int, lsn: int) -> dict:
    source = {
        "connector": "postgresql",
        "ts_ms": 1_700_000_000_000 + lsn,
        "snapshot": "false",
        "db": "shop",
        "sequence": json.dumps([str(lsn - 8), str(lsn)]),
        "schema": "public",
        "table": "accounts",
        "lsn": lsn,
    }
    return {
        "key": {"id": i},
        "value": {"before": None, "after": {"id": i, "balance": balance}, "source": source, "op": "c", "ts_ms": 1},
    }


@pytest.mark.slow
def test_one_poisoned_record_is_isolated_and_the_rest_syncs_in_one_run(wh, database_dsn, tmp_path):
    pipeline_file = tmp_path / "pipeline.toml"
    pipeline_file.write_text(pipeline_toml(TOML))
    deploy(wh, make_pipeline(TOML), "test")
    # The engine refuses one value: nothing in the pipeline file says so.
    wh.execute('ALTER TABLE cdc."acc" ADD CONSTRAINT no_13 CHECK (balance <> 13)')
    events = tmp_path / "events.jsonl"
    records = [event(i, 13 if i == 37 else 100 + i, 1000 + 10 * i) for i in range(100)]
    events.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    common = ["--config", str(pipeline_file), "--dsn", database_dsn]
    assert cli("ingest", "--table", "acc", "--file", str(events), *common).returncode == 0

    out = cli("sync", "--json", *common)
    assert out.returncode == 0, out.stderr
    (summary,) = json.loads(out.stdout)
    assert summary["status"] == "ok"
    assert summary["events_read"] == 100 and summary["upserted"] == 99 and summary["quarantined"] == 1
    assert len(summary["isolated"]) == 1 and "no_13" in summary["isolated"][0]
    assert wh.scalar('SELECT COUNT(*) FROM cdc."acc"') == 99
    assert wh.scalar('SELECT COUNT(*) FROM cdc."acc" WHERE id = 37') == 0
    (reason, offset) = wh.query('SELECT reason, kafka_offset FROM cdc."sync_quarantine"')[0]
    assert offset == 37 and "could not apply this record" in reason and "no_13" in reason
    assert wh.scalar("SELECT COUNT(*) FROM cdc.sync_run_log WHERE status = 'isolated'") == 1

    status = cli("status", *common)
    assert status.returncode == 0 and "could not apply this record" in status.stdout
    # nothing left behind: the next sync reads nothing and fails on nothing
    (again,) = json.loads(cli("sync", "--json", *common).stdout)
    assert again["status"] == "ok" and again["events_read"] == 0

"""Quarantine replay of a table with column policies, through the CLI on the embedded
PostgreSQL. The quarantine holds the envelope redacted: a hashed field as its keyed hash,
a masked one as its mask, a dropped one null. Replayed, a hashed field loads as that hash
(never hashed again), a masked one as its mask, a dropped one not at all; a record that
fails again is quarantined again with the same hashes. A record quarantined because a
policy field did not convert cannot be replayed (its value is gone): the replay is
refused, naming the field, and such a record can only be discarded.

Events are shaped as Debezium's MySQL connector emits them (both images carry every
column: https://debezium.io/documentation/reference/stable/connectors/mysql.html#mysql-events).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sync.cli.app import app
from sync.debezium.events import write_jsonl
from sync.sql.policy_replay import REPLAYED
from tests.helpers import cli_project
from tests.policy_scenarios import ALICE, EXAMPLE, SECRET, customers, keyed
from tests.test_policies import cli, deploy_with_key

HASHED = keyed(SECRET, "alice@example.com")


@pytest.fixture
def project(tmp_path: Path, database_dsn: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example with `country` a varchar(2), which a revision can widen."""
    monkeypatch.setenv("POLICY_KEY", SECRET)
    folder = cli_project(tmp_path, EXAMPLE, database_dsn, monkeypatch)
    config = folder / "pipeline.toml"
    config.write_text(
        config.read_text().replace('{ name = "country", type = "char(2)" }', '{ name = "country", type = "varchar(2)" }')
    )
    return folder


def ingest_sync(project: Path, records: list[dict]) -> dict:
    write_jsonl(records, project / "events.jsonl")
    cli("ingest", "--table", "customers", "--file", str(project / "events.jsonl"))
    (summary,) = json.loads(cli("sync", "--table", "customers", "--json"))
    return summary


def quarantined(wh) -> list[tuple]:
    return wh.query("SELECT reason, handled, payload FROM crm.customers__quarantine ORDER BY kafka_offset, handled NULLS FIRST")


def test_a_replayed_record_loads_its_stored_hash_not_a_hash_of_it(project, wh):
    deploy_with_key()
    run = ingest_sync(project, [customers().insert({**ALICE, "country": "USA"})])  # too long for varchar(2)
    assert run["quarantined"] == 1
    ((reason, _, payload),) = quarantined(wh)
    assert reason == "field country does not convert to varchar(2)" and payload["after"]["email"] == HASHED

    # Replayed before the cause is fixed: quarantined again, its hash kept as it was.
    cli("quarantine", "replay", "--table", "customers")
    (again,) = [p for _, handled, p in quarantined(wh) if handled is None]
    assert again["after"]["email"] == HASHED and again["after"]["phone"] == "****"

    # The cause fixed (the column widened by a revision), the replay loads it.
    config = project / "pipeline.toml"
    config.write_text(config.read_text().replace('type = "varchar(2)" }', 'type = "varchar(3)" }'))
    cli("revision", "-m", "wider country")
    cli("deploy")
    out = json.loads(cli("quarantine", "replay", "--table", "customers", "--json"))
    assert (out["replayed"], out["run"]["upserted"], out["run"]["quarantined"]) == (1, 1, 0)
    row = wh.query("SELECT id, email, phone, birth_year, country FROM crm.customers")
    assert row == [(1, HASHED, "****", 0, "USA")]  # hash kept, masks as masks, ssn not a column


def test_a_record_whose_bad_field_has_a_policy_cannot_be_replayed_only_discarded(project, wh):
    deploy_with_key()
    bad = customers().insert({**ALICE, "birth_year": "nineteen-eighty"})  # a masked integer that does not convert
    good = customers().insert({**ALICE, "id": 2, "country": "USA"})
    assert ingest_sync(project, [bad, good])["quarantined"] == 2
    assert "nineteen-eighty" not in json.dumps([p for _, _, p in quarantined(wh)])  # stored as its mask

    out = CliRunner().invoke(app, ["quarantine", "replay", "--table", "customers"])
    assert out.exit_code == 1
    assert "1 because field birth_year did not convert (field birth_year does not convert to integer)" in out.output
    assert "cannot be replayed: discard them" in out.output
    assert [h for _, h, _ in quarantined(wh)] == [None, None]  # nothing replayed

    # The other record replays on its own (selected by its reason), the bad one is discarded.
    cli("quarantine", "replay", "--table", "customers", "--reason", "country")
    cli("quarantine", "discard", "--table", "customers", "--reason", "birth_year", "--yes")
    assert sorted(h for _, h, _ in quarantined(wh) if h) == ["discarded", "replayed"]


@pytest.mark.parametrize("forged", ["yes", HASHED, None])
def test_a_streamed_row_that_names_the_replay_mark_is_hashed_all_the_same(project, wh, forged):
    """An unwrapped row's fields are the envelope's members, so a source column could bear
    the replay mark's name: without the key it cannot bear its value, and the field is
    hashed as any other (the clear value never lands)."""
    deploy_with_key()
    login = {"login_id": 7, "customer_id": 1, "ip_address": "10.1.2.3", "logged_in_at": 1_700_000_000_000}
    record = {**login, "__deleted": "false", REPLAYED: forged}
    write_jsonl([{"partition": 0, "key": {"login_id": 7}, "value": record}], project / "logins.jsonl")
    cli("ingest", "--table", "logins", "--file", str(project / "logins.jsonl"))
    cli("sync", "--table", "logins")
    assert wh.query("SELECT ip_address FROM crm.logins") == [(keyed(SECRET, "10.1.2.3"),)]

"""`redshift-sync explain --table T --key K` through the command line on a real PostgreSQL:
each kind of verdict, from the procedure's own rules, on the delivery behaviours
Debezium documents.

Debezium delivers at least once: "when a system fails ... the connector ... restarts from
the last recorded offset ... some events might be duplicated" (Debezium MySQL connector
documentation, "Behavior when things go wrong"). ExtractNewRecordState:
`delete.tombstone.handling.mode` "rewrite-with-tombstone" keeps the delete event with
`__deleted=true` and its tombstone, "tombstone" keeps only the tombstone (Debezium,
"New Record State Extraction"). PostgreSQL TOAST: "the connector receives a placeholder
... __debezium_unavailable_value" for an unchanged out-of-line value (Debezium PostgreSQL
connector documentation, "Considerations when using TOASTed values"). MySQL's
binlog_transaction_compression writes a transaction as one compressed event, whose row
events share one binlog position (MySQL 8.0 reference manual, "Binary Log Transaction
Compression").
"""

from __future__ import annotations

import pytest

from sync.operations.runner import deploy
from sync.warehouse import connect
from tests import explain_scenarios as scenarios
from tests.helpers import make_pipeline


@pytest.fixture
def cli(database_dsn, tmp_path) -> scenarios.Cli:
    """The pipeline deployed on a fresh database (no revision history: deployed as the
    tests do); records reach the stream through `redshift-sync ingest`."""
    wh = connect(database_dsn)
    try:
        deploy(wh, make_pipeline(scenarios.TABLES), "test")
    finally:
        wh.close()
    return scenarios.Cli(database_dsn, tmp_path, "cdc", scenarios.Cli.cli_ingest)


def test_a_replayed_stale_event_and_a_pending_record(cli):
    scenarios.a_replayed_stale_event_and_a_pending_record(cli)


def test_a_tie_inside_a_compressed_mysql_transaction(cli):
    scenarios.a_tie_inside_a_compressed_mysql_transaction(cli)


def test_a_redundant_tombstone_and_a_tombstone_only_delete(cli):
    scenarios.a_redundant_tombstone_and_a_tombstone_only_delete(cli)


def test_a_toast_placeholder_and_a_quarantined_record(cli):
    scenarios.a_toast_placeholder_and_a_quarantined_record(cli)


def test_a_record_a_newer_truncate_voids_and_explain_writes_nothing(cli):
    scenarios.a_record_a_newer_truncate_voids_and_explain_writes_nothing(cli)


def test_an_unknown_key_field_is_refused(cli):
    scenarios.an_unknown_key_field_is_refused(cli)


def test_in_a_scratch_schema_as_the_live_suite_runs_them(wh, database_dsn, tmp_path):
    cli = scenarios.scratch_cli(database_dsn, wh, "rs_test_0123abcd", tmp_path)
    scenarios.a_redundant_tombstone_and_a_tombstone_only_delete(cli)
    scenarios.a_record_a_newer_truncate_voids_and_explain_writes_nothing(cli)


def test_every_shared_scenario_runs_here():
    assert {f"test_{s.__name__}" for s in scenarios.SCENARIOS} <= set(globals())

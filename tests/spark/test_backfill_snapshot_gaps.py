"""What a new user runs into with a real snapshot: every row rejected, a snapshot older
than a column, a key column missing. Each says what is wrong, in the command's output."""

from __future__ import annotations

from datetime import datetime

import pytest
from typer.testing import CliRunner

from sync.cli.app import app
from sync.operations.backfill import run_backfill
from tests.helpers import EXAMPLES

pytestmark = pytest.mark.spark

CONFIG = str(EXAMPLES / "salesdb" / "pipeline.toml")
SNAPSHOT_TIME = datetime(2023, 11, 14, 22, 0, 0)


def cli_backfill(wh, *args: str):
    return CliRunner().invoke(
        app,
        [
            "backfill",
            "--table",
            "customer",
            "--config",
            CONFIG,
            "--dsn",
            wh.dsn,
            "--snapshot-time",
            "2023-11-14T22:00:00Z",
            *args,
        ],
    )


def test_every_row_rejected_reports_the_reasons(deployed, spark, tmp_path, monkeypatch):
    """Before: Spark's observation of the rejects was pruned with the empty result and the
    command died with a py4j AssertionError (Spark 4) or waited forever (Spark 3.5)."""
    wh, _ = deployed
    snap = tmp_path / "snap.jsonl"
    snap.write_text('{"CUST_ID": null, "NAME": "x"}\n{"NAME": "y", "MKTSEGMENT": "z"}\n')
    monkeypatch.chdir(tmp_path)
    out = cli_backfill(wh, "--snapshot", str(snap), "--format", "json")
    assert out.exit_code == 1, out.output
    assert "AssertionError" not in out.output and "py4j" not in out.output.lower()
    assert "primary key field CUST_ID is missing or not a varchar(64)" in out.output
    assert "all 2 rejected rows" in out.output
    assert wh.scalar('SELECT COUNT(*) FROM cdc."customer"') == 0


def test_snapshot_older_than_a_column_loads_it_as_null_with_a_note(deployed, spark, tmp_path):
    """A column added after the snapshot was taken: the target column is nullable, so its
    rows load with NULL there, and the result says so once (field name once)."""
    wh, pipeline = deployed
    snap = tmp_path / "snap.csv"
    snap.write_text("CUST_ID,NAME\nA1,Alpha\nB2,Beta\n")
    result = run_backfill(wh, pipeline, "customer", str(snap), "csv", SNAPSHOT_TIME, spark=spark)
    assert result.loaded == 2 and result.rejected == 0
    assert result.notes == ["snapshot has no column 'MKTSEGMENT': loaded as NULL (a column added after the snapshot)"]
    assert wh.query('SELECT customer_id, name, mktsegment FROM cdc."customer" ORDER BY 1') == [
        ("A1", "Alpha", None),
        ("B2", "Beta", None),
    ]
    out = cli_backfill(wh, "--snapshot", str(snap), "--format", "csv")
    assert out.exit_code == 0, out.output
    assert "note snapshot has no column 'MKTSEGMENT'" in " ".join(out.output.split())


def test_snapshot_without_the_key_column_is_refused(deployed, spark, tmp_path):
    wh, pipeline = deployed
    snap = tmp_path / "snap.csv"
    snap.write_text("NAME,MKTSEGMENT\nAlpha,BUILDING\n")
    with pytest.raises(ValueError) as err:
        run_backfill(wh, pipeline, "customer", str(snap), "csv", SNAPSHOT_TIME, spark=spark)
    message = str(err.value)
    assert message.startswith("snapshot has no column 'CUST_ID' (target 'customer_id'), a primary-key column of customer")
    assert "it has: NAME, MKTSEGMENT" in message
    assert wh.scalar('SELECT COUNT(*) FROM cdc."customer"') == 0


PLAIN_EXPORT = (  # what row_to_json() of the PostgreSQL row writes: decoded values
    '{"id": 1, "Sku": "S-1", "description": "bolt", "price": 12.34, "weight": 0.125, "released": "2024-05-01", '
    '"updated_at": "2024-05-01T10:00:00.123456", "published_at": "2024-05-01T12:00:00+02:00", '
    '"attributes": {"colour": "red"}, "in_stock": true}\n'
)


@pytest.fixture
def inventory(wh):
    import tomllib

    from sync.config import parse_pipeline
    from sync.operations.runner import deploy

    pipeline = parse_pipeline(tomllib.loads((EXAMPLES / "inventory_pg" / "pipeline.toml").read_text()))
    deploy(wh, pipeline, "examples/inventory_pg/pipeline.toml")
    return wh, pipeline


def test_plain_json_export_is_rejected_as_wire_encoding_with_a_hint(inventory, spark, tmp_path):
    """By default values are Debezium's wire encoding (a Connect Decimal is base64 bytes,
    a Date the days since the epoch: Debezium PostgreSQL connector, "Data type mappings")."""
    wh, pipeline = inventory
    snap = tmp_path / "export.jsonl"
    snap.write_text(PLAIN_EXPORT)
    result = run_backfill(
        wh, pipeline, "products", str(snap), "json", SNAPSHOT_TIME, spark=spark, rejects_dir=tmp_path / "rejects"
    )
    assert (result.rejected, result.loaded) == (1, 0)
    assert result.rejects_sample[0]["reason"].startswith(
        "field price does not convert from org.apache.kafka.connect.data.Decimal"
    )
    assert any("pass --values decoded" in note for note in result.notes)


def test_plain_json_export_loads_with_values_decoded(inventory, spark, tmp_path):
    wh, pipeline = inventory
    snap = tmp_path / "export.jsonl"
    snap.write_text(PLAIN_EXPORT)
    result = run_backfill(wh, pipeline, "products", str(snap), "json", SNAPSHOT_TIME, spark=spark, values="decoded")
    assert (result.rejected, result.loaded) == (0, 1)
    row = wh.query(
        "SELECT id, sku, price::text, weight::text, released::text, updated_at::text, "
        "(published_at AT TIME ZONE 'UTC')::text, attributes->>'colour', in_stock FROM inventory.products"
    )
    assert row == [
        (1, "S-1", "12.34", "0.125000", "2024-05-01", "2024-05-01 10:00:00.123456", "2024-05-01 10:00:00", "red", True)
    ]


def test_values_decoded_is_refused_for_change_events(inventory, spark, tmp_path):
    wh, pipeline = inventory
    snap = tmp_path / "events.jsonl"
    snap.write_text("{}\n")
    with pytest.raises(ValueError, match="change events are always wire-encoded"):
        run_backfill(wh, pipeline, "products", str(snap), "debezium", SNAPSHOT_TIME, spark=spark, values="decoded")

"""The demo's backfill and reconcile steps on the example pipeline."""

from __future__ import annotations

import pytest
from rich.console import Console

from sync.cli import demo_backfill
from sync.local.stream import ingest_file
from sync.operations.runner import sync
from tests.helpers import EXAMPLES

pytestmark = pytest.mark.spark


def test_demo_backfill_loads_behind_the_stream_and_reconciles_clean(deployed, spark):
    wh, pipeline = deployed
    for name in ("customer-1.jsonl", "customer-2.jsonl", "customer-3.jsonl"):
        ingest_file(wh, pipeline, "customer", EXAMPLES / "salesdb" / "events" / name)
        sync(wh, pipeline, ["customer"])
    console = Console(record=True, width=160)
    demo_backfill.run(console, wh, pipeline, EXAMPLES / "salesdb")
    assert wh.query('SELECT customer_id, name FROM cdc."customer" ORDER BY 1') == [
        ("C001", "Acme Corp"),
        ("C002", "Globex Corporation"),
        ("C003", "Initech (re-opened)"),
        ("C005", "Hooli"),
        ("C104", "Umbrella"),
        ("C201", "Wayne Enterprises"),
        ("C202", "Soylent"),
    ]
    out = console.export_text()
    assert "the same backfill again: loaded 0" in out
    assert out.rstrip().endswith("clean")

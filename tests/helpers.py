"""Small helpers shared by scenario tests."""

from __future__ import annotations

import json
from typing import Any

from sync.config import Pipeline
from sync.runner import RunSummary, sync
from sync.stream import IngestResult, ingest_records, parse_line
from sync.warehouse import Warehouse


def ingest(wh: Warehouse, pipeline: Pipeline, table: str, records: list[dict[str, Any]]) -> IngestResult:
    """Ingest record dicts as if they were lines of an events file."""
    lines = [parse_line(json.dumps(r).encode(), i + 1) for i, r in enumerate(records)]
    return ingest_records(wh, pipeline, table, lines)


def sync_one(wh: Warehouse, pipeline: Pipeline, table: str) -> RunSummary:
    (run,) = sync(wh, pipeline, [table])
    assert run.status == "ok", run.error
    return run


def rows(wh: Warehouse, sql: str) -> list[tuple]:
    return wh.query(sql)


def feed(wh: Warehouse, pipeline: Pipeline, table: str, records: list[dict[str, Any]]) -> RunSummary:
    """Ingest the records as one refresh of the stream, then sync the table once."""
    ingest(wh, pipeline, table, records)
    return sync_one(wh, pipeline, table)

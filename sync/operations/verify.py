"""`redshift-sync doctor --verify`: the behaviours the generated SQL relies on (each row of
docs/redshift.md), run on the user's own warehouse in a scratch schema, and reported as
verified, failed (with the engine's message) or not applicable to this engine.

The scenarios are in `sync.operations.verify_scenarios`; this module runs them: each in a
schema of its own that is dropped afterwards, whatever happened. On Redshift the streaming
materialized view of a scenario is replaced by a plain table with its columns (filled with
JSON_PARSE), so no MSK cluster is needed; on PostgreSQL the stream relation is the table
`ingest` fills.
"""

from __future__ import annotations

import json
import tomllib
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from sync.config import Pipeline, parse_pipeline
from sync.local.stream import ingest_records, parse_line
from sync.operations import stream_stand_in
from sync.operations.runner import RunSummary, sync
from sync.sql.dialect import PostgresDialect, dialect_for
from sync.sql.names import table_names
from sync.sql.objects import pipeline_objects
from sync.warehouse import Warehouse

SOURCE = (
    '[source]\nkind = "msk"\ncluster_arn = "arn:aws:kafka:us-east-1:123456789012:cluster/verify/abc"\n'
    'iam_role = "arn:aws:iam::123456789012:role/verify"\n'
)


class Verdict(StrEnum):
    VERIFIED = "verified"
    FAILED = "failed"
    NOT_APPLICABLE = "not applicable"


class NotApplicable(Exception):
    """Raised by a scenario whose behaviour this engine does not have (the reason)."""


@dataclass
class Scratch:
    """A scratch schema on the warehouse, with the helpers a scenario needs."""

    wh: Warehouse
    engine: str
    schema: str
    connect: Callable[[], Warehouse]  # a second session, for scenarios that need one
    _refresh: int = 0

    @property
    def d(self) -> PostgresDialect:
        return dialect_for(self.engine, self.schema)

    def name(self, relation: str) -> str:
        return self.d.qualified(self.schema, relation)

    def deploy(self, tables_toml: str) -> Pipeline:
        """Every object of a pipeline of `tables_toml` in the scratch schema."""
        text = f'[pipeline]\nschema = "{self.schema}"\n' + SOURCE + tables_toml
        return self.deploy_pipeline(parse_pipeline(tomllib.loads(text)))

    def deploy_pipeline(self, pipeline: Pipeline) -> Pipeline:
        """Every object of `pipeline` (whose schema is the scratch schema); on Redshift each
        streaming view replaced by its stand-in (sync/operations/stream_stand_in.py)."""
        for obj in pipeline_objects(pipeline, self.engine, "redshift-sync doctor --verify"):
            if obj.kind == "external_schema":
                continue
            if obj.kind == "stream" and self.d.streaming_ingestion:
                stream_stand_in.create(self.wh, self.name(obj.name))
                continue
            self.wh.execute(obj.sql)
        return pipeline

    def append(self, pipeline: Pipeline, table: str, records: list[dict[str, Any]]) -> None:
        """The records as one refresh of the table's stream."""
        if self.d.streaming_ingestion:
            self._refresh += 1
            stream = self.name(table_names(pipeline, pipeline.table(table)).stream)
            stream_stand_in.append_refresh(self.wh, stream, records, self._refresh)
        else:
            lines = [parse_line(json.dumps(r).encode(), i + 1) for i, r in enumerate(records)]
            ingest_records(self.wh, pipeline, table, lines)

    def feed(self, pipeline: Pipeline, table: str, records: list[dict[str, Any]]) -> RunSummary:
        """The records as one refresh of the stream, then one sync of the table."""
        self.append(pipeline, table, records)
        (run,) = sync(self.wh, pipeline, [table])
        if run.status != "ok":
            raise AssertionError(f"the sync failed: {run.error}")
        return run


@dataclass(frozen=True)
class Scenario:
    row: int  # the row of docs/redshift.md it verifies
    title: str
    run: Callable[[Scratch], None]


@dataclass
class Outcome:
    row: int
    title: str
    verdict: Verdict
    detail: str = ""


@dataclass
class Report:
    engine: str
    isolation_level: str
    settings: dict[str, str]
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.verdict is Verdict.FAILED]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def verify(connect: Callable[[], Warehouse], scenarios: Iterable[Scenario], progress: Callable[[str], None]) -> Report:
    """Every scenario in a scratch schema of its own (dropped afterwards), on a connection of
    its own (a failed statement leaves nothing behind for the next one)."""
    wh = connect()
    try:
        engine = wh.dialect.name
        report = Report(engine, str(wh.scalar(wh.dialect.isolation_level_sql)), settings(wh, wh.dialect))
    finally:
        wh.close()
    for scenario in scenarios:
        progress(f"row {scenario.row}: {scenario.title}")
        report.outcomes.append(_run(connect, engine, scenario))
    return report


def settings(wh: Warehouse, d: PostgresDialect) -> dict[str, str]:
    """The session settings the generated SQL depends on, as a new session has them."""
    return {name: str(wh.scalar(f"SELECT current_setting('{name}')")) for name in d.verified_settings}


def _run(connect: Callable[[], Warehouse], engine: str, scenario: Scenario) -> Outcome:
    wh = connect()
    schema = "redshift_sync_verify_" + uuid.uuid4().hex[:8]
    scratch = Scratch(wh, engine, schema, connect)
    try:
        wh.execute(f"CREATE SCHEMA {scratch.d.q(schema)}")
        scenario.run(scratch)
        return Outcome(scenario.row, scenario.title, Verdict.VERIFIED)
    except NotApplicable as why:
        return Outcome(scenario.row, scenario.title, Verdict.NOT_APPLICABLE, str(why))
    except Exception as exc:  # noqa: BLE001 - every failure is reported, with its words
        return Outcome(scenario.row, scenario.title, Verdict.FAILED, f"{type(exc).__name__}: {exc}".strip())
    finally:
        try:
            wh.execute(f"DROP SCHEMA IF EXISTS {scratch.d.q(schema)} CASCADE")
        finally:
            wh.close()

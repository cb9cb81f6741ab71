"""Freshness: an idle table told apart from a dead connector, per table.

Lag alone cannot tell them apart: it moves only when records arrive. With `[heartbeat]`,
the connector's heartbeat topic says whether capture is alive (Debezium sends a heartbeat
every `heartbeat.interval.ms`, also when the captured tables do not change), and the
refresh history of each stream relation says whether the warehouse still reads the
topics (Redshift's SYS_MV_REFRESH_HISTORY; locally, the refreshes `ingest` recorded).

Two statements, so each runs through the Data API as through a connection: the table
measures (one row per table) and the refresh ages (one row per stream relation).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from sync.config import Pipeline
from sync.operations.runner import pending_sql
from sync.sql import schemas
from sync.sql.dialect import PostgresDialect, quote_literal
from sync.sql.names import HEARTBEAT_STREAM, REFRESH_HISTORY, RUN_LOG, table_names
from sync.sql.schemas import Column

# Redshift's record of every materialized view refresh, automatic ones included.
REDSHIFT_REFRESH_HISTORY = "SYS_MV_REFRESH_HISTORY"
# The statuses of a refresh that read the topic (SVL_MV_REFRESH_STATUS lists them), as
# LIKE patterns: anything else (failed, aborted, partially updated) is not a refresh.
REFRESHED = ("Refresh successfully%", "MV was already updated%")


class Freshness(StrEnum):
    CURRENT = "current"  # capture alive; records arrived lately, or wait less than the threshold
    IDLE = "idle"  # capture alive; nothing waits and nothing arrived lately
    STALLED = "stalled"  # capture alive; records have waited longer than the threshold
    VIEW_STOPPED = "view not refreshing"  # the heartbeat's view refreshes, this table's does not
    CAPTURE_DOWN = "capture down"  # the heartbeat is stale (or never arrived)


# Freshness states the `Stalled` metric (and its alarm) counts: the source is alive but
# the table's data does not move.
STALLED_STATES = frozenset({Freshness.STALLED, Freshness.VIEW_STOPPED})


def classify(
    stale_after: float,
    heartbeat_age: float | None,
    heartbeat_refresh_age: float | None,
    refresh_age: float | None,
    event_age: float | None,
    pending: int,
    lag: float,
) -> Freshness:
    """The state from ages in seconds (None: never). The heartbeat decides first: without a
    fresh one nothing else can be told. A view that has not refreshed for `stale_after`
    longer than the heartbeat's is stopped, whatever else it shows."""
    if heartbeat_age is None or heartbeat_age > stale_after:
        return Freshness.CAPTURE_DOWN
    if heartbeat_refresh_age is not None and (refresh_age is None or refresh_age - heartbeat_refresh_age > stale_after):
        return Freshness.VIEW_STOPPED
    if pending > 0 and lag > stale_after:
        return Freshness.STALLED
    if pending > 0 or (event_age is not None and event_age <= stale_after):
        return Freshness.CURRENT
    return Freshness.IDLE


@dataclass
class TableFreshness:
    table: str
    state: Freshness
    source_alive_seconds: float | None  # the heartbeat's age: now minus its Kafka timestamp
    last_event_at: str | None  # the newest record the table's stream holds (Kafka timestamp)
    last_applied_at: str | None  # the end of the newest run that applied a record
    lag_seconds: float  # how long the oldest waiting record has waited (0: none waits)
    pending: int
    view_refresh_age_seconds: float | None  # since the table's stream relation last refreshed
    heartbeat_refresh_age_seconds: float | None

    def as_dict(self) -> dict:
        return {**asdict(self), "state": str(self.state)}

    def message(self) -> str:
        alive = "never" if self.source_alive_seconds is None else f"{self.source_alive_seconds:.0f} s ago"
        return (
            f"{self.table}: {self.state} (heartbeat {alive}; last event {self.last_event_at or 'never'}; "
            f"last applied {self.last_applied_at or 'never'}; {self.pending} waiting, lag {self.lag_seconds:.0f} s)"
        )


MEASURES = (
    Column("table_name", "varchar(127)"),
    Column("heartbeat_age", "double precision"),
    Column("last_event_at", "timestamp"),
    Column("event_age", "double precision"),
    Column("last_applied_at", "timestamp"),
    Column("pending", "bigint"),
    Column("waited", "double precision"),
)


def measures_sql(d: PostgresDialect, pipeline: Pipeline, tables: Sequence[str]) -> str:
    """One row per table (MEASURES): the heartbeat's age, the table's newest record, its
    last run that applied something, and what waits (the procedure's pending condition)."""
    run_log = d.qualified(pipeline.schema, RUN_LOG)
    parts = []
    for name in tables:
        stream = d.qualified(pipeline.schema, table_names(pipeline, pipeline.table(name)).stream)
        waiting = pending_sql(pipeline, name, "COUNT(*) AS pending, MIN(s.kafka_timestamp) AS oldest")
        parts.append(
            f"SELECT {quote_literal(name)} AS table_name,\n"
            f"       {d.seconds_between('c.now_at', 'hb.heartbeat_at')} AS heartbeat_age,\n"
            f"       e.last_event_at, {d.seconds_between('c.now_at', 'e.last_event_at')} AS event_age,\n"
            f"       (SELECT MAX(finished_at) FROM {run_log}\n"
            f"        WHERE table_name = {quote_literal(name)} AND status = 'ok' AND upserted + deleted > 0) AS last_applied_at,\n"
            f"       p.pending, COALESCE({d.seconds_between('c.now_at', 'p.oldest')}, 0) AS waited\n"
            "FROM c CROSS JOIN hb\n"
            f"CROSS JOIN (SELECT MAX(kafka_timestamp) AS last_event_at FROM {stream}) e\n"
            f"CROSS JOIN ({waiting}) p"
        )
    return (
        f"WITH c AS (SELECT {d.now()} AS now_at),\n"
        f"     hb AS (SELECT MAX(kafka_timestamp) AS heartbeat_at FROM {d.qualified(pipeline.schema, HEARTBEAT_STREAM)})\n"
        + "\nUNION ALL\n".join(parts)
    )


def refresh_ages_sql(d: PostgresDialect, pipeline: Pipeline, relations: Sequence[str]) -> str:
    """(relation, seconds since its last refresh) of the stream relations that refreshed."""
    history = REDSHIFT_REFRESH_HISTORY if d.streaming_ingestion else d.qualified(pipeline.schema, REFRESH_HISTORY)
    names = ", ".join(quote_literal(r) for r in relations)
    refreshed = " OR ".join(f"status LIKE {quote_literal(p)}" for p in REFRESHED)
    return (
        f"SELECT TRIM(mv_name), {d.seconds_between(d.now(), 'MAX(end_time)')}\n"
        f"FROM {history}\n"
        f"WHERE TRIM(schema_name) = {quote_literal(pipeline.schema)} AND TRIM(mv_name) IN ({names})\n"
        f"  AND ({refreshed})\n"
        "GROUP BY TRIM(mv_name)"
    )


def _text(value: Any) -> str | None:
    """A timestamp as text, whether the driver gave a datetime or the Data API a string."""
    return None if value is None else str(value)[:26]


def table_freshness(
    query: Callable[[str], list[tuple]], d: PostgresDialect, pipeline: Pipeline, tables: Sequence[str]
) -> list[TableFreshness]:
    """Each table's freshness, through `query` (a connection's or the Data API's); nothing
    without `[heartbeat]`."""
    if pipeline.heartbeat is None or not tables:
        return []
    stale_after = pipeline.heartbeat.stale_after_seconds
    streams = {t: table_names(pipeline, pipeline.table(t)).stream for t in tables}
    ages = {
        str(r): None if a is None else float(a)
        for r, a in query(refresh_ages_sql(d, pipeline, [HEARTBEAT_STREAM, *streams.values()]))
    }
    out = []
    for row in query(measures_sql(d, pipeline, tables)):
        m = schemas.as_row(MEASURES, row)
        name = m["table_name"]
        lag = m["waited"] or 0.0
        refresh_age, heartbeat_refresh_age = ages.get(streams[name]), ages.get(HEARTBEAT_STREAM)
        state = classify(stale_after, m["heartbeat_age"], heartbeat_refresh_age, refresh_age, m["event_age"], m["pending"], lag)
        out.append(
            TableFreshness(
                name,
                state,
                m["heartbeat_age"],
                _text(m["last_event_at"]),
                _text(m["last_applied_at"]),
                lag,
                m["pending"],
                refresh_age,
                heartbeat_refresh_age,
            )
        )
    return out

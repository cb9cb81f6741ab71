"""Records lost before they were read: offsets the topic no longer held when the streaming
view refreshed (retention shorter than an outage, a paused cluster, a view re-created
after the topic expired records).

Kafka offsets of a partition are consecutive, except where the topic says otherwise: an
exactly-once producer (Kafka Connect's `exactly.once.support`) leaves one offset per
transaction to its commit marker, which no consumer reads, and a compacted topic drops
superseded records by design. A table declares which (`offset_gaps`, "none" by default);
any other gap in the offsets its view holds, from the watermark before its latest run that
read records (so `status` still shows what that run skipped) on, is reported with the
backfill that repairs it: a snapshot taken after the first record past the gap.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from sync.config import Pipeline
from sync.operations.recovery import parse_watermark
from sync.sql import schemas
from sync.sql.dialect import PostgresDialect, quote_ident, quote_literal
from sync.sql.names import RUN_LOG, table_names

# The offsets a gap may span without a record lost, per `offset_gaps` (compacted: any).
EXPLAINED = {"none": 0, "transaction-markers": 1}

GAP = (
    schemas.Column("table_name", "varchar(127)"),
    schemas.Column("kafka_partition", "bigint"),
    schemas.Column("before_offset", "bigint"),
    schemas.Column("kafka_offset", "bigint"),
    schemas.Column("kafka_timestamp", "timestamp"),
)


@dataclass
class LostRecords:
    table: str
    partition: int
    before_offset: int  # the offset read (or held) before the gap
    next_offset: int  # the first offset after it
    next_timestamp: str | None  # that record's Kafka timestamp: a snapshot after it repairs

    @property
    def missing(self) -> int:
        return self.next_offset - self.before_offset - 1

    @property
    def command(self) -> str:
        after = (self.next_timestamp or "")[:19].replace(" ", "T")
        return (
            f"redshift-sync backfill --table {self.table} --snapshot <a snapshot of the source taken after {after}> "
            "--snapshot-time <when it was taken>"
        )

    def message(self) -> str:
        return (
            f"{self.table}: records lost before they were read: partition {self.partition}, offsets "
            f"{self.before_offset + 1}-{self.next_offset - 1} ({self.missing}) were not in the topic when the view "
            "refreshed (retention shorter than an outage, or the view re-created); the keys they changed may be "
            f"out of date: run `{self.command}`"
        )

    def as_dict(self) -> dict:
        return {**asdict(self), "missing": self.missing, "command": self.command, "message": self.message()}


def starts_sql(pipeline: Pipeline, tables: Sequence[str]) -> str:
    """Each table's watermark before its newest run that read records."""
    names = ", ".join(quote_literal(t) for t in tables)
    return (
        "SELECT table_name, watermark_before\n"
        "FROM (\n"
        "  SELECT r.table_name, r.watermark_before, ROW_NUMBER() OVER (PARTITION BY r.table_name ORDER BY r.run_id DESC) AS rn\n"
        f"  FROM {quote_ident(pipeline.schema)}.{quote_ident(RUN_LOG)} r\n"
        f"  WHERE r.table_name IN ({names}) AND r.status = 'ok' AND r.events_read > 0\n"
        ") x\n"
        "WHERE rn = 1"
    )


def gaps_sql(d: PostgresDialect, pipeline: Pipeline, starts: dict[str, dict[int, int]]) -> str:
    """Per table, the gaps wider than its `offset_gaps` explains between consecutive
    offsets its stream holds past `starts` (partition -> offset; the watermark where a
    table has no run yet), and between each start and the first offset past it."""
    parts = []
    for name, start in starts.items():
        n = table_names(pipeline, pipeline.table(name))
        wm = d.qualified(n.schema, n.watermark)
        first = " ".join(f"WHEN {int(p)} THEN {int(o)}" for p, o in sorted(start.items()))
        start_of = f"CASE s.kafka_partition {first} END" if first else "CAST(NULL AS bigint)"
        parts.append(
            f"SELECT {quote_literal(name)} AS table_name, g.kafka_partition, g.before_offset, g.kafka_offset, g.kafka_timestamp\n"
            "FROM (SELECT s.kafka_partition, s.kafka_offset, s.kafka_timestamp,\n"
            "             COALESCE(LAG(s.kafka_offset) OVER (PARTITION BY s.kafka_partition ORDER BY s.kafka_offset),\n"
            f"                      {start_of}, w.last_offset) AS before_offset\n"
            f"      FROM {d.qualified(n.schema, n.stream)} s\n"
            f"      LEFT JOIN {wm} w ON w.kafka_partition = s.kafka_partition\n"
            f"      WHERE s.kafka_offset > COALESCE({start_of}, w.last_offset, -1)) g\n"
            f"WHERE g.kafka_offset - g.before_offset - 1 > {EXPLAINED[pipeline.table(name).offset_gaps]}"
        )
    return "\nUNION ALL\n".join(parts) + "\nORDER BY 1, 2, 4"


def lost_records(
    query: Callable[[str], list[tuple]], d: PostgresDialect, pipeline: Pipeline, tables: Sequence[str]
) -> list[LostRecords]:
    """The gaps of every table that does not declare a compacted topic."""
    checked = [t for t in tables if pipeline.table(t).offset_gaps != "compacted"]
    if not checked:
        return []
    starts: dict[str, dict[int, int]] = {t: {} for t in checked}
    for name, text in query(starts_sql(pipeline, checked)):
        starts[str(name)] = parse_watermark(text) or {}
    out = []
    for row in query(gaps_sql(d, pipeline, starts)):
        g = schemas.as_row(GAP, row)
        stamp = None if g["kafka_timestamp"] is None else str(g["kafka_timestamp"])[:26]
        out.append(LostRecords(g["table_name"], g["kafka_partition"], g["before_offset"], g["kafka_offset"], stamp))
    return out

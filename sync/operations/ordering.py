"""Ordering breaks, detected from the run log: runs that read records, applied none and
found records older than the position stored for their key (stale), unless every record
they read is a copy of one read before them (a connector restart re-sends its last
records).

A MySQL failover renumbers binlog files, `RESET MASTER` restarts them at 1, a restored
database (or an Oracle RESETLOGS) restarts SCNs and LSNs lower: from then on every event
looks older than what is stored, and the sync quietly applies nothing. After
`[operations] ordering_break_runs` such runs in a row (3 by default), `sync`, `status` and
the Lambda name the table, the newest position the runs read and the newest stored, and
the `reset-positions` command that clears the stored positions and reads those records
again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from sync.config import Pipeline, TableConfig
from sync.operations.recovery import parse_watermark
from sync.sql import schemas
from sync.sql.dialect import PostgresDialect, quote_ident, quote_literal
from sync.sql.envelope import envelope_sql, source_sql, unwrap_schema
from sync.sql.names import RUN_LOG, table_names
from sync.sql.recovery import offset_ranges

# What a streak reads of each run: its counts and the watermarks around it.
STREAK = (
    schemas.column(schemas.RUN_LOG, "table_name"),
    schemas.column(schemas.RUN_LOG, "status"),
    schemas.column(schemas.RUN_LOG, "events_read"),
    schemas.column(schemas.RUN_LOG, "upserted"),
    schemas.column(schemas.RUN_LOG, "deleted"),
    schemas.column(schemas.RUN_LOG, "stale"),
    schemas.column(schemas.RUN_LOG, "watermark_before"),
    schemas.column(schemas.RUN_LOG, "watermark_after"),
)


@dataclass
class OrderingBreak:
    table: str
    runs: int  # the runs in a row that applied nothing, every record stale
    stale: int  # records those runs found stale
    newest_seen: str | None  # the newest source position those runs read
    newest_stored: str | None  # the newest source position stored
    reread_from: str | None  # the watermark before the first of those runs (None: not known in full)

    @property
    def command(self) -> str:
        reread = f" --reread-from {self.reread_from}" if self.reread_from else ""
        return f"redshift-sync reset-positions --table {self.table}{reread} --yes"

    def message(self) -> str:
        return (
            f"{self.table}: ordering break: the last {self.runs} runs applied nothing, {self.stale} record(s) older than "
            f"the stored positions (newest read {readable_position(self.newest_seen)}, newest stored "
            f"{readable_position(self.newest_stored)}): a MySQL failover or RESET MASTER, or a restored database? "
            f"Run `{self.command}`"
        )

    def as_dict(self) -> dict:
        return {**asdict(self), "command": self.command, "message": self.message()}


def readable_position(position: str | None) -> str:
    """A position key (zero-padded parts, "00..01.00..0150.00..0") as its numbers: 1.150.0."""
    if position is None:
        return "none"
    return ".".join(str(int(part)) if part.isdigit() else part for part in position.split("."))


def streaks_sql(pipeline: Pipeline, tables: Sequence[str], runs: int) -> str:
    """Each table's newest `runs` run-log rows that read something or are not a plain run
    (a reset-positions ends a streak), newest first."""
    names = ", ".join(quote_literal(t) for t in tables)
    return (
        f"SELECT {', '.join(schemas.names(STREAK))}\n"
        "FROM (\n"
        f"  SELECT r.*, ROW_NUMBER() OVER (PARTITION BY r.table_name ORDER BY r.run_id DESC) AS rn\n"
        f"  FROM {quote_ident(pipeline.schema)}.{quote_ident(RUN_LOG)} r\n"
        f"  WHERE r.table_name IN ({names}) AND (r.events_read > 0 OR r.status <> 'ok')\n"
        ") x\n"
        f"WHERE rn <= {int(runs)}\n"
        "ORDER BY table_name, rn"
    )


def positions_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig, ranges: dict[int, tuple[int, int | None]]) -> str:
    """The newest source position of the records in `ranges` (the stream `s`), by the
    procedure's own position expression, the newest stored in the target, and how many of
    those records there are and how many repeat the key and position of a record outside
    them (a copy the connector re-sent after a restart: no ordering break)."""
    n = table_names(pipeline, table)
    env = envelope_sql(d, table, unwrap_schema(d, "s.payload"))
    position = source_sql(d, table, env.source).position
    stream, within = d.qualified(n.schema, n.stream), offset_ranges(ranges)
    stored = d.q("_source_pos")
    return (
        f"SELECT c.seen, (SELECT MAX({stored}) FROM {d.qualified(n.schema, n.target)}), c.records, c.repeated\n"
        "FROM (SELECT MAX(r.pos) AS seen, COUNT(*) AS records, COUNT(o.pos) AS repeated\n"
        f"      FROM (SELECT s.kafka_key, {position} AS pos FROM {stream} s WHERE {within}) r\n"
        f"      LEFT JOIN (SELECT DISTINCT s.kafka_key, {position} AS pos FROM {stream} s WHERE NOT {within}) o\n"
        "        ON o.kafka_key = r.kafka_key AND o.pos = r.pos) c"
    )


def ordering_breaks(
    query: Callable[[str], list[tuple]], d: PostgresDialect, pipeline: Pipeline, tables: Sequence[str]
) -> list[OrderingBreak]:
    """The tables whose newest `ordering_break_runs` runs that read records applied none,
    with stale records among them, unless every record those runs read repeats the key and
    position of one read before them: Debezium re-sends what follows its last committed
    offset after a restart ("at-least-once during recovery"), and a re-sent suffix spread
    over several syncs applies nothing either (tables in Kafka order store no positions:
    never)."""
    positioned = [t for t in tables if pipeline.table(t).order_by != "kafka"]
    runs = pipeline.operations.ordering_break_runs
    if not positioned:
        return []
    rows: dict[str, list[dict]] = {}
    for row in query(streaks_sql(pipeline, positioned, runs)):
        r = schemas.as_row(STREAK, row)
        rows.setdefault(r["table_name"], []).append(r)
    out = []
    for name, streak in rows.items():
        broken = len(streak) == runs and all(
            r["status"] == "ok" and r["stale"] > 0 and r["upserted"] + r["deleted"] == 0 for r in streak
        )
        if not broken:
            continue
        before, after = parse_watermark(streak[-1]["watermark_before"]), parse_watermark(streak[0]["watermark_after"])
        seen = stored = reread = None
        if before is not None and after is not None:  # else a watermark listed only in part
            ranges = {p: (before.get(p, -1), o) for p, o in after.items()}
            (seen, stored, records, repeated), *_ = query(positions_sql(d, pipeline, pipeline.table(name), ranges))
            if records and repeated == records:  # every record a copy of one read before: re-sent
                continue
            reread = ",".join(f"{p}:{after_offset}" for p, (after_offset, _) in sorted(ranges.items()))
        out.append(OrderingBreak(name, runs, sum(r["stale"] for r in streak), seen, stored, reread))
    return out

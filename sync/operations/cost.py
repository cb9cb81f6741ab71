"""What each table's sync costs: its recent CALL durations from the run log (both engines)
and, on Redshift, the time its statements spent in SYS_QUERY_HISTORY (docs/operations.md
reads them for Serverless billing)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from sync.config import Pipeline
from sync.operations.runner import call_sql
from sync.sql.dialect import PostgresDialect, quote_ident, quote_literal
from sync.sql.names import RUN_LOG

RECENT_RUNS = 100  # the runs per table the percentiles are taken over
HISTORY_HOURS = 24  # the window of SYS_QUERY_HISTORY read


@dataclass
class CallDurations:
    runs: int  # recent runs that finished ok (at most RECENT_RUNS)
    p50_seconds: float | None
    p95_seconds: float | None
    since: str | None  # the start of the oldest of them

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class StatementTime:
    calls: int  # CALLs of the table's procedure in the window
    execution_seconds: float  # time its statements ran (SYS_QUERY_HISTORY.execution_time)
    queue_seconds: float  # time they waited in a queue first (queue_time)

    def as_dict(self) -> dict:
        return {**asdict(self), "hours": HISTORY_HOURS}


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile by linear interpolation between the closest ranks (what
    PERCENTILE_CONT computes), to the microsecond; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return round(ordered[low] + (ordered[high] - ordered[low]) * (position - low), 6)


def durations_sql(d: PostgresDialect, pipeline: Pipeline, tables: Sequence[str]) -> str:
    """Each table's newest RECENT_RUNS runs that finished ok: (table, seconds, start)."""
    names = ", ".join(quote_literal(t) for t in tables)
    return (
        f"SELECT table_name, {d.seconds_between('finished_at', 'started_at')}, started_at\n"
        "FROM (\n"
        "  SELECT r.table_name, r.started_at, r.finished_at,\n"
        "         ROW_NUMBER() OVER (PARTITION BY r.table_name ORDER BY r.run_id DESC) AS rn\n"
        f"  FROM {quote_ident(pipeline.schema)}.{quote_ident(RUN_LOG)} r\n"
        f"  WHERE r.table_name IN ({names}) AND r.status = 'ok' AND r.finished_at IS NOT NULL\n"
        ") x\n"
        f"WHERE rn <= {RECENT_RUNS}"
    )


def call_durations(
    query: Callable[[str], list[tuple]], d: PostgresDialect, pipeline: Pipeline, tables: Sequence[str]
) -> dict[str, CallDurations]:
    found: dict[str, list[tuple[float, str]]] = {t: [] for t in tables}
    if tables:
        for table, seconds, started in query(durations_sql(d, pipeline, tables)):
            found[str(table)].append((float(seconds), str(started)[:26]))
    return {
        t: CallDurations(
            len(runs),
            percentile([s for s, _ in runs], 0.5),
            percentile([s for s, _ in runs], 0.95),
            min((at for _, at in runs), default=None),
        )
        for t, runs in found.items()
    }


def statement_time_sql(pipeline: Pipeline, tables: Sequence[str]) -> str:
    """Redshift: per table, the CALLs of its procedure in the last HISTORY_HOURS hours
    (SYS_QUERY_HISTORY rows whose text is that CALL, bounded or not) and the execution and
    queue time of the statements of their transactions, the CALL's own row left out."""
    cases = "\n".join(
        f"               WHEN LEFT(query_text, {len(prefix)}) = {quote_literal(prefix)} THEN {quote_literal(t)}"
        for t in tables
        for prefix in [call_sql(pipeline, t).removesuffix(")")]
    )
    return (
        "SELECT c.table_name, COUNT(DISTINCT c.transaction_id) AS calls,\n"
        "       COALESCE(SUM(q.execution_time), 0) / 1000000.0 AS execution_seconds,\n"
        "       COALESCE(SUM(q.queue_time), 0) / 1000000.0 AS queue_seconds\n"
        "FROM (SELECT query_id, transaction_id,\n"
        f"             CASE\n{cases}\n             END AS table_name\n"
        "      FROM SYS_QUERY_HISTORY\n"
        f"      WHERE query_text LIKE 'CALL %' AND start_time >= DATEADD(hour, -{HISTORY_HOURS}, GETDATE())) c\n"
        "LEFT JOIN SYS_QUERY_HISTORY q ON q.transaction_id = c.transaction_id AND q.query_id <> c.query_id\n"
        "WHERE c.table_name IS NOT NULL\n"
        "GROUP BY c.table_name\n"
        "ORDER BY c.table_name"
    )


def statement_time(
    query: Callable[[str], list[tuple]], d: PostgresDialect, pipeline: Pipeline, tables: Sequence[str]
) -> dict[str, StatementTime] | None:
    """Redshift's account of each table's statements; None where the engine keeps none."""
    if not d.streaming_ingestion or not tables:
        return None
    found = {t: StatementTime(0, 0.0, 0.0) for t in tables}
    for table, calls, execution, queue in query(statement_time_sql(pipeline, tables)):
        found[str(table)] = StatementTime(int(calls), float(execution), float(queue))
    return found

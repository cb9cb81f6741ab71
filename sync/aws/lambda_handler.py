"""The scheduled sync as an AWS Lambda: `sync.lambda_handler.handler`.

The event may name tables (`{"tables": ["customer"]}`); any other event (an EventBridge
schedule's, `{}`) syncs every table of the pipeline file packaged with the function.
`{"maintenance": true}` (a second, hourly schedule) syncs nothing: it prunes the control
tables and vacuums the stages that need it (sync/aws/maintenance.py).
The environment chooses the connection:

- Data API: REDSHIFT_SYNC_WORKGROUP (Serverless; name or ARN) or REDSHIFT_SYNC_CLUSTER,
  REDSHIFT_SYNC_DATABASE (default dev), and REDSHIFT_SYNC_SECRET_ARN or
  REDSHIFT_SYNC_DB_USER (cluster) or neither (IAM temporary credentials).
- redshift_connector: REDSHIFT_SYNC_DSN (redshift+redshift_connector://...), autocommit on.

The boto3 client has short connect and read timeouts and botocore's standard retry mode
(`REDSHIFT_SYNC_CONNECT_TIMEOUT_SECONDS`, `..._READ_TIMEOUT_SECONDS`, `..._SDK_ATTEMPTS`),
and the deadline margin must cover the longest request they allow (checked at start), so
one hung request cannot make the invocation time out without its summary.

Returns a JSON summary per table, logs one CloudWatch Embedded Metric Format line per table
and raises `SyncFailed` when a table failed, was cancelled or ended unknown, so the
invocation counts as an error. Tables `not started` for lack of time do not fail the
invocation (the next one takes them first); they show in the `NotStarted` metric.
Only the standard library, boto3, pydantic and this package are imported: no Spark, no CLI stack.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sync.aws import data_api, maintenance
from sync.config import CONFIG_ENV_VAR, ConfigError, Pipeline, load_pipeline
from sync.operations.conflicts import RetryPolicy
from sync.operations.freshness import STALLED_STATES, Freshness, table_freshness
from sync.operations.isolation import is_data_error
from sync.operations.loss import lost_records
from sync.operations.ordering import ordering_breaks
from sync.operations.runner import RunSummary, in_transaction, selected_tables, sync_table, unfinished_summary
from sync.warehouse import DSN_ENV_VAR, Warehouse, connect

# The pipeline file sits at the root of the zip, next to the package.
PACKAGED_CONFIG = Path(__file__).resolve().parent.parent.parent / "pipeline.toml"
NO_CONTEXT_BUDGET_MS = 15 * 60 * 1000  # Lambda's longest timeout, for calls without a context


def _boto3_client(timeouts: data_api.ApiTimeouts) -> Any:
    import boto3  # part of the Lambda Python runtime

    return boto3.client("redshift-data", config=timeouts.config())


# Tests and local runs replace this with another implementation of the same four calls.
client_factory: Callable[[data_api.ApiTimeouts], Any] = _boto3_client
FAILING = ("failed", "cancelled", "unknown")


class SyncFailed(RuntimeError):
    """At least one table did not sync; `summary` holds every table's outcome."""

    def __init__(self, summary: dict):
        bad = [t for t in summary["tables"] if t["status"] in FAILING]
        detail = "; ".join(f"{t['table']} {t['status']}: {t['error']}" for t in bad)
        super().__init__(f"{len(bad)} of {len(summary['tables'])} table(s) did not sync: {detail}")
        self.summary = summary


@dataclass(frozen=True)
class Settings:
    config_path: Path
    target: data_api.DataApiTarget | None
    dsn: str | None
    policy: RetryPolicy
    polling: data_api.Polling
    pacing: data_api.Pacing
    timeouts: data_api.ApiTimeouts
    namespace: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        def text(name: str) -> str | None:
            return (env.get(name) or "").strip() or None

        def number(name: str, default: float) -> float:
            raw = text(name)
            try:
                return float(raw) if raw is not None else default
            except ValueError:
                raise ConfigError(f"{name}={raw!r} is not a number") from None

        dsn = text(DSN_ENV_VAR)
        target = None
        if text("REDSHIFT_SYNC_WORKGROUP") or text("REDSHIFT_SYNC_CLUSTER"):
            if dsn:
                raise ConfigError(
                    f"set either REDSHIFT_SYNC_WORKGROUP/REDSHIFT_SYNC_CLUSTER (Data API) or {DSN_ENV_VAR}, not both"
                )
            try:
                target = data_api.DataApiTarget(
                    database=text("REDSHIFT_SYNC_DATABASE") or "dev",
                    workgroup=text("REDSHIFT_SYNC_WORKGROUP"),
                    cluster=text("REDSHIFT_SYNC_CLUSTER"),
                    secret_arn=text("REDSHIFT_SYNC_SECRET_ARN"),
                    db_user=text("REDSHIFT_SYNC_DB_USER"),
                )
            except ValueError as exc:
                raise ConfigError(f"Data API settings (REDSHIFT_SYNC_*): {exc}") from None
        elif not dsn:
            raise ConfigError(
                "no connection configured: set REDSHIFT_SYNC_WORKGROUP or REDSHIFT_SYNC_CLUSTER (Data API), "
                f"or {DSN_ENV_VAR} (redshift_connector)"
            )
        try:
            policy = RetryPolicy(
                max_attempts=int(number("REDSHIFT_SYNC_MAX_ATTEMPTS", 4)),
                base_seconds=number("REDSHIFT_SYNC_RETRY_BASE_SECONDS", 1.0),
                cap_seconds=number("REDSHIFT_SYNC_RETRY_CAP_SECONDS", 20.0),
            )
        except ValueError as exc:
            raise ConfigError(f"retry settings: {exc}") from None
        polling = data_api.Polling(
            initial_seconds=number("REDSHIFT_SYNC_POLL_SECONDS", 0.5),
            max_seconds=number("REDSHIFT_SYNC_POLL_MAX_SECONDS", 5.0),
            margin_ms=int(number("REDSHIFT_SYNC_DEADLINE_MARGIN_SECONDS", 30.0) * 1000),
        )
        try:
            pacing = data_api.Pacing(
                max_concurrent_calls=int(number("REDSHIFT_SYNC_MAX_CONCURRENT_CALLS", 10)),
                execute_per_second=number("REDSHIFT_SYNC_EXECUTE_PER_SECOND", 5.0),
                describe_per_second=number("REDSHIFT_SYNC_DESCRIBE_PER_SECOND", 10.0),
                min_call_seconds=number("REDSHIFT_SYNC_MIN_CALL_SECONDS", 10.0),
                backoff_base_seconds=number("REDSHIFT_SYNC_API_BACKOFF_SECONDS", 0.5),
                backoff_cap_seconds=number("REDSHIFT_SYNC_API_BACKOFF_CAP_SECONDS", 8.0),
            )
            timeouts = data_api.ApiTimeouts(
                connect_seconds=number("REDSHIFT_SYNC_CONNECT_TIMEOUT_SECONDS", 2.0),
                read_seconds=number("REDSHIFT_SYNC_READ_TIMEOUT_SECONDS", 5.0),
                attempts=int(number("REDSHIFT_SYNC_SDK_ATTEMPTS", 2)),
            )
        except ValueError as exc:
            raise ConfigError(f"Data API pacing and timeouts (REDSHIFT_SYNC_*): {exc}") from None
        needed_ms = timeouts.worst_case_ms() + data_api.REPORT_MS
        if target is not None and polling.margin_ms < needed_ms:
            raise ConfigError(
                f"REDSHIFT_SYNC_DEADLINE_MARGIN_SECONDS={polling.margin_ms / 1000:g} does not cover one Data API request at "
                f"its slowest ({timeouts.worst_case_ms() / 1000:g} s: {timeouts.attempts} attempt(s) of "
                f"{timeouts.connect_seconds:g} s connect + {timeouts.read_seconds:g} s read, with backoff) plus "
                f"{data_api.REPORT_MS / 1000:g} s to report: raise it to at least {needed_ms / 1000:g}, or shorten the timeouts"
            )
        return cls(
            config_path=Path(text(CONFIG_ENV_VAR) or PACKAGED_CONFIG),
            target=target,
            dsn=dsn,
            policy=policy,
            polling=polling,
            pacing=pacing,
            timeouts=timeouts,
            namespace=text("REDSHIFT_SYNC_METRICS_NAMESPACE") or "RedshiftSync",
        )


def event_tables(event: Any) -> list[str] | None:
    """The tables an event names; None (all tables) for events without a "tables" key."""
    if not isinstance(event, Mapping) or event.get("tables") is None:
        return None
    tables = event["tables"]
    if not isinstance(tables, list) or not all(isinstance(t, str) for t in tables) or not tables:
        raise ConfigError(f'event "tables" must be a non-empty list of table names, got {tables!r}')
    return tables


def is_maintenance(event: Any) -> bool:
    """Whether the event asks for the maintenance run (`{"maintenance": true}`)."""
    if not isinstance(event, Mapping) or event.get("maintenance") is None:
        return False
    if not isinstance(event["maintenance"], bool):
        raise ConfigError(f'event "maintenance" must be true or false, got {event["maintenance"]!r}')
    return event["maintenance"]


def remaining_time(context: Any) -> Callable[[], int]:
    if context is not None and hasattr(context, "get_remaining_time_in_millis"):
        return context.get_remaining_time_in_millis
    deadline = time.monotonic() + NO_CONTEXT_BUDGET_MS / 1000
    return lambda: int((deadline - time.monotonic()) * 1000)


def sync_with_connector(
    wh: Warehouse, pipeline: Pipeline, tables: list[str], settings: Settings, remaining_ms: Callable[[], int]
) -> list[RunSummary]:
    """CALL each table in turn on one autocommit connection, retrying serialization conflicts
    while the deadline margin allows (`sync_table`, with record isolation on a data error)."""
    out = []
    for table in tables:
        if remaining_ms() < settings.polling.margin_ms:
            out.append(
                unfinished_summary(table, data_api.NOT_STARTED, 0.0, f"not started: {remaining_ms()} ms of Lambda time left")
            )
            continue
        out.append(sync_table(wh, pipeline, table, settings.policy, lambda: remaining_ms() >= settings.polling.margin_ms))
    return out


def metric_line(run: dict, namespace: str, timestamp_ms: int) -> dict:
    """One table's outcome in CloudWatch Embedded Metric Format (dimension: Table)."""
    values = {
        "EventsRead": (run["events_read"], "Count"),
        "Upserted": (run["upserted"], "Count"),
        "Deleted": (run["deleted"], "Count"),
        "Quarantined": (run["quarantined"], "Count"),
        "Attempts": (run["attempts"], "Count"),
        "ConflictRetries": (run.get("retries"), "Count"),
        "Failed": (1 if run["status"] in FAILING else 0, "Count"),
        "NotStarted": (1 if run["status"] == data_api.NOT_STARTED else 0, "Count"),
        "ApiRetries": (run.get("api_retries"), "Count"),
        "DurationSeconds": (round(run["duration_seconds"], 3), "Seconds"),
        "LagSeconds": (run["lag_seconds"], "Seconds"),
        **freshness_metrics(run.get("freshness")),
        "OrderingBreak": (None if "ordering_break" not in run else int(run["ordering_break"] is not None), "Count"),
        "RecordsLost": (None if "lost_records" not in run else sum(g["missing"] for g in run["lost_records"]), "Count"),
    }
    present = {name: vu for name, vu in values.items() if vu[0] is not None}
    line: dict[str, Any] = {
        "_aws": {
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [
                {
                    "Namespace": namespace,
                    # Per table, and (the empty dimension set) over all tables, for alarms.
                    "Dimensions": [["Table"], []],
                    "Metrics": [{"Name": name, "Unit": unit} for name, (_, unit) in present.items()],
                }
            ],
        },
        "Table": run["table"],
    }
    line.update({name: value for name, (value, _) in present.items()})
    line.update({k: run[k] for k in ("status", "error", "watermark_after", "statement_id") if run.get(k) is not None})
    if run.get("freshness"):
        line["freshness"] = run["freshness"]["state"]
    if run.get("ordering_break"):
        line["ordering_break"] = run["ordering_break"]["message"]
    if run.get("lost_records"):
        line["lost_records"] = [g["message"] for g in run["lost_records"]]
    return line


def freshness_metrics(freshness: dict | None) -> dict[str, tuple[Any, str]]:
    """A table's freshness ([heartbeat]) as metrics: the heartbeat's age, how long its
    oldest record has waited, and 1/0 for stalled (source alive, data not moving) and
    capture down."""
    if not freshness:
        return {}
    state = Freshness(freshness["state"])
    return {
        "HeartbeatAgeSeconds": (freshness["source_alive_seconds"], "Seconds"),
        "WaitingSeconds": (freshness["lag_seconds"], "Seconds"),
        "Stalled": (1 if state in STALLED_STATES else 0, "Count"),
        "CaptureDown": (1 if state == Freshness.CAPTURE_DOWN else 0, "Count"),
    }


def _by_table(tables: list[str], found: list[Any]) -> dict[str, list[dict]]:
    """Each table's findings, an empty list for a table checked with none."""
    out: dict[str, list[dict]] = {t: [] for t in tables}
    for item in found:
        out[item.table].append(item.as_dict())
    return out


def with_health(table_runs: list[dict], query: Callable[[str], list[tuple]], pipeline: Pipeline, dialect: Any) -> None:
    """Adds to each table's run, after the calls: its freshness ([heartbeat]), whether its
    last runs found every record stale (`ordering_break`: None or the break), and the
    offsets its view never held (`lost_records`, unless its topic is compacted). A check
    that cannot be read is logged, never a failed invocation."""
    tables = [r["table"] for r in table_runs]
    checks = {
        "freshness": lambda: {f.table: f.as_dict() for f in table_freshness(query, dialect, pipeline, tables)},
        "ordering_break": lambda: {
            **{t: None for t in tables if pipeline.table(t).order_by != "kafka"},
            **{b.table: b.as_dict() for b in ordering_breaks(query, dialect, pipeline, tables)},
        },
        "lost_records": lambda: _by_table(
            [t for t in tables if pipeline.table(t).offset_gaps != "compacted"], lost_records(query, dialect, pipeline, tables)
        ),
    }
    for key, check in checks.items():
        try:
            found = check()
        except Exception as exc:  # DataApiError, warehouse errors: the sync itself is done
            print(json.dumps({"warning": f"{key.replace('_', ' ')} could not be read: {exc}"}), flush=True)
            continue
        for run in table_runs:
            if run["table"] in found:
                run[key] = found[run["table"]]


def run_line(table_runs: list[dict], remaining_ms: int) -> dict:
    """The invocation in one log line: tables per status, transactions and Data API requests
    retried, time left."""
    statuses: dict[str, int] = {}
    for run in table_runs:
        statuses[run["status"]] = statuses.get(run["status"], 0) + 1
    return {
        "tables": len(table_runs),
        **statuses,
        "conflict_retries": sum(r["retries"] for r in table_runs),
        "api_retries": sum(r["api_retries"] for r in table_runs),
        "remaining_ms": remaining_ms,
    }


def data_session(settings: Settings, target: data_api.DataApiTarget, remaining_ms: Callable[[], int]) -> data_api.Session:
    """A Data API session on `target` with the settings' timeouts, polling and pacing."""
    return data_api.Session(
        client_factory(settings.timeouts),
        target,
        data_api.Deadline(remaining_ms, settings.timeouts.worst_case_ms()),
        settings.polling,
        settings.pacing,
    )


def maintenance_run(settings: Settings, pipeline: Pipeline, remaining_ms: Callable[[], int]) -> dict:
    """Prune and vacuum (sync/aws/maintenance.py), outside any CALL, on the configured
    connection; `maintenance.report` logs and returns the outcome."""
    if settings.target is not None:
        mode = "data-api"
        session = data_session(settings, settings.target, remaining_ms)
        name = f"redshift-sync.{pipeline.schema}.maintenance"
        engine = data_api.engine_dialect(session, pipeline)
        result = maintenance.maintain(
            pipeline,
            engine,
            lambda statements: data_api.run_batch(session, statements, f"{name}.prune"),
            lambda sql: data_api.query(session, sql, f"{name}.check"),
            lambda sql: data_api.run_to_end(session, sql, f"{name}.vacuum"),
            session.deadline.allows_request,
        )
    else:
        mode = "redshift_connector"
        wh = connect(settings.dsn)
        try:
            result = maintenance.maintain(
                pipeline,
                wh.dialect.bind_schema(pipeline.schema),
                in_transaction(wh),
                wh.query,
                wh.execute,
                lambda: remaining_ms() >= settings.polling.margin_ms,
            )
        finally:
            wh.close()
    return maintenance.report(result, mode, settings.namespace, remaining_ms())


def handler(event: Any, context: Any) -> dict:
    """Sync every table (or the event's "tables"); returns {"ok", "mode", "tables": [...]}
    and raises SyncFailed, with the same summary attached, when a table did not sync."""
    settings = Settings.from_env(os.environ)
    pipeline, _ = load_pipeline(settings.config_path)
    if is_maintenance(event):
        return maintenance_run(settings, pipeline, remaining_time(context))
    tables = selected_tables(pipeline, event_tables(event))
    remaining_ms = remaining_time(context)

    if settings.target is not None:
        mode = "data-api"
        session = data_session(settings, settings.target, remaining_ms)
        order, baseline, unordered = data_api.last_runs(session, pipeline, tables)
        if unordered:
            print(json.dumps({"warning": unordered}), flush=True)
        calls = data_api.run_calls(session, pipeline, order, settings.policy)
        by_table = dict(zip(order, data_api.summaries(session, pipeline, calls, baseline)))
        calls_by_table = {c.table: c for c in calls}
        for table, run in by_table.items():
            # A CALL that ran and failed on a record's data: isolate the record, apply the rest.
            if run.status == "failed" and calls_by_table[table].last_status == "FAILED" and is_data_error(run.error or ""):
                by_table[table] = data_api.isolate_table(session, pipeline, table, run, settings.policy)
        runs = [by_table[t] for t in tables]
        for run in runs:  # the CALL's own conflicts, before those of record isolation
            run.retries += max(calls_by_table[run.table].attempts - 1, 0)
        details = [
            {
                "attempts": calls_by_table[t].attempts,
                "api_retries": calls_by_table[t].api_retries,
                "statement_id": calls_by_table[t].statement_id,
            }
            for t in tables
        ]
        table_runs = [{**run.as_dict(), **extra} for run, extra in zip(runs, details)]
        name = f"redshift-sync.{pipeline.schema}.health"
        engine = data_api.engine_dialect(session, pipeline)
        with_health(table_runs, lambda sql: data_api.query(session, sql, name), pipeline, engine)
    else:
        mode = "redshift_connector"
        wh = connect(settings.dsn)
        try:
            runs = sync_with_connector(wh, pipeline, tables, settings, remaining_ms)
            details = [
                {"attempts": 0 if r.status == data_api.NOT_STARTED else 1 + r.retries, "api_retries": 0, "statement_id": None}
                for r in runs
            ]
            table_runs = [{**run.as_dict(), **extra} for run, extra in zip(runs, details)]
            with_health(table_runs, wh.query, pipeline, wh.dialect.bind_schema(pipeline.schema))
        finally:
            wh.close()

    now_ms = int(time.time() * 1000)
    for run in table_runs:
        print(json.dumps(metric_line(run, settings.namespace, now_ms), default=str), flush=True)
    print(json.dumps({"run": run_line(table_runs, remaining_ms())}), flush=True)
    summary = {
        "ok": all(r["status"] == "ok" for r in table_runs),
        "mode": mode,
        "not_started": [r["table"] for r in table_runs if r["status"] == data_api.NOT_STARTED],
        "tables": table_runs,
    }
    if any(r["status"] in FAILING for r in table_runs):
        raise SyncFailed(summary)
    return summary

"""The Lambda's maintenance run (an event `{"maintenance": true}`, sent by its own hourly
schedule): outside any CALL's transaction, it prunes the control tables per
`[operations] retention_days` (`sync.operations.runner.prune_with`, which locks in the
procedures' order) and vacuums each stage keeping more deleted, not yet reclaimed rows than
`[operations] stage_vacuum_rows`, one VACUUM after another, largest first.

"You cannot run VACUUM within a transaction block" and "only one VACUUM command on a
cluster at any given time" (r_VACUUM_command); Redshift refuses a second with "VACUUM is
running", which is a stage skipped (reported, tried again next hour), not a failure.
docs/redshift.md, "Stage vacuum".
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from sync.aws.data_api import DataApiError, StatementFailed
from sync.config import Pipeline
from sync.operations.runner import PruneResult, prune_with
from sync.sql.dialect import PostgresDialect, quote_ident
from sync.sql.names import table_names
from sync.warehouse import WarehouseError

# Redshift's refusal of a second VACUUM: "VACUUM is running HINT: re-execute after other
# vacuum finished" (as reported in dbt-labs/dbt-core#639).
VACUUM_BUSY = re.compile(r"vacuum is running|other vacuum|another vacuum", re.IGNORECASE)
# A statement refused for want of a privilege: SQLSTATE 42501 insufficient_privilege, or
# (the Data API gives no SQLSTATE) the engine's words for it.
INSUFFICIENT_PRIVILEGE = "42501"
PERMISSION_DENIED = re.compile(r"permission denied", re.IGNORECASE)
STATEMENT_ERRORS = (DataApiError, WarehouseError)


class VacuumOutcome(StrEnum):
    VACUUMED = "vacuumed"
    SKIPPED = "skipped"  # another vacuum was running, or no time was left (tried again next hour)
    FAILED = "failed"


@dataclass
class StageVacuum:
    table: str
    dead_rows: int
    outcome: VacuumOutcome
    error: str | None = None


@dataclass
class Maintenance:
    pruned: PruneResult | None = None
    prune_error: str | None = None
    stages_checked: int = 0
    check_error: str | None = None
    check_denied: str | None = None  # the user may not read the statistics: what to grant (not a failure)
    vacuums: list[StageVacuum] = field(default_factory=list)

    @property
    def pruned_rows(self) -> int:
        p = self.pruned
        return 0 if p is None else p.run_log + p.schema_drift + p.quarantine

    def count(self, outcome: VacuumOutcome) -> int:
        return sum(1 for v in self.vacuums if v.outcome == outcome)

    @property
    def failed(self) -> bool:
        return bool(self.prune_error or self.check_error or self.count(VacuumOutcome.FAILED))

    def as_dict(self) -> dict:
        return {
            **asdict(self),
            "pruned_rows": self.pruned_rows,
            "stages_vacuumed": self.count(VacuumOutcome.VACUUMED),
            "vacuums_skipped": self.count(VacuumOutcome.SKIPPED),
            "vacuums_failed": self.count(VacuumOutcome.FAILED),
        }


def dead_rows_sql(d: PostgresDialect, pipeline: Pipeline) -> list[str]:
    """Per schema, each stage's deleted rows not yet reclaimed (`dead_rows_sql` of the dialect)."""
    by_schema: dict[str, list[str]] = {}
    for t in pipeline.tables:
        n = table_names(pipeline, t)
        by_schema.setdefault(n.schema, []).append(n.stage)
    return [
        d.dead_rows_sql.format(schema=d.lit(schema), tables=", ".join(d.lit(s) for s in stages))
        for schema, stages in by_schema.items()
    ]


def stage_check_denied(d: PostgresDialect, exc: Exception, user: str | None) -> str | None:
    """When the stage check failed because the user may not read the dialect's statistics
    view (Redshift: "SVV_TABLE_INFO is visible only to superusers", r_SVV_TABLE_INFO), what
    to do about it; None for any other error."""
    if getattr(exc, "sqlstate", None) != INSUFFICIENT_PRIVILEGE and not PERMISSION_DENIED.search(str(exc)):
        return None
    grantee = quote_ident(user) if user else "<the sync user>"
    return (
        f"{user or 'the sync user'} may not read {d.dead_rows_view}, so no stage is vacuumed; "
        f"a superuser grants it: GRANT SELECT ON {d.dead_rows_view} TO {grantee}"
    )


def current_user(query: Callable[[str], list[tuple]]) -> str | None:
    try:
        return str(query("SELECT current_user")[0][0])
    except STATEMENT_ERRORS:
        return None


def maintain(
    pipeline: Pipeline,
    d: PostgresDialect,
    transaction: Callable[[list[str]], list[int]],
    query: Callable[[str], list[tuple]],
    execute: Callable[[str], Any],
    time_left: Callable[[], bool],
) -> Maintenance:
    """Prune, then vacuum the stages past the threshold one at a time, largest first, while
    `time_left()`. `transaction` runs statements in one transaction (their row counts);
    `execute` runs one statement outside any."""
    out = Maintenance()
    try:
        out.pruned = prune_with(transaction, d, pipeline, None, False)
    except STATEMENT_ERRORS as exc:
        out.prune_error = str(exc)
    stages = {table_names(pipeline, t).stage: table_names(pipeline, t) for t in pipeline.tables}
    try:
        dead = [(str(name), int(rows or 0)) for sql in dead_rows_sql(d, pipeline) for name, rows in query(sql)]
    except STATEMENT_ERRORS as exc:
        # Not readable by this user: no vacuum, reported with the grant, not a failure.
        out.check_denied = stage_check_denied(d, exc, current_user(query))
        out.check_error = None if out.check_denied else str(exc)
        return out
    out.stages_checked = len(dead)
    threshold = pipeline.operations.stage_vacuum_rows
    for stage, rows in sorted((x for x in dead if x[1] > threshold and x[0] in stages), key=lambda x: -x[1]):
        n = stages[stage]
        if not time_left():
            out.vacuums.append(StageVacuum(n.table, rows, VacuumOutcome.SKIPPED, "no Lambda time left"))
            continue
        try:
            execute(d.vacuum_sql.format(table=d.qualified(n.schema, stage)))
            out.vacuums.append(StageVacuum(n.table, rows, VacuumOutcome.VACUUMED))
        except STATEMENT_ERRORS as exc:
            out.vacuums.append(StageVacuum(n.table, rows, vacuum_outcome(exc), str(exc)))
    return out


def vacuum_outcome(exc: Exception) -> VacuumOutcome:
    """A vacuum refused because another runs, or not finished by the Lambda's deadline
    (`data_api.run_to_end`: cancelled while a request fits, else left to end on its own),
    is skipped; any other error of the engine failed."""
    ran_out = isinstance(exc, DataApiError) and not isinstance(exc, StatementFailed)
    return VacuumOutcome.SKIPPED if ran_out or VACUUM_BUSY.search(str(exc)) else VacuumOutcome.FAILED


def metric_line(result: Maintenance, namespace: str, timestamp_ms: int) -> dict:
    """The maintenance run in CloudWatch Embedded Metric Format (no dimension: the pipeline)."""
    values = {
        "PrunedRows": result.pruned_rows,
        "StagesVacuumed": result.count(VacuumOutcome.VACUUMED),
        "VacuumsSkipped": result.count(VacuumOutcome.SKIPPED),
        "VacuumCheckDenied": int(result.check_denied is not None),
        "MaintenanceFailed": int(result.failed),
    }
    return {
        "_aws": {
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [
                {"Namespace": namespace, "Dimensions": [[]], "Metrics": [{"Name": k, "Unit": "Count"} for k in values]}
            ],
        },
        **values,
    }


class MaintenanceFailed(RuntimeError):
    """The prune, the stage check or a vacuum failed; `summary` holds the whole run."""

    def __init__(self, summary: dict):
        m = summary["maintenance"]
        failed = [f"{v['table']}: {v['error']}" for v in m["vacuums"] if v["outcome"] == VacuumOutcome.FAILED]
        errors = [e for e in (m["prune_error"], m["check_error"], *failed) if e]
        super().__init__("maintenance failed: " + "; ".join(errors))
        self.summary = summary


def report(result: Maintenance, mode: str, namespace: str, remaining_ms: int) -> dict:
    """Logs the metric line and the run line; the summary the Lambda returns, or
    MaintenanceFailed with it when a step failed (a vacuum refused because another runs is
    a skip, not a failure)."""
    summary = {"ok": not result.failed, "mode": mode, "maintenance": result.as_dict()}
    print(json.dumps(metric_line(result, namespace, int(time.time() * 1000))), flush=True)
    print(json.dumps({"run": {"maintenance": summary["maintenance"], "remaining_ms": remaining_ms}}, default=str), flush=True)
    if result.failed:
        raise MaintenanceFailed(summary)
    return summary

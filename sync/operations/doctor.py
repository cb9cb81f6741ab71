"""`redshift-sync doctor`: is everything in place for the pipeline to run? Each check is ok or
failed with what to do; `--verify` adds the warehouse behaviours of docs/redshift.md
(`sync.operations.verify`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from sync.config import ConfigError, Pipeline, load_pipeline
from sync.sql.policy import KEY_TABLE, any_policies, key_table
from sync.warehouse import Warehouse, WarehouseError, connect


class CheckState(StrEnum):
    OK = "ok"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass
class Check:
    name: str
    state: CheckState
    detail: str


def run_checks(config: Path | None, dsn: str | None, revisions: Callable[[Pipeline, Path], Any]) -> list[Check]:
    """The pipeline file, the warehouse, its isolation level, the deployed revision against
    the pipeline file (`revisions` gives the alembic configuration), and the statistics the
    maintenance run reads."""
    checks: list[Check] = []
    try:
        pipeline, path = load_pipeline(config)
        checks.append(Check("pipeline file", CheckState.OK, f"{path}: {len(pipeline.tables)} table(s)"))
    except (ConfigError, FileNotFoundError) as exc:
        pipeline, path = None, None
        checks.append(Check("pipeline file", CheckState.FAILED, str(exc)))
    try:
        wh: Warehouse | None = connect(dsn)
    except WarehouseError as exc:
        wh = None
        checks.append(Check("warehouse", CheckState.FAILED, str(exc)))
    if wh is None:
        checks.append(Check("deployed revision", CheckState.SKIPPED, "no warehouse"))
        return checks
    try:
        version = wh.scalar("SELECT version()")
        checks.append(Check("warehouse", CheckState.OK, f"{wh.dialect.name}: {str(version).split(',')[0]}"))
        level = wh.scalar(wh.dialect.isolation_level_sql)
        checks.append(Check("isolation level", CheckState.OK, str(level)))
        if pipeline is None or path is None:
            checks.append(Check("deployed revision", CheckState.SKIPPED, "no pipeline file"))
        else:
            from sync.schema.revisions import deployment_problem

            problem = deployment_problem(wh, revisions(pipeline, path), pipeline)
            checks.append(
                Check("deployed revision", CheckState.FAILED, problem)
                if problem
                else Check("deployed revision", CheckState.OK, "the database is at the pipeline file's revision")
            )
            checks.append(stage_statistics_check(wh, pipeline))
            if any_policies(pipeline) and not problem:
                checks.append(policy_key_check(wh, pipeline))
    finally:
        wh.close()
    return checks


def stage_statistics_check(wh: Warehouse, pipeline: Pipeline) -> Check:
    """Whether this user can read what the Lambda's maintenance run reads to find the stages
    to vacuum (sync/aws/maintenance.py): on Redshift SVV_TABLE_INFO, "visible only to
    superusers" unless granted (r_SVV_TABLE_INFO)."""
    from sync.aws.maintenance import dead_rows_sql, stage_check_denied

    name = "stage vacuum statistics"
    d = wh.dialect.bind_schema(pipeline.schema)
    try:
        for sql in dead_rows_sql(d, pipeline):
            wh.query(sql)
    except WarehouseError as exc:
        return Check(name, CheckState.FAILED, stage_check_denied(d, exc, wh.scalar("SELECT current_user")) or str(exc))
    return Check(name, CheckState.OK, f"{d.dead_rows_view} is readable: the maintenance run finds the stages to vacuum")


def policy_key_check(wh: Warehouse, pipeline: Pipeline) -> Check:
    """Column policies: a hash key is in place (else every sync of those tables stops)."""
    try:
        keys = wh.scalar(f"SELECT COUNT(*) FROM {key_table(wh.dialect, pipeline)}")
    except WarehouseError as exc:
        return Check("policy key", CheckState.FAILED, f"cannot read {pipeline.schema}.{KEY_TABLE} (only its owner can): {exc}")
    if not keys:
        return Check("policy key", CheckState.FAILED, "no key yet: run redshift-sync policy rotate-key")
    return Check("policy key", CheckState.OK, f"{keys} key(s); the newest hashes new values")


def as_dicts(checks: list[Check]) -> list[dict[str, str]]:
    return [asdict(c) for c in checks]

"""The `redshift-sync` command line."""

from __future__ import annotations

import argparse
import functools
import json
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from sync.cli.report import (
    print_backfill,
    print_cost,
    print_explanation,
    print_freshness,
    print_keyless_reconcile,
    print_pruned,
    print_reconcile,
    print_runs,
    print_status,
    readable_count,
)
from sync.config import ConfigError, Pipeline, load_pipeline
from sync.extras import MissingExtra, require_spark
from sync.resources import relative_to_cwd
from sync.times import parse_utc
from sync.warehouse import Warehouse, WarehouseError, connect

app = typer.Typer(
    add_completion=True,  # --install-completion, --show-completion (bash, zsh, fish, PowerShell)
    no_args_is_help=True,
    help="Keep Redshift tables in sync with operational databases (Debezium CDC from MSK).",
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help is plain text: `[[tables]]` and `[backfill] iam_role` are not markup
)


def _print_version(given: bool) -> None:
    if given:
        from importlib.metadata import version

        sys.stdout.write(f"redshift-sync {version('redshift-sync')}\n")
        raise typer.Exit()


@app.callback()
def _options(
    _version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Also print each statement sent to the warehouse, with its time (stderr).")
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Only results, warnings and errors: no progress or where-lines (stderr).")
    ] = False,
) -> None:
    """Options before the command (the app's help is the Typer's)."""
    if verbose and quiet:
        raise typer.BadParameter("--verbose and --quiet exclude each other")
    info_console.quiet = quiet
    if verbose:
        from rich.logging import RichHandler

        handler = RichHandler(console=err_console, show_time=False, show_path=False, markup=False)
        for name in ("redshift_sync", "alembic.runtime.migration"):
            logging.getLogger(name).addHandler(handler)
            logging.getLogger(name).setLevel(logging.DEBUG)


# Wide enough for the summary tables when the output is a pipe or a CI log. No Rich markup:
# messages carry `[backfill]`, `redshift-sync[spark]`, JSON values; colour comes as Text styles.
console = Console(width=None if sys.stdout.isatty() else 120, markup=False)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 120, markup=False)
# Progress and where-lines on stderr: what --quiet silences (warnings and errors stay).
info_console = Console(stderr=True, width=None if sys.stderr.isatty() else 120, markup=False)


def warn(message: str, **options: Any) -> None:
    err_console.print(Text.assemble(("warning:", "yellow"), " ", message), highlight=False, **options)


ConfigOpt = Annotated[
    Optional[Path],
    typer.Option("--config", "-c", help="Pipeline file (default ./pipeline.toml, or $REDSHIFT_SYNC_CONFIG).", metavar="PATH"),
]
DsnOpt = Annotated[
    Optional[str],
    typer.Option(
        "--dsn",
        help="postgresql://... or redshift+redshift_connector://... (default $REDSHIFT_SYNC_DSN, else the embedded PostgreSQL).",
        metavar="DSN",
    ),
]
VersionsOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--versions",
        help="Revisions folder (default: version_locations of ./alembic.ini, else ./migrations/versions).",
        metavar="DIR",
    ),
]


class CliError(Exception):
    """An error already phrased for the user; exits with `code`."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn known failures into one clear message and a non-zero exit, no traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ConfigError as exc:
            err_console.print(Text.assemble(("error:", "red"), " ", str(exc)), soft_wrap=True)
            raise typer.Exit(2) from None
        except (WarehouseError, CliError, MissingExtra, FileNotFoundError, ValueError) as exc:
            err_console.print(Text.assemble(("error:", "red"), " ", str(exc)), soft_wrap=True)
            raise typer.Exit(getattr(exc, "code", 1)) from None
        except KeyboardInterrupt as exc:
            # Every CALL, load and revision is one transaction: the one in progress rolled
            # back. A command that had finished some of them says which (its message).
            err_console.print(f"interrupted: {str(exc) or 'nothing of this run was applied'}", style="yellow", soft_wrap=True)
            raise typer.Exit(130) from None

    return wrapper


def open_pipeline(config: Path | None) -> tuple[Pipeline, Path]:
    return load_pipeline(config)


def open_warehouse(dsn: str | None, pipeline_file: Path | None = None) -> Warehouse:
    """A connection (without a DSN: the embedded PostgreSQL next to the pipeline file); a
    line on stderr when connecting takes over a second."""
    return connect(dsn, on_slow=_progress, pipeline_file=pipeline_file)


def revisions_config(versions: Path | None, dsn: str | None, pipeline: Pipeline, path: Path, **kwargs: Any) -> Any:
    """The alembic configuration, with the revisions folder given once (see `versions_setting`)."""
    from sync.schema.revisions import alembic_config, versions_setting

    return alembic_config(versions_setting(versions, pipeline, path), dsn, path, **kwargs)


def open_checked(config: Path | None, dsn: str | None) -> tuple[Pipeline, Path, Warehouse]:
    """The pipeline file and a connection to a database deployed at the revision that
    records that file; otherwise stop before doing anything, saying what to run."""
    pipeline, path = open_pipeline(config)
    return pipeline, path, connect_checked(pipeline, path, dsn)


def connect_checked(pipeline: Pipeline, path: Path, dsn: str | None) -> Warehouse:
    """A connection to a database deployed at the revision that records the pipeline file
    (see `open_checked`)."""
    from sync.schema.revisions import deployment_problem

    wh = open_warehouse(dsn, path)
    try:
        problem = deployment_problem(wh, revisions_config(None, dsn, pipeline, path), pipeline)
    except BaseException:
        wh.close()
        raise
    if problem:
        wh.close()
        raise CliError(f"{problem}\n(warehouse: {wh.where})")
    return wh


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")


@app.command()
@handle_errors
def generate(
    config: ConfigOpt = None,
    dialect: Annotated[str, typer.Option(help="redshift | postgres", metavar="DIALECT")] = "redshift",
    out: Annotated[
        Optional[Path], typer.Option(help="Write one file per table into this folder instead of printing.", metavar="DIR")
    ] = None,
) -> None:
    """Print (or write) the SQL of every warehouse object of the pipeline."""
    from sync.sql.dialect import dialect_for
    from sync.sql.objects import auto_refresh_requirements
    from sync.sql.render import render_files, write_files

    pipeline, path = open_pipeline(config)
    files = render_files(pipeline, dialect, relative_to_cwd(path))
    for warning in auto_refresh_requirements(pipeline, dialect_for(dialect)):
        warn(warning)
    if out is None:
        sys.stdout.write("\n".join(files.values()))
        return
    for written in write_files(files, out):
        console.print(f"wrote {written}")


@app.command()
@handle_errors
def deploy(
    config: ConfigOpt = None,
    dsn: DsnOpt = None,
    versions: VersionsOpt = None,
    sql: Annotated[
        bool, typer.Option("--sql", help="Print the upgrade script for review instead of running it (nothing connects).")
    ] = False,
    dialect: Annotated[str, typer.Option(help="With --sql: redshift | postgres.", metavar="DIALECT")] = "redshift",
    since: Annotated[
        Optional[str],
        typer.Option(
            "--from", help="With --sql: the revision the database is at (default: an empty database).", metavar="REVISION"
        ),
    ] = None,
) -> None:
    """Upgrade the warehouse to the last revision (`alembic upgrade head`; idempotent)."""
    from sync.schema.revisions import deploy as run_deploy
    from sync.schema.revisions import offline_sql
    from sync.sql.dialect import DIALECTS

    pipeline, path = open_pipeline(config)
    if sql:
        if dialect not in DIALECTS:
            raise CliError(f"--dialect {dialect!r}: use {' or '.join(DIALECTS)}")
        offline_sql(revisions_config(versions, None, pipeline, path, output_buffer=sys.stdout), pipeline, dialect, since)
        return
    probe = open_warehouse(dsn, path)  # an unreachable warehouse is named before alembic starts
    probe.close()
    info_console.print(f"warehouse: {probe.where}", style="dim", highlight=False)
    result = run_deploy(revisions_config(versions, dsn, pipeline, path), pipeline)
    for warning in result.warnings:
        warn(warning)
    if not result.applied:
        console.print(f"already at revision {result.head}: nothing to do")
    for label in result.applied:
        console.print(f"  applied {label}", highlight=False)


@app.command()
@handle_errors
def ingest(
    file: Annotated[
        Path,
        typer.Option(
            "--file", "-f", help="JSON lines: {partition, offset, timestamp, key, value} or kcat -J output.", metavar="FILE"
        ),
    ],
    table: Annotated[
        Optional[str], typer.Option("--table", "-t", help="Pipeline table whose stream receives the records.", metavar="TABLE")
    ] = None,
    heartbeat: Annotated[bool, typer.Option("--heartbeat", help="Into the heartbeat topic's stream ([heartbeat]).")] = False,
    config: ConfigOpt = None,
    dsn: DsnOpt = None,
) -> None:
    """Append one refresh of Kafka records to a table's (or the heartbeat's) local stream (embedded warehouse)."""
    from sync.local.stream import check_events_file, ingest_file

    if (table is None) == (not heartbeat):
        raise CliError("give either --table TABLE or --heartbeat")
    check_events_file(file)  # a wrong path is the first thing to say, before the warehouse
    from sync.cli.progress import ingest_progress

    pipeline, _, wh = open_checked(config, dsn)
    try:
        with ingest_progress(info_console, file.stat().st_size) as progress:
            result = ingest_file(wh, pipeline, table, file, progress)
    finally:
        wh.close()
    parts = ", ".join(f"partition {p}: offsets {a}-{b}" for p, (a, b) in sorted(result.partitions.items()))
    console.print(f"ingested {readable_count(result.records)} record(s) into {result.table} ({parts or 'none'})", highlight=False)
    if result.tombstones:
        console.print(f"  {readable_count(result.tombstones)} tombstone(s) (null value)")
    if result.unparseable_values:
        console.print(
            f"  {readable_count(result.unparseable_values)} value(s) are not JSON: kept raw, sync will quarantine them",
            style="yellow",
        )
    if result.malformed_lines:
        lines = ", ".join(str(n) for n in result.malformed_lines[:20]) + (", ..." if len(result.malformed_lines) > 20 else "")
        console.print(
            f"  {len(result.malformed_lines)} line(s) were not record objects (line {lines}): "
            "ingested whole as values, sync will quarantine them",
            style="yellow",
            highlight=False,
        )


@app.command("sync")
@handle_errors
def sync_cmd(
    table: Annotated[
        Optional[list[str]], typer.Option("--table", "-t", help="Only these tables (repeatable).", metavar="TABLE")
    ] = None,
    config: ConfigOpt = None,
    dsn: DsnOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the run summaries as JSON.")] = False,
) -> None:
    """CALL incremental_sync_<table>() for every table (or those named) and summarise."""
    from sync.operations.runner import prune, selected_tables, sync_table

    pipeline, path = open_pipeline(config)
    names = selected_tables(pipeline, table)
    wh = connect_checked(pipeline, path, dsn)
    runs = []
    try:
        print_regression_warnings(wh, pipeline, names)
        for i, name in enumerate(names, start=1):
            # One CALL cannot report as it goes: a spinner (on a terminal) names the table.
            with info_console.status(f"syncing {name} ({i}/{len(names)})", spinner="dots"):
                runs.append(sync_table(wh, pipeline, name))
        print_run_warnings(wh, pipeline, names)
        # Retention after a clean run only: a failed call may have left the connection broken.
        pruned = None
        if all(r.status == "ok" for r in runs):
            try:
                pruned = prune(wh, pipeline)
            except Exception as exc:  # the sync itself is done: its summary still prints
                warn(f"pruning the control tables failed: {exc}")
    except KeyboardInterrupt:
        if not runs:
            raise
        done = ", ".join(r.table for r in runs)
        raise KeyboardInterrupt(f"{done} synced before it (committed); nothing after that was applied") from None
    finally:
        wh.close()
    if as_json:
        print_json([r.as_dict() for r in runs])
    else:
        print_runs(runs, console, err_console)
    if pruned is not None:
        print_pruned(pruned, err_console)
    if any(r.status != "ok" for r in runs):
        raise typer.Exit(1)


@app.command()
@handle_errors
def status(
    config: ConfigOpt = None,
    dsn: DsnOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the status as JSON.")] = False,
) -> None:
    """Watermarks, pending records, last run, lag, waiting quarantine and current schema drift per table."""
    from sync.operations.cost import call_durations, statement_time
    from sync.operations.freshness import table_freshness
    from sync.operations.loss import lost_records
    from sync.operations.ordering import ordering_breaks
    from sync.operations.positions import missing_positions
    from sync.operations.recovery import regression_warnings
    from sync.operations.runner import status as run_status

    pipeline, _, wh = open_checked(config, dsn)
    if not as_json:
        info_console.print(f"warehouse: {wh.where}", style="dim", highlight=False)
    try:
        rows = run_status(wh, pipeline)
        deployed = [s.table for s in rows if s.deployed]
        d = wh.dialect.bind_schema(pipeline.schema)
        breaks = {b.table: b for b in ordering_breaks(wh.query, d, pipeline, deployed)}
        lost = lost_records(wh.query, d, pipeline, deployed)
        positionless = {m.table: m for m in missing_positions(wh.query, d, pipeline, deployed)}
        warnings = [
            *regression_warnings(wh, pipeline, deployed),
            *(b.message() for b in breaks.values()),
            *(gap.message() for gap in lost),
            *(m.message() for m in positionless.values()),
        ]
        fresh = table_freshness(wh.query, d, pipeline, deployed)
        durations = call_durations(wh.query, d, pipeline, deployed)
        statements = statement_time(wh.query, d, pipeline, deployed)
    finally:
        wh.close()
    by_table = {f.table: f.as_dict() for f in fresh}
    if as_json:
        print_json(
            [
                {
                    **r.as_dict(),
                    "freshness": by_table.get(r.table),
                    "ordering_break": breaks[r.table].as_dict() if r.table in breaks else None,
                    "lost_records": [gap.as_dict() for gap in lost if gap.table == r.table],
                    "records_without_position": positionless[r.table].as_dict() if r.table in positionless else None,
                    "call_seconds": durations[r.table].as_dict() if r.table in durations else None,
                    "statement_seconds": statements[r.table].as_dict() if statements and r.table in statements else None,
                    "warnings": [w for w in warnings if w.startswith(f"{r.table}:")],
                }
                for r in rows
            ]
        )
        return
    print_status(rows, console)
    print_freshness(fresh, console)
    print_cost(durations, statements, console)
    for line in warnings:
        console.print(f"  {line}", style="yellow", highlight=False, soft_wrap=True)


@app.command()
@handle_errors
def explain(
    table: Annotated[str, typer.Option("--table", "-t", help="Pipeline table.", metavar="TABLE")],
    key: Annotated[
        list[str],
        typer.Option("--key", "-k", help="A key field's value, FIELD=VALUE (repeat for a composite key).", metavar="KEY"),
    ],
    config: ConfigOpt = None,
    dsn: DsnOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the explanation as JSON.")] = False,
) -> None:
    """Why a key's row looks as it does: its records, quarantine, remembered delete and stored row, each with a verdict."""
    from sync.operations.explain import explain as explain_key

    pipeline, _, wh = open_checked(config, dsn)
    try:
        result = explain_key(wh, pipeline, table, key)
    finally:
        wh.close()
    if as_json:
        print_json(result.as_dict())
        return
    print_explanation(result, console)


@app.command()
@handle_errors
def demo(
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    skip_spark: Annotated[bool, typer.Option(help="Skip the PySpark backfill and reconcile steps.")] = False,
) -> None:
    """End to end on the embedded warehouse: deploy, ingest sample events, sync, backfill, reconcile."""
    from sync.cli.demo import run_demo

    run_demo(console, dsn=dsn, config=config, skip_spark=skip_spark)


FormatOpt = Annotated[str, typer.Option("--format", help="parquet | json | csv | debezium | s3-sink", metavar="FORMAT")]
SnapshotTimeOpt = Annotated[
    Optional[str],
    typer.Option(
        "--snapshot-time", help="When the snapshot was taken (ISO 8601); needed unless rows carry _source_ts.", metavar="TIME"
    ),
]


def _progress(message: str) -> None:
    info_console.print(message, style="dim", highlight=False)


@app.command()
@handle_errors
def backfill(
    table: Annotated[str, typer.Option("--table", "-t", help="Pipeline table to backfill.", metavar="TABLE")],
    snapshot: Annotated[
        Optional[str], typer.Option("--snapshot", help="Snapshot path (local, or s3:// downloaded with boto3).", metavar="PATH")
    ] = None,
    staged: Annotated[
        Optional[str],
        typer.Option(
            "--staged",
            help="Load the run folder a cluster's backfill job wrote (s3:// or local), no Spark here.",
            metavar="FOLDER",
        ),
    ] = None,
    fmt: FormatOpt = "parquet",
    snapshot_time: SnapshotTimeOpt = None,
    staging: Annotated[
        Optional[str], typer.Option("--staging", help="s3://bucket/prefix/ for the Parquet COPY (Redshift).", metavar="S3_URL")
    ] = None,
    iam_role: Annotated[
        Optional[str], typer.Option("--iam-role", help="Role for COPY (default: [backfill] iam_role).", metavar="ROLE_ARN")
    ] = None,
    config: ConfigOpt = None,
    dsn: DsnOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    values: Annotated[
        str,
        typer.Option(
            "--values", help="debezium (wire encoding: base64 decimals, epoch days) | decoded (a plain export).", metavar="KIND"
        ),
    ] = "debezium",
) -> None:
    """Load a snapshot into a table without overwriting newer stream changes (PySpark)."""
    from sync.operations.backfill import run_backfill
    from sync.operations.run_folder import run_staged

    if (snapshot is None) == (staged is None):
        raise ValueError("give either --snapshot (run Spark here) or --staged (load what a cluster's job wrote)")
    when = parse_utc(snapshot_time, "--snapshot-time")
    if snapshot is not None:
        require_spark("backfill --snapshot")
    pipeline, _, wh = open_checked(config, dsn)
    role = iam_role or pipeline.backfill.iam_role
    try:
        if staged is not None:
            result = run_staged(wh, pipeline, staged, table, iam_role=role, progress=_progress)
        else:
            result = run_backfill(
                wh,
                pipeline,
                table,
                snapshot,
                fmt,
                when,
                staging=staging,
                iam_role=role,
                progress=_progress,
                values=values,
            )
    finally:
        wh.close()
    if as_json:
        print_json(result.as_dict())
    else:
        print_backfill(result, table, console)
    if result.rejected:
        raise typer.Exit(1)


@app.command()
@handle_errors
def reconcile(
    table: Annotated[str, typer.Option("--table", "-t", help="Pipeline table to compare.", metavar="TABLE")],
    snapshot: Annotated[str, typer.Option("--snapshot", help="Snapshot path (local, or s3://).", metavar="PATH")],
    fmt: FormatOpt = "parquet",
    snapshot_time: SnapshotTimeOpt = None,
    buckets: Annotated[int, typer.Option("--buckets", help="Key buckets (hash of the key mod N).", metavar="N")] = 64,
    checksum: Annotated[
        Optional[str], typer.Option("--checksum", help="Compare these columns too: col,col,...", metavar="COLUMNS")
    ] = None,
    report_path: Annotated[Optional[Path], typer.Option("--report", help="Write the JSON report here.", metavar="FILE")] = None,
    config: ConfigOpt = None,
    dsn: DsnOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON (as --report writes it).")] = False,
) -> None:
    """Compare a snapshot with the warehouse; exit 1 on any difference the stream does not explain."""
    from sync.operations.keyless_reconcile import run_keyless_reconcile
    from sync.operations.reconcile import run_reconcile

    when = parse_utc(snapshot_time, "--snapshot-time")
    require_spark("reconcile (it reads the snapshot)")
    columns = [c.strip() for c in checksum.split(",") if c.strip()] if checksum else []
    pipeline, _, wh = open_checked(config, dsn)
    keyless = pipeline.table(table).is_keyless
    try:
        if keyless and columns:
            raise ValueError(f"--checksum: table {table!r} has no primary key; its rows are compared on every column")
        if keyless:
            report = run_keyless_reconcile(wh, pipeline, table, snapshot, fmt, when, buckets, progress=_progress)
        else:
            report = run_reconcile(wh, pipeline, table, snapshot, fmt, when, buckets, columns, progress=_progress)
    finally:
        wh.close()
    if as_json:
        print_json(report.as_dict())
    else:
        (print_keyless_reconcile if keyless else print_reconcile)(report, console)
    if report_path is not None:
        report_path.write_text(json.dumps(report.as_dict(), indent=2, default=str) + "\n", encoding="utf-8")
        (err_console if as_json else console).print(f"report written to {report_path}", highlight=False)
    if not report.clean:
        raise typer.Exit(1)


@app.command()
@handle_errors
def revision(
    message: Annotated[str, typer.Option("--message", "-m", help="What the revision does.", metavar="TEXT")],
    config: ConfigOpt = None,
    versions: VersionsOpt = None,
) -> None:
    """Write the next schema revision: the pipeline file compared with the last revision's state."""
    from sync.schema.revisions import write_revision

    pipeline, path = open_pipeline(config)
    # quiet: alembic's own "Generating <absolute path>" line; the line below says it, relative to here
    cfg = revisions_config(versions, None, pipeline, path, cmd_opts=argparse.Namespace(quiet=True))
    written = write_revision(cfg, pipeline, relative_to_cwd(path), message)
    if written is None:
        console.print("nothing to do: the pipeline file matches the last revision")
        return
    console.print(f"wrote {relative_to_cwd(Path(written.path))} (revision {written.revision})", highlight=False)
    for line in written.plan.upgrade:
        console.print(f"  {line}", highlight=False)
    for warning in written.plan.warnings:
        warn(warning)


@app.command()
@handle_errors
def infer(
    sample: Annotated[
        Path,
        typer.Option(
            "--sample",
            "-s",
            help="JSON lines of Debezium messages: with schemas (schemas.enable=true), else types are guessed from values.",
            metavar="FILE",
        ),
    ],
    table: Annotated[str, typer.Option("--table", "-t", help="Name of the target table.", metavar="TABLE")],
    topic: Annotated[str, typer.Option("--topic", help="The Kafka topic the messages come from.", metavar="TOPIC")],
    primary_key: Annotated[
        Optional[list[str]],
        typer.Option("--primary-key", help="Key field(s) when the sample has no key schema (repeatable).", metavar="FIELD"),
    ] = None,
) -> None:
    """Print a ready [[tables]] block inferred from sample messages: their Connect schemas, else their values."""
    from sync.debezium.infer import infer_block

    sys.stdout.write(infer_block(sample, table, topic, primary_key))


@app.command("prune")
@handle_errors
def prune_cmd(
    config: ConfigOpt = None,
    dsn: DsnOpt = None,
    days: Annotated[
        Optional[int],
        typer.Option("--days", min=1, help="Keep this many days (default: [operations] retention_days, 30).", metavar="N"),
    ] = None,
    stream: Annotated[
        bool,
        typer.Option(
            "--stream",
            help="Also delete stream records already read that wrote no stored row (the streaming MV on Redshift; "
            "tables with column policies: those too).",
        ),
    ] = False,
) -> None:
    """Delete run-log, schema-drift and handled quarantine rows past the retention (`sync` does it too)."""
    from sync.operations.runner import prune

    pipeline, _, wh = open_checked(config, dsn)
    try:
        pruned = prune(wh, pipeline, days, stream)
    finally:
        wh.close()
    console.print(
        f"pruned rows older than {pruned.retention_days} day(s): run log {pruned.run_log}, "
        f"schema drift {pruned.schema_drift}, quarantine (replayed or discarded) {pruned.quarantine}",
        highlight=False,
    )
    for table, count in pruned.stream.items():
        console.print(f"  stream of {table}: {count} record(s) already read and superseded", highlight=False)
    if pruned.heartbeat is not None:
        console.print(f"  heartbeat stream: {pruned.heartbeat} record(s) older than the newest", highlight=False)


quarantine_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Records that could not be applied: list them, replay them once the cause is fixed, or discard them.",
)
app.add_typer(quarantine_app, name="quarantine")

policy_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Column policies (policy = hash | mask | drop): the hash key the warehouse holds.",
)
app.add_typer(policy_app, name="policy")


@policy_app.command("rotate-key")
@handle_errors
def policy_rotate_key(
    secret_env: Annotated[
        Optional[str],
        typer.Option("--secret-env", help="Take the key from this environment variable (default: a random one).", metavar="VAR"),
    ] = None,
    config: ConfigOpt = None,
    dsn: DsnOpt = None,
) -> None:
    """Add a new hash key; new values hash with it, stored hashes keep theirs (README, "Column policies")."""
    import os

    from sync.operations.policy_key import KeyRefused, rotate_key

    secret = None
    if secret_env is not None:
        secret = os.environ.get(secret_env)
        if not secret:
            raise CliError(f"--secret-env {secret_env}: the variable is not set")
    pipeline, _, wh = open_checked(config, dsn)
    try:
        rotated = rotate_key(wh, pipeline, secret)
    except KeyRefused as exc:
        raise CliError(str(exc)) from None
    finally:
        wh.close()
    origin = "generated" if rotated.generated else f"from ${secret_env}"
    console.print(f"policy key {rotated.key_id} in use ({origin}); values stored before keep their hashes", highlight=False)


QTableOpt = Annotated[str, typer.Option("--table", "-t", help="Pipeline table.", metavar="TABLE")]
ReasonOpt = Annotated[
    Optional[str], typer.Option("--reason", help="Only records whose reason contains this text.", metavar="TEXT")
]
BeforeOpt = Annotated[
    Optional[str], typer.Option("--before", help="Only records quarantined before this time (ISO 8601, UTC).", metavar="TIME")
]


def _selection(table: str, reason: str | None, before: str | None) -> Any:
    from sync.operations.quarantine import Selection

    return Selection(table, reason, parse_utc(before, "--before"))


@quarantine_app.command("list")
@handle_errors
def quarantine_list(
    table: QTableOpt,
    reason: ReasonOpt = None,
    before: BeforeOpt = None,
    include_handled: Annotated[bool, typer.Option("--all", help="Also records already replayed or discarded.")] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many records.", metavar="N")] = 50,
    config: ConfigOpt = None,
    dsn: DsnOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the records as JSON.")] = False,
) -> None:
    """The quarantined records of a table, oldest first, with their reason and value."""
    from sync.operations.quarantine import list_records

    sel = _selection(table, reason, before)
    pipeline, _, wh = open_checked(config, dsn)
    try:
        total, records = list_records(wh, pipeline, sel, include_handled, limit)
    finally:
        wh.close()
    if as_json:
        print_json({"table": table, "matching": total, "records": [r.as_dict() for r in records]})
        return
    grid = Table(title=f"quarantine {table}: {total} record(s)" + ("" if include_handled else " waiting"), title_justify="left")
    for col in ("partition:offset", "quarantined at", "reason", "status", "value"):
        grid.add_column(col, overflow="fold")
    for r in records:
        status = r.handled or "waiting"
        if r.handled_at:
            status += f" {r.handled_at[:19]}"
        value = r.value if r.value is None or len(r.value) <= 80 else r.value[:77] + "..."
        grid.add_row(f"{r.kafka_partition}:{r.kafka_offset}", (r.quarantined_at or "-")[:19], r.reason, status, value or "-")
    console.print(grid)
    if total > len(records):
        console.print(f"  ... {total - len(records)} more (--limit, --reason, --before, --json)")


@quarantine_app.command("replay")
@handle_errors
def quarantine_replay(
    table: QTableOpt,
    reason: ReasonOpt = None,
    before: BeforeOpt = None,
    config: ConfigOpt = None,
    dsn: DsnOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Run waiting records through the table's procedure again (after the cause is fixed)."""
    from sync.operations.quarantine import replay

    sel = _selection(table, reason, before)
    pipeline, _, wh = open_checked(config, dsn)
    try:
        result = replay(wh, pipeline, sel)
    finally:
        wh.close()
    if as_json:
        print_json(result.as_dict())
        return
    run = result.run
    console.print(
        f"replayed {result.replayed} record(s) of {table} in one sync run: read {run.events_read}, upserted {run.upserted}, "
        f"deleted {run.deleted}, stale {run.stale}, superseded {run.superseded}, quarantined {run.quarantined}",
        highlight=False,
    )
    for why, count in result.quarantined_again:
        console.print(Text.assemble("  ", (f"{count} failed again", "yellow"), f": {why}"), highlight=False)


@quarantine_app.command("discard")
@handle_errors
def quarantine_discard(
    table: QTableOpt,
    reason: ReasonOpt = None,
    before: BeforeOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say how many records it would discard; change nothing.")] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask first (it asks only on a terminal).")] = False,
    config: ConfigOpt = None,
    dsn: DsnOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Mark waiting records discarded: they are kept, as handled, until retention prunes them."""
    from sync.operations.quarantine import discard

    sel = _selection(table, reason, before)
    pipeline, _, wh = open_checked(config, dsn)
    try:
        waiting = discard(wh, pipeline, sel, apply=False)
        ask = not (dry_run or yes) and waiting > 0 and sys.stdin.isatty()
        if ask and not typer.confirm(f"discard {waiting} waiting record(s) of {table}?"):
            dry_run = True  # answered no: nothing changes
        count = 0 if dry_run else discard(wh, pipeline, sel)
    finally:
        wh.close()
    if as_json:
        print_json({"table": table, "matching": waiting, "discarded": count, "applied": not dry_run})
    elif dry_run:
        console.print(f"would discard {waiting} record(s) of {table}; nothing was changed", highlight=False)
    else:
        console.print(f"discarded {count} record(s) of {table}", highlight=False)


@app.command()
@handle_errors
def query(
    sql: Annotated[str, typer.Argument(metavar="SQL", help="One SQL statement.")],
    config: Annotated[
        Optional[Path],
        typer.Option(
            "--config",
            "-c",
            help="Without --dsn: the embedded warehouse of this pipeline file (default ./pipeline.toml).",
            metavar="PATH",
        ),
    ] = None,
    dsn: DsnOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the rows as JSON objects.")] = False,
) -> None:
    """Run one SQL statement on the warehouse (the embedded one by default) and print the result."""
    from sync.config import resolve_config_path

    wh = open_warehouse(dsn, resolve_config_path(config))
    try:
        columns, rows, count = wh.run(sql)
    finally:
        wh.close()
    if columns is None:
        console.print(f"ok, {count} row(s) affected" if count >= 0 else "ok", highlight=False)
    elif as_json:
        print_json([dict(zip(columns, r)) for r in rows])
    else:
        grid = Table(*columns)
        for r in rows:
            grid.add_row(*("NULL" if v is None else str(v) for v in r))
        console.print(grid)
        console.print(f"({len(rows)} row(s))", highlight=False)


def main() -> None:
    """The console script. A hang-up or SIGTERM (the terminal closed, a CI job cancelled)
    ends the command as an exit does, so the connection closes (the statement in progress
    rolls back) and the embedded PostgreSQL this process started is stopped."""
    from sync.local import embedded

    def end(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    for signum in (signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, end)
    try:
        app()
    finally:
        embedded.stop()


@app.command("package-lambda")
@handle_errors
def package_lambda(
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the zip.", metavar="PATH")] = Path("dist/lambda.zip"),
    config: ConfigOpt = None,
    python_version: Annotated[
        str, typer.Option(help="Python of the Lambda runtime (python3.12 -> 3.12).", metavar="VERSION")
    ] = "3.12",
    arch: Annotated[str, typer.Option(help="Lambda architecture: x86_64 | arm64.", metavar="ARCH")] = "x86_64",
    with_connector: Annotated[
        bool, typer.Option(help="Also bundle redshift-connector (for REDSHIFT_SYNC_DSN mode instead of the Data API).")
    ] = False,
) -> None:
    """Build the Lambda zip: the sync package, its dependencies for Lambda and the pipeline file (no Spark)."""
    from sync.aws.packaging import PackagingError, build_lambda_zip

    _, path = open_pipeline(config)
    try:
        pkg = build_lambda_zip(out, path, python_version, arch, with_connector, progress=console.print)
    except PackagingError as exc:
        raise CliError(str(exc)) from None
    console.print(
        f"wrote {pkg.path}: {pkg.size_bytes / 1e6:.2f} MB zipped, {pkg.files} files "
        f"({', '.join(pkg.requirements)}); Lambda's limit is 50 MB. Handler: sync.lambda_handler.handler"
    )


def print_regression_warnings(wh: Warehouse, pipeline: Pipeline, tables: list[str]) -> None:
    """Records no sync will read (a re-created topic): one warning per partition, on stderr."""
    from sync.operations.recovery import regression_warnings

    try:
        lines = regression_warnings(wh, pipeline, tables)
    except WarehouseError as exc:  # the check must not keep the sync from running
        lines = [f"could not check for records below the watermark: {exc}"]
    for line in lines:
        warn(line, soft_wrap=True)


def print_run_warnings(wh: Warehouse, pipeline: Pipeline, tables: list[str]) -> None:
    """After the runs, on stderr: tables whose last runs found every record stale (an
    ordering break), and records lost before they were read."""
    from sync.operations.loss import lost_records
    from sync.operations.ordering import ordering_breaks

    d = wh.dialect.bind_schema(pipeline.schema)
    lines = []
    for what, check in (("ordering breaks", ordering_breaks), ("records lost before they were read", lost_records)):
        try:
            lines += [found.message() for found in check(wh.query, d, pipeline, tables)]
        except WarehouseError as exc:  # a check must not hide the runs' own summary
            lines.append(f"could not check for {what}: {exc}")
    for line in lines:
        warn(line, soft_wrap=True)


YesOpt = Annotated[bool, typer.Option("--yes", help="Do it (without --yes: say what it would change, and change nothing).")]


def run_recovery(command: Callable[..., Any], table: str, yes: bool, config: Path | None, dsn: str | None) -> Any:
    """One recovery command of sync/operations/recovery.py on one table (applied only with --yes)."""
    pipeline, path = open_pipeline(config)
    wh = open_warehouse(dsn, path)
    try:
        return command(wh, pipeline, table, apply=yes)
    finally:
        wh.close()


@app.command("reset-positions")
@handle_errors
def reset_positions(
    table: Annotated[
        str, typer.Option("--table", "-t", help="Pipeline table whose stored source positions are cleared.", metavar="TABLE")
    ],
    reread_from: Annotated[
        Optional[str],
        typer.Option(
            "--reread-from",
            metavar="WATERMARK",
            help="A watermark (partition:offset,...; `status` prints it): the next sync reads again the records after it, "
            "which the stored positions made stale.",
        ),
    ] = None,
    yes: YesOpt = False,
    config: ConfigOpt = None,
    dsn: DsnOpt = None,
) -> None:
    """After a MySQL failover, RESET MASTER or a restore of the source database: clear the stored source positions so that new events apply."""
    from functools import partial

    from sync.operations.recovery import parse_watermark
    from sync.operations.recovery import reset_positions as run_reset

    reread = parse_watermark(reread_from) if reread_from is not None else None
    if reread_from is not None and not reread:
        raise CliError(f"--reread-from {reread_from!r} is not a watermark like 0:17,1:5 (partition:offset, comma-separated)")
    result = run_recovery(partial(run_reset, reread_from=reread), table, yes, config, dsn)
    parts = [f"{result.target_rows} row(s) of {table}"]
    parts += [f"{result.deleted_keys} deleted key(s)"] if result.deleted_keys is not None else []
    parts += [f"{result.history_versions} history version(s)"] if result.history_versions is not None else []
    what = " and ".join([", ".join(parts[:-1]), parts[-1]] if len(parts) > 1 else parts)
    if result.applied:
        again = f"; the next sync reads again the records after {reread_from}" if reread else ""
        console.print(
            f"cleared the stored source positions of {what}{again}; logged as reset-positions", highlight=False, soft_wrap=True
        )
        return
    again = f", and moves the watermark back so that the next sync reads again the records after {reread_from}" if reread else ""
    raise CliError(
        f"reset-positions clears the stored source positions of {what}{again}, so that events whose positions "
        "restarted lower (a MySQL failover, RESET MASTER) are no longer stale.\n"
        "Risk: until a key stores a new position, a replay of an older event of it (a restarted connector "
        "re-sending what it sent before) overwrites its newer row.\n"
        "Nothing was changed: run it again with --yes."
    )


@app.command("rebase-offsets")
@handle_errors
def rebase_offsets(
    table: Annotated[str, typer.Option("--table", "-t", help="Pipeline table whose watermark is re-based.", metavar="TABLE")],
    yes: YesOpt = False,
    config: ConfigOpt = None,
    dsn: DsnOpt = None,
) -> None:
    """After a topic is re-created: move the watermark so that the records refreshed after it are read next."""
    from sync.operations.recovery import rebase_offsets as run_rebase

    result = run_recovery(run_rebase, table, yes, config, dsn)
    out = console if result.applied else err_console
    out.print(
        f"{'re-based' if result.applied else 'would re-base'} the watermark of {table}: "
        f"refresh time {result.since_before} -> {result.since_after}",
        highlight=False,
    )
    for p in result.partitions:
        before = "-" if p.last_offset_before is None else p.last_offset_before
        out.print(
            f"  partition {p.partition}: last offset {before} -> {p.last_offset_after} "
            f"({p.new_records} record(s) refreshed after the watermark)",
            highlight=False,
        )
    if result.applied:
        console.print("logged as rebase-offsets; the next sync reads exactly those records")
        return
    raise CliError(
        "rebase-offsets moves the watermark so that the next sync reads the records refreshed after it, which a "
        "re-created topic wrote at offsets at or below it, and never again the older ones.\n"
        "Risk: if the topic was not re-created but its streaming materialized view was (it re-reads the topic at "
        "the same offsets, and sync needs no help), records already applied are read again.\n"
        "Nothing was changed: run it again with --yes."
    )


history_app = typer.Typer(
    no_args_is_help=True, rich_markup_mode=None, help="History mode (history = true): the history table of a table."
)
app.add_typer(history_app, name="history")


@history_app.command("rebuild")
@handle_errors
def history_rebuild(
    table: Annotated[str, typer.Option("--table", "-t", help="Pipeline table with history = true.", metavar="TABLE")],
    yes: Annotated[
        bool, typer.Option("--yes", help="Replace stored versions (without it: say how many, change nothing).")
    ] = False,
    accept_gap: Annotated[
        bool,
        typer.Option("--accept-gap", help="Rebuild although the stream no longer retains records the history was built from."),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the outcome as JSON.")] = False,
    config: ConfigOpt = None,
    dsn: DsnOpt = None,
) -> None:
    """Rebuild the history table from the records the stream retains, with backfill snapshots below them."""
    from sync.cli.history_report import print_rebuild, refusal
    from sync.operations.history_rebuild import Outcome, rebuild_history

    pipeline, _, wh = open_checked(config, dsn)
    try:
        result = rebuild_history(wh, pipeline, table, apply=yes, accept_gap=accept_gap)
    finally:
        wh.close()
    refused = result.outcome in (Outcome.NEEDS_YES, Outcome.GAP)
    if as_json:
        print_json(result.as_dict())
        if refused:
            raise typer.Exit(1)
        return
    if refused:
        raise CliError(refusal(result))
    print_rebuild(result, console, err_console)


@app.command("package-backfill")
@handle_errors
def package_backfill(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder to write the cluster artifact into.", metavar="PATH")] = Path(
        "dist/backfill"
    ),
    config: ConfigOpt = None,
) -> None:
    """Build what a Spark cluster (EMR, EMR Serverless, Glue) needs to run the backfill job."""
    from sync.aws.packaging import build_backfill_bundle

    _, path = open_pipeline(config)
    bundle = build_backfill_bundle(out, path, progress=console.print)
    console.print(f"upload {out}/ and run {bundle.files[1]} with --py-files {bundle.files[0]}: docs/backfill-on-aws.md")


if __name__ == "__main__":
    main()


@app.command()
@handle_errors
def doctor(
    config: ConfigOpt = None,
    dsn: DsnOpt = None,
    verify: Annotated[
        bool,
        typer.Option("--verify", help="Also run the behaviours of docs/redshift.md in a scratch schema, dropped afterwards."),
    ] = False,
    report: Annotated[Optional[Path], typer.Option(metavar="FILE", help="Write the --verify report as JSON here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the checks (and the --verify report) as JSON.")] = False,
) -> None:
    """Check the pipeline file, the warehouse, its isolation level and the deployed revision (exit 1 on a failure)."""
    from sync.cli.report import print_checks, print_verify
    from sync.operations.doctor import CheckState, as_dicts, run_checks

    checks = run_checks(config, dsn, lambda pipeline, path: revisions_config(None, dsn, pipeline, path))
    verified = None
    if verify:
        from sync.operations.verify import verify as run_verify
        from sync.operations.verify_scenarios import SCENARIOS

        verified = run_verify(lambda: connect(dsn), SCENARIOS, _progress)
        if report is not None:
            report.write_text(json.dumps(verified.as_dict(), indent=2, default=str) + "\n")
    if as_json:
        print_json({"checks": as_dicts(checks), "verify": verified.as_dict() if verified else None})
    else:
        print_checks(checks, console)
        if verified:
            print_verify(verified, console)
            if report is not None:
                console.print(f"report written to {report}", highlight=False)
    if any(c.state is CheckState.FAILED for c in checks) or (verified and verified.failed):
        raise typer.Exit(1)


@app.command()
@handle_errors
def init(
    folder: Annotated[Path, typer.Argument(metavar="FOLDER", help="The project folder (created if missing).")] = Path("."),
    example: Annotated[
        Optional[str], typer.Option(metavar="NAME", help="Start from a bundled example pipeline (salesdb, ...), with its events.")
    ] = None,
    sample: Annotated[
        Optional[Path], typer.Option(metavar="FILE", help="Start from sample messages of one topic (as `infer` reads them).")
    ] = None,
    table: Annotated[Optional[str], typer.Option(metavar="TABLE", help="With --sample: the target table's name.")] = None,
    topic: Annotated[
        Optional[str], typer.Option(metavar="TOPIC", help="With --sample: the topic the messages come from.")
    ] = None,
) -> None:
    """Write a new project: pipeline.toml and its revisions folder, from an example or a sample."""
    from sync.operations.init import InitRefused, Sample, init_project

    if sample is not None and not (table and topic):
        raise CliError("--sample needs --table and --topic")
    samples = [Sample(sample, table or "", topic or "")] if sample is not None else []
    try:
        written = init_project(folder, example, samples)
    except InitRefused as exc:
        raise CliError(str(exc)) from None
    for path in written:
        console.print(f"wrote {path}{'/' if path.is_dir() else ''}", highlight=False, markup=False)
    where = "" if folder.resolve() == Path.cwd().resolve() else f"cd {folder} && "
    console.print(
        f"next: {where}redshift-sync revision -m initial && redshift-sync deploy", highlight=False, markup=False, soft_wrap=True
    )

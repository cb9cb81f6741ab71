"""The `redshift-sync` command line."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from sync.config import ConfigError, Pipeline, load_pipeline
from sync.warehouse import Warehouse, WarehouseError, connect

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Keep Redshift tables in sync with operational databases (Debezium CDC from MSK).",
    pretty_exceptions_enable=False,
)
# Wide enough for the summary tables when the output is a pipe or a CI log.
console = Console(width=None if sys.stdout.isatty() else 120)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 120)

ConfigOpt = Annotated[
    Optional[Path],
    typer.Option("--config", "-c", help="Pipeline file (default ./pipeline.toml, or $REDSHIFT_SYNC_CONFIG)."),
]
DsnOpt = Annotated[
    Optional[str],
    typer.Option("--dsn", help="postgresql://... or redshift+redshift_connector://... (default $REDSHIFT_SYNC_DSN, else the embedded PostgreSQL)."),
]
VersionsOpt = Annotated[
    Optional[Path],
    typer.Option("--versions", help="Revisions folder (default: version_locations of ./alembic.ini, else ./migrations/versions)."),
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
            err_console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except (WarehouseError, CliError, FileNotFoundError, ValueError) as exc:
            err_console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(getattr(exc, "code", 1)) from None

    return wrapper


def open_pipeline(config: Path | None) -> tuple[Pipeline, Path]:
    return load_pipeline(config)


def origin_of(path: Path) -> str:
    """How generated SQL names its pipeline file: relative to the working directory when
    possible, so committed output does not depend on where the checkout lives."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def open_warehouse(dsn: str | None) -> Warehouse:
    return connect(dsn)


@app.command()
@handle_errors
def generate(
    config: ConfigOpt = None,
    dsn: DsnOpt = None,
    dialect: Annotated[str, typer.Option(help="redshift | postgres")] = "redshift",
    out: Annotated[Optional[Path], typer.Option(help="Write one file per table into this folder instead of printing.")] = None,
) -> None:
    """Print (or write) the SQL of every warehouse object of the pipeline."""
    from sync.generate import render_files, write_files

    pipeline, path = open_pipeline(config)
    files = render_files(pipeline, dialect, origin_of(path))
    if out is None:
        sys.stdout.write("\n".join(files.values()))
        return
    for written in write_files(files, out):
        console.print(f"wrote {written}")


@app.command()
@handle_errors
def deploy(config: ConfigOpt = None, dsn: DsnOpt = None, versions: VersionsOpt = None) -> None:
    """Upgrade the warehouse to the last revision (`alembic upgrade head`; idempotent)."""
    from sync.revisions import alembic_config, deploy as run_deploy

    pipeline, path = open_pipeline(config)
    result = run_deploy(alembic_config(versions, dsn, path), pipeline)
    for warning in result.warnings:
        err_console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
    if not result.applied:
        console.print(f"already at revision {result.head}: nothing to do")
    for label in result.applied:
        console.print(f"  applied {label}", highlight=False)


@app.command()
@handle_errors
def ingest(
    table: Annotated[str, typer.Option("--table", "-t", help="Pipeline table whose stream receives the records.")],
    file: Annotated[Path, typer.Option("--file", "-f", help="JSON lines: {partition, offset, timestamp, key, value} or kcat -J output.")],
    config: ConfigOpt = None,
    dsn: DsnOpt = None,
) -> None:
    """Append one refresh of Kafka records to a table's local stream (embedded warehouse)."""
    from sync.stream import ingest_file

    pipeline, _ = open_pipeline(config)
    wh = open_warehouse(dsn)
    try:
        result = ingest_file(wh, pipeline, table, file)
    finally:
        wh.close()
    parts = ", ".join(f"partition {p}: offsets {a}-{b}" for p, (a, b) in sorted(result.partitions.items()))
    console.print(f"ingested {result.records} record(s) into {table} ({parts or 'none'})")
    if result.tombstones:
        console.print(f"  {result.tombstones} tombstone(s) (null value)")
    if result.unparseable_values:
        console.print(f"  [yellow]{result.unparseable_values} value(s) are not JSON: kept raw, sync will quarantine them[/yellow]")
    if result.malformed_lines:
        console.print(f"  [yellow]{result.malformed_lines} line(s) were not record objects: ingested whole as values[/yellow]")


def print_runs(runs: list[Any]) -> None:
    grid = Table(title="sync", title_justify="left")
    for col in ("table", "status", "read", "upserted", "deleted", "quarantined", "stale", "superseded", "watermark", "lag s", "time s"):
        grid.add_column(col, justify="right" if col not in ("table", "status", "watermark") else "left")
    for r in runs:
        grid.add_row(
            r.table,
            "[green]ok[/green]" if r.status == "ok" else f"[red]{r.status}[/red]",
            str(r.events_read), str(r.upserted), str(r.deleted), str(r.quarantined), str(r.stale), str(r.superseded),
            r.watermark_after or "-",
            f"{r.lag_seconds:.1f}" if r.lag_seconds is not None else "-",
            f"{r.duration_seconds:.2f}",
        )
    console.print(grid)
    for r in runs:
        if r.error:
            err_console.print(f"[red]{r.table} failed:[/red] {r.error}", highlight=False)


@app.command("sync")
@handle_errors
def sync_cmd(
    table: Annotated[Optional[list[str]], typer.Option("--table", "-t", help="Only these tables (repeatable).")] = None,
    config: ConfigOpt = None,
    dsn: DsnOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the run summaries as JSON.")] = False,
) -> None:
    """CALL incremental_sync_<table>() for every table (or those named) and summarise."""
    from sync.runner import call_procedure, selected_tables

    pipeline, _ = open_pipeline(config)
    names = selected_tables(pipeline, table)
    wh = open_warehouse(dsn)
    runs = []
    try:
        for i, name in enumerate(names, start=1):
            # One CALL cannot report as it goes: a spinner (on a terminal) names the table.
            with err_console.status(f"syncing {name} ({i}/{len(names)})", spinner="dots"):
                runs.append(call_procedure(wh, pipeline, name))
    finally:
        wh.close()
    if as_json:
        sys.stdout.write(json.dumps([r.as_dict() for r in runs], indent=2, default=str) + "\n")
    else:
        print_runs(runs)
    if any(r.status != "ok" for r in runs):
        raise typer.Exit(1)


@app.command()
@handle_errors
def status(config: ConfigOpt = None, dsn: DsnOpt = None) -> None:
    """Watermarks, pending records, last run, lag and quarantine per table."""
    from sync.runner import status as run_status

    pipeline, _ = open_pipeline(config)
    wh = open_warehouse(dsn)
    try:
        rows = run_status(wh, pipeline)
    finally:
        wh.close()
    print_status(rows)


def print_status(rows: list[Any]) -> None:
    grid = Table(title="status", title_justify="left")
    for col in ("table", "rows", "pending", "watermarks", "last run", "last read", "lag s", "quarantined"):
        grid.add_column(col, justify="left" if col in ("table", "watermarks", "last run") else "right")
    for s in rows:
        if not s.deployed:
            grid.add_row(s.table, "-", "-", "[yellow]not deployed[/yellow]", "-", "-", "-", "-")
            continue
        wm = ",".join(f"{p}:{o}" for p, o in s.watermarks.items()) or "-"
        lag = s.last_run.get("lag_seconds") if s.last_run else None
        grid.add_row(
            s.table, str(s.target_rows), str(s.pending), wm, (s.last_run_at or "never")[:19],
            str(s.last_run["events_read"]) if s.last_run else "-",
            f"{lag:.1f}" if lag is not None else "-", str(s.quarantined),
        )
    console.print(grid)
    for s in rows:
        for reason, count in s.quarantine_reasons:
            console.print(f"  {s.table}: {count} quarantined: {reason}", highlight=False)
        for kind, name, count in s.schema_drift:
            what = "field not in the pipeline file" if kind == "unknown" else "configured field absent from events"
            console.print(f"  {s.table}: {what}: {name} ({count} event(s))", highlight=False)


@app.command()
@handle_errors
def demo(
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    skip_spark: Annotated[bool, typer.Option(help="Skip the PySpark backfill and reconcile steps.")] = False,
) -> None:
    """End to end on the embedded warehouse: deploy, ingest sample events, sync, backfill, reconcile."""
    from sync.demo import run_demo

    run_demo(console, dsn=dsn, config=config, skip_spark=skip_spark)


FormatOpt = Annotated[str, typer.Option("--format", help="parquet | json | csv | debezium | s3-sink")]
SnapshotTimeOpt = Annotated[
    Optional[str],
    typer.Option("--snapshot-time", help="When the snapshot was taken (ISO 8601); needed unless rows carry _source_ts."),
]


def _progress(message: str) -> None:
    err_console.print(f"[dim]{message}[/dim]", highlight=False)


@app.command()
@handle_errors
def backfill(
    table: Annotated[str, typer.Option("--table", "-t", help="Pipeline table to backfill.")],
    snapshot: Annotated[Optional[str], typer.Option("--snapshot", help="Snapshot path (local, or s3:// downloaded with boto3).")] = None,
    staged: Annotated[Optional[str], typer.Option("--staged", help="Load the run folder a cluster's backfill job wrote (s3:// or local), no Spark here.")] = None,
    fmt: FormatOpt = "parquet",
    snapshot_time: SnapshotTimeOpt = None,
    staging: Annotated[Optional[str], typer.Option("--staging", help="s3://bucket/prefix/ for the Parquet COPY (Redshift).")] = None,
    iam_role: Annotated[Optional[str], typer.Option("--iam-role", help="Role for COPY (default: [backfill] iam_role).")] = None,
    config: ConfigOpt = None,
    dsn: DsnOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    values: Annotated[str, typer.Option("--values", help="debezium (wire encoding: base64 decimals, epoch days) | decoded (a plain export).")] = "debezium",
) -> None:
    """Load a snapshot into a table without overwriting newer stream changes (PySpark)."""
    from backfill.job import parse_time
    from sync.backfill import run_backfill, run_staged

    if (snapshot is None) == (staged is None):
        raise ValueError("give either --snapshot (run Spark here) or --staged (load what a cluster's job wrote)")
    pipeline, _ = open_pipeline(config)
    when = parse_time(snapshot_time)
    wh = open_warehouse(dsn)
    role = iam_role or pipeline.backfill.iam_role
    try:
        if staged is not None:
            result = run_staged(wh, pipeline, staged, table, iam_role=role, progress=_progress)
        else:
            result = run_backfill(
                wh, pipeline, table, snapshot, fmt, when, staging=staging, iam_role=role, progress=_progress, values=values,
            )
    finally:
        wh.close()
    if as_json:
        sys.stdout.write(json.dumps(result.as_dict(), indent=2, default=str) + "\n")
    else:
        grid = Table(title=f"backfill {table}", title_justify="left")
        for col in ("staged", "loaded", "deleted", "kept: newer in stream", "kept: deleted by stream", "rejected", "time s"):
            grid.add_column(col, justify="right")
        grid.add_row(
            f"{result.staged:,}", f"{result.loaded:,}", f"{result.deleted:,}", f"{result.kept_newer:,}",
            f"{result.kept_deleted:,}", f"{result.rejected:,}", f"{result.seconds:.1f}",
        )
        console.print(grid)
        for note in result.notes:
            console.print(f"  [cyan]note[/cyan] {note}", highlight=False)
        for sample in result.rejects_sample:
            console.print(f"  [yellow]rejected[/yellow] {sample['reason']}: {str(sample['record'])[:120]}", highlight=False)
        if result.rejects_path:
            console.print(f"  all {result.rejected} rejected rows, with their reason: {result.rejects_path}", highlight=False)
    if result.rejected:
        raise typer.Exit(1)


def print_reconcile(report: Any, out: Console | None = None) -> None:
    out = out or console
    grid = Table(title=f"reconcile {report.table}", title_justify="left")
    for col in ("snapshot rows", "warehouse rows", "buckets", "buckets differing", "unexplained", "explained by stream", "rejected"):
        grid.add_column(col, justify="right")
    grid.add_row(
        f"{report.snapshot_rows:,}", f"{report.warehouse_rows:,}", str(report.buckets),
        str(len(report.mismatched_buckets)), str(len(report.unexplained)), str(len(report.explained)), str(report.rejected),
    )
    out.print(grid)
    if report.differences:
        keys = Table("key", "difference", "explained", "why", "snapshot _source_ts", "warehouse _source_ts")
        for d in report.differences[:50]:
            keys.add_row(d.key, d.kind, "yes" if d.explained else "[red]no[/red]", d.why, d.snapshot_ts or "-", d.warehouse_ts or "-")
        out.print(keys)
        if len(report.differences) > 50:
            out.print(f"  ... {len(report.differences) - 50} more in the JSON report")
    out.print("[green]clean[/green]" if report.clean else "[red]unexplained differences[/red]")


@app.command()
@handle_errors
def reconcile(
    table: Annotated[str, typer.Option("--table", "-t", help="Pipeline table to compare.")],
    snapshot: Annotated[str, typer.Option("--snapshot", help="Snapshot path (local, or s3://).")],
    fmt: FormatOpt = "parquet",
    snapshot_time: SnapshotTimeOpt = None,
    buckets: Annotated[int, typer.Option("--buckets", help="Key buckets (hash of the key mod N).")] = 64,
    checksum: Annotated[Optional[str], typer.Option("--checksum", help="Compare these columns too: col,col,...")] = None,
    report_path: Annotated[Optional[Path], typer.Option("--report", help="Write the JSON report here.")] = None,
    config: ConfigOpt = None,
    dsn: DsnOpt = None,
) -> None:
    """Compare a snapshot with the warehouse; exit 1 on any difference the stream does not explain."""
    from backfill.job import parse_time
    from sync.reconcile import run_reconcile

    pipeline, _ = open_pipeline(config)
    when = parse_time(snapshot_time)
    columns = [c.strip() for c in checksum.split(",") if c.strip()] if checksum else []
    wh = open_warehouse(dsn)
    try:
        report = run_reconcile(wh, pipeline, table, snapshot, fmt, when, buckets, columns, progress=_progress)
    finally:
        wh.close()
    print_reconcile(report)
    if report_path is not None:
        report_path.write_text(json.dumps(report.as_dict(), indent=2, default=str) + "\n", encoding="utf-8")
        console.print(f"report written to {report_path}", highlight=False)
    if not report.clean:
        raise typer.Exit(1)


@app.command()
@handle_errors
def revision(
    message: Annotated[str, typer.Option("--message", "-m", help="What the revision does.")],
    config: ConfigOpt = None,
    versions: VersionsOpt = None,
) -> None:
    """Write the next schema revision: the pipeline file compared with the last revision's state."""
    from sync.revisions import alembic_config, write_revision

    pipeline, path = open_pipeline(config)
    written = write_revision(alembic_config(versions, None, path), pipeline, origin_of(path), message)
    if written is None:
        console.print("nothing to do: the pipeline file matches the last revision")
        return
    console.print(f"wrote {written.path} (revision {written.revision})", highlight=False)
    for line in written.plan.upgrade:
        console.print(f"  {line}", highlight=False)
    for warning in written.plan.warnings:
        err_console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)


@app.command()
@handle_errors
def infer(
    sample: Annotated[Path, typer.Option("--sample", "-s", help="JSON lines of Debezium messages with schemas (schemas.enable=true).")],
    table: Annotated[str, typer.Option("--table", "-t", help="Name of the target table.")],
    topic: Annotated[str, typer.Option("--topic", help="The Kafka topic the messages come from.")],
    primary_key: Annotated[Optional[list[str]], typer.Option("--primary-key", help="Key field(s) when the sample has no key schema (repeatable).")] = None,
) -> None:
    """Print a ready [[tables]] block inferred from sample messages' Connect schemas."""
    from sync.infer import infer_block

    sys.stdout.write(infer_block(sample, table, topic, primary_key))


def main() -> None:
    app()



@app.command("package-lambda")
@handle_errors
def package_lambda(
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the zip.")] = Path("dist/lambda.zip"),
    config: ConfigOpt = None,
    python_version: Annotated[str, typer.Option(help="Python of the Lambda runtime (python3.12 -> 3.12).")] = "3.12",
    arch: Annotated[str, typer.Option(help="Lambda architecture: x86_64 | arm64.")] = "x86_64",
    with_connector: Annotated[bool, typer.Option(help="Also bundle redshift-connector (for REDSHIFT_SYNC_DSN mode instead of the Data API).")] = False,
) -> None:
    """Build the Lambda zip: the sync package, its dependencies for Lambda and the pipeline file (no Spark)."""
    from sync.packaging import PackagingError, build_lambda_zip

    _, path = open_pipeline(config)
    try:
        pkg = build_lambda_zip(out, path, python_version, arch, with_connector, progress=console.print)
    except PackagingError as exc:
        raise CliError(str(exc)) from None
    console.print(
        f"wrote {pkg.path}: {pkg.size_bytes / 1e6:.2f} MB zipped, {pkg.files} files "
        f"({', '.join(pkg.requirements)}); Lambda's limit is 50 MB. Handler: sync.lambda_handler.handler"
    )


@app.command("package-backfill")
@handle_errors
def package_backfill(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder to write the cluster artifact into.")] = Path("dist/backfill"),
    config: ConfigOpt = None,
) -> None:
    """Build what a Spark cluster (EMR, EMR Serverless, Glue) needs to run the backfill job."""
    from sync.packaging import build_backfill_bundle

    _, path = open_pipeline(config)
    bundle = build_backfill_bundle(out, path, progress=console.print)
    console.print(f"upload {out}/ and run {bundle.files[1]} with --py-files {bundle.files[0]}: docs/backfill-on-aws.md")


if __name__ == "__main__":
    main()

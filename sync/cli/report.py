"""Readable summaries of sync runs, status, backfills and reconciliations, printed by the
command line and by the demo to the consoles they are given."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sync.operations.freshness import Freshness
from sync.operations.ordering import readable_position
from sync.operations.unknown_values import UnknownValues
from sync.sql.procedure.routing import UNMATCHED_KIND

# A shared topic's records no table selects, counted by the run log (sync.sql.procedure.routing).
UNMATCHED_RECORDS = "record(s) of the topic no table's route selects"
# What a schema-drift row of each kind says in `status` (sync.sql.procedure.drift, .routing).
DRIFT_KINDS = {
    "unknown": "field not in the pipeline file",
    "missing": "configured field absent from events",
    UNMATCHED_KIND: "records of the topic no table's route selects",
}


def readable_count(n: int | None) -> str:
    """A count as every command prints one: 1,234,567 (None: -)."""
    return "-" if n is None else f"{n:,}"


def readable_seconds(seconds: float | None) -> str:
    """A duration as a person reads it: 0.42 s, 12.5 s, 7 min 3 s, 5 h 12 min, 729 d 16 h."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"
    whole = int(seconds)
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "min", 60), ("min", 60, "s", 1)):
        if whole >= size:
            return f"{whole // size} {unit} {(whole % size) // sub_size} {sub}"
    raise AssertionError("unreachable: 60 s or more is at least one minute")


def print_runs(runs: list[Any], out: Console, err: Console) -> None:
    """One row per sync run; isolated records and failures follow on `err`."""
    grid = Table(title="sync", title_justify="left")
    for col in (
        "table",
        "status",
        "read",
        "upserted",
        "deleted",
        "quarantined",
        "stale",
        "superseded",
        "watermark",
        "lag",
        "time",
    ):
        grid.add_column(col, justify="right" if col not in ("table", "status", "watermark") else "left")
    for r in runs:
        grid.add_row(
            r.table,
            Text(r.status, style="green" if r.status == "ok" else "red"),
            readable_count(r.events_read),
            readable_count(r.upserted),
            readable_count(r.deleted),
            readable_count(r.quarantined),
            readable_count(r.stale),
            readable_count(r.superseded),
            r.watermark_after or "-",
            readable_seconds(r.lag_seconds),
            readable_seconds(r.duration_seconds),
        )
    out.print(grid)
    for r in runs:
        if r.retries:
            err.print(
                Text(f"{r.table}: {r.retries} transaction(s) stopped by a serialization conflict, run again", style="yellow"),
                highlight=False,
            )
        for error in r.isolated:
            first_line = error.splitlines()[0] if error else ""
            err.print(
                Text.assemble(
                    (f"{r.table}: one record isolated", "yellow"),
                    f" (quarantined; the warehouse could not apply it): {first_line}",
                ),
            )
        if r.unmatched:
            err.print(f"{r.table}: {r.unmatched:,} {UNMATCHED_RECORDS} (by source: status)", highlight=False)
        if r.error:
            err.print(Text.assemble((f"{r.table} failed:", "red"), f" {r.error}"))


def print_pruned(pruned: Any, err: Console) -> None:
    if pruned.run_log or pruned.schema_drift or pruned.quarantine:
        err.print(
            f"pruned past {pruned.retention_days} day(s): {pruned.run_log} run-log, {pruned.schema_drift} "
            f"schema-drift and {pruned.quarantine} handled quarantine row(s)",
            style="dim",
            highlight=False,
        )


def print_status(rows: list[Any], out: Console) -> None:
    """One row per table, then its quarantine reasons, skipped stream records and schema drift."""
    grid = Table(title="status", title_justify="left")
    for col in ("table", "rows", "pending", "watermarks", "last run", "last read", "lag", "quarantined"):
        grid.add_column(col, justify="left" if col in ("table", "watermarks", "last run") else "right")
    for s in rows:
        if not s.deployed:
            grid.add_row(s.table, "-", "-", Text("not deployed", style="yellow"), "-", "-", "-", "-")
            continue
        wm = ",".join(f"{p}:{o}" for p, o in s.watermarks.items()) or "-"
        lag = s.last_run.get("lag_seconds") if s.last_run else None
        grid.add_row(
            s.table,
            readable_count(s.target_rows),
            readable_count(s.pending),
            wm,
            (s.last_run_at or "never")[:19],
            readable_count(s.last_run["events_read"]) if s.last_run else "-",
            readable_seconds(lag),
            readable_count(s.quarantined),
        )
    out.print(grid)
    for s in rows:
        for reason, count in s.quarantine_reasons:
            out.print(f"  {s.table}: {count} quarantined: {reason}", highlight=False)
        for reason, count in s.stream_errors:
            out.print(f"  {s.table}: {count} record(s) skipped by streaming ingestion: {reason}", highlight=False)
        if s.last_run and s.last_run.get("unmatched"):
            out.print(f"  {s.table}: last run read {s.last_run['unmatched']:,} {UNMATCHED_RECORDS}", highlight=False)
        for kind, name, count in s.schema_drift:
            what = DRIFT_KINDS.get(kind, kind)
            out.print(f"  {s.table}: {what}: {name} ({count} event(s))", highlight=False)
        for column, count in s.unknown_values:
            out.print(f"  {UnknownValues(s.table, column, count).describe()}", highlight=False)


def print_freshness(rows: list[Any], out: Console) -> None:
    """Per table ([heartbeat]): the state, the heartbeat's age, the newest record, the last
    run that applied one, and what waits."""
    if not rows:
        return
    grid = Table(title="freshness", title_justify="left")
    for col in ("table", "state", "heartbeat", "last event", "last applied", "waiting", "lag"):
        grid.add_column(col, justify="right" if col in ("heartbeat", "waiting", "lag") else "left")
    for f in rows:
        colour = "green" if f.state in (Freshness.CURRENT, Freshness.IDLE) else "red"
        grid.add_row(
            f.table,
            Text(str(f.state), style=colour),
            "never" if f.source_alive_seconds is None else f"{readable_seconds(f.source_alive_seconds)} ago",
            (f.last_event_at or "never")[:19],
            (f.last_applied_at or "never")[:19],
            readable_count(f.pending),
            readable_seconds(f.lag_seconds),
        )
    out.print(grid)


def print_cost(durations: dict[str, Any], statements: dict[str, Any] | None, out: Console) -> None:
    """Per table: its recent CALL durations (run log) and, on Redshift, the time its
    statements ran and queued (SYS_QUERY_HISTORY)."""
    if not durations:
        return
    grid = Table(title="cost", title_justify="left")
    columns = ["table", "runs", "CALL p50", "CALL p95", "since"]
    if statements is not None:
        columns += ["CALLs (24 h)", "statements ran", "queued"]
    for col in columns:
        grid.add_column(col, justify="left" if col in ("table", "since") else "right")
    for table, c in durations.items():
        row = [
            table,
            readable_count(c.runs),
            readable_seconds(c.p50_seconds),
            readable_seconds(c.p95_seconds),
            (c.since or "-")[:19],
        ]
        if statements is not None:
            st = statements[table]
            row += [str(st.calls), readable_seconds(st.execution_seconds), readable_seconds(st.queue_seconds)]
        grid.add_row(*row)
    out.print(grid)


def print_backfill(result: Any, table: str, out: Console) -> None:
    """The counts of one backfill (a table without a primary key: the rows it replaced),
    its notes and a sample of the rows it rejected."""
    grid = Table(title=f"backfill {table}", title_justify="left")
    if result.keyless:
        counts = {"staged": result.staged, "loaded": result.loaded, "replaced": result.replaced}
    else:
        counts = {
            "staged": result.staged,
            "loaded": result.loaded,
            "deleted": result.deleted,
            "kept: target as new or newer": result.kept_newer,
            "kept: deleted by stream": result.kept_deleted,
        }
    for col in [*counts, "rejected", "time"]:
        grid.add_column(col, justify="right")
    grid.add_row(*map(readable_count, [*counts.values(), result.rejected]), readable_seconds(result.seconds))
    out.print(grid)
    if result.history_versions is not None:
        out.print(f"  history: {result.history_versions} snapshot row(s) became versions below the stream", highlight=False)
    for note in result.notes:
        out.print(Text.assemble("  ", ("note", "cyan"), f" {note}"))
    for sample in result.rejects_sample:
        out.print(Text.assemble("  ", ("rejected", "yellow"), f" {sample['reason']}: {str(sample['record'])[:120]}"))
    if result.rejects_path:
        out.print(f"  all {result.rejected} rejected rows, with their reason: {result.rejects_path}", highlight=False)


def _reconcile_counts(report: Any, out: Console) -> None:
    """The counts on both sides (a keyed or a keyless report)."""
    grid = Table(title=f"reconcile {report.table}", title_justify="left")
    for col in (
        "snapshot rows",
        "warehouse rows",
        "buckets",
        "buckets differing",
        "unexplained",
        "explained by stream",
        "rejected",
    ):
        grid.add_column(col, justify="right")
    grid.add_row(
        f"{report.snapshot_rows:,}",
        f"{report.warehouse_rows:,}",
        str(report.buckets),
        str(len(report.mismatched_buckets)),
        str(len(report.unexplained)),
        str(len(report.explained)),
        str(report.rejected),
    )
    out.print(grid)


def _verdict(report: Any, out: Console) -> None:
    out.print(Text("clean", style="green") if report.clean else Text("unexplained differences", style="red"))


def print_reconcile(report: Any, out: Console) -> None:
    """The counts on both sides, the first 50 differing keys, and the verdict."""
    _reconcile_counts(report, out)
    if report.differences:
        keys = Table("key", "difference", "explained", "why", "snapshot time", "warehouse time")
        for d in report.differences[:50]:
            keys.add_row(
                d.key,
                d.kind,
                "yes" if d.explained else Text("no", style="red"),
                d.why,
                d.snapshot_ts or "-",
                d.warehouse_ts or "-",
            )
        out.print(keys)
        if len(report.differences) > 50:
            out.print(f"  ... {len(report.differences) - 50} more in the JSON report")
    _verdict(report, out)


def print_keyless_reconcile(report: Any, out: Console) -> None:
    """A table without a primary key: the counts, the first 50 differing rows (their
    values, how many copies differ), and the verdict."""
    _reconcile_counts(report, out)
    if report.differences:
        rows = Table("row", "difference", "copies", "explained", "why")
        for d in report.differences[:50]:
            values = ", ".join(f"{k}={v}" for k, v in d.row.items())
            rows.add_row(values, d.kind, str(d.copies), "yes" if d.explained else Text("no", style="red"), d.why)
        out.print(rows)
        if len(report.differences) > 50:
            out.print(f"  ... {len(report.differences) - 50} more in the JSON report")
    _verdict(report, out)


_MARKS = {"ok": "ok", "failed": "FAILED", "skipped": "skipped", "verified": "verified", "not applicable": "n/a"}


def print_checks(checks: list[Any], out: Console) -> None:
    """`doctor`: one line per check, its state and what it found (or what to do)."""
    for c in checks:
        out.print(f"{_MARKS[c.state]:>8}  {c.name}: {c.detail}", highlight=False, markup=False, soft_wrap=True)


def print_verify(report: Any, out: Console) -> None:
    """`doctor --verify`: each row of docs/redshift.md with its verdict."""
    out.print(f"\nverify on {report.engine} (isolation level: {report.isolation_level})", highlight=False, markup=False)
    for name, value in report.settings.items():
        out.print(f"  setting {name} = {value}", highlight=False, markup=False)
    for o in report.outcomes:
        detail = f": {o.detail}" if o.detail else ""
        out.print(f"{_MARKS[o.verdict]:>8}  row {o.row:>2}  {o.title}{detail}", highlight=False, markup=False, soft_wrap=True)
    counts = {v: sum(1 for o in report.outcomes if o.verdict == v) for v in ("verified", "failed", "not applicable")}
    out.print(
        f"{counts['verified']} verified, {counts['failed']} failed, {counts['not applicable']} not applicable",
        highlight=False,
        markup=False,
    )


def print_explanation(result: Any, out: Console) -> None:
    """`explain`: the key's stored row and remembered delete, its records newest first as
    ranked, then its quarantined records; each on one line, its verdict (or the stored
    values) on the next."""
    key = ", ".join(f"{k}={v}" for k, v in result.key.items())
    out.print(f"explain {result.table} {key}: {len(result.entries)} entries, newest first as ranked", highlight=False)
    for e in result.entries:
        ts = (e.kafka_timestamp or "-")[:23]
        position = readable_position(e.source_pos) if e.source_pos else "-"
        out.print(f"{e.origin:<17} {e.coordinates:<9} {e.op or '-':<2} {ts:<23} position {position}", highlight=False)
        detail = ", ".join(f"{k}={v}" for k, v in e.values.items()) if e.values else e.verdict
        out.print(f"    {detail}", highlight=False, soft_wrap=True)

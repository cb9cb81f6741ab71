"""The measured phases. Each builds its workload with SQL, runs VACUUM ANALYZE, measures
(medians of repeated runs, each rolled back so every run starts from the same data) and
records figures by name in the run's `Bench`."""

from __future__ import annotations

import importlib.util
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from benchmarks import baselines as bl
from benchmarks.measure import Clock, Measurement, PeakMemory, cpu_figure, timed
from benchmarks.profile import profile_call
from benchmarks.sizes import Sizes
from benchmarks.workload import TABLE, Relations, batch_events_sql, load, mark_applied_sql, reset
from sync.config import Pipeline
from sync.sql import schemas
from sync.sql.dialect import quote_ident
from sync.sql.names import RUN_LOG
from sync.warehouse import Warehouse

RETAINED_REFRESH = 100_000  # records per refresh when filling the retained stream


@dataclass
class Bench:
    wh: Warehouse
    pipeline: Pipeline
    rel: Relations
    sizes: Sizes
    progress: Callable[[str], None]
    clock: Clock
    figures: dict[str, float] = field(default_factory=dict)
    measurements: dict[str, dict] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    breakdown: list[dict] = field(default_factory=list)  # the procedure's statements, slowest first

    def record(self, name: str, m: Measurement, items: int | None = None, unit: str = "events") -> None:
        self.measurements[name] = m.as_dict()
        self.figures[f"{name}.seconds"] = m.median
        if m.cpu_median is not None:
            self.figures[f"{name}.cpu_seconds"] = m.cpu_median
        if items:
            self.figures[f"{name}.{unit}_per_second"] = items / m.median

    def ratio(self, figure: str, numerator: str, denominator: str) -> None:
        """`figure` = numerator/denominator of wall medians, and `cpu_<figure>` of CPU medians."""
        self.figures[figure] = self.figures[f"{numerator}.seconds"] / self.figures[f"{denominator}.seconds"]
        if f"{numerator}.cpu_seconds" in self.figures and f"{denominator}.cpu_seconds" in self.figures:
            # CPU is read in clock ticks (10 ms): a denominator below one tick counts as one.
            self.figures[cpu_figure(figure)] = self.figures[f"{numerator}.cpu_seconds"] / max(
                self.figures[f"{denominator}.cpu_seconds"], 0.01
            )

    def call_procedure(self) -> None:
        self.wh.execute(f"CALL {self.rel.procedure}()")

    def last_run(self) -> dict[str, int]:
        """Events read, upserted and deleted (by run-log column) of the latest run of the table."""
        columns = [schemas.column(schemas.RUN_LOG, name) for name in ("events_read", "upserted", "deleted")]
        row = self.wh.query(
            f"SELECT {', '.join(schemas.names(columns))} FROM {quote_ident(self.pipeline.schema)}.{quote_ident(RUN_LOG)}\n"
            "WHERE table_name = %s ORDER BY run_id DESC LIMIT 1",
            (TABLE,),
        )[0]
        return schemas.as_row(columns, row)


def incremental(b: Bench) -> None:
    """Part 1: one batch of N events against M rows, five ways, side by side."""
    n, m = b.sizes.events, b.sizes.target_rows
    b.progress(f"incremental: building a {m:,}-row target and a {n:,}-event batch")
    load(b.wh, b.rel, m, n)
    bl.prepare_seed(b.wh, b.rel)
    bl.prepare_floor(b.wh, b.rel)
    copy_data = bl.prepare_copy(b.wh, b.rel)
    bl.prepare_decode(b.wh, b.rel)
    events = bl.fetch_events(b.wh, b.rel)
    b.wh.execute("VACUUM ANALYZE")
    digest = lambda table: lambda: tuple(b.wh.query(bl.digest_sql(table))[0])  # noqa: E731
    approaches: dict[str, tuple[Callable[[], object], Callable[[], object] | None]] = {
        "generated_procedure": (b.call_procedure, lambda: (b.last_run(), digest(b.rel.target)())),
        "seed_blog_pattern": (lambda: bl.run_seed(b.wh), digest(bl.SEED_TARGET)),
        "per_row_upsert": (lambda: bl.run_per_row(b.wh, b.rel, events, b.sizes.upsert_batch), digest(b.rel.target)),
        "apply_floor": (lambda: bl.run_floor(b.wh, b.rel), digest(b.rel.target)),
        "raw_copy": (lambda: bl.run_copy(b.wh, copy_data), None),
        "decode_floor": (lambda: bl.run_decode(b.wh, b.rel), None),
    }
    runs = {name: Measurement() for name in approaches}
    results: dict[str, object] = {}
    for rep in range(b.sizes.repeats):
        for name, (fn, check) in approaches.items():
            b.progress(f"incremental: {name}, run {rep + 1} of {b.sizes.repeats}")
            wall, cpu, result = b.clock.rolled_back(b.wh, fn, check if rep == 0 else None)
            runs[name].add(wall, cpu)
            if rep == 0 and result is not None:
                results[name] = result
    run, expected = results.pop("generated_procedure")
    if run["events_read"] != n:
        raise RuntimeError(f"the procedure read {run['events_read']} events, expected {n}")
    differ = [name for name, got in results.items() if got != expected]
    b.notes.append(
        f"incremental: the procedure applied {run['upserted']:,} upserts and {run['deleted']:,} deletes (final rows of {n:,} events); "
        + (
            f"RESULTS DIFFER from the procedure's: {', '.join(differ)}"
            if differ
            else "the seed pattern, the per-row upserts and the apply floor left the same rows (count and hash of the data columns)"
        )
    )
    for name, m_ in runs.items():
        b.record(f"incremental.{name}", m_, n)
    for letter, name in (
        ("b", "seed_blog_pattern"),
        ("c", "per_row_upsert"),
        ("d", "apply_floor"),
        ("e", "raw_copy"),
        ("f", "decode_floor"),
    ):
        b.ratio(f"incremental.ratio_a_{letter}", "incremental.generated_procedure", f"incremental.{name}")
    b.progress("incremental: one timestamped call for the breakdown of the procedure's time")
    statements = profile_call(b.wh, b.pipeline, TABLE)
    total = sum(st.seconds for st in statements)
    b.breakdown = [
        {"statement": st.label, "seconds": round(st.seconds, 6), "share": round(st.seconds / total, 4)}
        for st in sorted(statements, key=lambda st: -st.seconds)
        if st.seconds > 0
    ]


def scaling(b: Bench) -> None:
    """Part 2a: the same batch against targets of growing size."""
    n = b.sizes.scaling_events
    for m in b.sizes.scaling_targets:
        b.progress(f"scaling: building a {m:,}-row target and a {n:,}-event batch")
        load(b.wh, b.rel, m, n)
        bl.prepare_floor(b.wh, b.rel)
        b.wh.execute("VACUUM ANALYZE")
        proc, floor = Measurement(), Measurement()
        for rep in range(b.sizes.repeats):
            b.progress(f"scaling: target {m:,}, run {rep + 1} of {b.sizes.repeats}")
            proc.add(*b.clock.rolled_back(b.wh, b.call_procedure)[:2])
            floor.add(*b.clock.rolled_back(b.wh, lambda: bl.run_floor(b.wh, b.rel))[:2])
        b.record(f"scaling.target_{m}.generated_procedure", proc, n)
        b.record(f"scaling.target_{m}.apply_floor", floor, n)
    small, large = b.sizes.scaling_targets[0], b.sizes.scaling_targets[-1]
    for name, figure in (("generated_procedure", "ratio_largest_smallest"), ("apply_floor", "floor_ratio_largest_smallest")):
        b.ratio(f"scaling.{figure}", f"scaling.target_{large}.{name}", f"scaling.target_{small}.{name}")


def empty_sync(b: Bench) -> None:
    """Part 2b: a sync with nothing new while many applied records stay in the stream."""
    retained = b.sizes.retained
    b.progress(f"empty sync: filling the stream with {retained:,} applied records")
    reset(b.wh, b.rel)
    for i, start in enumerate(range(0, retained, RETAINED_REFRESH)):
        b.wh.execute(batch_events_sql(b.rel, min(RETAINED_REFRESH, retained - start), retained, file_number=10 + i))
    b.wh.execute(mark_applied_sql(b.rel))
    b.wh.execute("VACUUM ANALYZE")
    b.call_procedure()  # a first call on the connection (plans, caches)
    m = Measurement()
    for _ in range(b.sizes.empty_repeats):
        m.add(timed(b.call_procedure), None)  # a few ms: below the resolution of CPU ticks
        if b.last_run()["events_read"] != 0:
            raise RuntimeError("the empty sync read records: the watermark was not where the benchmark put it")
    b.record("empty_sync", m)
    b.figures["empty_sync.max_seconds"] = max(m.runs)


def backfill_available() -> str | None:
    """None when the backfill and reconcile modules exist, else why the phase is skipped."""
    missing = [mod for mod in ("sync.operations.backfill", "sync.operations.reconcile") if importlib.util.find_spec(mod) is None]
    if missing:
        return f"skipped: {' and '.join(missing)} not importable in this checkout (backfill/reconcile not built yet)"
    return None


# When the benchmark's snapshot was taken (plain snapshots carry no source time per row).
SNAPSHOT_TIME = datetime(2024, 1, 1)


def write_snapshot(directory: Path, rows: int) -> tuple[Path, Path]:
    """The same rows as Parquet and as CSV (with a header)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    ids = [f"C{i:09d}" for i in range(1, rows + 1)]
    segments = ["BUILDING", "AUTOMOBILE", "MACHINERY", "HOUSEHOLD", "FURNITURE"]
    table = pa.table(
        {
            "CUST_ID": ids,
            "NAME": [f"Customer {i}" for i in range(1, rows + 1)],
            "MKTSEGMENT": [segments[i % 5] for i in range(1, rows + 1)],
        }
    )
    parquet, csv = directory / "customer.parquet", directory / "customer.csv"
    pq.write_table(table, parquet)
    pacsv.write_csv(table, csv)
    return parquet, csv


def _backfill_and_copy(b: Bench, label: str, rows: int, directory: Path) -> Path:
    """A snapshot of `rows` rows: a raw COPY of its CSV into an empty unlogged table, then
    the backfill of its Parquet into the emptied target. Returns the Parquet path."""
    from sync.operations.backfill import run_backfill  # type: ignore[import-not-found]

    b.progress(f"{label}: writing a {rows:,}-row snapshot (Parquet and CSV)")
    parquet, csv = write_snapshot(directory, rows)
    reset(b.wh, b.rel)
    b.wh.execute("VACUUM ANALYZE")
    sink = f"{bl.SCHEMA}.copy_snapshot"
    b.wh.execute(f"CREATE SCHEMA IF NOT EXISTS {bl.SCHEMA}")
    b.wh.execute(f"DROP TABLE IF EXISTS {sink}")
    b.wh.execute(f"CREATE UNLOGGED TABLE {sink} (customer_id varchar(64), name varchar(256), mktsegment varchar(64))")

    def copy_csv() -> None:
        with b.wh.copy_from(f"COPY {sink} FROM STDIN (FORMAT csv, HEADER true)") as copy, csv.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                copy.write(chunk)

    b.progress(f"{label}: raw COPY of the CSV")
    b.record(f"{label}.raw_copy_csv", Measurement([timed(copy_csv)]), rows, "rows")
    b.wh.execute(f"DROP TABLE {sink}")
    b.progress(f"{label}: run_backfill")
    with PeakMemory() as mem:
        seconds = timed(lambda: run_backfill(b.wh, b.pipeline, TABLE, str(parquet), "parquet", SNAPSHOT_TIME))
    b.record(label, Measurement([seconds]), rows, "rows")
    b.figures[f"{label}.peak_driver_memory_mb"] = mem.peak_mb
    return parquet


def backfill(b: Bench) -> None:
    """Part 3: backfill from a Parquet snapshot vs a raw COPY of the same rows from CSV;
    reconcile with counts only and with a checksum over all columns. Then both at a larger
    size: the cost per row beyond start-up is the difference of the two sizes' times over
    the difference of their rows."""
    from sync.operations.reconcile import run_reconcile  # type: ignore[import-not-found]

    rows, large = b.sizes.snapshot_rows, b.sizes.snapshot_rows_large
    columns = [c.target_name for c in b.pipeline.table(TABLE).columns]
    with tempfile.TemporaryDirectory(prefix="rs-bench-snapshot-") as tmp:
        parquet = _backfill_and_copy(b, "backfill", rows, Path(tmp))
        b.progress("reconcile: counts only")
        b.record(
            "reconcile.counts",
            Measurement([timed(lambda: run_reconcile(b.wh, b.pipeline, TABLE, str(parquet), "parquet", SNAPSHOT_TIME))]),
        )
        b.progress("reconcile: checksum over all columns")
        b.record(
            "reconcile.checksum",
            Measurement(
                [timed(lambda: run_reconcile(b.wh, b.pipeline, TABLE, str(parquet), "parquet", SNAPSHOT_TIME, checksum=columns))]
            ),
        )
        # The first backfill started Spark: the small size again, warm, for the per-row cost.
        from sync.operations.backfill import run_backfill  # type: ignore[import-not-found]

        reset(b.wh, b.rel)
        b.progress("backfill: run_backfill again, Spark started")
        b.record(
            "backfill.warm",
            Measurement([timed(lambda: run_backfill(b.wh, b.pipeline, TABLE, str(parquet), "parquet", SNAPSHOT_TIME))]),
            rows,
            "rows",
        )
    with tempfile.TemporaryDirectory(prefix="rs-bench-snapshot-") as tmp:
        _backfill_and_copy(b, "backfill.large", large, Path(tmp))
    b.figures.pop("backfill.large.peak_driver_memory_mb")
    f = b.figures
    for name, small in (("backfill", "backfill.warm"), ("backfill.raw_copy_csv", "backfill.raw_copy_csv")):
        large_name = name.replace("backfill", "backfill.large", 1)
        f[f"{name}.us_per_row_beyond_start"] = (f[f"{large_name}.seconds"] - f[f"{small}.seconds"]) / (large - rows) * 1e6
    f["backfill.ratio_per_row_copy"] = f["backfill.us_per_row_beyond_start"] / f["backfill.raw_copy_csv.us_per_row_beyond_start"]
    b.figures["backfill.ratio_backfill_copy"] = b.figures["backfill.seconds"] / b.figures["backfill.raw_copy_csv.seconds"]
    b.figures["reconcile.ratio_counts_backfill"] = b.figures["reconcile.counts.seconds"] / b.figures["backfill.seconds"]
    b.notes.append("backfill/reconcile: one run each (a Spark job per run); peak memory is the driver process and its children")

"""What a run reports: the figures it must produce, the targets, the printed table and
the JSON document."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.measure import cpu_figure
from benchmarks.sizes import Sizes

INCREMENTAL = ("generated_procedure", "seed_blog_pattern", "per_row_upsert", "apply_floor", "raw_copy", "decode_floor")
RATIO_LETTERS = "bcdef"  # (a) against each of the others, by their letters
LABELS = {
    "generated_procedure": "(a) incremental_sync_customer(), as generated",
    "seed_blog_pattern": "(b) seed-blog pattern (ts_ms RANK, refresh_time watermark)",
    "per_row_upsert": "(c) per-row upsert/delete, batches of 500, pipelined",
    "apply_floor": "(d) apply floor: DELETE USING + INSERT of final rows",
    "raw_copy": "(e) raw COPY into an empty unlogged table",
    "decode_floor": "(f) decode floor: INSERT ... SELECT of the typed events",
}


@dataclass(frozen=True)
class Target:
    figure: str
    limit: float
    text: str
    strict: bool = False  # "<" instead of "<="

    def met(self, value: float) -> bool:
        return value < self.limit if self.strict else value <= self.limit


TARGETS = (
    Target("incremental.ratio_a_c", 0.33, "a/c <= 0.33 (3x faster than pipelined per-row upserts)"),
    Target("incremental.ratio_a_b", 0.75, "a/b <= 0.75 (faster than the seed-blog pattern)"),
    Target("incremental.ratio_a_d", 1.3, "a/d <= 1.3 (close to the apply floor)"),
    Target("incremental.ratio_a_f", 1.8, "a/f <= 1.8 (the whole merge under twice a bare decode)"),
    Target("scaling.ratio_largest_smallest", 1.5, "largest/smallest target <= 1.5"),
    Target("history.ratio_history_current", 1.6, "history + current state <= 1.6x current state alone"),
    Target("empty_sync.seconds", 0.050, "empty sync < 50 ms with the retained records", strict=True),
    Target("ingest.ratio_ingest_copy", 3.0, "ingest <= 3x a raw COPY of the same records"),
    Target("backfill.ratio_backfill_copy", 2.5, "backfill <= 2.5x the raw COPY"),
    Target("backfill.ratio_per_row_copy", 4.0, "backfill cost per row beyond start-up <= 4x the raw COPY's"),
    Target("reconcile.ratio_counts_backfill", 1.0, "reconcile (counts) <= 1x the backfill"),
)


def expected_figures(sizes: Sizes, phases: Sequence[str], with_backfill: bool) -> list[str]:
    """Every figure the selected phases produce."""
    names = []
    if "incremental" in phases:
        for name in INCREMENTAL:
            names += [f"incremental.{name}.seconds", f"incremental.{name}.events_per_second"]
        names += [f"incremental.ratio_a_{x}" for x in RATIO_LETTERS]
    if "scaling" in phases:
        for m in sizes.scaling_targets:
            for name in ("generated_procedure", "apply_floor"):
                names += [f"scaling.target_{m}.{name}.seconds", f"scaling.target_{m}.{name}.events_per_second"]
        names += ["scaling.ratio_largest_smallest", "scaling.floor_ratio_largest_smallest"]
    if "empty-sync" in phases:
        names += ["empty_sync.seconds", "empty_sync.max_seconds"]
    if "ingest" in phases:
        for name in ("ingest", "raw_copy"):
            names += [f"ingest.{name}.seconds", f"ingest.{name}.records_per_second"]
        names += ["ingest.megabytes_per_second", "ingest.ratio_ingest_copy"]
    if "history" in phases:
        for part in ("", "lagging.", "placeholders."):
            for name in ("current_state", "with_history"):
                names += [f"history.{part}{name}.seconds", f"history.{part}{name}.events_per_second"]
        names += ["history.ratio_history_current", "history.ratio_lagging_partition", "history.ratio_stored_placeholders"]
    if with_backfill:
        names += [
            "backfill.raw_copy_csv.seconds",
            "backfill.raw_copy_csv.rows_per_second",
            "backfill.seconds",
            "backfill.rows_per_second",
            "backfill.peak_driver_memory_mb",
            "backfill.ratio_backfill_copy",
            "reconcile.counts.seconds",
            "reconcile.checksum.seconds",
            "reconcile.ratio_counts_backfill",
            "backfill.warm.seconds",
            "backfill.warm.rows_per_second",
            "backfill.large.raw_copy_csv.seconds",
            "backfill.large.raw_copy_csv.rows_per_second",
            "backfill.large.seconds",
            "backfill.large.rows_per_second",
            "backfill.raw_copy_csv.us_per_row_beyond_start",
            "backfill.us_per_row_beyond_start",
            "backfill.ratio_per_row_copy",
        ]
    return names


def target_results(figures: dict[str, float]) -> list[dict]:
    return [
        {
            "figure": t.figure,
            "target": t.text,
            "limit": t.limit,
            "value": figures.get(t.figure),
            "met": t.met(figures[t.figure]) if t.figure in figures else None,
        }
        for t in TARGETS
    ]


def _seconds(value: float) -> str:
    return f"{value * 1000:,.1f} ms" if value < 1 else f"{value:,.2f} s"


def _cpu(f: dict, name: str) -> str:
    value = f.get(f"{name}.cpu_seconds")
    return f"cpu {_seconds(value):>9}" if value is not None else ""


def _ratios(f: dict, figures: Sequence[tuple[str, str]]) -> str:
    wall = "  ".join(f"{label} = {f[name]:.2f}" for label, name in figures)
    cpu = "  ".join(f"{label} = {f[cpu_figure(name)]:.2f}" for label, name in figures if cpu_figure(name) in f)
    return f"   wall ratios: {wall}" + (f"\n   cpu ratios:  {cpu}" if cpu else "")


def _incremental_lines(f: dict, inputs: dict) -> list[str]:
    lines = [
        f"1. Incremental sync: {inputs['events']:,} events into {inputs['target_rows']:,} rows (median of {inputs['repeats']})"
    ]
    for name in INCREMENTAL:
        key = f"incremental.{name}"
        lines.append(
            f"   {LABELS[name]:<62} {_seconds(f[f'{key}.seconds']):>11} "
            f"{f[f'{key}.events_per_second']:>12,.0f} events/s   {_cpu(f, key)}"
        )
    lines.append(_ratios(f, [(f"a/{x}", f"incremental.ratio_a_{x}") for x in RATIO_LETTERS]))
    return lines


def _breakdown_lines(breakdown: list[dict], shown: int = 6) -> list[str]:
    lines = ["   where (a) spends its time (one timestamped call; `python -m benchmarks.profile` for all statements):"]
    for row in breakdown[:shown]:
        lines.append(f"   {_seconds(row['seconds']):>11} {100 * row['share']:5.1f} %  {row['statement'][:72]}")
    return lines


def _scaling_lines(f: dict, inputs: dict) -> list[str]:
    lines = [f"2. Scaling: {inputs['scaling_events']:,} events against targets of growing size (median of {inputs['repeats']})"]
    for m in inputs["scaling_targets"]:
        proc, floor = f"scaling.target_{m}.generated_procedure", f"scaling.target_{m}.apply_floor"
        lines.append(
            f"   target {m:>11,} rows: procedure {_seconds(f[f'{proc}.seconds']):>11} {_cpu(f, proc)}"
            f"   apply floor {_seconds(f[f'{floor}.seconds']):>11} {_cpu(f, floor)}"
        )
    lines.append(
        _ratios(
            f,
            [
                ("largest/smallest: procedure", "scaling.ratio_largest_smallest"),
                ("apply floor", "scaling.floor_ratio_largest_smallest"),
            ],
        )
    )
    return lines


def _backfill_lines(f: dict, inputs: dict) -> list[str]:
    return [
        f"3. Backfill and reconcile: a {inputs['snapshot_rows']:,}-row Parquet snapshot (one run each)",
        f"   raw COPY from CSV {_seconds(f['backfill.raw_copy_csv.seconds'])}, backfill {_seconds(f['backfill.seconds'])} "
        f"(ratio {f['backfill.ratio_backfill_copy']:.2f}), peak driver memory {f['backfill.peak_driver_memory_mb']:,.0f} MB",
        f"   reconcile: counts {_seconds(f['reconcile.counts.seconds'])} (ratio to backfill "
        f"{f['reconcile.ratio_counts_backfill']:.2f}), checksum over all columns {_seconds(f['reconcile.checksum.seconds'])}",
    ]


def table(doc: dict) -> str:
    """The run as readable text."""
    f, inputs = doc["figures"], doc["inputs"]
    lines = [f"redshift-sync benchmarks on {doc['engine']} ({doc['machine']['cpu']}, {doc['machine']['logical_cpus']} CPUs)", ""]
    if "incremental.ratio_a_b" in f:
        lines += [*_incremental_lines(f, inputs), *_breakdown_lines(doc.get("breakdown", [])), ""]
    if "scaling.ratio_largest_smallest" in f:
        lines += _scaling_lines(f, inputs)
    if "empty_sync.seconds" in f:
        lines.append(
            f"   empty sync with {inputs['retained']:,} applied records retained: "
            f"{_seconds(f['empty_sync.seconds'])} (max {_seconds(f['empty_sync.max_seconds'])})"
        )
    if "ingest.ratio_ingest_copy" in f:
        lines.append(
            f"   ingest of {inputs['ingest_records']:,} records: {_seconds(f['ingest.ingest.seconds'])} "
            f"({f['ingest.ingest.records_per_second']:,.0f} records/s, {f['ingest.megabytes_per_second']:,.1f} MB/s); "
            f"raw COPY of the same rows {_seconds(f['ingest.raw_copy.seconds'])}; ratio {f['ingest.ratio_ingest_copy']:.2f}"
        )
    if "history.ratio_history_current" in f:
        lines.append(
            f"   history mode, {inputs['events']:,} events into {inputs['target_rows']:,} rows and versions: "
            f"current state {_seconds(f['history.current_state.seconds'])}, with history "
            f"{_seconds(f['history.with_history.seconds'])} ({f['history.ratio_history_current']:.2f}x); "
            f"with one more record from a lagging partition {f['history.ratio_lagging_partition']:.2f}x; "
            f"with a tenth of the stored versions holding a TOAST placeholder {f['history.ratio_stored_placeholders']:.2f}x"
        )
    lines.append("")
    if "backfill" in doc["skipped"]:
        lines.append(f"3. Backfill and reconcile: {doc['skipped']['backfill']}")
    else:
        lines += _backfill_lines(f, inputs)
    lines += ["", "Targets"]
    for t in doc["targets"]:
        state = "not measured" if t["met"] is None else ("met" if t["met"] else "MISSED")
        value = "" if t["value"] is None else (_seconds(t["value"]) if t["figure"].endswith(".seconds") else f"{t['value']:.3f}")
        lines.append(f"   {t['target']:<52} {value:>9}  {state}")
    if doc["notes"]:
        lines.append("")
        lines += [f"Note: {n}" for n in doc["notes"]]
    return "\n".join(lines)


def write_json(doc: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")

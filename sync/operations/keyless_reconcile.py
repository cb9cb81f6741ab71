"""`redshift-sync reconcile` of a table without a primary key: the snapshot and the target
compared as multisets of rows, by row hash (docs/correctness.md, "Backfill and reconcile of
a table without a primary key").

Per bucket of row hashes the counts and hash sums are compared; the buckets that differ are
opened: per row hash, the copies the snapshot holds and the copies the target holds. Copies
the target lacks are missing, copies it has beyond the snapshot's are extra. What the
stream explains, when the snapshot has one source position P:
- extra copies the stream wrote at or after P;
- missing copies while their number is at most the changes the stream applied at or after
  P (each removed at most one row; without a key, which one cannot be said).
"""

from __future__ import annotations

import typing as t
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from sync.config import Pipeline
from sync.operations.reconcile import MAX_LISTED, Difference, Verdict
from sync.sql.keyless_reconcile import KeylessReconcileSql
from sync.warehouse import Warehouse

Progress = Callable[[str], None]


@dataclass
class RowDiff:
    row_hash: str
    kind: Difference  # missing or extra
    copies: int  # how many copies of the row differ
    explained: bool
    why: str
    row: dict[str, t.Any] = field(default_factory=dict)


@dataclass
class KeylessReconcileReport(Verdict):
    table: str
    buckets: int
    snapshot_position: str | None = None  # the snapshot's one source position, if it has one
    snapshot_rows: int = 0
    warehouse_rows: int = 0
    mismatched_buckets: list[int] = field(default_factory=list)
    differences: list[RowDiff] = field(default_factory=list)
    rejected: int = 0

    def copies(self, kind: Difference) -> int:
        return sum(d.copies for d in self.differences if d.kind is kind)

    def as_dict(self) -> dict:
        out = self.verdict_dict(MAX_LISTED * 2)
        out["missing"] = self.copies(Difference.MISSING)
        out["extra"] = self.copies(Difference.EXTRA)
        return out


def compare_copies(
    snapshot: dict[str, tuple[int, dict]],
    warehouse: dict[str, tuple[int, int, dict]],
    changes_after: int | None,
) -> list[RowDiff]:
    """Row hash -> (copies, values) in the snapshot, and (copies, copies the stream wrote
    at or after the snapshot's position, values) in the warehouse; `changes_after`: the
    changes the stream applied at or after it (None: the snapshot has no one position)."""
    diffs: list[RowDiff] = []
    for h in sorted(set(snapshot) | set(warehouse)):
        held, streamed, held_row = warehouse.get(h, (0, 0, {}))
        wanted, wanted_row = snapshot.get(h, (0, {}))
        if held > wanted:
            explained = held - wanted <= streamed
            why = "written by the stream after the snapshot" if explained else "not in the snapshot"
            diffs.append(RowDiff(h, Difference.EXTRA, held - wanted, explained, why, held_row))
        elif wanted > held:
            diffs.append(RowDiff(h, Difference.MISSING, wanted - held, False, "not in the warehouse", wanted_row))
    missing = [d for d in diffs if d.kind is Difference.MISSING]
    if changes_after and sum(d.copies for d in missing) <= changes_after:
        for d in missing:
            d.explained, d.why = True, f"removed by one of the {changes_after} changes the stream applied after the snapshot"
    return diffs


def _values(row: t.Any, names: list[str]) -> dict[str, t.Any]:
    return {name: row[name] for name in names}


def run_keyless_reconcile(
    wh: Warehouse,
    pipeline: Pipeline,
    table_name: str,
    snapshot: str,
    fmt: str,
    snapshot_time: datetime | None = None,
    buckets: int = 64,
    spark: t.Any = None,
    progress: Progress = lambda _: None,
) -> KeylessReconcileReport:
    from pyspark.sql import functions as F

    from backfill.keyless import row_bucket_counts, with_row_buckets
    from sync.operations.backfill import prepared_snapshot

    table = pipeline.table(table_name)
    sql = KeylessReconcileSql(wh.dialect.bind_schema(pipeline.schema), pipeline, table, buckets)
    names = [c.target_name for c in table.columns]
    report = KeylessReconcileReport(table.name, buckets)
    with prepared_snapshot(table, snapshot, fmt, snapshot_time, spark, progress) as (prepared, _):
        hashed = with_row_buckets(prepared.rows, table, buckets).cache()
        positions = prepared.rows.agg(F.count_distinct("_source_pos"), F.count("_source_pos"), F.count(F.lit(1))).first()
        report.rejected = prepared.rejected()
        snap = {int(r["bucket"]): (int(r["rows"]), int(r["checksum"])) for r in row_bucket_counts(hashed).collect()}
        if positions[0] == 1 and positions[1] == positions[2]:
            report.snapshot_position = prepared.rows.agg(F.max("_source_pos")).first()[0]
        report.snapshot_rows = sum(c for c, _ in snap.values())
        progress(f"snapshot: {report.snapshot_rows:,} rows in {len(snap)} buckets")
        held = {int(b): (int(c), int(s)) for b, c, s in wh.query(sql.bucket_counts())}
        report.warehouse_rows = sum(c for c, _ in held.values())
        progress(f"warehouse: {report.warehouse_rows:,} rows in {len(held)} buckets")
        report.mismatched_buckets = sorted(b for b in set(snap) | set(held) if snap.get(b) != held.get(b))
        if report.mismatched_buckets:
            progress(f"{len(report.mismatched_buckets)} bucket(s) differ; listing their rows")
            opened = hashed.where(F.col("bucket").isin(report.mismatched_buckets)).groupBy("row_hash", *names).count()
            snapshot_copies = {r["row_hash"]: (int(r["count"]), _values(r, names)) for r in opened.toLocalIterator()}
            warehouse_copies = {
                r[0]: (int(r[-2]), int(r[-1]), dict(zip(names, r[1:-2], strict=True)))
                for r in wh.query(sql.bucket_rows(report.mismatched_buckets, report.snapshot_position))
            }
            position = report.snapshot_position
            changes = int(wh.scalar(sql.changes_after(position))) if position is not None else None
            report.differences = compare_copies(snapshot_copies, warehouse_copies, changes)
        hashed.unpersist()
    return report

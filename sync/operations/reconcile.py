"""`redshift-sync reconcile`: compare a snapshot with the warehouse table.

Counts (and optional checksums) per key bucket on both sides; the buckets that differ are
opened up to name the keys: missing in the warehouse, extra in the warehouse, or changed.
A difference the stream explains (the warehouse row, or its delete, is newer than the
snapshot row, or of unknown age, by the rule the backfill's merge keeps it by:
`sync/sql/handover.py`) is reported apart and is not an error.
"""

from __future__ import annotations

import typing as t
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import StrEnum

from sync.config import ColumnConfig, Pipeline, TableConfig
from sync.keyless_config import refuse_keyless
from sync.sql.buckets import ReconcileSql
from sync.sql.handover import STREAMS, Recency, Stamp, recency
from sync.warehouse import Warehouse

Progress = Callable[[str], None]
MAX_LISTED = 1000  # keys listed per kind in the report


class Difference(StrEnum):
    MISSING = "missing"  # live in the snapshot, absent or deleted in the warehouse
    EXTRA = "extra"  # live in the warehouse, absent from the snapshot
    CHANGED = "changed"  # live in both, checksums differ


@dataclass
class KeyDiff:
    key: str
    kind: Difference
    explained: bool
    why: str
    snapshot_ts: str | None = None
    warehouse_ts: str | None = None
    columns: list[str] = field(default_factory=list)  # changed: the checksum columns whose values differ


class Verdict:
    """What a report's `differences` (each `explained` or not) and `rejected` rows say: the
    keyed report's and the keyless one's (sync/operations/keyless_reconcile.py)."""

    differences: list
    rejected: int

    @property
    def unexplained(self) -> list:
        return [d for d in self.differences if not d.explained]

    @property
    def explained(self) -> list:
        return [d for d in self.differences if d.explained]

    @property
    def clean(self) -> bool:
        return not self.unexplained and self.rejected == 0

    def verdict_dict(self, listed: int) -> dict:
        """The report as JSON: its first `listed` differences, and the verdict's counts."""
        out = asdict(self)  # the reports are dataclasses
        out["differences"] = [asdict(d) for d in self.differences[:listed]]
        out["unexplained"] = len(self.unexplained)
        out["explained"] = len(self.explained)
        out["clean"] = self.clean
        return out


@dataclass
class ReconcileReport(Verdict):
    table: str
    buckets: int
    checksum_columns: list[str]
    snapshot_rows: int = 0
    warehouse_rows: int = 0
    mismatched_buckets: list[int] = field(default_factory=list)
    differences: list[KeyDiff] = field(default_factory=list)
    rejected: int = 0

    def as_dict(self) -> dict:
        return self.verdict_dict(MAX_LISTED * 3)


def checksum_columns(table: TableConfig, names: list[str]) -> list[ColumnConfig]:
    cols = []
    for name in names:
        col = table.column_by_any_name(name)
        if col is None:
            raise ValueError(f"--checksum: {name!r} is not a column of table {table.name!r}")
        cols.append(col)
    return cols


def _ts(v: t.Any) -> str | None:
    return None if v is None else str(v)


# Why a difference is there, by its kind and the warehouse side's recency (handover.py).
WHY = {
    Difference.MISSING: (
        "deleted by the stream after the snapshot",
        "deleted by the stream, at an unknown time",
        "not in the warehouse",
    ),
    Difference.EXTRA: (
        "written by the stream after the snapshot",
        "written by the stream, at an unknown time",
        "not in the snapshot",
    ),
    Difference.CHANGED: (
        "changed by the stream after the snapshot",
        "changed by the stream, at an unknown time",
        "values differ",
    ),
}


def _diff(key: str, kind: Difference, held: Stamp | None, snap: Stamp) -> KeyDiff:
    """A difference, explained when the stream's side is newer than the snapshot's or of
    unknown age: the backfill's merge keeps the warehouse's side for the same reason."""
    age = recency(held, snap) if held is not None else None
    newer, unknown, real = WHY[kind]
    why = newer if age is Recency.NEWER else unknown if age is Recency.UNKNOWN else real
    shown = None if kind is Difference.EXTRA else _ts(snap.time)  # an extra key's is the cutoff
    return KeyDiff(key, kind, age in STREAMS, why, shown, _ts(held.time) if held else None)


def compare_rows(
    snapshot: dict[str, tuple[str, Stamp]],
    warehouse: dict[str, tuple[str | None, Stamp, bool]],
    cutoff: datetime | None,
    use_checksum: bool,
) -> list[KeyDiff]:
    """Keys of the mismatched buckets: snapshot key -> (checksum, stamp); warehouse key ->
    (checksum, stamp, deleted), its stamp's time the one the merge dates it by. `cutoff`
    is the snapshot time for keys the snapshot does not have."""
    diffs: list[KeyDiff] = []
    for key in sorted(set(snapshot) | set(warehouse)):
        s = snapshot.get(key)
        w = warehouse.get(key)
        if s is not None and (w is None or w[2]):
            diffs.append(_diff(key, Difference.MISSING, w[1] if w else None, s[1]))
        elif s is None and w is not None and not w[2]:
            diffs.append(_diff(key, Difference.EXTRA, w[1], Stamp(None, cutoff)))
        elif s is not None and w is not None and use_checksum and s[0] != w[0]:
            diffs.append(_diff(key, Difference.CHANGED, w[1], s[1]))
    return diffs


def warehouse_rows(wh: Warehouse, sql: ReconcileSql, buckets: list[int]) -> dict[str, tuple[str | None, Stamp, bool]]:
    """The warehouse's keys of `buckets`, as `compare_rows` takes them."""
    rows: dict[str, tuple[str | None, Stamp, bool]] = {}
    for key, chk, pos, held_time, deleted in wh.query(sql.bucket_rows(buckets)):
        if key not in rows or not deleted:  # a live row wins over a remembered delete
            rows[key] = (chk, Stamp(pos, held_time), bool(deleted))
    return rows


def name_changed_columns(
    wh: Warehouse,
    pipeline: Pipeline,
    table: TableConfig,
    rows: t.Any,
    buckets: int,
    mismatched: list[int],
    cols: list[ColumnConfig],
    differences: list[KeyDiff],
) -> None:
    """Name the columns of each unexplained changed key whose values differ: the row
    checksums of the mismatched buckets again, one checksum column at a time."""
    from pyspark.sql import functions as F

    from backfill.reconcile import with_buckets

    changed = {d.key: d for d in differences if d.kind == "changed" and not d.explained}
    if not changed:
        return
    for col in cols:
        sql = ReconcileSql(wh.dialect.bind_schema(pipeline.schema), pipeline, table, buckets, [col])
        stored = {key: chk for key, chk, *_, deleted in wh.query(sql.bucket_rows(mismatched)) if not deleted}
        keyed = with_buckets(rows, table, buckets, [col]).where(F.col("bucket").isin(mismatched))
        for r in keyed.select("key_text", "checksum").toLocalIterator():
            diff = changed.get(r["key_text"])
            if diff is not None and stored.get(r["key_text"]) != r["checksum"]:
                diff.columns.append(col.target_name)
    for diff in changed.values():
        if diff.columns:
            diff.why = f"values differ in {', '.join(diff.columns)}"


def run_reconcile(
    wh: Warehouse,
    pipeline: Pipeline,
    table_name: str,
    snapshot: str,
    fmt: str,
    snapshot_time: datetime | None = None,
    buckets: int = 64,
    checksum: list[str] | None = None,
    spark: t.Any = None,
    progress: Progress = lambda _: None,
) -> ReconcileReport:
    refuse_keyless(pipeline.table(table_name), "reconcile")
    from pyspark.sql import functions as F

    from backfill.reconcile import bucket_counts, with_buckets
    from sync.operations.backfill import prepared_snapshot

    table = pipeline.table(table_name)
    cols = checksum_columns(table, checksum or [])
    sql = ReconcileSql(wh.dialect.bind_schema(pipeline.schema), pipeline, table, buckets, cols)
    report = ReconcileReport(table.name, buckets, [c.target_name for c in cols])
    with prepared_snapshot(table, snapshot, fmt, snapshot_time, spark, progress) as (prepared, _):
        keyed = with_buckets(prepared.rows, table, buckets, cols).cache()
        snap_counts = {
            int(r["bucket"]): (int(r["rows"]), int(r["checksum"] or 0)) for r in bucket_counts(keyed, bool(cols)).collect()
        }
        report.rejected = prepared.rejected()
        report.snapshot_rows = sum(c for c, _ in snap_counts.values())
        progress(f"snapshot: {report.snapshot_rows:,} rows in {len(snap_counts)} buckets")
        wh_counts = {int(b): (int(c), int(s or 0)) for b, c, s in wh.query(sql.bucket_counts())}
        report.warehouse_rows = sum(c for c, _ in wh_counts.values())
        progress(f"warehouse: {report.warehouse_rows:,} rows in {len(wh_counts)} buckets")
        mismatched = sorted(b for b in set(snap_counts) | set(wh_counts) if snap_counts.get(b) != wh_counts.get(b))
        report.mismatched_buckets = mismatched
        if mismatched:
            progress(f"{len(mismatched)} bucket(s) differ; listing their keys")
            snap_rows = {
                r["key_text"]: (r["checksum"], Stamp(r["_source_pos"], r["_source_ts"]))
                for r in keyed.where(F.col("bucket").isin(mismatched))
                .select("key_text", "checksum", "_source_pos", "_source_ts")
                .toLocalIterator()
            }
            wh_rows = warehouse_rows(wh, sql, mismatched)
            cutoff = snapshot_time or keyed.agg(F.max("_source_ts")).first()[0]
            report.differences = compare_rows(snap_rows, wh_rows, cutoff, bool(cols))
            name_changed_columns(wh, pipeline, table, prepared.rows, buckets, mismatched, cols, report.differences)
        keyed.unpersist()
    return report

"""`redshift-sync reconcile`: compare a snapshot with the warehouse table.

Counts (and optional checksums) per key bucket on both sides; the buckets that differ are
opened up to name the keys: missing in the warehouse, extra in the warehouse, or changed.
A difference the stream explains (the warehouse row, or its delete, is newer than the
snapshot row) is reported apart and is not an error.
"""

from __future__ import annotations

import typing as t
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime

from sync.config import ColumnConfig, Pipeline, TableConfig
from sync.sql.buckets import ReconcileSql
from sync.warehouse import Warehouse

Progress = Callable[[str], None]
MAX_LISTED = 1000  # keys listed per kind in the report


@dataclass
class KeyDiff:
    key: str
    kind: str  # missing | extra | changed
    explained: bool
    why: str
    snapshot_ts: str | None = None
    warehouse_ts: str | None = None
    columns: list[str] = field(default_factory=list)  # changed: the checksum columns whose values differ


@dataclass
class ReconcileReport:
    table: str
    buckets: int
    checksum_columns: list[str]
    snapshot_rows: int = 0
    warehouse_rows: int = 0
    mismatched_buckets: list[int] = field(default_factory=list)
    differences: list[KeyDiff] = field(default_factory=list)
    rejected: int = 0

    @property
    def unexplained(self) -> list[KeyDiff]:
        return [d for d in self.differences if not d.explained]

    @property
    def explained(self) -> list[KeyDiff]:
        return [d for d in self.differences if d.explained]

    @property
    def clean(self) -> bool:
        return not self.unexplained and self.rejected == 0

    def as_dict(self) -> dict:
        out = asdict(self)
        out["differences"] = [asdict(d) for d in self.differences[: MAX_LISTED * 3]]
        out["unexplained"] = len(self.unexplained)
        out["explained"] = len(self.explained)
        out["clean"] = self.clean
        return out


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


def compare_rows(
    snapshot: dict[str, tuple[str, datetime | None]],
    warehouse: dict[str, tuple[str | None, datetime | None, bool]],
    cutoff: datetime | None,
    use_checksum: bool,
) -> list[KeyDiff]:
    """Keys of the mismatched buckets: snapshot key -> (checksum, source ts); warehouse key
    -> (checksum, source ts, deleted). `cutoff` is the snapshot time for keys the snapshot
    does not have."""
    diffs: list[KeyDiff] = []
    for key in sorted(set(snapshot) | set(warehouse)):
        s = snapshot.get(key)
        w = warehouse.get(key)
        if s is not None and (w is None or w[2]):
            newer = w is not None and w[1] is not None and s[1] is not None and w[1] > s[1]
            why = "deleted by the stream after the snapshot" if newer else "not in the warehouse"
            diffs.append(KeyDiff(key, "missing", newer, why, _ts(s[1]), _ts(w[1]) if w else None))
        elif s is None and w is not None and not w[2]:
            newer = w[1] is not None and cutoff is not None and w[1] > cutoff
            why = "written by the stream after the snapshot" if newer else "not in the snapshot"
            diffs.append(KeyDiff(key, "extra", newer, why, None, _ts(w[1])))
        elif s is not None and w is not None and use_checksum and s[0] != w[0]:
            newer = w[1] is not None and s[1] is not None and w[1] > s[1]
            why = "changed by the stream after the snapshot" if newer else "values differ"
            diffs.append(KeyDiff(key, "changed", newer, why, _ts(s[1]), _ts(w[1])))
    return diffs


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
        stored = {key: chk for key, chk, _, deleted in wh.query(sql.bucket_rows(mismatched)) if not deleted}
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
                r["key_text"]: (r["checksum"], r["_source_ts"])
                for r in keyed.where(F.col("bucket").isin(mismatched))
                .select("key_text", "checksum", "_source_ts")
                .toLocalIterator()
            }
            wh_rows: dict[str, tuple] = {}
            for key, chk, ts, deleted in wh.query(sql.bucket_rows(mismatched)):
                if key not in wh_rows or not deleted:  # a live row wins over a remembered delete
                    wh_rows[key] = (chk, ts, bool(deleted))
            cutoff = snapshot_time or keyed.agg(F.max("_source_ts")).first()[0]
            report.differences = compare_rows(snap_rows, wh_rows, cutoff, bool(cols))
            name_changed_columns(wh, pipeline, table, prepared.rows, buckets, mismatched, cols, report.differences)
        keyed.unpersist()
    return report

"""Workload sizes of a full run and of the `--quick` smoke run."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Sizes:
    events: int  # N: events in the incremental batch
    target_rows: int  # M: rows in the target before the batch
    scaling_events: int  # the batch of the scaling series
    scaling_targets: tuple[int, ...]  # target sizes of the scaling series, smallest first
    retained: int  # already-applied records kept in the stream for the empty sync
    snapshot_rows: int  # rows of the backfill snapshot
    snapshot_rows_large: int  # rows of the second snapshot: the cost per row beyond start-up
    repeats: int  # runs of each measurement (the median is reported)
    empty_repeats: int  # runs of the (fast) empty sync
    ingest_records: int  # records of the events file `ingest` reads (part 4)
    upsert_batch: int = 500  # statements per batch of the per-row upsert baseline

    def as_dict(self) -> dict:
        return asdict(self)


FULL = Sizes(
    events=100_000,
    target_rows=1_000_000,
    scaling_events=50_000,
    scaling_targets=(100_000, 1_000_000, 5_000_000),
    retained=1_000_000,
    snapshot_rows=2_000_000,
    snapshot_rows_large=10_000_000,
    repeats=5,
    empty_repeats=9,
    ingest_records=200_000,
)

QUICK = Sizes(
    events=2_000,
    target_rows=10_000,
    scaling_events=1_000,
    scaling_targets=(2_000, 20_000),
    retained=20_000,
    snapshot_rows=10_000,
    snapshot_rows_large=100_000,
    repeats=2,
    empty_repeats=3,
    ingest_records=3_000,
)

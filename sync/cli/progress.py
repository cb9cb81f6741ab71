"""How far a long `ingest` is: a progress bar (records, MB/s, time left) on a terminal, a
line every few seconds otherwise (a CI log, a pipe), on standard error."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from sync.cli.report import readable_seconds

LINE_EVERY_SECONDS = 10.0


class ProgressLines:
    """`update(records, bytes)` prints a line when `every` seconds have passed since the
    last one (never for a read that ends before the first period)."""

    def __init__(self, console: Console, total_bytes: int, every: float, clock: Callable[[], float] = time.monotonic):
        self.console, self.total, self.every, self.clock = console, total_bytes, every, clock
        self.started = self.last = clock()

    def update(self, records: int, consumed: int) -> None:
        now = self.clock()
        if now - self.last < self.every:
            return
        self.last = now
        elapsed = max(now - self.started, 1e-9)
        speed = consumed / elapsed
        left = (self.total - consumed) / speed if speed > 0 else None
        share = f" ({100 * consumed / self.total:.0f} %)" if self.total else ""
        self.console.print(
            f"ingest: {records:,} records, {consumed / 1e6:,.1f} of {self.total / 1e6:,.1f} MB{share}, "
            f"{speed / 1e6:,.1f} MB/s, {readable_seconds(left)} left",
            highlight=False,
        )


@contextmanager
def ingest_progress(
    console: Console, total_bytes: int, every: float = LINE_EVERY_SECONDS
) -> Iterator[Callable[[int, int], None]]:
    """The callback `ingest_file` reports to: a bar on a terminal, lines otherwise."""
    if not console.is_terminal:
        yield ProgressLines(console, total_bytes, every).update
        return
    columns = (
        TextColumn("ingest"),
        BarColumn(),
        TextColumn("{task.fields[records]:,} records"),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("ingest", total=total_bytes, records=0)
        yield lambda records, consumed: bar.update(task, completed=consumed, records=records)

"""Timing, memory and environment helpers: medians of repeated runs, the peak memory of
the driver (the process and its children, e.g. a Spark JVM), and a description of the
machine and the versions a run used."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from sync.warehouse import Warehouse

SERVER_SETTINGS = ("shared_buffers", "work_mem", "maintenance_work_mem", "max_wal_size", "synchronous_commit", "fsync", "jit")


@dataclass
class Measurement:
    """Repeated runs of one thing: wall-clock seconds (the figure) and, where the server's
    process can be read, CPU seconds of the server backend plus this driver process (less
    sensitive to other load on a shared machine)."""

    runs: list[float] = field(default_factory=list)
    cpu_runs: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    @property
    def cpu_median(self) -> float | None:
        return statistics.median(self.cpu_runs) if self.cpu_runs else None

    def add(self, wall: float, cpu: float | None) -> None:
        self.runs.append(wall)
        if cpu is not None:
            self.cpu_runs.append(cpu)

    def as_dict(self) -> dict:
        doc: dict = {"runs": [round(r, 6) for r in self.runs], "median": round(self.median, 6)}
        if self.cpu_runs:
            doc.update(cpu_runs=[round(r, 3) for r in self.cpu_runs], cpu_median=round(statistics.median(self.cpu_runs), 3))
        return doc


def cpu_figure(figure: str) -> str:
    """The name of a ratio's CPU counterpart: a.b.ratio_x -> a.b.cpu_ratio_x."""
    head, _, last = figure.rpartition(".")
    return f"{head}.cpu_{last}"


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


class Clock:
    """Times a callable: wall clock, and CPU of the server backend (read from /proc when
    the server runs on this machine, in clock ticks) plus this process."""

    def __init__(self, wh: Warehouse):
        stat = Path(f"/proc/{wh.scalar('SELECT pg_backend_pid()')}/stat")
        self._stat = stat if stat.exists() else None
        self._tick = os.sysconf("SC_CLK_TCK") if self._stat else 1

    def _cpu(self) -> float | None:
        if self._stat is None:
            return None
        try:
            fields = self._stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / self._tick + time.process_time()

    def time(self, fn: Callable[[], object]) -> tuple[float, float | None]:
        cpu0, wall0 = self._cpu(), time.perf_counter()
        fn()
        wall, cpu1 = time.perf_counter() - wall0, self._cpu()
        return wall, (cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None)

    def rolled_back(
        self, wh: Warehouse, fn: Callable[[], object], check: Callable[[], object] | None = None
    ) -> tuple[float, float | None, object]:
        """Time `fn` inside a transaction that is then rolled back, so every repeat starts
        from the same data; `check` (untimed) reads the result before the rollback. VACUUM
        ANALYZE afterwards clears what the aborted run left, so repeats are alike."""
        wh.execute("BEGIN")
        try:
            wall, cpu = self.time(fn)
            result = check() if check else None
        finally:
            wh.execute("ROLLBACK")
        wh.execute("VACUUM ANALYZE")
        return wall, cpu, result


class PeakMemory:
    """Samples the resident memory of this process and its children; `peak_mb` is the
    largest sum seen (psutil), or this process's own peak (getrusage) without psutil."""

    def __init__(self, interval: float = 0.05):
        self.interval = interval
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for proc in [me, *me.children(recursive=True)]:
                try:
                    total += proc.memory_info().rss
                except psutil.Error:
                    pass
            self.peak_bytes = max(self.peak_bytes, total)
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakMemory:
        try:
            import psutil  # noqa: F401
        except ImportError:
            return self
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()
        else:
            import resource

            self.peak_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    @property
    def peak_mb(self) -> float:
        return self.peak_bytes / 2**20


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gb() -> float | None:
    try:
        import psutil

        return round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        return None


def machine() -> dict:
    return {
        "cpu": _cpu_model(),
        "logical_cpus": os.cpu_count(),
        "memory_gb": _memory_gb(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
    }


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            cwd=Path(__file__).resolve().parent,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def versions(wh: Warehouse) -> dict:
    return {
        "postgresql": wh.scalar("SHOW server_version"),
        "redshift_sync": _version("redshift-sync"),
        "git_commit": _git_commit(),
        "psycopg": _version("psycopg"),
        "pgserver": _version("pgserver"),
        "pyspark": _version("pyspark"),
        "pyarrow": _version("pyarrow"),
    }


def server_settings(wh: Warehouse) -> dict:
    return {name: wh.scalar(f"SHOW {name}") for name in SERVER_SETTINGS}

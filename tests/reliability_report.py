"""Run the reliability and fuzz suites in one process and write their figures into
docs/correctness.md (between the `figures` markers):

    PYTHONPATH=. python -m tests.reliability_report

Each test adds what it tried and survived to `tests.reliability_support.COUNTS`; a
divergence is a failed test (a state that differs from the reference model, a crash,
a traceback). The exit code is pytest's.
"""

from __future__ import annotations

import platform
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.reliability_support import COUNTS

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "correctness.md"
SUITES = [
    "tests/test_reliability_histories.py",
    "tests/test_reliability_crash.py",
    "tests/test_reliability_concurrency.py",
    "tests/test_reliability_large.py",
    "tests/test_fuzz_events.py",
    "tests/test_fuzz_config.py",
    "tests/test_fuzz_ingest.py",
]
START, END = "<!-- figures:start -->", "<!-- figures:end -->"


class Outcomes:
    """A pytest plugin counting test outcomes."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or report.failed:
            self.counts[report.outcome] += 1


def figures_block(counts: Counter, outcomes: Counter, seconds: float) -> str:
    rows = [
        (
            "fault injections survived (SIGKILL of `sync`, backend terminate/kill, immediate server restart)",
            counts["fault injections survived"],
        ),
        ("... of which aborted a run in the middle", counts["fault injections that aborted a run"]),
        ("histories checked against the reference model", counts["histories checked"]),
        ("concurrent sync calls (4 callers + 1 ingest writer)", counts["concurrent sync calls"]),
        ("... that gave up waiting for the lock with a clear status", counts["lock waits that returned a clear failure"]),
        ("fuzz cases tried (records, input lines, pipeline files)", counts["fuzz cases tried"]),
        ("events in one sync (large batch)", counts["large batch: events in one sync"]),
        ("... seconds for that sync", counts["large batch: seconds"]),
        ("... peak memory of the server backend, MB", counts["large batch: peak backend memory MB"]),
        ("tests passed", outcomes["passed"]),
        ("divergences (failed tests)", outcomes["failed"]),
    ]
    table = "\n".join(f"| {what} | {value} |" for what, value in rows)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"{START}\n| figure | value |\n|---|---|\n{table}\n\n"
        f"Measured {stamp} on {platform.machine()} ({platform.python_implementation()} {platform.python_version()}), "
        f"{seconds:.0f} s in all, with `PYTHONPATH=. python -m tests.reliability_report`.\n{END}"
    )


def main(argv: list[str]) -> int:
    outcomes = Outcomes()
    started = time.perf_counter()
    code = pytest.main(["-q", "-p", "no:cacheprovider", *SUITES, *argv], plugins=[outcomes])
    block = figures_block(COUNTS, outcomes.counts, time.perf_counter() - started)
    text = DOC.read_text(encoding="utf-8")
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    DOC.write_text(head + block + tail, encoding="utf-8")
    print(block)
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

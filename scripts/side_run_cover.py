"""Which quick Spark tests a side venv runs (tests/spark_envs.py, `SIDE_RUN_TESTS`): runs
them once (one case of each, as a side venv does) under coverage.py with each test's
lines recorded apart, then prints a greedy
cover: the fewest tests that together run every line of backfill/ the quick tests run on
the driver. The property tests are listed by hand (hypothesis runs them under contexts of
its own). Needs coverage.py (`pip install coverage`); about five minutes:

    python scripts/side_run_cover.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from coverage import CoverageData

REPO = Path(__file__).resolve().parent.parent


def lines_by_test(data_file: Path) -> dict[str, set[tuple[str, int]]]:
    data = CoverageData(str(data_file))
    data.read()
    found: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for path in data.measured_files():
        for line, contexts in data.contexts_by_lineno(path).items():
            for context in filter(None, contexts):
                found[context].add((path, line))
    return found


def greedy_cover(found: dict[str, set[tuple[str, int]]]) -> list[str]:
    tests = {name: lines for name, lines in found.items() if name.startswith("tests.")}
    wanted, chosen = set().union(*tests.values()), []
    while wanted:
        best = max(tests, key=lambda name: len(tests[name] & wanted))
        chosen.append(best)
        wanted -= tests[best]
    return chosen


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rc, data_file = Path(tmp) / "coveragerc", Path(tmp) / "coverage.data"
        rc.write_text(f"[run]\nsource = backfill\ndynamic_context = test_function\ndata_file = {data_file}\n")
        env = {**os.environ, "REDSHIFT_SYNC_TEST_SPARK_SIDE_RUN": "cover"}
        pytest = ["-m", "pytest", "tests/spark", "-m", "not slow", "-q", "-p", "no:xdist", "-p", "no:cacheprovider"]
        subprocess.run([sys.executable, "-m", "coverage", "run", f"--rcfile={rc}", *pytest], cwd=REPO, env=env, check=True)
        for name in greedy_cover(lines_by_test(data_file)):
            module, function = name.rsplit(".", 1)
            print(f'    ("{module.rsplit(".", 1)[1]}.py", "{function}"),')


if __name__ == "__main__":
    main()

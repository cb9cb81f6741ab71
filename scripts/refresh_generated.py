"""Refresh every committed artefact of the generator after a deliberate change to it:

    .venv/bin/python scripts/refresh_generated.py

- sql/procedures/<example>/: the Redshift SQL of each example pipeline;
- the STATE (model and SQL fingerprints) of the example pipeline's first revision, so the
  repository's own migration history describes what the generator renders today (before a
  release; once released, a generator change becomes a new revision instead);
- the golden files of the test suite, and the conflict matrix of docs/redshift.md
  (UPDATE_GOLDEN=1 on the tests that keep them).

Review the diff afterwards: it is the change the generator makes to users' warehouses.
"""

from __future__ import annotations

import os
import pprint
import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sync.config import parse_pipeline  # noqa: E402
from sync.schema.state import state_for  # noqa: E402
from sync.sql.render import render_files, write_files  # noqa: E402

GOLDEN_TESTS = [
    "tests/test_migrations_sql.py",
    "tests/test_backfill_sql.py",
    "tests/test_column_fill.py",
    "tests/test_conflict_matrix.py",
    "tests/test_freshness.py",
    "tests/test_cost.py",
    "tests/test_explain_sql.py",
]


def refresh_procedures() -> None:
    for pipeline_path in sorted((REPO / "examples").glob("*/pipeline.toml")):
        pipeline = parse_pipeline(tomllib.loads(pipeline_path.read_text()))
        origin = str(pipeline_path.relative_to(REPO))
        out = REPO / "sql" / "procedures" / pipeline_path.parent.name
        for stale in out.glob("*.sql"):
            stale.unlink()
        for path in write_files(render_files(pipeline, "redshift", origin), out):
            print(f"wrote {path.relative_to(REPO)}")


def refresh_first_revision() -> None:
    versions = sorted((REPO / "migrations" / "versions").glob("*.py"))
    first = next((p for p in versions if "down_revision: Union[str, Sequence[str], None] = None" in p.read_text()), None)
    if first is None:
        return
    text = first.read_text()
    origin = re.search(r"STATE = \{'origin': '([^']+)'", text).group(1)
    pipeline = parse_pipeline(tomllib.loads((REPO / origin).read_text()))
    state = pprint.pformat(state_for(pipeline, origin), indent=1, width=100, sort_dicts=False)
    start = text.index("STATE = ")
    end = text.index("\n\n\ndef upgrade()")
    first.write_text(text[:start] + "STATE = " + state + text[end:])
    print(f"refreshed STATE of {first.relative_to(REPO)}")


def refresh_golden_files() -> None:
    tests = [t for t in GOLDEN_TESTS if (REPO / t).exists()]
    if tests:
        env = {**os.environ, "UPDATE_GOLDEN": "1"}
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", *tests], cwd=REPO, env=env, check=False)


if __name__ == "__main__":
    refresh_procedures()
    refresh_first_revision()
    refresh_golden_files()

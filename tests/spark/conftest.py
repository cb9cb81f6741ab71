"""A real local Spark session for the backfill and reconcile tests (one per xdist worker)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.spark_envs import SIDE_RUN_ENV_VAR, SIDE_RUN_TESTS


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a side venv (tests/test_spark_versions.py), the tests of `SIDE_RUN_TESTS`, one
    case of each: the cases of one test call the same Spark API with other data, and every
    test and case runs on the newest PySpark with the rest of the suite. `cover`: one case
    of every test (what scripts/side_run_cover.py chooses from)."""
    mode = os.environ.get(SIDE_RUN_ENV_VAR)
    if mode not in ("1", "cover"):
        return
    seen: set[tuple[str, str]] = set()
    kept, dropped = [], []
    for item in items:
        key = (item.path.name, getattr(item, "originalname", item.name))
        (kept if key not in seen and (mode == "cover" or key in SIDE_RUN_TESTS) else dropped).append(item)
        seen.add(key)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    os.environ["SPARK_TESTING"] = "1"
    from backfill.session import local_session

    session = local_session("local[2]", shuffle_partitions=2)
    yield session
    session.stop()

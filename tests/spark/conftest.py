"""A real local Spark session for the backfill and reconcile tests (one per xdist worker)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.spark_envs import SIDE_RUN_ENV_VAR


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a side venv (tests/test_spark_versions.py), one case of each parametrized test:
    the cases of one test call the same Spark API with other data, and every case runs on
    the newest PySpark with the rest of the suite."""
    if os.environ.get(SIDE_RUN_ENV_VAR) != "1":
        return
    seen: set[tuple[object, str]] = set()
    kept, dropped = [], []
    for item in items:
        key = (item.path, getattr(item, "originalname", item.name))
        (dropped if key in seen else kept).append(item)
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

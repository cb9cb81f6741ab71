"""A real local Spark session for the backfill and reconcile tests (one per xdist worker)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    os.environ["SPARK_TESTING"] = "1"
    from backfill.session import local_session

    session = local_session("local[2]", shuffle_partitions=2)
    yield session
    session.stop()

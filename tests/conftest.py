"""Shared fixtures: a real PostgreSQL per test session (pgserver, or REDSHIFT_SYNC_TEST_DSN),
a fresh database per test, the example pipeline, a local S3; and the Hypothesis profiles.
What tests import (paths, pipeline builders) lives in tests/helpers.py."""

from __future__ import annotations

import itertools
import os
import tempfile
import warnings
from collections.abc import Iterator

import pytest

from sync.config import Pipeline, parse_pipeline
from sync.operations.runner import deploy
from sync.warehouse import Warehouse, connect
from tests.helpers import EXAMPLES, fresh_database


def pytest_configure(config: pytest.Config) -> None:
    """With `-n` (pytest-xdist), idle workers steal tests from busy ones ("worksteal"),
    so a long file near the end does not leave the other worker idle. Set here, not in
    addopts: the side virtualenvs run tests/spark without pytest-xdist.

    Every Spark driver the suite starts (its sessions, spark-submit, the documents' and
    the demo's backfills; the launcher adds SPARK_SUBMIT_OPTS to the driver's JVM options)
    compiles with the JVM's first tier only: the suite's Spark jobs are small and short,
    and the optimising compiler's threads cost more CPU than they save (tests/spark on 2
    workers: 305 s of CPU against 354 s, the same wall time)."""
    os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")
    if getattr(config.option, "numprocesses", None) and getattr(config.option, "dist", None) == "load":
        config.option.dist = "worksteal"


# About how long the longest slow test files take in a CI run (worker seconds, from its
# `--durations` list); any other slow test counts as SLOW_TEST_SECONDS.
SLOW_FILE_SECONDS = {
    "tests/test_doc_transcripts.py": 200,
    "tests/test_spark_versions.py": 200,
    "tests/test_redshift_sqlfluff.py": 180,
    "tests/test_reliability_crash.py": 100,
    "tests/test_explain_property.py": 80,
    "tests/spark/test_backfill_cluster.py": 60,
    "tests/test_demo.py": 40,
    "tests/test_backfill_package.py": 30,
}
SLOW_TEST_SECONDS = 8


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def deal_slow_files(items: list[pytest.Item], workers: int) -> list[list[pytest.Item]]:
    """The slow tests of each file as one lot (a file's module fixtures, such as a
    spark-submit run or a warm CLI, then start on one worker only), the heaviest lot first
    to the worker with the least work so far."""
    lots: dict[str, list[pytest.Item]] = {}
    for item in items:
        lots.setdefault(_file(item), []).append(item)

    def seconds(lot: list[pytest.Item]) -> int:
        return SLOW_FILE_SECONDS.get(_file(lot[0]), SLOW_TEST_SECONDS * len(lot))

    shares: list[list[pytest.Item]] = [[] for _ in range(workers)]
    load = [0] * workers
    for lot in sorted(lots.values(), key=seconds, reverse=True):
        least = load.index(min(load))
        shares[least] += lot
        load[least] += seconds(lot)
    return shares


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With `-n N` the work-stealing scheduler (`pytest_configure`) hands worker i the i-th
    contiguous N-th of the collected list, and an idle worker steals from the tail of a
    busy one's. So each N-th starts with its worker's lots of slow tests
    (`deal_slow_files`), then is filled with quick tests to the same length."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers < 2:
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    rest = [item for item in items if item.get_closest_marker("slow") is None]
    size, extra = divmod(len(items), workers)
    dealt: list[pytest.Item] = []
    for i, share in enumerate(deal_slow_files(slow, workers)):
        fill = max(0, size + (1 if i >= workers - extra else 0) - len(share))
        dealt += share + rest[:fill]
        rest = rest[fill:]
    items[:] = dealt + rest


# Hypothesis: CI runs the property tests at their declared example counts, derandomized
# so a failure reproduces; locally `--hypothesis-profile dev` runs them randomized, and
# PROPERTY_EXAMPLES=<n> sets the example count of the delivery property tests
# (test_property_cdc.py, test_history_rebuild_property.py) for a longer search.
try:
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
    )
    settings.register_profile("dev", max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
except ImportError:  # pragma: no cover
    pass


@pytest.fixture(scope="session")
def pg_server_dsn() -> Iterator[str]:
    """One PostgreSQL server for the session (per xdist worker)."""
    external = os.environ.get("REDSHIFT_SYNC_TEST_DSN")
    if external:
        yield external
        return
    with tempfile.TemporaryDirectory(prefix="rs-test-pg-") as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR is not set
        import pgserver

        server = pgserver.get_server(tmp, cleanup_mode="delete")
        _without_flushes(server.get_uri())
        yield server.get_uri()
        server.cleanup()


def _without_flushes(dsn: str) -> None:
    """A throwaway server's data need not survive an operating-system crash: no fsync, no
    full-page images (the manual, "Write Ahead Log": with fsync off "the database might
    not be able to recover after an operating system crash"; a crash of the server itself
    loses nothing committed, as every commit still writes its WAL to the kernel). The
    session creates a database per test and commits thousands of times. The crash tests
    (test_reliability_crash.py) restart a server of their own, with the defaults."""
    admin = connect(dsn)
    for setting in ("fsync", "full_page_writes"):
        admin.execute(f"ALTER SYSTEM SET {setting} = off")
    admin.execute("SELECT pg_reload_conf()")
    admin.close()


_db_counter = itertools.count()


@pytest.fixture
def database_dsn(pg_server_dsn: str) -> Iterator[str]:
    """A fresh, empty database for one test."""
    with fresh_database(pg_server_dsn, f"t_{os.getpid()}_{next(_db_counter)}") as dsn:
        yield dsn


@pytest.fixture
def whole_relation_predicate_locks(pg_server_dsn: str) -> Iterator[None]:
    """PostgreSQL's SERIALIZABLE as Redshift's: every predicate lock covers its whole
    relation at once (`max_pred_locks_per_relation = 0`; the manual: "how many pages or
    tuples of a single relation can be predicate-locked before the lock is promoted to
    covering the whole relation"), since Redshift detects conflicts per table. Only on
    the server the harness started."""
    if os.environ.get("REDSHIFT_SYNC_TEST_DSN"):
        pytest.skip("the harness did not start this server: its settings are not the test's to change")
    admin = connect(pg_server_dsn)
    admin.execute("ALTER SYSTEM SET max_pred_locks_per_relation = 0")
    admin.execute("SELECT pg_reload_conf()")
    yield
    admin.execute("ALTER SYSTEM RESET max_pred_locks_per_relation")
    admin.execute("SELECT pg_reload_conf()")
    admin.close()


@pytest.fixture
def wh(database_dsn: str) -> Iterator[Warehouse]:
    conn = connect(database_dsn)
    yield conn
    conn.close()


@pytest.fixture
def example_pipeline() -> Pipeline:
    import tomllib

    return parse_pipeline(tomllib.loads((EXAMPLES / "salesdb" / "pipeline.toml").read_text()))


@pytest.fixture
def deployed(wh: Warehouse, example_pipeline: Pipeline) -> tuple[Warehouse, Pipeline]:
    deploy(wh, example_pipeline, "examples/salesdb/pipeline.toml")
    return wh, example_pipeline


@pytest.fixture
def s3_server(monkeypatch):
    """A local S3 (moto's server on the loopback) with a bucket named lake."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
    }.items():
        monkeypatch.setenv(k, v)
    import boto3

    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="lake")
    yield s3
    server.stop()

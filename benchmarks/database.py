"""The database a benchmark runs in: a fresh embedded PostgreSQL in a temporary directory
(or a scratch database named by a DSN), with the example pipeline deployed."""

from __future__ import annotations

import contextlib
import tempfile
import warnings
from collections.abc import Iterator, Sequence

from benchmarks.workload import PIPELINE, REPO
from sync.config import Pipeline, load_pipeline
from sync.operations.runner import deploy
from sync.warehouse import Warehouse, connect

SCHEMAS = ("bench",)  # created by the baselines, besides the pipeline's schema


@contextlib.contextmanager
def embedded_server(dsn: str | None) -> Iterator[tuple[str, str]]:
    """(DSN, engine description): the one given, or a fresh pgserver in a temp folder."""
    if dsn:
        yield dsn, "PostgreSQL (given DSN)"
        return
    with tempfile.TemporaryDirectory(prefix="rs-bench-pg-") as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR is not set
        import pgserver  # type: ignore[import-not-found]

        server = pgserver.get_server(tmp, cleanup_mode="delete")
        try:
            yield server.get_uri(), "embedded PostgreSQL (pgserver, fresh data directory)"
        finally:
            server.cleanup()


def _refuse_existing(wh: Warehouse, schemas: Sequence[str]) -> None:
    found = [s for s in schemas if wh.scalar("SELECT COUNT(*) FROM pg_namespace WHERE nspname = %s", (s,))]
    if found:
        raise SystemExit(
            f"benchmarks: schema {', '.join(found)} already exists in this database; "
            "use a scratch database (the run creates and empties it)"
        )


@contextlib.contextmanager
def deployed(dsn: str | None) -> Iterator[tuple[Warehouse, Pipeline, str]]:
    """(connection, pipeline, engine description) with the example pipeline deployed in a
    database that held none of the benchmark's schemas."""
    pipeline, _ = load_pipeline(PIPELINE)
    with embedded_server(dsn) as (url, engine):
        wh = connect(url)
        try:
            _refuse_existing(wh, (pipeline.schema, *SCHEMAS))
            deploy(wh, pipeline, str(PIPELINE.relative_to(REPO)))
            yield wh, pipeline, engine
        finally:
            wh.close()

"""A fleet of tables on one database, at both of Redshift's isolation levels, with retrying
turned off: no CALL, replay, prune or backfill merge may be stopped by a serialization
conflict, and every table ends equal to its model.

Redshift runs a database at SERIALIZABLE or SNAPSHOT ("Isolation levels in Amazon
Redshift", https://docs.aws.amazon.com/redshift/latest/dg/c_serial_isolation.html).
PostgreSQL models both: its SERIALIZABLE aborts rw-dependency cycles with SQLSTATE 40001
like Redshift's error 1023, and its REPEATABLE READ is snapshot isolation (PostgreSQL
manual, 13.2 "Transaction Isolation"). PostgreSQL tracks the reads of SERIALIZABLE
transactions per row or page, Redshift per table: on the server the harness starts,
`max_pred_locks_per_relation = 0` promotes every predicate lock to its whole relation at
once (the manual, "max_pred_locks_per_relation": "how many pages or tuples of a single
relation can be predicate-locked before the lock is promoted to covering the whole
relation"), so the model misses no cycle Redshift would stop. The level is the database's
default, as Redshift's is (`ALTER DATABASE ... SET default_transaction_isolation`).

Fleet: TABLES tables (50; FLEET_TABLES scales it) synced concurrently in two rounds, a
quarter of them quarantining records (values that do not convert) that are then
replayed, a quarter isolating a record the engine refuses (a CHECK), a prune of every
control table and stream between, and a backfill merge of one table.
"""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sync.config import Pipeline, parse_pipeline
from sync.operations.backfill import load_and_merge
from sync.operations.conflicts import RetryPolicy
from sync.operations.quarantine import Selection, replay
from sync.operations.runner import deploy, prune, sync_table
from sync.warehouse import Warehouse, connect
from tests.helpers import at_isolation_level, fresh_database, ingest, pipeline_toml

TABLES = int(os.environ.get("FLEET_TABLES", "50"))
WORKERS = 8
KEYS = 12
NO_RETRY = RetryPolicy(max_attempts=1)
BACKFILL_KEYS = range(1000, 1005)


def fleet_pipeline(n: int) -> Pipeline:
    import tomllib

    blocks = [
        f'[[tables]]\nname = "a{i:02d}"\ntopic = "shop.public.a{i:02d}"\nprimary_key = ["id"]\norder_by = "postgres-lsn"\n'
        'columns = [{ name = "id", type = "integer" }, { name = "balance", type = "integer" }]\n'
        for i in range(n)
    ]
    text = pipeline_toml("\n".join(blocks), schema="fleet") + "\n[operations]\nconflict_attempts = 1\n"
    return parse_pipeline(tomllib.loads(text))


def event(key: int, balance: object, lsn: int) -> dict:
    source = {"connector": "postgresql", "ts_ms": 1_700_000_000_000 + lsn, "db": "shop", "schema": "public", "lsn": lsn}
    source["table"], source["sequence"] = "a", json.dumps([str(lsn - 8), str(lsn)])
    after = {"id": key, "balance": balance}
    return {"key": {"id": key}, "value": {"before": None, "after": after, "source": source, "op": "u", "ts_ms": 1}}


class Fleet:
    """The tables, their events and their model: the latest applicable event per key."""

    def __init__(self, n: int):
        self.pipeline = fleet_pipeline(n)
        self.names = [t.name for t in self.pipeline.tables]
        quarter = max(1, n // 4)
        self.quarantining = self.names[:quarter]  # events with a value that does not convert
        self.isolating = self.names[quarter : 2 * quarter]  # one value the engine refuses (a CHECK)
        self.backfilled = self.names[-1]
        self.lsn = {t: 1000 for t in self.names}
        self.model: dict[str, dict[int, int]] = {t: {} for t in self.names}

    def batch(self, table: str, round_no: int) -> list[dict]:
        out = []
        for key in range(KEYS):
            self.lsn[table] += 10
            balance: object = 100 * round_no + key
            if table in self.quarantining and key % 4 == 0:
                balance = "not a number"
            elif table in self.isolating and key == 5:
                balance = 13
            else:
                self.model[table][key] = balance
            out.append(event(key, balance, self.lsn[table]))
        return out


def stage_parts(directory, keys) -> None:
    n = len(keys)
    pq.write_table(
        pa.table(
            {
                "id": pa.array(keys, pa.int32()),
                "balance": pa.array([7] * n, pa.int32()),
                "_source_ts": pa.array([datetime(2020, 1, 1)] * n, pa.timestamp("us")),
                "_source_pos": pa.array([None] * n, pa.string()),
                "_kafka_partition": pa.array([None] * n, pa.int64()),
                "_kafka_offset": pa.array([None] * n, pa.int64()),
                "_delete": [False] * n,
            }
        ),
        directory / "part-00000.parquet",
    )


@pytest.mark.slow
@pytest.mark.parametrize("level", ["serializable", "repeatable read"])
def test_a_fleet_runs_without_a_serialization_failure_and_matches_its_model(
    level, pg_server_dsn, whole_relation_predicate_locks, tmp_path
):
    fleet = Fleet(TABLES)
    pipeline = fleet.pipeline
    with fresh_database(pg_server_dsn, f"fleet_{level.replace(' ', '_')}_{os.getpid()}") as dsn:
        setup = connect(dsn)
        deploy(setup, pipeline, "test")
        for table in fleet.isolating:
            setup.execute(f'ALTER TABLE fleet."{table}" ADD CONSTRAINT no_13 CHECK (balance <> 13)')
        at_isolation_level(dsn, level)
        assert setup.scalar("SHOW max_pred_locks_per_relation") == "0"

        local = threading.local()
        connections: list[Warehouse] = []
        lock = threading.Lock()

        def wh() -> Warehouse:
            if not hasattr(local, "wh"):
                local.wh = connect(dsn)
                assert local.wh.scalar("SHOW transaction_isolation") == level
                with lock:
                    connections.append(local.wh)
            return local.wh

        failures: list[str] = []

        def run(name: str, work) -> None:
            try:
                outcome = work(wh())
            except Exception as exc:
                failures.append(f"{name}: {exc}")
                return
            if getattr(outcome, "status", "ok") != "ok":
                failures.append(f"{name}: {outcome.error}")

        backfilled = pipeline.table(fleet.backfilled)
        stage = tmp_path / "stage"
        stage.mkdir()
        stage_parts(stage, list(BACKFILL_KEYS))
        for round_no in (1, 2):
            for name in fleet.names:
                ingest(setup, pipeline, name, fleet.batch(name, round_no))
            work = [(f"sync {t}", lambda w, t=t: sync_table(w, pipeline, t, NO_RETRY)) for t in fleet.names]
            if round_no == 2:  # records quarantined in round 1 run again (and fail again)
                work += [(f"replay {t}", lambda w, t=t: replay(w, pipeline, Selection(t)).run) for t in fleet.quarantining]
                work.append(("backfill merge", lambda w: load_and_merge(w, pipeline, backfilled, stage, print)))
            work.insert(len(work) // 2, ("prune", lambda w: prune(w, pipeline, days=0, stream=True)))
            with ThreadPoolExecutor(WORKERS) as pool:
                list(pool.map(lambda item: run(*item), work))

        assert failures == [], f"{len(failures)} operations failed at {level}:\n" + "\n".join(failures[:20])
        for key in BACKFILL_KEYS:
            fleet.model[fleet.backfilled][key] = 7
        for table in fleet.names:
            stored = dict(setup.query(f'SELECT id, balance FROM fleet."{table}"'))
            assert stored == fleet.model[table], table
        waiting = dict(setup.query("SELECT table_name, COUNT(*) FROM fleet.sync_quarantine WHERE handled IS NULL GROUP BY 1"))
        assert waiting == {t: 2 for t in fleet.isolating} | {t: 6 for t in fleet.quarantining}
        for conn in connections:
            conn.close()
        setup.close()

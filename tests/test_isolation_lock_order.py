"""Record isolation (quarantining the record the engine refuses) takes the table's lock
before its snapshot, as the sync CALL does, at both of Redshift's isolation levels.

PostgreSQL, "LOCK": at REPEATABLE READ and SERIALIZABLE "the LOCK TABLE command must be
executed before any SELECT or data modification statement", or the transaction's snapshot
predates what the lock's holder commits. A fresh-clone run of tests/test_fleet_isolation.py
failed at SERIALIZABLE with "could not serialize access due to read/write dependencies
among transactions ... Canceled on identification as a pivot, during write", at the
isolation's INSERT into the quarantine: its CALL, made on its own, had started its snapshot,
then waited for the lock a prune held; the prune read the quarantine and deleted applied
stream records, and the isolation then read the stream as it was before the prune and
wrote the quarantine the prune had read."""

from __future__ import annotations

import threading
import time

import pytest

from sync.operations.runner import deploy, isolate_first_pending, sync_table
from sync.sql.names import table_names
from sync.warehouse import connect
from tests.helpers import at_isolation_level, ingest
from tests.test_fleet_isolation import NO_RETRY, event, fleet_pipeline


@pytest.mark.parametrize("level", ["serializable", "repeatable read"])
def test_record_isolation_waiting_for_a_prune_is_no_serialization_conflict(database_dsn, whole_relation_predicate_locks, level):
    pipeline = fleet_pipeline(1)
    table = pipeline.tables[0]
    n = table_names(pipeline, table)
    setup = connect(database_dsn)
    deploy(setup, pipeline, "test")
    setup.execute(f'ALTER TABLE fleet."{table.name}" ADD CONSTRAINT no_13 CHECK (balance <> 13)')
    at_isolation_level(database_dsn, level)
    ingest(setup, pipeline, table.name, [event(1, 5, 1010)])
    assert sync_table(setup, pipeline, table.name, NO_RETRY).status == "ok"
    ingest(setup, pipeline, table.name, [event(2, 13, 1020)])  # the engine refuses it

    prune, isolating = connect(database_dsn), connect(database_dsn)
    pid = isolating.scalar("SELECT pg_backend_pid()")
    errors: list[BaseException] = []

    def isolate() -> None:
        try:
            isolate_first_pending(isolating, pipeline, table.name, "new row violates check constraint")
        except BaseException as exc:  # reported by the test's thread
            errors.append(exc)

    with prune.transaction():  # a prune of the table: its lock, then what it reads and deletes
        prune.execute(f'LOCK TABLE fleet."{n.watermark}" IN SHARE ROW EXCLUSIVE MODE')
        worker = threading.Thread(target=isolate)
        worker.start()
        deadline = time.monotonic() + 30
        while not prune.scalar(f"SELECT COUNT(*) FROM pg_locks WHERE pid = {pid} AND NOT granted"):
            assert time.monotonic() < deadline, "the isolation never waited for the lock"
            time.sleep(0.02)
        prune.scalar(f'SELECT COUNT(*) FROM fleet."{n.quarantine}"')
        assert prune.scalar(f'SELECT COUNT(*) FROM fleet."{n.stream}" WHERE kafka_offset = 0') == 1
        prune.execute(f'DELETE FROM fleet."{n.stream}" WHERE kafka_offset = 0')  # applied: below the watermark
    worker.join(60)

    assert not errors, errors
    quarantined = setup.query(f'SELECT kafka_offset, reason FROM fleet."{n.quarantine}"')
    assert [(offset, "check constraint" in reason) for offset, reason in quarantined] == [(1, True)]
    for wh in (setup, prune, isolating):
        wh.close()

"""Upgrading a live deployment: a warehouse deployed and synced by an earlier release of
the tool, records pending, a scheduled CALL of the earlier procedure running, is upgraded
with `revision` + `deploy` of this release and ends equal to the source.

The earlier release is taken from this repository's own history (`git archive`), run as
a user ran it: the CLI, in a project folder of its own, with its own revision file. The
test is skipped (with the reason) only where the checkout has no history.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sync.debezium.events import ChangeStream, MySqlSource, write_jsonl
from sync.warehouse import connect
from tests.helpers import EXAMPLES, REPO

# The release before the procedure's clock, stage and bookkeeping changes.
EARLIER = "207ee69"


def _earlier_release(tmp: Path) -> Path:
    where = tmp / "earlier"
    where.mkdir()
    try:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", EARLIER], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"no git history with release {EARLIER} in this checkout: {exc}")
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive.stdout, check=True)
    return where


def _cli(code: Path, project: Path, dsn: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(code), "REDSHIFT_SYNC_DSN": dsn}
    done = subprocess.run(
        [sys.executable, "-m", "sync", *args], cwd=project, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{' '.join(args)} ({code.name}):\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _history(seed: int) -> tuple[list[dict], dict[str, tuple]]:
    """A customer topic's records (inserts, updates, deletes with their tombstones, two
    partitions) and the source table they leave, worked out as the source applied them."""
    rnd = random.Random(seed)
    cs = ChangeStream(["CUST_ID"], MySqlSource(), partitions=2)
    source: dict[str, dict] = {}
    records: list[dict] = []
    for step in range(400):
        key = f"C{rnd.randrange(60):03d}"
        row = {"CUST_ID": key, "NAME": f"name {step}", "MKTSEGMENT": rnd.choice(["BUILDING", "MACHINERY"])}
        if key not in source:
            records.append(cs.insert(row))
            source[key] = row
        elif rnd.random() < 0.2:
            records += [cs.delete(source.pop(key)), cs.tombstone(row)]
        else:
            records.append(cs.update(source[key], row))
            source[key] = row
    return records, {k: (k, r["NAME"], r["MKTSEGMENT"]) for k, r in source.items()}


@pytest.mark.slow
def test_upgrade_mid_stream_with_a_call_running_ends_equal_to_the_source(tmp_path, database_dsn):
    earlier = _earlier_release(tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    (project / "pipeline.toml").write_text((EXAMPLES / "salesdb" / "pipeline.toml").read_text())
    records, expected = _history(7)
    cuts = (len(records) // 3, 2 * len(records) // 3)
    for name, part in (("one", records[: cuts[0]]), ("two", records[cuts[0] : cuts[1]]), ("three", records[cuts[1] :])):
        write_jsonl(part, project / f"{name}.jsonl")

    # The earlier release: first revision, deploy, a synced part and a pending part.
    _cli(earlier, project, database_dsn, "revision", "-m", "initial")
    _cli(earlier, project, database_dsn, "deploy")
    _cli(earlier, project, database_dsn, "ingest", "--table", "customer", "--file", "one.jsonl")
    _cli(earlier, project, database_dsn, "sync")
    _cli(earlier, project, database_dsn, "ingest", "--table", "customer", "--file", "two.jsonl")

    # This release: the revision the upgrade needs, deployed while the earlier procedure's
    # scheduled CALL runs (it holds the table's lock until it commits).
    written = _cli(REPO, project, database_dsn, "revision", "-m", "upgrade")
    assert 'r.replace_procedure("customer")' in written
    running = connect(database_dsn)
    called = threading.Event()

    def scheduled_call() -> None:
        with running.transaction():
            running.execute('CALL "cdc"."incremental_sync_customer"()')
            called.set()
            running.execute("SELECT pg_sleep(2)")  # the CALL's transaction is still open

    caller = threading.Thread(target=scheduled_call)
    caller.start()
    assert called.wait(120)
    _cli(REPO, project, database_dsn, "deploy")
    caller.join(120)
    running.close()

    _cli(REPO, project, database_dsn, "ingest", "--table", "customer", "--file", "three.jsonl")
    _cli(REPO, project, database_dsn, "sync")
    wh = connect(database_dsn)
    try:
        got = {r[0]: tuple(r) for r in wh.query('SELECT customer_id, name, mktsegment FROM cdc."customer"')}
        runs = wh.query("SELECT events_read, status FROM cdc.sync_run_log WHERE table_name = 'customer' ORDER BY run_id")
        settings = wh.scalar("SELECT proconfig FROM pg_proc WHERE oid = 'cdc.incremental_sync_customer(bigint)'::regprocedure")
    finally:
        wh.close()
    assert got == expected
    assert sum(n for n, _ in runs) == len(records) and {s for _, s in runs} == {"ok"}
    assert settings == ["TimeZone=UTC"]  # this release's procedure is the one deployed

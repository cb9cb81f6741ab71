"""History mode and `reset-positions` (docs/correctness.md, "A MySQL failover or `RESET
MASTER`"). After a failover to another MySQL server, or `RESET MASTER` ("Deletes all binary
log files listed in the index file, resets the binary log index file to be empty, and
creates a new binary log file", MySQL 8.0 manual, RESET MASTER Statement), binlog file
numbers restart lower: every new event's position is below every position the history
holds. The documented order is kept: every event of the old server is applied, the
positions are reset, then the connector starts on the new server."""

from __future__ import annotations

import pytest

from sync.config import ConfigError
from sync.operations.history_rebuild import rebuild_history
from sync.operations.recovery import reset_positions
from tests.helpers import feed, pipeline_toml
from tests.test_cli import run
from tests.test_delivery_semantics import TS, envelope, mysql_source, rows, setup, tombstone, unwrap_row
from tests.test_history import history_toml, row

OLD_SERVER, NEW_SERVER = 42, 1  # mysql-bin.000042, then mysql-bin.000001 after the failover
# Key 1's versions (see `intervals`): two on the old server, two on the new one, one chain.
KEY_1 = [(1, 10, "c", False, True), (1, 20, "u", False, True), (1, 30, "u", False, True), (1, 40, "u", True, True)]


def my(op: str, key: int, balance: int, file: int, pos: int, at: int) -> dict:
    """A MySQL change event at binlog `file`/`pos`, committed `at` ms after TS (commit
    times go on rising across the failover; positions do not)."""
    source = mysql_source(pos, file=f"mysql-bin.{file:06d}") | {"ts_ms": TS + at}
    image = row(key, balance)
    return envelope(op, key, None if op == "d" else image, image if op != "c" else None, source)


def intervals(wh, table: str) -> list[tuple]:
    """Each version as (id, balance, _op, _is_current, starts where the one before it ends)."""
    held = wh.query(
        f'SELECT id, balance, _op, _is_current, _valid_from, _valid_to FROM cdc."{table}__history" ORDER BY id, _valid_from'
    )
    return [
        (key, balance, op, current, n == 0 or held[n - 1][0] != key or held[n - 1][5] == start)
        for n, (key, balance, op, current, start, _) in enumerate(held)
    ]


@pytest.mark.parametrize("deletes", ["close", "tombstone"])
def test_after_reset_positions_the_new_servers_events_follow_the_stored_versions(wh, deletes):
    p = setup(wh, history_toml("acc", deletes, order_by="mysql-binlog"))
    feed(
        wh, p, "acc", [my("c", 1, 10, OLD_SERVER, 100, 1), my("u", 1, 20, OLD_SERVER, 200, 2), my("c", 2, 5, OLD_SERVER, 300, 3)]
    )
    reset = reset_positions(wh, p, "acc", apply=True)
    assert (reset.target_rows, reset.history_versions) == (2, 3)
    new = [my("u", 1, 30, NEW_SERVER, 4, 10), my("d", 2, 5, NEW_SERVER, 50, 11), my("u", 1, 40, NEW_SERVER, 60, 12)]
    run = feed(wh, p, "acc", new)
    assert run.stale == 0 and rows(wh, "acc") == [(1, 40)]
    assert intervals(wh, "acc") == [
        *KEY_1,
        (2, 5, "c", False, True),
        (2, 5, "d", deletes == "tombstone", True),  # "close": a version of no duration
    ]
    (closed_at,) = wh.query("SELECT _valid_to FROM cdc.\"acc__history\" WHERE id = 2 AND _op = 'c'")[0]
    assert closed_at is not None, "the delete on the new server closes the version of the old one"


def test_an_unwrapped_topic_recomputes_the_old_versions_in_their_order(wh):
    """ExtractNewRecordState (rewrite-with-tombstone): every batch recomputes its keys'
    intervals, so the old server's versions, without positions now, are ordered by Kafka
    order, which is theirs. A source database restored from a backup logs at LSNs below
    those delivered (docs/correctness.md)."""

    def pg(key: int, balance: int, lsn: int, at: int, op: str = "u", deleted: bool = False) -> dict:
        record = unwrap_row(key, balance, lsn, op=op, deleted=deleted)
        record["value"]["__source_ts_ms"] = TS + at
        return record

    p = setup(wh, history_toml("acc", format="debezium-unwrap", order_by="postgres-lsn"))
    feed(wh, p, "acc", [pg(1, 10, 1000, 1, "c"), pg(1, 20, 2000, 2), pg(2, 5, 3000, 3, "c")])
    reset_positions(wh, p, "acc", apply=True)
    feed(wh, p, "acc", [pg(1, 30, 40, 10), pg(2, 5, 50, 11, "d", deleted=True), tombstone(2), pg(1, 40, 60, 12)])
    assert rows(wh, "acc") == [(1, 40)]
    assert intervals(wh, "acc") == [
        *KEY_1,
        (2, 5, "c", False, True),
        (2, 5, "d", False, True),
    ]


def test_reset_positions_with_reread_from_is_refused_on_a_history_table(wh):
    """The records after the watermark were applied as versions at their new server's
    positions, below the old server's: re-reading them would add them a second time."""
    p = setup(wh, history_toml("acc", order_by="mysql-binlog"))
    feed(wh, p, "acc", [my("c", 1, 10, OLD_SERVER, 100, 1)])
    with pytest.raises(ConfigError, match="--reread-from: table acc keeps a history"):
        reset_positions(wh, p, "acc", apply=True, reread_from={0: 0})
    assert wh.scalar('SELECT COUNT(*) FROM cdc."acc__history" WHERE _valid_from_pos IS NOT NULL') == 1, "nothing changed"


def test_history_rebuild_is_refused_after_reset_positions(wh):
    """The stream holds records of both servers; their positions do not compare, so a
    rebuild, which orders them by position, cannot put them in order."""
    p = setup(wh, history_toml("acc", order_by="mysql-binlog"))
    feed(wh, p, "acc", [my("c", 1, 10, OLD_SERVER, 100, 1)])
    reset_positions(wh, p, "acc", apply=True)
    feed(wh, p, "acc", [my("u", 1, 20, NEW_SERVER, 4, 10)])
    with pytest.raises(ConfigError, match="history rebuild: the source positions of table acc were reset"):
        rebuild_history(wh, p, "acc", apply=True)


def test_reset_positions_names_the_history_versions_it_clears(wh, database_dsn, tmp_path):
    toml = history_toml("acc", order_by="mysql-binlog")
    p = setup(wh, toml)
    feed(wh, p, "acc", [my("c", 1, 10, OLD_SERVER, 100, 1), my("u", 1, 20, OLD_SERVER, 200, 2)])
    (tmp_path / "pipeline.toml").write_text(pipeline_toml(toml, "cdc"))
    where = ("--table", "acc", "--config", str(tmp_path / "pipeline.toml"), "--dsn", database_dsn)
    refused = run("reset-positions", *where)
    assert refused.returncode == 1
    assert "clears the stored source positions of 1 row(s) of acc, 0 deleted key(s) and 2 history version(s)" in refused.stderr
    done = run("reset-positions", *where, "--yes")
    assert done.returncode == 0, done.stderr
    assert "cleared the stored source positions of 1 row(s) of acc, 0 deleted key(s) and 2 history version(s)" in done.stdout
    again = run("history", "rebuild", *where)
    assert again.returncode == 2 and "history rebuild: the source positions of table acc were reset at" in again.stderr

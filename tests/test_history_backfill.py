"""History mode and the backfill, through the command line: a snapshot's rows enter the
history as versions dated by the snapshot time, below the stream's versions and never over
them. The snapshot is a read of each row at one moment (Debezium names a snapshot read
`op: r`, "read (applies to only snapshots)", in its change event's `op` field), so it is a
state of the row at that time: the first version of a key whose stream history begins
later, closed by the stream's first version; nothing for a key whose stream history
already holds that moment. `backfill --staged` loads a run folder as a cluster's job
writes it (backfill/stage.py), without Spark; `backfill --snapshot` reaches the same merge."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa

from sync.config import Pipeline
from tests.helpers import feed
from tests.test_cli import run
from tests.test_delivery_semantics import TS
from tests.test_history import pg
from tests.test_history_rebuild import history, project, rebuild
from tests.test_without_spark import write_stage_files

EPOCH = datetime(1970, 1, 1)


def at_ms(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


def write_run_folder(folder: Path, pipeline: Pipeline, rows: list[tuple[int, int]], snapshot_ms: int) -> None:
    """A run folder as backfill/job.py writes it: (id, balance) rows read at `snapshot_ms`."""
    table = pipeline.table("acc")
    n = len(rows)
    data = pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int32()),
            "balance": pa.array([r[1] for r in rows], pa.int32()),
            "note": pa.array([None] * n, pa.string()),
            "_source_ts": pa.array([at_ms(snapshot_ms)] * n, pa.timestamp("us")),
            "_source_pos": pa.array([None] * n, pa.string()),
            "_kafka_partition": pa.array([None] * n, pa.int64()),
            "_kafka_offset": pa.array([None] * n, pa.int64()),
            "_delete": [False] * n,
        }
    )
    write_stage_files(folder, pipeline, table, data, at_ms(snapshot_ms))


def versions(wh) -> list[tuple]:
    return wh.query(
        'SELECT id, balance, _op, _valid_from, _valid_to, _is_current FROM cdc."acc__history"\n'
        "ORDER BY id, _valid_from_pos ASC NULLS FIRST, _kafka_timestamp ASC NULLS FIRST, _kafka_partition, _kafka_offset"
    )


def test_backfill_below_the_stream(wh, database_dsn, tmp_path):
    """Key 1's stream history begins at lsn 300, after the snapshot (taken at lsn 200's
    time): the snapshot row is its first version, closed by the stream's first. Key 2's
    begins at lsn 100, before it: its stream versions stay as they are. Key 3 has no stream
    history: the snapshot row is its one, current version. Loaded again, nothing changes;
    a rebuild from the stream keeps the snapshot versions below the stream."""
    p, config = project(wh, tmp_path, order_by="postgres-lsn")
    feed(wh, p, "acc", [pg("c", 2, 5, 100), pg("u", 1, 30, 300), pg("u", 2, 6, 400)])
    stream_versions = versions(wh)
    write_run_folder(tmp_path / "run", p, [(1, 10), (2, 4), (3, 7)], TS + 200)
    args = ("backfill", "--table", "acc", "--staged", str(tmp_path / "run"), "--config", str(config), "--dsn", database_dsn)

    loaded = run(*args)
    assert loaded.returncode == 0, loaded.stderr
    assert "history: 2 snapshot row(s) became versions below the stream" in loaded.stdout
    snapshot, first_stream = at_ms(TS + 200), at_ms(TS + 300)
    after = versions(wh)
    assert after == [
        (1, 10, "r", snapshot, first_stream, False),
        (1, 30, "u", first_stream, None, True),
        *[v for v in stream_versions if v[0] == 2],
        (3, 7, "r", snapshot, None, True),
    ]
    assert [v for v in after if v[2] != "r"] == stream_versions, "a stream version was changed"

    again = run(*args, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["history_versions"] == 0 and versions(wh) == after

    unchanged = rebuild(config, database_dsn, "--json")
    assert unchanged.returncode == 0, unchanged.stderr
    report = json.loads(unchanged.stdout)
    assert (report["outcome"], report["snapshot_versions"]) == ("unchanged", 2)
    built = history(wh)
    wh.execute('DELETE FROM cdc."acc__history" WHERE _kafka_partition >= 0')
    assert rebuild(config, database_dsn, "--yes").returncode == 0
    assert history(wh) == built


def test_a_snapshot_covers_records_the_stream_no_longer_retains(wh, database_dsn, tmp_path):
    """The streaming view was created after the topic's two oldest records expired: it
    starts at offset 2 (key 2 created at lsn 300), then key 1 changes at lsn 400. Without a
    snapshot the rebuild cannot tell what the expired records held: a gap. A snapshot taken
    at lsn 350's time, after the first retained record, covers them: key 1's row as of then
    is its first version, and the rebuild is complete."""
    p, config = project(wh, tmp_path, order_by="postgres-lsn")
    stamped = [
        {**pg("c", 2, 5, 300), "offset": 2, "timestamp": TS + 300},
        {**pg("u", 1, 30, 400), "offset": 3, "timestamp": TS + 400},
    ]
    feed(wh, p, "acc", stamped)
    gap = rebuild(config, database_dsn)
    assert gap.returncode == 1 and "partition 0: offsets 0-1 are not retained (2 record(s))" in gap.stderr

    write_run_folder(tmp_path / "run", p, [(1, 20), (2, 5)], TS + 350)
    staged = ("backfill", "--table", "acc", "--staged", str(tmp_path / "run"), "--config", str(config), "--dsn", database_dsn)
    assert run(*staged).returncode == 0
    assert [v[:3] for v in versions(wh)] == [(1, 20, "r"), (1, 30, "u"), (2, 5, "c")]
    covered = rebuild(config, database_dsn, "--json")
    assert covered.returncode == 0, covered.stderr
    report = json.loads(covered.stdout)
    assert report["outcome"] == "unchanged" and report["complete"]
    assert [(g["not_retained"], g["covered"]) for g in report["partitions"]] == [(2, True)]

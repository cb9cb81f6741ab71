"""`redshift-sync history rebuild` through the command line: the history made again from
the records the stream retains equals the one the procedure built incrementally from the
same records, batch after batch, for every delivery shape; it replaces stored versions
only with --yes, and refuses a history with a hole.

Kafka numbers each partition's records from offset 0 and deletes the oldest once they
pass the topic's retention ("The Kafka cluster durably persists all published
records ... using a configurable retention period", Kafka documentation, Introduction);
a Redshift streaming view keeps the records it ingested until they are deleted, and one
re-created after the topic's records expired starts from what the topic still holds
("Streaming ingestion ... If the materialized view is re-created, it re-reads from the
earliest offset the topic retains", Redshift Database Developer Guide, streaming
ingestion considerations)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sync.config import ConfigError
from sync.operations.history_rebuild import history_table
from sync.sql import schemas
from tests.helpers import feed, make_pipeline, pipeline_toml
from tests.test_cli import run
from tests.test_delivery_semantics import TS, envelope, mysql_source, pg_source, setup, table_toml, tombstone
from tests.test_history import history_toml, pg, row
from tests.test_partition_increase import KEY, NEW, OLD, at, unwrapped

PLACEHOLDER = "__debezium_unavailable_value"


def toast(op: str, balance: int, note: str, lsn: int) -> dict:
    return envelope(op, 1, {"id": 1, "balance": balance, "note": note}, None, pg_source(lsn, lsn - 10))


def mysql_tx(op: str, balance: int) -> dict:
    """A change of a compressed MySQL transaction: every change carries its file/pos and row 0."""
    return envelope(op, 1, row(1, balance), None, mysql_source(1041))


REDELIVERY = [pg("c", 1, 10, 100), pg("u", 1, 20, 200), pg("u", 1, 30, 300), pg("c", 2, 5, 400)]
TRUNCATE = {"partition": 0, "key": None, "value": {"source": pg_source(300, 290), "op": "t", "ts_ms": TS}}
# Each shape: the table's options and the batches of records, each ingested as one refresh and synced.
SHAPES = {
    "redelivered suffix": (
        {"order_by": "postgres-lsn"},
        [REDELIVERY, REDELIVERY[1:], [*REDELIVERY[2:], *REDELIVERY[2:], pg("u", 1, 40, 500)]],
    ),
    "late older event after a partition increase": (
        {"format": "debezium-unwrap", "order_by": "postgres-lsn"},
        [
            [at(unwrapped(KEY, 10, 100, "c"), OLD, 1), at(unwrapped(KEY, 30, 300, "u"), NEW, 3)],
            [at(unwrapped(KEY, 20, 200, "u"), OLD, 2)],
        ],
    ),
    "tie within a compressed transaction": (
        {"order_by": "mysql-binlog"},
        [
            [mysql_tx("c", 0), mysql_tx("u", 100)],
            [mysql_tx("u", 250)],
            [mysql_tx("c", 0), mysql_tx("u", 100), mysql_tx("u", 250)],
        ],
    ),
    # A restart re-sends from inside a compressed transaction after the next one was sent,
    # and a sync runs before the rest of the re-sent run has arrived.
    "re-sent compressed run cut by a batch": (
        {"order_by": "mysql-binlog"},
        [
            [mysql_tx("c", 0), mysql_tx("u", 100), mysql_tx("u", 250), envelope("c", 2, row(2, 5), None, mysql_source(1300))],
            [mysql_tx("u", 100)],
            [mysql_tx("u", 250), envelope("c", 2, row(2, 5), None, mysql_source(1300))],
        ],
    ),
    "toast placeholders and a late value": (
        {"order_by": "postgres-lsn"},
        [
            [toast("c", 1, "long text", 100), toast("u", 2, PLACEHOLDER, 200), toast("u", 3, PLACEHOLDER, 300)],
            [toast("u", 4, PLACEHOLDER, 400), toast("u", 6, PLACEHOLDER, 500)],
            [toast("u", 5, "rewritten", 350)],
        ],
    ),
    # A restart re-sends a placeholder update; the original and its copy meet in one batch
    # (the merge fills the newer one's placeholder, not the copy's) or in a rebuild.
    "re-sent toast placeholder": (
        {"order_by": "postgres-lsn"},
        [
            [toast("c", 1, "long text", 100), toast("u", 2, PLACEHOLDER, 200)],
            [toast("u", 2, PLACEHOLDER, 200), toast("u", 3, PLACEHOLDER, 300), toast("u", 3, PLACEHOLDER, 300)],
        ],
    ),
    # The truncate's closing marker carries the values of the version it closes, the
    # placeholder's filled in: in the rebuild's one batch the version is filled with it.
    "truncate after a placeholder": (
        {"order_by": "postgres-lsn", "on_truncate": "delete"},
        [[toast("c", 1, "long text", 100), toast("u", 2, PLACEHOLDER, 200)], [TRUNCATE, toast("c", 9, "new", 400)]],
    ),
    # A restart re-sends the truncate to another partition: the marker is the first record's.
    "truncate re-sent to another partition": (
        {"order_by": "postgres-lsn", "on_truncate": "delete"},
        [[at(pg("c", 1, 10, 100), 1, 1)], [at(TRUNCATE, 1, 2)], [at(TRUNCATE, 0, 3), at(pg("c", 1, 11, 400), 0, 4)]],
    ),
    "tombstone-only delete": (
        {"format": "debezium-unwrap", "order_by": "postgres-lsn"},
        [[at(unwrapped(1, 10, 100, "c"), 0, 1), at(unwrapped(1, 20, 200, "u"), 0, 2)], [at(tombstone(1), 0, 3)]],
    ),
    "truncate": (
        {"order_by": "postgres-lsn", "on_truncate": "delete"},
        [[pg("c", 1, 10, 100), pg("c", 2, 20, 200)], [TRUNCATE, pg("c", 2, 21, 400)], [TRUNCATE]],
    ),
}


def history(wh) -> list[tuple]:
    """Every column of every version in version order, its TOAST marks (`_unavailable`:
    which of its values were placeholders) too."""
    columns = [c.name for c in schemas.history(make_pipeline(history_toml("acc", order_by="postgres-lsn")).tables[0])]
    return wh.query(
        f'SELECT {", ".join(columns)} FROM cdc."acc__history"\n'
        "ORDER BY id, _valid_from_pos ASC NULLS FIRST, _kafka_timestamp ASC NULLS FIRST, _kafka_partition, _kafka_offset"
    )


def rebuild(config: Path, dsn: str, *flags: str):
    return run("history", "rebuild", "--table", "acc", "--config", str(config), "--dsn", dsn, *flags)


def project(wh, tmp_path: Path, deletes: str = "close", **options: str):
    toml = history_toml("acc", deletes, **options)
    config = tmp_path / "pipeline.toml"
    config.write_text(pipeline_toml(toml))
    return setup(wh, toml), config


@pytest.mark.parametrize("deletes", ["close", "tombstone"])
@pytest.mark.parametrize("shape", SHAPES)
def test_history_rebuild_equals_the_incrementally_built_history(wh, database_dsn, tmp_path, shape, deletes):
    options, batches = SHAPES[shape]
    p, config = project(wh, tmp_path, deletes, **options)
    for batch in batches:
        feed(wh, p, "acc", batch)
    incremental = history(wh)
    assert incremental, "the shape built no history"
    wh.execute('DELETE FROM cdc."acc__history"')

    first = rebuild(config, database_dsn, "--json")
    assert first.returncode == 0, first.stderr
    outcome = json.loads(first.stdout)
    assert outcome["outcome"] == "written" and outcome["complete"] and outcome["stored"] == 0
    assert outcome["records"] == sum(len(b) for b in batches)
    assert history(wh) == incremental

    again = rebuild(config, database_dsn)
    assert again.returncode == 0, again.stderr
    assert "; the stored history had " in again.stdout and again.stdout.rstrip().endswith(": equal: nothing to do")
    assert history(wh) == incremental


def test_history_rebuild_refuses_to_replace_versions_without_yes(wh, database_dsn, tmp_path):
    p, config = project(wh, tmp_path, order_by="postgres-lsn")
    feed(wh, p, "acc", REDELIVERY)
    built = history(wh)
    wh.execute('UPDATE cdc."acc__history" SET balance = 99 WHERE balance = 20')
    wh.execute('DELETE FROM cdc."acc__history" WHERE id = 2')
    damaged = history(wh)

    refused = rebuild(config, database_dsn)
    assert refused.returncode == 1
    assert "history rebuild would replace 1 of the 3 stored version(s) of acc (2 of the 4 rebuilt ones" in refused.stderr
    assert "Nothing was changed: run it again with --yes." in refused.stderr
    assert history(wh) == damaged

    done = rebuild(config, database_dsn, "--yes")
    assert done.returncode == 0, done.stderr
    assert "history rebuild acc: 4 version(s) from 4 retained record(s); the stored history had 3: replaced" in done.stdout
    assert history(wh) == built


def test_history_rebuild_names_the_versions_that_differ(wh, database_dsn, tmp_path):
    """Besides the counts, the versions a replacement would remove (`stored`) and add
    (`rebuilt`), by key and position, in the refusal and in --json."""
    p, config = project(wh, tmp_path, order_by="postgres-lsn")
    feed(wh, p, "acc", REDELIVERY)
    columns = "id, _valid_from_pos, _op, _kafka_partition, _kafka_offset"

    def versions(where: str) -> list[tuple]:
        return wh.query(f'SELECT {columns} FROM cdc."acc__history" WHERE {where} ORDER BY id, _valid_from_pos')

    removed = versions("balance IN (20, 5)")  # the versions the damage below changes or deletes
    wh.execute('UPDATE cdc."acc__history" SET balance = 99 WHERE balance = 20')
    damaged = versions("balance = 99")
    wh.execute('DELETE FROM cdc."acc__history" WHERE id = 2')
    expected = [*damaged, *removed]

    shown = json.loads(rebuild(config, database_dsn, "--json").stdout)["differing"]
    assert [d["side"] for d in shown] == ["stored", "rebuilt", "rebuilt"]
    assert [(d["key"]["id"], d["valid_from_pos"], d["op"], d["kafka_partition"], d["kafka_offset"]) for d in shown] == expected
    assert all(d["valid_from"] for d in shown) and [d["valid_to"] is None for d in shown] == [False, False, True]

    refused = rebuild(config, database_dsn)
    assert refused.returncode == 1
    lines = [line.strip() for line in refused.stderr.splitlines() if line.startswith("  ")]
    shown_versions = lines[: len(expected)]
    assert [line.split(" at position ")[0] for line in shown_versions] == ["stored: id=1", "rebuilt: id=1", "rebuilt: id=2"]
    assert all(
        f" at position {v[1]} (" in line and line.endswith(f", op {v[2]}, record {v[3]}:{v[4]}")
        for line, v in zip(shown_versions, expected, strict=True)
    )
    # the stored and rebuilt versions of one record: what differs, stored -> rebuilt
    assert lines[len(expected) :] == [f"id=1 at position {damaged[0][1]}: balance 99 -> 20"]
    assert [d["values"]["balance"] for d in shown] == [99, 20, 5]


def test_history_rebuild_lists_the_differing_versions_by_key_and_position(wh, database_dsn, tmp_path):
    """Each key's differing versions together, in version order, whichever history holds
    them: not every stored one first."""
    p, config = project(wh, tmp_path, order_by="postgres-lsn")
    feed(wh, p, "acc", REDELIVERY)
    wh.execute('DELETE FROM cdc."acc__history" WHERE id = 1 AND balance = 10')  # rebuilt only: key 1
    wh.execute('UPDATE cdc."acc__history" SET balance = 6 WHERE id = 2')  # stored and rebuilt: key 2

    shown = json.loads(rebuild(config, database_dsn, "--json").stdout)["differing"]
    assert [(d["key"]["id"], d["side"], d["values"]["balance"]) for d in shown] == [
        (1, "rebuilt", 10),
        (2, "stored", 6),
        (2, "rebuilt", 5),
    ]


def test_history_rebuild_reads_only_the_applied_records(wh, database_dsn, tmp_path):
    """Records above the watermark are the next CALL's: the rebuild leaves them to it."""
    from tests.helpers import ingest

    p, config = project(wh, tmp_path, order_by="postgres-lsn")
    feed(wh, p, "acc", REDELIVERY[:2])
    ingest(wh, p, "acc", REDELIVERY[2:])
    built = history(wh)
    done = rebuild(config, database_dsn, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["outcome"] == "unchanged" and history(wh) == built


def test_history_rebuild_reports_records_no_longer_retained_and_refuses_the_hole(wh, database_dsn, tmp_path):
    """The topic's two oldest records of partition 0 expired: the history they opened
    cannot be rebuilt, and no backfill snapshot covers them."""
    p, config = project(wh, tmp_path, order_by="postgres-lsn")
    feed(wh, p, "acc", REDELIVERY)
    built = history(wh)
    wh.execute('DELETE FROM cdc."acc__stream" WHERE kafka_offset < 2')

    refused = rebuild(config, database_dsn)
    assert refused.returncode == 1
    assert "a rebuild would present a history with a hole as complete" in refused.stderr
    assert "partition 0: offsets 0-1 are not retained (2 record(s)); the first retained record, offset 2" in refused.stderr
    assert "the stored history holds 2 version(s) of missing records" in refused.stderr
    assert history(wh) == built

    as_json = rebuild(config, database_dsn, "--json")
    assert as_json.returncode == 1
    report = json.loads(as_json.stdout)
    assert report["outcome"] == "gap" and not report["complete"]
    assert [(g["partition"], g["not_retained"], g["lost_versions"], g["covered"]) for g in report["partitions"]] == [
        (0, 2, 2, False)
    ]

    accepted = rebuild(config, database_dsn, "--accept-gap", "--yes")
    assert accepted.returncode == 0, accepted.stderr
    assert "incomplete: partition 0: offsets 0-1 are not retained" in accepted.stderr
    assert [(v[0], v[1]) for v in history(wh)] == [(1, 30), (2, 5)], "the versions of the retained records"


def test_history_rebuild_reports_a_hole_between_retained_records(wh, database_dsn, tmp_path):
    """`prune --stream` (or records lost before they were read) took offsets 1-2 and left
    0 and 3: a hole no snapshot fills."""
    p, config = project(wh, tmp_path, order_by="postgres-lsn")
    feed(wh, p, "acc", REDELIVERY)
    wh.execute('DELETE FROM cdc."acc__stream" WHERE kafka_offset IN (1, 2)')
    refused = rebuild(config, database_dsn)
    assert refused.returncode == 1
    assert (
        "partition 0: 2 offset(s) missing between retained records (lost before they were read, or pruned); "
        "the stored history holds 2 version(s) of missing records"
    ) in refused.stderr


def test_history_rebuild_takes_a_transaction_marker_for_no_record(wh, database_dsn, tmp_path):
    """offset_gaps = "transaction-markers": an exactly-once producer leaves one offset per
    transaction to its commit marker ("Kafka Connect ... exactly.once.source.support"), so a
    one-offset gap is no hole; the version of the record that is gone is still counted,
    and replaced only with --yes."""
    p, config = project(wh, tmp_path, order_by="postgres-lsn")
    feed(wh, p, "acc", REDELIVERY)
    config.write_text(config.read_text().replace("columns = ", 'offset_gaps = "transaction-markers"\ncolumns = ', 1))
    wh.execute('DELETE FROM cdc."acc__stream" WHERE kafka_offset = 1')
    refused = rebuild(config, database_dsn)
    assert refused.returncode == 1
    assert "1 of them are versions of records the stream no longer retains: no rebuild restores them" in refused.stderr
    assert "hole" not in refused.stderr


@pytest.mark.parametrize("level", ["serializable", "repeatable read"])
def test_history_rebuild_and_sync_run_at_once_without_a_serialization_failure(
    database_dsn, whole_relation_predicate_locks, level
):
    """Redshift runs every transaction at SERIALIZABLE or SNAPSHOT isolation, one level per
    database ("Isolation levels in Amazon Redshift"), and tracks conflicts per table: the
    rebuild takes the table's watermark lock first, as the CALL does, so a stream writer, a
    sync and a rebuild that replaces versions, running at once, never form a cycle (no
    retries: conflict_attempts = 1), and the history ends equal to a rebuild of it."""
    import threading

    from sync.operations.history_rebuild import Outcome, rebuild_history
    from sync.warehouse import connect
    from tests.helpers import at_isolation_level, ingest, make_pipeline, sync_one
    from tests.test_delivery_semantics import setup as deployed

    toml = history_toml("acc", order_by="postgres-lsn")
    setup_wh = connect(database_dsn)
    p = deployed(setup_wh, toml)
    at_isolation_level(database_dsn, level)
    p = make_pipeline(toml.replace("[[tables]]", "[operations]\nconflict_attempts = 1\n\n[[tables]]", 1))
    errors: list[BaseException] = []

    def each(work) -> None:
        wh = connect(database_dsn)
        try:
            for i in range(8):
                work(wh, i)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            wh.close()

    def write_and_sync(wh, i: int) -> None:
        ingest(wh, p, "acc", [pg("u", k, 100 * i + k, 1000 + 10 * i + k) for k in (1, 2, 3)])
        sync_one(wh, p, "acc")

    def damage_and_rebuild(wh, i: int) -> None:
        with wh.transaction():  # an operation of its own, under the table's lock
            wh.execute(f'LOCK TABLE cdc."acc__watermark"{wh.dialect.lock_mode}')
            deleted = wh.execute('DELETE FROM cdc."acc__history" WHERE id = 3')
        outcome = rebuild_history(wh, p, "acc", apply=True).outcome
        assert outcome in ((Outcome.WRITTEN, Outcome.REPLACED) if deleted else (Outcome.UNCHANGED,))

    threads = [threading.Thread(target=each, args=(work,)) for work in (write_and_sync, damage_and_rebuild)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert rebuild_history(setup_wh, p, "acc").outcome is Outcome.UNCHANGED
    assert len(history(setup_wh)) == 24
    setup_wh.close()


def test_history_rebuild_on_a_table_without_history_says_how_to_turn_it_on():
    pipeline = make_pipeline(table_toml("acc", order_by="postgres-lsn"))
    assert pipeline.table("acc").history is None
    with pytest.raises(
        ConfigError, match=r"keeps no history: set history = true on it in the pipeline file, then run `redshift-sync revision`"
    ):
        history_table(pipeline, "acc")

"""Property: for whatever Debezium delivers (tests/delivery.py: restarts that re-send a
suffix, tied positions, re-snapshots, tombstone-only deletes, partition growth), cut into
any sync batches, `history rebuild` over the records the stream retains finds the history
the procedure built incrementally: nothing to replace, in every history mode of
tests/test_property_cdc.py. Below, by their smallest deliveries, the batch cuts that once
made them differ (a tombstone-only delete whose fate the next batch's record decides)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from sync.operations.history_rebuild import Outcome, rebuild_history
from tests.delivery import Change, Connector, History, Restart, batches, deliver, emit
from tests.helpers import ingest, sync_one
from tests.history_model import history_sequences, true_sequences
from tests.test_property_cdc import (
    KEYS,
    MODES,
    _reset,
    _row,
    _source_rows,
    _target,
    check_history,
    describe,
    draw_delivery,
    steps,
    warehouse,  # noqa: F401 (fixture)
)

HISTORY_MODES = [name for name, mode in MODES.items() if mode.history]


def test_the_property_covers_history_modes():
    assert len(HISTORY_MODES) >= 5


@pytest.mark.slow
@pytest.mark.parametrize("mode_name", HISTORY_MODES)
@settings(max_examples=int(os.environ.get("PROPERTY_EXAMPLES", 15)))
@given(
    initial=st.lists(st.tuples(st.sampled_from(KEYS), st.integers(-9999, 9999)), max_size=3, unique_by=lambda t: t[0]),
    drawn=steps,
    data=st.data(),
)
def test_rebuild_finds_the_incremental_history(warehouse, mode_name, initial, drawn, data):  # noqa: F811
    wh, mode = warehouse.wh, MODES[mode_name]
    pipeline = warehouse.pipeline(mode_name)
    table = f"t_{mode_name}"
    _reset(wh, table)
    history, connector, restarts, cuts = draw_delivery(data, mode, initial, drawn)
    delivery = deliver(emit(history, connector), connector, restarts)
    records = delivery.records
    note(describe(history, connector, restarts, delivery, cuts))
    for lo, hi in batches(records, cuts):
        ingest(wh, pipeline, table, records[lo:hi])
        sync_one(wh, pipeline, table)
    result = rebuild_history(wh, pipeline, table)
    assert result.records == len(records) and not result.gaps
    assert (result.outcome, result.stored_only, result.rebuilt_only) == (Outcome.UNCHANGED, 0, 0), result


# ---- a batch ending on a re-sent event before a re-sent tombstone-only delete ---------------
#
# A Db2 table through ExtractNewRecordState with `delete.tombstone.handling.mode=tombstone`:
# "the SMT removes the change event ... and retains only the tombstone record" (Debezium,
# New Record State Extraction), so a delete reaches the sync as a tombstone with no position.
# A connector that restarts "might receive some events more than once" (Debezium Db2
# connector, "Behavior when things go wrong"): it re-sends, in order, from an earlier offset.
DB2 = "db2_unwrap_tombstone_history"
A = (0, "eu")
CONNECTOR = Connector(source="db2", format="unwrap-tombstone", initial_snapshot=False)


def _synced(warehouse, history: History, restarts: list[Restart], cuts: list[int], mode=DB2, connector=CONNECTOR):  # noqa: F811
    wh, pipeline, table = warehouse.wh, warehouse.pipeline(mode), f"t_{mode}"
    _reset(wh, table)
    delivery = deliver(emit(history, connector), connector, restarts)
    print(describe(history, connector, restarts, delivery, cuts))
    for lo, hi in batches(delivery.records, cuts):
        ingest(wh, pipeline, table, delivery.records[lo:hi])
        sync_one(wh, pipeline, table)
    return wh, pipeline, table


# Insert a, delete, insert b; the connector stops after b and resumes at the first insert.
LOST_DELETE = (
    History(((Change("write", A, _row(A, "a", 1)),), (Change("delete", A),), (Change("write", A, _row(A, "b", 2)),))),
    [Restart(stop=3, resume=0)],
    [4],
)
# Insert, delete, insert, delete; the connector stops after the first delete and resumes at the first insert.
_WRITE = Change("write", A, _row(A, "a", 1))
LATE_DELETE = (History(((_WRITE,), (Change("delete", A),), (_WRITE,), (Change("delete", A),))), [Restart(stop=2, resume=0)], [3])


def test_a_batch_ending_on_a_resent_create_keeps_the_delete_after_it(warehouse):  # noqa: F811
    """a, tombstone, b, then re-sent: a, tombstone, b. A batch ending on the re-sent insert
    of a cannot tell the real tombstone yet (the record after the re-sent a decides): it
    waits, no version, and the next batch's first record, the re-sent tombstone, keeps it.
    The re-sent tombstone, ranked at b's position and followed by b's copy, is none: the
    history is the source's a, deleted, b, as a rebuild finds it."""
    history, restarts, cuts = LOST_DELETE
    wh, pipeline, table = _synced(warehouse, history, restarts, cuts)
    assert history_sequences(wh, f'cdc."{table}__history"') == true_sequences(history, CONNECTOR)
    result = rebuild_history(wh, pipeline, table)
    assert (result.outcome, result.stored_only, result.rebuilt_only) == (Outcome.UNCHANGED, 0, 0), result


@pytest.mark.parametrize("delivery", [LOST_DELETE, LATE_DELETE], ids=["lost_delete", "late_delete"])
def test_the_target_after_a_batch_ending_on_a_resent_create_is_the_source_state(warehouse, delivery):  # noqa: F811
    """The current state after the same deliveries, cut there: the source's final state
    (the history's waiting tombstone is the history's alone), every version's interval
    ending where the next begins."""
    history, restarts, cuts = delivery
    wh, _, table = _synced(warehouse, history, restarts, cuts)
    assert _target(wh, table, soft=False) == _source_rows(history)
    check_history(wh, table, "close", history, CONNECTOR, complete=True)


def test_a_batch_ending_on_a_resent_create_dates_the_delete_by_its_first_record(warehouse):  # noqa: F811
    """a, tombstone, then re-sent: a, tombstone, then a, tombstone. A batch ending on the
    re-sent insert leaves the real tombstone (offset 1) waiting; its re-sent copy (offset 3),
    the next batch's first record, makes it the delete again, and adds nothing itself: the
    version is the first record's, as a rebuild finds it."""
    history, restarts, cuts = LATE_DELETE
    wh, pipeline, table = _synced(warehouse, history, restarts, cuts)
    assert history_sequences(wh, f'cdc."{table}__history"') == true_sequences(history, CONNECTOR)
    opened = wh.query(f"SELECT _kafka_offset FROM cdc.\"{table}__history\" WHERE _op = 'd' ORDER BY _kafka_offset")
    assert opened == [(1,), (5,)]
    result = rebuild_history(wh, pipeline, table)
    assert (result.outcome, result.stored_only, result.rebuilt_only) == (Outcome.UNCHANGED, 0, 0), result


@pytest.mark.parametrize("cuts", [[3], [3, 4]], ids=["next_batch", "batch_after"])
def test_a_second_restart_after_a_batch_ending_on_a_resent_create_keeps_the_first_delete(warehouse, cuts):  # noqa: F811
    """a, tombstone, b; the connector stops after the tombstone and resumes at a, then stops
    right after a and resumes at it once more: a, tombstone, a, a, tombstone, b. A batch
    ends on the first re-sent a (the tombstone waits); the key's next record, in the next
    batch or alone in it, is the second re-sent a, not the tombstone: the tombstone's copy
    follows that one, so the delete stays, dated by its first record (offset 1), as a
    rebuild in one batch finds it."""
    history = LOST_DELETE[0]
    wh, pipeline, table = _synced(warehouse, history, [Restart(stop=2, resume=0), Restart(stop=1, resume=0)], cuts)
    assert history_sequences(wh, f'cdc."{table}__history"') == true_sequences(history, CONNECTOR)
    assert wh.query(f"SELECT _kafka_offset FROM cdc.\"{table}__history\" WHERE _op = 'd'") == [(1,)]
    result = rebuild_history(wh, pipeline, table)
    assert (result.outcome, result.stored_only, result.rebuilt_only) == (Outcome.UNCHANGED, 0, 0), result


def test_a_second_restart_within_the_resent_run_keeps_the_delete(warehouse):  # noqa: F811
    """Insert a, update to b, delete (PostgreSQL, tombstone-only deletes); the connector
    stops after the tombstone and resumes at the update, then stops again right after it and
    resumes at it once more: a, b, tombstone, b, b, tombstone. In one batch the first re-sent
    b (followed by the second, not by a tombstone) took the real tombstone for a re-sent
    one; the copy that precedes the re-sent tombstone is the second, and it keeps it. The
    source's history is a, b, deleted."""
    mode = "pg_unwrap_tombstone_history"
    connector = Connector(source="postgres", format="unwrap-tombstone", initial_snapshot=False)
    history = History(((Change("write", A, _row(A, "a", 1)),), (Change("write", A, _row(A, "b", 2)),), (Change("delete", A),)))
    restarts = [Restart(stop=3, resume=1), Restart(stop=2, resume=1)]
    wh, _, table = _synced(warehouse, history, restarts, [], mode, connector)
    assert history_sequences(wh, f'cdc."{table}__history"') == true_sequences(history, connector)

"""A TOAST placeholder after a delete of its key: the deleted row's values are not the key's.

Debezium's PostgreSQL connector sends an unchanged TOASTed value as the placeholder
("Unchanged TOASTed columns arrive as `__debezium_unavailable_value`", toasted values); the
sync keeps "the stored value (or the batch's earlier one)" (docs/correctness.md). A delete
between that value and the placeholder ends the key: what the row held before it is no
longer its value, whether the delete came in an earlier batch or the same one, and whether
the target keeps deleted rows (soft mode) or not. Without a known value the update is
quarantined, and a replay, once the record that brought the value is in, applies it."""

from __future__ import annotations

import pytest

from sync.operations.quarantine import Selection, replay
from tests.helpers import feed
from tests.test_delivery_semantics import envelope, pg_source, table_toml
from tests.test_replay_ties import _widened

PLACEHOLDER = "__debezium_unavailable_value"


def row(note: str, balance: int = 10) -> dict:
    return {"id": 1, "balance": balance, "note": note}


@pytest.mark.parametrize("mode", ["hard", "soft"])
@pytest.mark.parametrize("cut", ["delete in the placeholder's batch", "delete in the batch before"])
def test_a_placeholder_after_a_delete_never_takes_the_deleted_rows_value(wh, mode, cut):
    """Source: INSERT note 'old' (lsn 100); DELETE (200); INSERT note 'new value' (300),
    which the sync quarantines (the column is varchar(4) until a revision widens it);
    UPDATE of the balance only (400), its unchanged note sent as the placeholder. The source
    ends at (1, 30, 'new value')."""
    narrow, widen = _widened(wh, table_toml("acc", order_by="postgres-lsn", delete_mode=mode), "acc", "note")
    records = [
        envelope("c", 1, row("old"), None, pg_source(100, 90)),
        envelope("d", 1, None, {"id": 1, "balance": None, "note": None}, pg_source(200, 190)),
        envelope("c", 1, row("new value"), None, pg_source(300, 290)),
        envelope("u", 1, row(PLACEHOLDER, 30), None, pg_source(400, 390)),
    ]
    first = 1 if cut == "delete in the placeholder's batch" else 2
    feed(wh, narrow, "acc", records[:first])
    run = feed(wh, narrow, "acc", records[first:])
    live = "SELECT id, balance, note FROM cdc.acc" + (" WHERE NOT _deleted" if mode == "soft" else "")
    assert wh.query(live) == [], "the placeholder took the value of the deleted row"
    assert run.quarantined == 2  # the over-long insert and the update without a known value
    replay(wh, widen(), Selection("acc"))
    assert wh.query(live) == [(1, 30, "new value")]

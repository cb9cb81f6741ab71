"""A soft delete keeps the row's last values (docs/correctness.md, "Delivery semantics").
Under REPLICA IDENTITY DEFAULT PostgreSQL's delete carries the key only, and an update
that leaves a TOASTed column unchanged carries the placeholder for it: "any unchanged
TOAST column value that is not part of the replica identity is not contained in the event
... Debezium ... returns a placeholder value" (Debezium PostgreSQL connector, "Toasted
values"). The last value of such a column is the one before the placeholder."""

from __future__ import annotations

import pytest

from tests.helpers import feed
from tests.test_delivery_semantics import envelope, pg_source, rows, setup, table_toml

PLACEHOLDER = "__debezium_unavailable_value"


def ev(op: str, balance: int, note: str | None, lsn: int) -> dict:
    return envelope(op, 1, {"id": 1, "balance": balance, "note": note}, None, pg_source(lsn, lsn - 10))


DELETE = envelope("d", 1, None, {"id": 1, "balance": None, "note": None}, pg_source(900, 890))


@pytest.mark.parametrize("stored", [False, True], ids=["insert in the batch", "insert stored before"])
@pytest.mark.parametrize(
    ("updates", "last"),
    [
        ([ev("u", 2, PLACEHOLDER, 200)], "kept"),
        ([ev("u", 2, PLACEHOLDER, 200), ev("u", 3, PLACEHOLDER, 300)], "kept"),
        ([ev("u", 2, "changed", 200), ev("u", 3, PLACEHOLDER, 300)], "changed"),
        ([ev("u", 2, None, 200), ev("u", 3, PLACEHOLDER, 300)], None),  # a NULL set by the source stays
    ],
    ids=["one placeholder", "two placeholders", "a change, then a placeholder", "NULL, then a placeholder"],
)
def test_a_soft_delete_after_placeholder_updates_in_its_batch_keeps_the_last_value(wh, stored, updates, last):
    p = setup(wh, table_toml("acc", order_by="postgres-lsn", delete_mode="soft"))
    insert = ev("c", 1, "kept", 100)
    if stored:
        feed(wh, p, "acc", [insert])
    feed(wh, p, "acc", [*([] if stored else [insert]), *updates, DELETE])
    assert rows(wh, "acc", "id, balance, note, _deleted") == [(1, len(updates) + 1, last, True)]

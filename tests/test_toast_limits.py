"""Known limits of the TOAST rule (docs/correctness.md, "Delivery semantics", the row of
unchanged TOASTed values), written as the outside contract says they should end, and
marked as expected failures until the merge meets it (strict: the day one passes, its mark
must go).

PostgreSQL sends an unchanged TOASTed value of an UPDATE as the placeholder under REPLICA
IDENTITY DEFAULT: "any unchanged TOAST column value that is not part of the replica
identity is not contained in the event ... Debezium ... returns a placeholder value"
(Debezium PostgreSQL connector, "Toasted values"). The value is the one the row held just
before the update, in source order."""

from __future__ import annotations

import pytest

from tests.helpers import feed
from tests.test_delivery_semantics import envelope, pg_source, rows, setup, table_toml

PLACEHOLDER = "__debezium_unavailable_value"


def ev(op: str, balance: int, note: str, lsn: int, partition: int = 0) -> dict:
    return envelope(op, 1, {"id": 1, "balance": balance, "note": note}, None, pg_source(lsn, lsn - 10), partition)


@pytest.mark.xfail(strict=True, reason="the stored value a placeholder took is not revised by a late older change")
def test_a_late_older_change_reaches_the_placeholder_update_applied_before_it(wh):
    """The topic's partitions grew: the key's update at LSN 400 (NOTE unchanged: the
    placeholder) is in its new partition and synced; the update at LSN 240 that set NOTE,
    appended late to the old partition, arrives after it. In source order NOTE is 'late'
    from 240 on, so also at 400; the target keeps what it filled in at 400."""
    p = setup(wh, table_toml("acc", order_by="postgres-lsn"))
    feed(wh, p, "acc", [ev("c", 1, "first", 100)])
    feed(wh, p, "acc", [ev("u", 3, PLACEHOLDER, 400, partition=1)])
    feed(wh, p, "acc", [ev("u", 2, "late", 240)])
    assert rows(wh, "acc", "id, balance, note") == [(1, 3, "late")]

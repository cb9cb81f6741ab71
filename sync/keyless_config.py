"""What a table without a primary key (`primary_key = []`) needs of its pipeline file to be
exact, and the refusal, naming the setting to change, of what cannot be.

A keyless table's target is a multiset of rows: an insert adds a row, a delete removes one
row equal to its before image, an update replaces one such row (docs/correctness.md,
"Tables without a primary key"). That takes, for every update and delete, the full before
image, and a source position that orders every event of the source database: Kafka order
cannot tell a re-sent event from a new one with the same values, and the producer
spreads a null-key topic over its partitions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class _Column(Protocol):
    name: str

    @property
    def sql_type(self): ...


class TableSettings(Protocol):
    """What the checks read of a table (sync.config.TableConfig, which calls them: a
    protocol, so this module does not import the one that imports it)."""

    name: str
    format: str
    order_by: str
    replica_identity: str
    delete_mode: str
    on_truncate: str

    @property
    def columns(self) -> Sequence[_Column]: ...

    @property
    def is_keyless(self) -> bool: ...


# The source orders a keyless table is exact with: a position per change event, total per
# source database (docs/debezium.md, "Ordering").
KEYLESS_ORDERS = ("mysql-binlog", "postgres-lsn")


def check_keyless(table: TableSettings) -> None:
    """Raise ValueError naming the setting when `table` (keyless) cannot be kept exact."""
    if table.format == "debezium-unwrap":
        raise ValueError(
            "format: a table without a primary key needs format = 'debezium' (the full envelope): "
            "ExtractNewRecordState's tombstone delete modes turn a delete into a tombstone, which "
            "carries no row to delete"
        )
    if table.format == "row":
        raise ValueError(
            "format: a table without a primary key needs format = 'debezium': a query-based topic has "
            "no deletes and no source position"
        )
    if table.order_by not in KEYLESS_ORDERS:
        raise ValueError(
            f"order_by: a table without a primary key needs a source order ({' or '.join(map(repr, KEYLESS_ORDERS))}): "
            f"with {table.order_by!r} a re-sent event cannot be told from a new one with the same values"
        )
    if table.order_by == "postgres-lsn" and table.replica_identity != "full":
        raise ValueError(
            "replica_identity: a PostgreSQL table without a primary key needs REPLICA IDENTITY FULL "
            "(ALTER TABLE ... REPLICA IDENTITY FULL on the source, then replica_identity = 'full'): "
            "without it the connector emits no update or delete events for the table"
        )
    compared = [c.name for c in table.columns if c.sql_type.family == "super"]
    if compared:
        raise ValueError(
            f"columns: {', '.join(compared)} is super, which Redshift cannot compare or group by, and a row "
            "without a primary key is found by all its values; load it as varchar instead"
        )
    if table.delete_mode != "hard":
        raise ValueError("delete_mode: a table without a primary key has no key to mark deleted; use delete_mode = 'hard'")
    if table.on_truncate != "ignore":
        raise ValueError("on_truncate: not supported for a table without a primary key; use on_truncate = 'ignore'")


def refuse_keyless(table: TableSettings, command: str) -> None:
    """`command` matches rows by key: a table without one has its own (the keyless
    reconcile, sync/operations/keyless_reconcile.py)."""
    if table.is_keyless:
        raise ValueError(
            f"{command}: table {table.name!r} has no primary key (primary_key = []); {command} matches rows "
            "by key: such a table is compared by row hash (sync/operations/keyless_reconcile.py)"
        )

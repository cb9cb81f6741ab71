"""Reconcile of a table without a primary key on the warehouse side: rows compared as a
multiset, by their hash (`backfill/keyless.py` is the Spark twin).

  row hash   the row checksum of `sync/sql/buckets.py` over every configured column
  bucket     the row hash's number (its first 8 hex digits) mod N
  per bucket the rows, and the sum of their row hashes' numbers

The buckets that differ are opened: per row hash, its copies, and how many of them the
stream wrote at or after the snapshot's position."""

from __future__ import annotations

from sync.config import Pipeline, TableConfig
from sync.sql.buckets import hash_number, row_checksum
from sync.sql.dialect import PostgresDialect
from sync.sql.names import table_names


class KeylessReconcileSql:
    def __init__(self, d: PostgresDialect, pipeline: Pipeline, table: TableConfig, buckets: int):
        if buckets < 1:
            raise ValueError("--buckets must be at least 1")
        self.d, self.table, self.buckets = d, table, buckets
        n = table_names(pipeline, table)
        self.target = d.qualified(n.schema, n.target)
        self.deleted = d.qualified(n.schema, n.deleted_keys)
        self.hash = row_checksum(d, list(table.columns), "t")  # refuses a type without a canonical text

    def _hashed(self) -> str:
        return f"(SELECT {self.hash} AS row_hash, t.* FROM {self.target} t) h"

    def _bucket(self) -> str:
        return f"MOD({hash_number(self.d, 'h.row_hash')}, {int(self.buckets)})"

    def bucket_counts(self) -> str:
        """Per bucket: the rows and the sum of their row hashes' numbers."""
        return (
            f"SELECT {self._bucket()} AS bucket, COUNT(*) AS rows, SUM({hash_number(self.d, 'h.row_hash')}) AS checksum\n"
            f"FROM {self._hashed()}\nGROUP BY 1\nORDER BY 1;"
        )

    def bucket_rows(self, buckets: list[int], position: str | None) -> str:
        """Per row hash of `buckets`: the row's values, its copies, and the copies the
        stream wrote at or after `position` (the snapshot's; none without one)."""
        ids = ", ".join(str(int(x)) for x in buckets) or "-1"
        values = ", ".join(f"h.{self.d.q(c.target_name)}" for c in self.table.columns)
        after = f"COUNT(CASE WHEN h._source_pos >= {self.d.lit(position)} THEN 1 END)" if position is not None else "0"
        return (
            f"SELECT h.row_hash, {values}, COUNT(*) AS copies, {after} AS streamed\n"
            f"FROM {self._hashed()}\nWHERE {self._bucket()} IN ({ids})\nGROUP BY h.row_hash, {values};"
        )

    def changes_after(self, position: str) -> str:
        """The changes the stream applied at or after `position` (each may have removed one
        row): the applied positions, not the pending deletes (they repeat one)."""
        return (
            f"SELECT COUNT(*) FROM {self.deleted}\n"
            f"WHERE _kafka_partition IS NULL AND _row_hash IS NULL AND _source_pos >= {self.d.lit(position)};"
        )

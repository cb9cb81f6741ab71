"""Reconcile on the warehouse side: key buckets and row checksums in SQL.

The same functions exist in Spark (`backfill/reconcile.py`) and must give the same
numbers for the same values, on PostgreSQL and on Redshift:

  canonical text  a fixed text form per type (TO_CHAR with explicit formats for dates
                  and times, 'true'/'false' for booleans, plain digits for numbers,
                  significand and binary exponent for floats: `sync/sql/float_text.py`)
  key text        the key columns' canonical texts joined with '|'
  bucket          the first 8 hex digits of MD5(key text) as an unsigned number, mod N
  row checksum    MD5 over the MD5 of each chosen column's canonical text ('N' for NULL);
                  per bucket, the sum of each row checksum's first 8 hex digits

MD5, SUBSTRING, TO_CHAR and MOD are spelled the same in both engines; only hex-to-integer
differs (a dialect method).
"""

from __future__ import annotations

from sync.config import ColumnConfig, Pipeline, TableConfig
from sync.sql.dialect import PostgresDialect
from sync.sql.float_text import float_text
from sync.sql.handover import DELETE_TIME, ROW_TIME, held_time_sql
from sync.sql.names import table_names
from sync.sql.types import SqlType

KEY_SEPARATOR = "|"
FLOAT_FAMILIES = ("real", "double")
CHECKSUM_FAMILIES = (
    "smallint", "integer", "bigint", "decimal", *FLOAT_FAMILIES, "boolean", "char", "varchar", "date", "timestamp", "timestamptz",
)  # fmt: skip


def canonical_text(expr: str, t: SqlType) -> str:
    f = t.family
    if f in ("smallint", "integer", "bigint", "decimal"):
        return f"CAST({expr} AS varchar(64))"
    if f in FLOAT_FAMILIES:
        return float_text(expr)  # significand and exponent: exact, and alike in every engine
    if f in ("char", "varchar"):
        return f"CAST({expr} AS varchar(65535))"
    if f == "boolean":
        return f"CASE WHEN {expr} THEN 'true' WHEN NOT {expr} THEN 'false' END"
    if f == "date":
        return f"TO_CHAR({expr}, 'YYYY-MM-DD')"
    if f == "timestamp":
        return f"TO_CHAR({expr}, 'YYYY-MM-DD HH24:MI:SS.US')"
    if f == "timestamptz":
        return f"TO_CHAR({expr} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')"
    raise ValueError(
        f"reconcile cannot compare {t} columns (their text forms differ between engines); "
        f"usable types: {', '.join(CHECKSUM_FAMILIES)}"
    )


def key_text(d: PostgresDialect, table: TableConfig, alias: str) -> str:
    parts = [canonical_text(f"{alias}.{d.q(c.target_name)}", c.sql_type) for c in table.key_columns]
    return f" || '{KEY_SEPARATOR}' || ".join(parts)


def hash_number(d: PostgresDialect, text_expr: str) -> str:
    return d.hex_to_bigint(f"SUBSTRING(MD5({text_expr}), 1, 8)")


def bucket(d: PostgresDialect, table: TableConfig, alias: str, buckets: int) -> str:
    return f"MOD({hash_number(d, key_text(d, table, alias))}, {int(buckets)})"


def row_checksum(d: PostgresDialect, columns: list[ColumnConfig], alias: str) -> str:
    if not columns:
        return "''"
    parts = []
    for c in columns:
        value = f"{alias}.{d.q(c.target_name)}"
        parts.append(f"COALESCE(MD5({canonical_text(value, c.sql_type)}), 'N')")
    return "MD5(" + " || ".join(parts) + ")"


class ReconcileSql:
    def __init__(self, d: PostgresDialect, pipeline: Pipeline, table: TableConfig, buckets: int, checksum: list[ColumnConfig]):
        if buckets < 1:
            raise ValueError("--buckets must be at least 1")
        self.d, self.table, self.buckets, self.checksum = d, table, buckets, checksum
        n = table_names(pipeline, table)
        self.target = d.qualified(n.schema, n.target)
        self.deleted = d.qualified(n.schema, n.deleted_keys)
        self.soft = table.delete_mode == "soft"

    def _live(self, alias: str) -> str:
        return f"\n      WHERE NOT {alias}._deleted" if self.soft else ""

    def bucket_counts(self) -> str:
        """Per bucket: live rows and the checksum sum."""
        b = bucket(self.d, self.table, "t", self.buckets)
        chk = hash_number(self.d, row_checksum(self.d, self.checksum, "t")) if self.checksum else "0"
        return (
            f"SELECT b.bucket, COUNT(*) AS rows, SUM(b.checksum) AS checksum\n"
            f"FROM (SELECT {b} AS bucket, {chk} AS checksum\n"
            f"      FROM {self.target} t{self._live('t')}) b\n"
            "GROUP BY b.bucket\nORDER BY b.bucket;"
        )

    def bucket_rows(self, buckets: list[int]) -> str:
        """Every key of the given buckets: key text, checksum, source position, the time
        the backfill's merge dates it by (`sync/sql/handover.py`), and whether it is
        deleted (soft-deleted row, or a remembered hard delete)."""
        ids = ", ".join(str(int(x)) for x in buckets) or "-1"
        b_t = bucket(self.d, self.table, "t", self.buckets)
        chk = row_checksum(self.d, self.checksum, "t")
        deleted_flag = "t._deleted" if self.soft else "FALSE"
        key = key_text(self.d, self.table, "t")
        sql = (
            f"SELECT {key} AS key_text, {chk} AS checksum, t._source_pos, {held_time_sql('t', ROW_TIME)} AS held_time,"
            f" {deleted_flag} AS deleted\nFROM {self.target} t\nWHERE {b_t} IN ({ids})"
        )
        if not self.soft:
            sql += (
                f"\nUNION ALL\nSELECT {key}, NULL, t._source_pos, {held_time_sql('t', DELETE_TIME)}, TRUE\n"
                f"FROM {self.deleted} t\nWHERE {b_t} IN ({ids})"
            )
        return sql + ";"

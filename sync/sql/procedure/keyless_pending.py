"""Pending deletes of a table without a primary key (sync/sql/procedure/keyless.py).

The producer spreads a null-key table over partitions and Kafka orders records within a
partition only, so a refresh can expose a delete (or an update's before image) before the
insert of the row it removes. Such a delete is applied all the same: its position is
recorded, and what it could not remove is kept pending in the deleted-keys table, by the
hash of its image (`_row_hash`: the row checksum reconcile uses, sync/sql/buckets.py). An
insert of an equal row pays a pending delete instead of adding a row; the pair cancels, as
an insert and a delete of one batch do. The multiset is then exact whatever order the
partitions arrive in."""

from __future__ import annotations

from sync.sql.buckets import CHECKSUM_FAMILIES, FLOAT_FAMILIES, canonical_text
from sync.sql.procedure.context import CALL_TIME, Action, TableSql

PAYS = "pays a pending delete"


def row_hash(ctx: TableSql, alias: str = "") -> str:
    """The MD5 of the row's content: each column's canonical text (its own text form where
    reconcile has none, and for floats: stored pending deletes keep the hashes they have),
    'N' for NULL."""
    parts = []
    for c in ctx.table.columns:
        value = alias + ctx.q(c.target_name)
        if c.sql_type.family in CHECKSUM_FAMILIES and c.sql_type.family not in FLOAT_FAMILIES:
            text = canonical_text(value, c.sql_type)
        else:
            text = f"CAST({value} AS varchar(65535))"
        parts.append(f"COALESCE(MD5({text}), 'N')")
    return "MD5(" + " || ".join(parts) + ")"


def _pairs(ctx: TableSql) -> str:
    """The batch's remaining inserts (`pending` 0) and the stored pending deletes (1), each
    numbered within its row hash, with the count of pending deletes."""
    rel = ctx.rel
    return (
        "(SELECT h, pending, pos, k_partition, k_offset, k_op,\n"
        "        ROW_NUMBER() OVER (PARTITION BY h, pending ORDER BY pos, k_partition, k_offset) AS copy_no,\n"
        "        SUM(pending) OVER (PARTITION BY h) AS pendings\n"
        f" FROM (SELECT _row_hash AS h, 1 AS pending, _source_pos AS pos, CAST(NULL AS bigint) AS k_partition,\n"
        "              CAST(NULL AS bigint) AS k_offset, CAST(NULL AS varchar(16)) AS k_op\n"
        f"       FROM {rel.deleted} WHERE _row_hash IS NOT NULL\n"
        "       UNION ALL\n"
        f"       SELECT {row_hash(ctx)}, 0, _source_pos, _kafka_partition, _kafka_offset, _op\n"
        f"       FROM {rel.stage} WHERE _rn = 1 AND _action = '{Action.UPSERT}') x)"
    )


def pay_pending_sql(ctx: TableSql) -> str:
    """5. Each remaining insert equal to a pending delete pays it: both go (the insert
    superseded, `_reason` says why; a pending delete's position is unique among them)."""
    rel = ctx.rel
    return (
        "-- 5. An insert equal to a pending delete (one that arrived first, from another\n"
        "--    partition) pays it: the pair cancels.\n"
        f"UPDATE {rel.stage} s SET _rn = 2, _reason = '{PAYS}'\n"
        f"FROM {_pairs(ctx)} c\n"
        "WHERE c.pending = 0 AND c.copy_no <= c.pendings\n"
        "  AND s._kafka_partition = c.k_partition AND s._kafka_offset = c.k_offset AND s._op = c.k_op;\n"
        f"DELETE FROM {rel.deleted}\n"
        "WHERE _row_hash IS NOT NULL\n"
        "  AND _source_pos IN (\n"
        "    SELECT p.pos\n"
        "    FROM (SELECT _row_hash AS h, _source_pos AS pos,\n"
        "                 ROW_NUMBER() OVER (PARTITION BY _row_hash ORDER BY _source_pos) AS copy_no\n"
        f"          FROM {rel.deleted} WHERE _row_hash IS NOT NULL) p\n"
        f"    JOIN (SELECT {row_hash(ctx)} AS h, COUNT(*) AS paid\n"
        f"          FROM {rel.stage} WHERE _reason = '{PAYS}' GROUP BY 1) q ON q.h = p.h\n"
        "    WHERE p.copy_no <= q.paid);"
    )


def keep_pending_sql(ctx: TableSql, content: str) -> str:
    """6. The deletes beyond the stored rows of their content are kept pending (inside the
    apply's IF: the batch has deletes)."""
    rel = ctx.rel
    return (
        f"INSERT INTO {rel.deleted} (_source_pos, _row_hash, _deleted_at)\n"
        f"SELECT _p._source_pos, _p.h, {CALL_TIME}\n"
        "FROM (SELECT _source_pos, h, stored,\n"
        f"             ROW_NUMBER() OVER (PARTITION BY {content}, stored ORDER BY _source_pos) AS copy_no,\n"
        f"             SUM(stored) OVER (PARTITION BY {content}) AS rows_stored\n"
        f"      FROM (SELECT {content}, CAST(NULL AS varchar(64)) AS _source_pos, CAST(NULL AS char(32)) AS h, 1 AS stored\n"
        f"            FROM {rel.target}\n"
        "            UNION ALL\n"
        f"            SELECT {content}, _source_pos, {row_hash(ctx)}, 0 FROM {rel.stage}\n"
        f"            WHERE _rn = 1 AND _action = '{Action.DELETE}') x) _p\n"
        "WHERE _p.stored = 0 AND _p.copy_no > _p.rows_stored;"
    )

"""A table without a primary key (`primary_key = []`): its target is a multiset of rows.
An insert adds a row, a delete removes ONE row equal to its before image, an update
removes one row equal to its before image and adds its after image (docs/correctness.md,
"Tables without a primary key").

The stage query runs twice: once over the before images (an update's row to remove, as a
delete of its own, `_op = BEFORE`), once as for every table. Exactness under
at-least-once delivery rests on the source position, total per source database and
unique per change event. The table's deleted-keys table holds the positions applied
(written in the same transaction as the rows): a re-sent change is recognised because its
position is there, while an older change that arrives late (the producer spreads a
null-key table over partitions, and Kafka orders only within one) is not there and
applies. The reads of one snapshot share one position: the table keeps the record of the
snapshot's first read (its Kafka partition, offset and time; change positions keep none),
and a read older than it in Kafka order, or a change below its position, is stale. The
copies of one event read in one batch are one event. What remains is a multiset sum: per
row content, the batch's inserts and deletes cancel pairwise, the rest add or remove that
many rows; a delete that finds no row to remove, its row's insert being late in another
partition, is kept pending until that insert pays it (sync/sql/procedure/keyless_pending.py)."""

from __future__ import annotations

from dataclasses import replace

from sync.sql import schemas
from sync.sql.procedure.context import APPLIED, CALL_TIME, Action, TableSql
from sync.sql.procedure.keyless_pending import keep_pending_sql
from sync.sql.procedure.ordering import kafka_later, kafka_order
from sync.sql.procedure.stage import stage_insert_sql
from sync.sql.procedure.text import indent

# The `_op` of an update's before image in the stage: no connector writes it (Debezium's
# operations are one letter: Envelope.Operation).
BEFORE = "before"
POSITIONLESS = "no source position: a table without a primary key is ordered by it"
UNAVAILABLE = "a value is the TOAST placeholder: a row without a primary key has no stored value to keep"
SNAPSHOT_START = "the first read of a snapshot"
NO_BEFORE_IMAGE = "update without a full before image: the source table needs REPLICA IDENTITY FULL"
# A physical row of the target: the event that wrote it.
ROW_IDENTITY = ("_source_pos", "_kafka_partition", "_kafka_offset")


def _content(ctx: TableSql, alias: str = "") -> str:
    """Every configured column: what makes two rows equal (NULLs equal, as in PARTITION BY)."""
    return ", ".join(alias + ctx.q(c.target_name) for c in ctx.table.columns)


def snapshot_at(ctx: TableSql) -> str:
    """The position of the snapshot the table began with (NULL without one): the one
    applied-positions row that carries a Kafka record."""
    return f"(SELECT MAX(_source_pos) FROM {ctx.rel.deleted} WHERE _kafka_partition IS NOT NULL)"


def _applied(ctx: TableSql) -> str:
    """The stage row `s` was applied before: a change whose position is recorded, or a
    read older in Kafka order than the recorded first read of its snapshot."""
    later = kafka_later("a", "a._kafka_timestamp", "s", "s._kafka_timestamp")
    return (
        f"EXISTS (SELECT 1 FROM {ctx.rel.deleted} a\n"
        "               WHERE a._source_pos = s._source_pos\n"
        "                 AND (s._op <> 'r' AND a._kafka_partition IS NULL\n"
        f"                      OR s._op = 'r' AND a._kafka_partition IS NOT NULL\n"
        f"                         AND {indent(later, 25).lstrip()}))"
    )


def before_images_sql(ctx: TableSql) -> str:
    """The before image of each update of the batch, into the stage as a delete."""
    stage = ctx.rel.stage
    return (
        "-- 2./3. An update removes one row equal to its before image: the before images of the\n"
        "--       batch's updates are staged first, each as a delete of its own (_op 'before').\n"
        + stage_insert_sql(replace(ctx, before_images=True))
        + f"\nDELETE FROM {stage} WHERE _op IS NULL OR _op <> 'u';\n"
        f"UPDATE {stage} SET _op = '{BEFORE}',\n"
        f"  _action = CASE WHEN _action = '{Action.UPSERT}' THEN '{Action.DELETE}' ELSE '{Action.QUARANTINE}' END;"
    )


def pair_sql(ctx: TableSql) -> str:
    """An update applies whole or not at all. An image holding the TOAST placeholder is
    quarantined first (a row without a primary key has no stored value to keep), in either
    image of an update (DBZ-7193: under REPLICA IDENTITY FULL the after image may hold it
    while the before image is whole). An update whose before image is missing, does not
    convert or holds the placeholder is quarantined (with the payload its before image
    kept), and the before image of an update that does not apply goes."""
    stage = ctx.rel.stage
    same_record = "b._kafka_partition = {s}._kafka_partition AND b._kafka_offset = {s}._kafka_offset"
    return (
        "-- 3. An update applies whole: an image with the TOAST placeholder, and an update whose before image is\n"
        "--    missing, does not convert or holds it, are quarantined; the before image of one that does not apply goes.\n"
        f"UPDATE {stage} SET _action = '{Action.QUARANTINE}', _reason = '{UNAVAILABLE}'\n"
        f"WHERE _unavailable IS NOT NULL AND _action IN {APPLIED};\n"
        f"UPDATE {stage} s SET _action = '{Action.QUARANTINE}', _reason = '{NO_BEFORE_IMAGE}', _payload = b._payload\n"
        f"FROM {stage} b\n"
        f"WHERE s._op = 'u' AND s._action = '{Action.UPSERT}'\n"
        f"  AND b._op = '{BEFORE}' AND b._action = '{Action.QUARANTINE}' AND {same_record.format(s='s')};\n"
        f"DELETE FROM {stage}\n"
        f"WHERE _op = '{BEFORE}'\n"
        f"  AND NOT EXISTS (SELECT 1 FROM {stage} b\n"
        f"                  WHERE b._op = 'u' AND b._action = '{Action.UPSERT}' AND {same_record.format(s=stage)});"
    )


def keyless_order_sql(ctx: TableSql) -> str:
    """5. An event applied before is stale, and so is a change the table's snapshot holds
    (below its position); copies of one event read in one batch are one event (`_rn` 1,
    the others superseded)."""
    stage = ctx.rel.stage
    oldest_first = kafka_order("x._kafka_time", "x._kafka_partition", "x._kafka_offset", newest_first=False)
    return (
        "-- 4./5. Events without a source position cannot be ordered: quarantined. A change whose\n"
        "--    position was applied is a re-sent one, and so is a read older than its snapshot's\n"
        "--    first read; a change below the snapshot's position is in it: stale (a replayed\n"
        "--    record too: a copy of it applied, or the snapshot read its row). A late older change\n"
        "--    (another partition) applies. Copies of one event in the batch are one event.\n"
        f"UPDATE {stage} SET _action = '{Action.QUARANTINE}', _reason = '{POSITIONLESS}'\n"
        f"WHERE _source_pos IS NULL AND _action IN {APPLIED};\n"
        f"UPDATE {stage} s SET _action = '{Action.STALE}'\n"
        f"WHERE s._action IN {APPLIED}\n"
        f"  AND (s._source_pos < {snapshot_at(ctx)}\n"
        f"       OR {_applied(ctx)});\n"
        f"UPDATE {stage} s SET _rn = CASE WHEN s._op = 'r' THEN 1 ELSE c.copy_no END\n"
        "FROM (SELECT x._kafka_partition, x._kafka_offset, x._op,\n"
        f"             ROW_NUMBER() OVER (PARTITION BY x._source_pos, x._op ORDER BY {oldest_first}) AS copy_no\n"
        f"      FROM {stage} x\n"
        f"      WHERE x._action IN {APPLIED}) c\n"
        "WHERE s._kafka_partition = c._kafka_partition AND s._kafka_offset = c._kafka_offset AND s._op = c._op;"
    )


def snapshot_start_sql(ctx: TableSql) -> str:
    """A (re-)started snapshot: its first read (`source.snapshot` "first", or
    "first_in_data_collection" for each table, Debezium 2.0+) begins the table anew: the
    reads of one snapshot share one position, so an interrupted snapshot, which the
    connector runs again from the start, cannot be told apart read by read. Not stale, it
    is at or above every stored position: the stored rows go, and so do the batch's events
    before it (position, then Kafka order). The applied positions go too, and the first read
    is recorded: the read every later one is compared with, and the position below which a
    change is in the snapshot (a safe prune: such a change is stale whatever it is)."""
    d, rel = ctx.d, ctx.rel
    stage = rel.stage
    snapshot = " OR ".join(
        f"{d.json_get_text(d.json_get(payload, 'source'), 'snapshot')} IN ('first', 'first_in_data_collection')"
        for payload in ("m.payload", d.json_get("m.payload", "payload"))
    )
    newest = "ORDER BY _source_pos DESC, _kafka_timestamp DESC, _kafka_partition DESC, _kafka_offset DESC"
    return (
        "-- 4. A snapshot's first read begins the table anew (an interrupted snapshot is run again\n"
        "--    from the start, at one position): the stored rows and the events before it go.\n"
        f"UPDATE {stage} s SET _reason = '{SNAPSHOT_START}'\n"
        f"FROM {rel.stream} m\n"
        f"WHERE s._op = 'r' AND s._action IN {APPLIED}\n"
        "  AND m.kafka_partition = s._kafka_partition AND m.kafka_offset = s._kafka_offset AND m.refresh_time = s._refresh_time\n"
        f"  AND ({snapshot});\n"
        "GET DIAGNOSTICS v_rows := ROW_COUNT;\n"
        "IF v_rows > 0 THEN\n"
        f"  DELETE FROM {rel.target};\n"
        f"  UPDATE {stage} s SET _action = '{Action.STALE}'\n"
        "  FROM (SELECT _source_pos, _kafka_partition, _kafka_offset, _kafka_timestamp,\n"
        f"               ROW_NUMBER() OVER ({newest}) AS newest_no\n"
        f"        FROM {stage} WHERE _reason = '{SNAPSHOT_START}') mk\n"
        f"  WHERE mk.newest_no = 1 AND s._action IN {APPLIED}\n"
        "    AND (s._source_pos < mk._source_pos\n"
        "         OR (s._source_pos = mk._source_pos\n"
        f"             AND {indent(kafka_later('mk', 'mk._kafka_timestamp', 's', 's._kafka_timestamp'), 13).lstrip()}));\n"
        f"  DELETE FROM {rel.deleted};\n"
        + indent(
            schemas.insert_select_sql(
                d,
                rel.deleted,
                schemas.deleted_keys(ctx.table),
                {
                    **{c: c for c in ("_source_pos", "_kafka_partition", "_kafka_offset", "_kafka_timestamp")},
                    "_deleted_at": CALL_TIME,
                },
                f"FROM {stage} WHERE _reason = '{SNAPSHOT_START}' AND _action IN {APPLIED};",
            ),
            2,
        )
        + "\nEND IF;"
    )


def cancel_sql(ctx: TableSql) -> str:
    """Per row content, the batch's inserts and deletes cancel pairwise (`_rn` 2: superseded):
    what is left of one content is all inserts or all deletes."""
    stage, content = ctx.rel.stage, _content(ctx)
    return (
        "-- 4. A multiset sum: per row content, the batch's inserts and deletes cancel in pairs.\n"
        f"UPDATE {stage} s SET _rn = 2\n"
        "FROM (SELECT _kafka_partition, _kafka_offset, _op,\n"
        f"             ROW_NUMBER() OVER (PARTITION BY {content}, _action\n"
        "               ORDER BY _source_pos, _kafka_partition, _kafka_offset) AS copy_no,\n"
        f"             COUNT(CASE WHEN _action = '{Action.UPSERT}' THEN 1 END) OVER (PARTITION BY {content}) AS inserts,\n"
        f"             COUNT(CASE WHEN _action = '{Action.DELETE}' THEN 1 END) OVER (PARTITION BY {content}) AS deletes\n"
        f"      FROM {stage} WHERE _rn = 1 AND _action IN {APPLIED}) c\n"
        "WHERE s._kafka_partition = c._kafka_partition AND s._kafka_offset = c._kafka_offset AND s._op = c._op\n"
        "  AND c.copy_no <= LEAST(c.inserts, c.deletes);\n"
        f"SELECT COUNT(*) INTO v_rows FROM {stage} WHERE _rn = 1 AND _action = '{Action.DELETE}';"
    )


def delete_rows_sql(ctx: TableSql) -> str:
    """6. Each remaining delete removes one stored row of its content (which one does not
    matter to a multiset: the oldest). Redshift's DELETE takes tables only in USING
    (r_DELETE: "You can use a subquery in the WHERE clause instead")."""
    rel, content = ctx.rel, _content(ctx)
    identity = ", ".join(ROW_IDENTITY)
    # `reset-positions` clears stored positions: a row's position may be NULL.
    same_row = " AND ".join(
        f"COALESCE(_d.{c}, '') = COALESCE({rel.target}.{c}, '')" if c == "_source_pos" else f"_d.{c} = {rel.target}.{c}"
        for c in ROW_IDENTITY
    )
    return (
        "-- 6. Apply: each remaining delete removes one stored row equal to its image; those\n"
        "--    beyond the stored rows of their content are kept pending.\n"
        "IF v_rows > 0 THEN\n" + indent(keep_pending_sql(ctx, content), 2) + f"\n  DELETE FROM {rel.target}\n"
        "  WHERE EXISTS (\n"
        f"    SELECT 1 FROM (SELECT stored, {identity},\n"
        f"                          ROW_NUMBER() OVER (PARTITION BY {content}, stored ORDER BY {identity}) AS copy_no,\n"
        f"                          SUM(deleting) OVER (PARTITION BY {content}) AS deletes\n"
        f"                   FROM (SELECT {content}, {identity}, 1 AS stored, 0 AS deleting FROM {rel.target}\n"
        "                         UNION ALL\n"
        f"                         SELECT {content}, {identity}, 0, 1 FROM {rel.stage}\n"
        f"                         WHERE _rn = 1 AND _action = '{Action.DELETE}') x) _d\n"
        f"    WHERE _d.stored = 1 AND _d.copy_no <= _d.deletes\n"
        f"      AND {same_row});\n"
        "END IF;"
    )


def applied_positions_sql(ctx: TableSql) -> str:
    """7. The positions of the changes applied, in the same transaction: what makes a
    re-sent copy stale; the before images, which only the apply reads, leave the stage
    before the batch is counted."""
    rel = ctx.rel
    return (
        "-- 7. The positions of the changes applied (one deleted-keys row each), and the before\n"
        "--    images leave the stage before the batch is counted.\n"
        + schemas.insert_select_sql(
            ctx.d,
            rel.deleted,
            schemas.deleted_keys(ctx.table),
            {"_source_pos": "a._source_pos", "_deleted_at": CALL_TIME},
            f"FROM (SELECT DISTINCT _source_pos FROM {rel.stage}\n"
            f"      WHERE _action IN {APPLIED} AND _op IN ('c', 'u', 'd')) a;",
        )
        + f"\nDELETE FROM {rel.stage} WHERE _op = '{BEFORE}';"
    )

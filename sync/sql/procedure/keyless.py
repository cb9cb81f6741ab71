"""A table without a primary key (`primary_key = []`): its target is a multiset of rows.
An insert adds a row, a delete removes ONE row equal to its before image, an update
removes one row equal to its before image and adds its after image (docs/correctness.md,
"Tables without a primary key").

The stage query runs twice: once over the before images (an update's row to remove, as a
delete of its own, `_op = BEFORE`), once as for every table. Exactness under
at-least-once delivery rests on the source position, total per source database: the
table's high-water position (the newest one applied, kept as the one row of its
deleted-keys table) makes every re-sent event stale (a snapshot read at exactly that
position is not: the reads of one snapshot share it), and the copies of one event read
in one batch are one event. What remains is a multiset sum: per row content, the batch's
inserts and deletes cancel pairwise, the rest add or remove that many rows."""

from __future__ import annotations

from dataclasses import replace

from sync.sql import schemas
from sync.sql.procedure.context import APPLIED, CALL_TIME, Action, TableSql
from sync.sql.procedure.ordering import kafka_later, kafka_order, kafka_time, replayed
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


def high_water(ctx: TableSql) -> str:
    """The newest source position applied to the table (NULL before the first)."""
    return f"(SELECT MAX(_source_pos) FROM {ctx.rel.deleted})"


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
    """An update applies whole or not at all: one whose before image is missing or does not
    convert is quarantined (with the payload its before image kept), and the before image
    of an update that does not apply goes."""
    stage = ctx.rel.stage
    same_record = "b._kafka_partition = {s}._kafka_partition AND b._kafka_offset = {s}._kafka_offset"
    return (
        "-- 3. An update applies whole: one whose before image is missing or does not convert is\n"
        "--    quarantined, and the before image of one that does not apply goes.\n"
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
    """5. Never regress, by the table's high-water position; copies of one event read in
    one batch are one event (`_rn` 1, the others superseded)."""
    stage = ctx.rel.stage
    oldest_first = kafka_order("x._kafka_time", "x._kafka_partition", "x._kafka_offset", newest_first=False)
    return (
        "-- 4./5. Events without a source position cannot be ordered: quarantined. An event at or\n"
        "--    below the newest position applied is a re-sent one: stale (a snapshot read at that\n"
        "--    position is not: the reads of one snapshot share it; nor is a quarantined record\n"
        "--    being replayed: it was never applied). Copies of one event in the batch (a\n"
        "--    restart re-sent it) are one event: the first in Kafka order applies.\n"
        f"UPDATE {stage} SET _action = '{Action.QUARANTINE}', _reason = '{POSITIONLESS}'\n"
        f"WHERE _source_pos IS NULL AND _action IN {APPLIED};\n"
        f"UPDATE {stage} SET _action = '{Action.QUARANTINE}', _reason = '{UNAVAILABLE}'\n"
        f"WHERE _unavailable IS NOT NULL AND _action IN {APPLIED};\n"
        f"UPDATE {stage} s SET _action = '{Action.STALE}', _reason = s._action\n"
        f"WHERE s._action IN {APPLIED}\n"
        f"  AND (s._source_pos < {high_water(ctx)}\n"
        f"       OR (s._source_pos = {high_water(ctx)} AND s._op <> 'r'))\n"
        f"  AND NOT {replayed(ctx)};\n"
        f"UPDATE {stage} s SET _rn = CASE WHEN s._op = 'r' THEN 1 ELSE c.copy_no END\n"
        "FROM (SELECT x._kafka_partition, x._kafka_offset, x._op,\n"
        f"             ROW_NUMBER() OVER (PARTITION BY x._source_pos, x._op ORDER BY {oldest_first}) AS copy_no\n"
        f"      FROM (SELECT z.*, {indent(kafka_time('z._'), 20).lstrip()} AS _kafka_time\n"
        f"            FROM {stage} z) x\n"
        f"      WHERE x._action IN {APPLIED}) c\n"
        "WHERE s._kafka_partition = c._kafka_partition AND s._kafka_offset = c._kafka_offset AND s._op = c._op;"
    )


def snapshot_start_sql(ctx: TableSql) -> str:
    """A (re-)started snapshot: its first read (`source.snapshot` "first", or
    "first_in_data_collection" for each table, Debezium 2.0+) begins the table anew: the
    reads of one snapshot share one position, so an interrupted snapshot, which the
    connector runs again from the start, cannot be told apart read by read. Not stale, it
    is at or above every stored position: the stored rows go, and so do the batch's events
    before it (position, then Kafka order)."""
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
        f"  UPDATE {stage} s SET _action = '{Action.STALE}', _reason = s._action\n"
        "  FROM (SELECT _source_pos, _kafka_partition, _kafka_offset, _kafka_timestamp,\n"
        f"               ROW_NUMBER() OVER ({newest}) AS newest_no\n"
        f"        FROM {stage} WHERE _reason = '{SNAPSHOT_START}') mk\n"
        f"  WHERE mk.newest_no = 1 AND s._action IN {APPLIED}\n"
        "    AND (s._source_pos < mk._source_pos\n"
        "         OR (s._source_pos = mk._source_pos\n"
        f"             AND {indent(kafka_later('mk', 'mk._kafka_timestamp', 's', 's._kafka_timestamp'), 13).lstrip()}));\n"
        "END IF;"
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
        "-- 6. Apply: each remaining delete removes one stored row equal to its image.\n"
        "IF v_rows > 0 THEN\n"
        f"  DELETE FROM {rel.target}\n"
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


def high_water_sql(ctx: TableSql) -> str:
    """7. The newest position applied, in the same transaction; the before images, which
    only the apply reads, leave the stage before the batch is counted."""
    rel = ctx.rel
    values = {"_source_pos": "m.newest", "_deleted_at": CALL_TIME}
    return (
        "-- 7. The newest source position applied (the table's one deleted-keys row), and the\n"
        "--    before images leave the stage before the batch is counted.\n"
        + schemas.insert_select_sql(
            ctx.d,
            rel.deleted,
            schemas.deleted_keys(ctx.table),
            values,
            f"FROM (SELECT MAX(_source_pos) AS newest FROM {rel.stage} WHERE _action IN {APPLIED}) m\n"
            f"WHERE m.newest > COALESCE({high_water(ctx)}, '');",
        )
        + f"\nDELETE FROM {rel.deleted} WHERE _source_pos < {high_water(ctx)};\n"
        f"DELETE FROM {rel.stage} WHERE _op = '{BEFORE}';"
    )

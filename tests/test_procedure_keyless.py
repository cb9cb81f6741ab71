"""A table without a primary key: its target is a multiset of rows
(sync/sql/procedure/keyless.py), pinned for a one-column and a two-column table. An insert
adds a row, a delete removes one row equal to its before image, an update removes one
such row and adds its after image; re-sent and snapshot events are stale by their source
position. What it does is tested on a database in tests/test_keyless.py and
tests/test_keyless_property.py; the pending deletes are pinned in
tests/test_procedure_keyless_pending.py; here, one behaviour per line of SQL."""

from __future__ import annotations

from sync.sql.procedure import keyless
from tests.helpers import assert_lines, table_sql
from tests.test_keyless import KEYLESS_BLOCK, keyless_toml

TWO = table_sql(keyless_toml("kl"))
ONE = table_sql(KEYLESS_BLOCK)
POSTGRES = table_sql(keyless_toml("kl"), dialect="postgres")


def test_an_updates_before_image_is_staged_as_a_delete_of_its_own():
    # Debezium PostgreSQL connector, "Replica identity": "FULL - Emitted events for UPDATE
    # and DELETE operations contain the previous values of all columns in the table."
    # (MySQL: binlog_row_image=FULL, the same full before image.)
    assert_lines(
        keyless.before_images_sql(TWO),
        'f._env."before" AS _img, f._env."source" AS _src',
        # Only updates have a before image to stage: an insert or a read has none, a delete
        # is staged by the second pass, and a tombstone ("a special tombstone event that has
        # the same key but a null value", "Tombstone events") has no operation at all.
        'DELETE FROM "cdc"."kl__stage" WHERE _op IS NULL OR _op <> \'u\';',
        'UPDATE "cdc"."kl__stage" SET _op = \'before\',',
        "_action = CASE WHEN _action = 'upsert' THEN 'delete' ELSE 'quarantine' END;",
    )
    assert_lines(keyless.before_images_sql(POSTGRES), "f._env -> 'before' AS _img, f._env -> 'source' AS _src")


def test_an_update_without_a_full_before_image_is_quarantined_with_its_before_images_payload():
    # Debezium PostgreSQL connector, "Replica identity": with DEFAULT, "If a table does not
    # have a primary key, the connector does not emit UPDATE or DELETE events for that
    # table"; a source left short of FULL sends an update that cannot say which row it changes.
    assert_lines(
        keyless.pair_sql(TWO),
        f"UPDATE \"cdc\".\"kl__stage\" s SET _action = 'quarantine', _reason = '{keyless.NO_BEFORE_IMAGE}', _payload = b._payload",
        "WHERE s._op = 'u' AND s._action = 'upsert'",
        "AND b._op = 'before' AND b._action = 'quarantine'"
        " AND b._kafka_partition = s._kafka_partition AND b._kafka_offset = s._kafka_offset;",
    )


def test_the_before_image_of_an_update_that_does_not_apply_goes():
    assert_lines(
        keyless.pair_sql(TWO),
        "WHERE _op = 'before'",
        'AND NOT EXISTS (SELECT 1 FROM "cdc"."kl__stage" b',
        "WHERE b._op = 'u' AND b._action = 'upsert'"
        ' AND b._kafka_partition = "cdc"."kl__stage"._kafka_partition AND b._kafka_offset = "cdc"."kl__stage"._kafka_offset);',
    )


def test_an_event_without_a_position_is_quarantined():
    assert_lines(
        keyless.keyless_order_sql(TWO),
        f"UPDATE \"cdc\".\"kl__stage\" SET _action = 'quarantine', _reason = '{keyless.POSITIONLESS}'",
        "WHERE _source_pos IS NULL AND _action IN ('upsert', 'delete');",
    )


def test_an_image_with_the_toast_placeholder_is_quarantined_before_its_update_is_paired():
    # DBZ-7193 (debezium/debezium pull request 5069): "Unchanged toasted array columns are
    # substituted with placeholder even if REPLICA IDENTITY == FULL": one image of an update
    # may hold the placeholder. Quarantined first, the update then applies neither image.
    placeholder = f"UPDATE \"cdc\".\"kl__stage\" SET _action = 'quarantine', _reason = '{keyless.UNAVAILABLE}'"
    paired = keyless.pair_sql(TWO)
    assert_lines(paired, placeholder, "WHERE _unavailable IS NOT NULL AND _action IN ('upsert', 'delete');")
    assert paired.index(placeholder) < paired.index(keyless.NO_BEFORE_IMAGE)
    assert "_unavailable" not in keyless.keyless_order_sql(TWO)


def test_a_change_whose_position_was_applied_is_stale_and_a_late_older_one_is_not():
    # The exact position, no high-water mark: a change older than one applied, exposed
    # late from another partition, applies.
    assert_lines(
        keyless.keyless_order_sql(TWO),
        'UPDATE "cdc"."kl__stage" s SET _action = \'stale\'',
        'OR EXISTS (SELECT 1 FROM "cdc"."kl__deleted" a',
        "WHERE a._source_pos = s._source_pos",
        "AND (s._op <> 'r' AND a._kafka_partition IS NULL",
    )


def test_a_change_below_the_snapshots_position_is_stale():
    assert_lines(
        keyless.keyless_order_sql(TWO),
        'AND (s._source_pos < (SELECT MAX(_source_pos) FROM "cdc"."kl__deleted" WHERE _kafka_partition IS NOT NULL)',
    )


def test_a_read_older_in_kafka_order_than_its_snapshots_first_read_is_stale():
    assert_lines(
        keyless.keyless_order_sql(TWO),
        "OR s._op = 'r' AND a._kafka_partition IS NOT NULL",
        # Kafka order: offsets within a partition, the Kafka time across partitions, then the partition.
        "AND (a._kafka_partition = s._kafka_partition AND a._kafka_offset > s._kafka_offset",
        "OR a._kafka_partition <> s._kafka_partition",
        "AND (a._kafka_timestamp > s._kafka_timestamp",
        "OR (COALESCE(a._kafka_timestamp = s._kafka_timestamp, true) AND a._kafka_partition > s._kafka_partition))))));",
    )


def test_a_quarantined_record_being_replayed_is_judged_like_any_other():
    # Never applied itself, a replayed record may still be in the table: a re-sent copy of it
    # applied, or a later snapshot read its row (test_keyless.py, the replay tests).
    sql = keyless.keyless_order_sql(TWO)
    assert "kl__watermark" not in sql and "last_offset" not in sql


def test_copies_of_one_event_read_in_one_batch_are_one_event_and_every_read_applies():
    assert_lines(
        keyless.keyless_order_sql(TWO),
        # The reads of one snapshot share one position: each is a row of its own.
        'UPDATE "cdc"."kl__stage" s SET _rn = CASE WHEN s._op = \'r\' THEN 1 ELSE c.copy_no END',
        "ROW_NUMBER() OVER (PARTITION BY x._source_pos, x._op"
        " ORDER BY x._kafka_time ASC NULLS FIRST, x._kafka_partition, x._kafka_offset) AS copy_no",
        "WHERE s._kafka_partition = c._kafka_partition AND s._kafka_offset = c._kafka_offset AND s._op = c._op;",
    )


def _redshift_text(field: str) -> str:
    """A SUPER field as text on Redshift: bounded to VARCHAR's limit, a non-string serialized."""
    bounded = f"(CASE WHEN JSON_SIZE({field}) <= 65535 THEN {field} END)"
    return f"CASE WHEN IS_VARCHAR({bounded}) THEN {bounded}::varchar(65535) WHEN {bounded} IS NOT NULL THEN JSON_SERIALIZE({bounded}) END"


def test_a_snapshots_first_read_is_told_by_its_source_snapshot_with_or_without_a_schema():
    # Debezium's SnapshotRecord (debezium-connector-common, io.debezium.connector):
    # FIRST and FIRST_IN_DATA_COLLECTION, written lowercase, since 2.0 (DBZ-5136). The
    # JsonConverter wraps the value in {"schema", "payload"} when schemas are enabled.
    first = "IN ('first', 'first_in_data_collection')"
    for ctx in (TWO, POSTGRES):
        assert_lines(
            keyless.snapshot_start_sql(ctx),
            f'UPDATE "cdc"."kl__stage" s SET _reason = \'{keyless.SNAPSHOT_START}\'',
            "WHERE s._op = 'r' AND s._action IN ('upsert', 'delete')",
        )
    plain, wrapped = (_redshift_text(f'm.payload.{path}."snapshot"') for path in ('"source"', '"payload"."source"'))
    assert_lines(keyless.snapshot_start_sql(TWO), f"AND ({plain} {first} OR {wrapped} {first});")
    assert_lines(
        keyless.snapshot_start_sql(POSTGRES),
        f"AND (m.payload -> 'source' ->> 'snapshot' {first} OR m.payload -> 'payload' -> 'source' ->> 'snapshot' {first});",
    )


def test_a_snapshots_first_read_empties_the_table_and_makes_the_batchs_earlier_events_stale():
    assert_lines(
        keyless.snapshot_start_sql(TWO),
        "GET DIAGNOSTICS v_rows := ROW_COUNT;",
        "IF v_rows > 0 THEN",
        'DELETE FROM "cdc"."kl";',
        # The newest first read of the batch (position, then Kafka order) is the one that counts.
        "ROW_NUMBER() OVER (ORDER BY _source_pos DESC, _kafka_timestamp DESC, _kafka_partition DESC, _kafka_offset DESC)"
        " AS newest_no",
        "WHERE mk.newest_no = 1 AND s._action IN ('upsert', 'delete')",
        "AND (s._source_pos < mk._source_pos",
        "OR (s._source_pos = mk._source_pos",
        "AND (mk._kafka_partition = s._kafka_partition AND mk._kafka_offset > s._kafka_offset",
    )


def test_a_snapshots_first_read_replaces_the_applied_positions():
    assert_lines(
        keyless.snapshot_start_sql(TWO),
        'DELETE FROM "cdc"."kl__deleted";',
        'INSERT INTO "cdc"."kl__deleted" (_source_pos, _kafka_partition, _kafka_offset, _kafka_timestamp, _deleted_at)',
        f"FROM \"cdc\".\"kl__stage\" WHERE _reason = '{keyless.SNAPSHOT_START}' AND _action IN ('upsert', 'delete');",
    )


def test_per_row_content_the_batchs_inserts_and_deletes_cancel_in_pairs():
    assert_lines(
        keyless.cancel_sql(TWO),
        'UPDATE "cdc"."kl__stage" s SET _rn = 2',
        'ROW_NUMBER() OVER (PARTITION BY "sku", "qty", _action',
        'COUNT(CASE WHEN _action = \'upsert\' THEN 1 END) OVER (PARTITION BY "sku", "qty") AS inserts,',
        'COUNT(CASE WHEN _action = \'delete\' THEN 1 END) OVER (PARTITION BY "sku", "qty") AS deletes',
        "AND c.copy_no <= LEAST(c.inserts, c.deletes);",
    )
    assert_lines(keyless.cancel_sql(ONE), 'ROW_NUMBER() OVER (PARTITION BY "page", _action')


def test_the_table_is_read_for_deletes_only_when_some_remain():
    assert_lines(
        keyless.cancel_sql(TWO),
        'SELECT COUNT(*) INTO v_rows FROM "cdc"."kl__stage" WHERE _rn = 1 AND _action = \'delete\';',
    )
    assert_lines(keyless.delete_rows_sql(TWO), "IF v_rows > 0 THEN")


def test_a_delete_removes_one_stored_row_equal_to_its_before_image_the_oldest():
    assert_lines(
        keyless.delete_rows_sql(TWO),
        'DELETE FROM "cdc"."kl"',
        'ROW_NUMBER() OVER (PARTITION BY "sku", "qty", stored ORDER BY _source_pos, _kafka_partition, _kafka_offset) AS copy_no,',
        'SUM(deleting) OVER (PARTITION BY "sku", "qty") AS deletes',
        "WHERE _d.stored = 1 AND _d.copy_no <= _d.deletes",
    )
    assert_lines(keyless.delete_rows_sql(ONE), 'SUM(deleting) OVER (PARTITION BY "page") AS deletes')


def test_a_stored_row_is_the_event_that_wrote_it_also_once_its_position_was_cleared():
    assert_lines(
        keyless.delete_rows_sql(TWO),
        "AND COALESCE(_d._source_pos, '') = COALESCE(\"cdc\".\"kl\"._source_pos, '')"
        ' AND _d._kafka_partition = "cdc"."kl"._kafka_partition AND _d._kafka_offset = "cdc"."kl"._kafka_offset);',
    )


def test_the_deletes_beyond_the_stored_rows_are_kept_pending_before_any_row_goes():
    sql = keyless.delete_rows_sql(TWO)
    pending = 'INSERT INTO "cdc"."kl__deleted" (_source_pos, _row_hash, _deleted_at)'
    assert_lines(sql, pending)
    assert sql.index(pending) < sql.index('DELETE FROM "cdc"."kl"')


def test_each_change_applied_records_its_position_once_and_a_read_does_not():
    assert_lines(
        keyless.applied_positions_sql(TWO),
        'INSERT INTO "cdc"."kl__deleted" (_source_pos, _deleted_at)',
        'FROM (SELECT DISTINCT _source_pos FROM "cdc"."kl__stage"',
        "WHERE _action IN ('upsert', 'delete') AND _op IN ('c', 'u', 'd')) a;",
    )


def test_the_before_images_leave_the_stage_before_the_batch_is_counted():
    assert_lines(keyless.applied_positions_sql(TWO), 'DELETE FROM "cdc"."kl__stage" WHERE _op = \'before\';')

"""The steps of a keyless table's procedure (sync/sql/procedure/keyless_steps.py), pinned
for a one-column and a two-column table: the keyed table's steps where the rule is the
same, the keyless rules in place of the key's, in an order each rule depends on. What the
procedure does is tested on a database in tests/test_keyless.py and
tests/test_keyless_property.py, its stage contract in tests/test_procedure_steps.py; the
rules' own SQL is pinned in tests/test_procedure_keyless.py; here, one behaviour per line."""

from __future__ import annotations

from sync.sql.procedure.keyless_steps import KEYLESS_SYNC_STEPS, insert_rows_sql, keyless_apply_batch_sql
from sync.sql.procedure.steps import steps_sql
from tests.helpers import assert_lines, table_sql
from tests.test_keyless import KEYLESS_BLOCK, keyless_toml

TWO = table_sql(keyless_toml("kl"))
ONE = table_sql(KEYLESS_BLOCK)
POSTGRES = table_sql(keyless_toml("kl"), dialect="postgres")
BODY = steps_sql(TWO, KEYLESS_SYNC_STEPS)


def assert_in_order(sql: str, *expected: str) -> None:
    """Each expected line is a line of `sql`, the first of each after the first of the one before."""
    assert_lines(sql, *expected)
    lines = [line.strip() for line in sql.splitlines()]
    found = [lines.index(line) for line in expected]
    assert found == sorted(found), "out of order:\n" + "\n".join(line for _, line in sorted(zip(found, expected)))


def test_the_before_images_are_staged_under_the_lock_before_the_records_and_not_counted_as_read():
    for ctx, lock in (
        (TWO, 'LOCK TABLE "cdc"."kl__watermark";'),
        (POSTGRES, 'LOCK TABLE "cdc"."kl__watermark" IN SHARE ROW EXCLUSIVE MODE;'),
    ):
        assert_in_order(
            steps_sql(ctx, KEYLESS_SYNC_STEPS),
            lock,
            # The before images pass deletes every other row of the stage: it runs on an empty one.
            'DELETE FROM "cdc"."kl__stage" WHERE _op IS NULL OR _op <> \'u\';',
            'UPDATE "cdc"."kl__stage" SET _op = \'before\',',
            # The records read are those of the second pass alone.
            "GET DIAGNOSTICS v_read := ROW_COUNT;",
        )


def test_the_rules_run_only_when_the_batch_has_records():
    sql = keyless_apply_batch_sql(TWO)
    assert sql.startswith("IF v_read > 0 THEN\n") and sql.endswith("\nEND IF;")
    assert_in_order(
        sql,
        "INTO v_drift, v_quarantined, v_partitions, v_positionless, v_unavailable, v_replayed, v_wm_before",
        "GET DIAGNOSTICS v_advanced := ROW_COUNT;",
    )


def test_each_remaining_insert_adds_one_row_with_the_event_that_wrote_it():
    assert_lines(
        insert_rows_sql(TWO),
        'INSERT INTO "cdc"."kl" ("sku", "qty", "_source_ts", "_source_pos", "_kafka_partition", "_kafka_offset", "_synced_at")',
        'SELECT s."sku", s."qty", s._source_ts, s._source_pos, s._kafka_partition, s._kafka_offset, v_started',
        "WHERE s._rn = 1 AND s._action = 'upsert';",
    )
    assert_lines(
        insert_rows_sql(ONE),
        'INSERT INTO "cdc"."visits" ("page", "_source_ts", "_source_pos", "_kafka_partition", "_kafka_offset", "_synced_at")',
    )


def test_copies_and_stale_events_are_settled_before_inserts_and_deletes_cancel():
    assert_in_order(
        BODY,
        # An update without its before image is quarantined before anything else ranks it.
        'UPDATE "cdc"."kl__stage" s SET _action = \'quarantine\', _reason = \'update without a full before image:'
        " the source table needs REPLICA IDENTITY FULL', _payload = b._payload",
        'UPDATE "cdc"."kl__stage" s SET _rn = CASE WHEN s._op = \'r\' THEN 1 ELSE c.copy_no END',
        'DELETE FROM "cdc"."kl";',  # a snapshot's first read: the events before it are stale
        'UPDATE "cdc"."kl__stage" s SET _rn = 2',
    )


def test_an_insert_pays_a_pending_delete_only_if_not_cancelled_and_then_adds_no_row():
    assert_in_order(
        BODY,
        "AND c.copy_no <= LEAST(c.inserts, c.deletes);",
        "WHERE c.pending = 0 AND c.copy_no <= c.pendings",
        "WHERE _d.stored = 1 AND _d.copy_no <= _d.deletes",
        'INSERT INTO "cdc"."kl" ("sku", "qty", "_source_ts", "_source_pos", "_kafka_partition", "_kafka_offset", "_synced_at")',
    )


def test_the_before_images_leave_the_stage_before_the_quarantine_and_the_run_log_count_it():
    assert_in_order(
        BODY,
        'INSERT INTO "cdc"."kl" ("sku", "qty", "_source_ts", "_source_pos", "_kafka_partition", "_kafka_offset", "_synced_at")',
        'INSERT INTO "cdc"."kl__deleted" (_source_pos, _deleted_at)',
        'DELETE FROM "cdc"."kl__stage" WHERE _op = \'before\';',
        # The rules quarantine after the batch counts: counted again for the quarantine step.
        "INTO v_quarantined",
        "IF v_quarantined > 0 THEN",
        'INSERT INTO "cdc"."sync_run_log" (table_name, backend_pid, started_at, finished_at, events_read, upserted, deleted,',
    )


def test_no_rule_of_a_keyed_table_judges_a_row_without_a_key():
    # Neither the newest stored state of a key (a late older change from another partition
    # applies) nor a delete by key (a delete removes one row equal to its image).
    assert "v_not_newer" not in BODY
    assert 'USING "cdc"."kl__stage" _s' not in BODY

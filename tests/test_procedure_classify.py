"""The classification of a typed record (sync/sql/procedure/classify.py) and how its fields
are read (fields.py), pinned for a one-column and a composite-key table."""

from __future__ import annotations

from sync.sql.procedure.classify import classification_checks, first_match, lookup
from sync.sql.procedure.context import Action
from sync.sql.procedure.fields import drift_image_sql, kafka_key_field_sql, toastable, unavailable_sql
from tests.helpers import COMPOSITE_KEY, ONE_COLUMN, table_sql

ONE, COMPOSITE = table_sql(ONE_COLUMN), table_sql(COMPOSITE_KEY)


def _rules(ctx) -> list[tuple[Action, str]]:
    return [(chk.action, chk.condition) for chk in classification_checks(ctx.d, ctx.table)]


def test_the_rules_in_order_first_match_wins():
    assert _rules(ONE) == [
        (Action.QUARANTINE, "t._raw_value IS NOT NULL"),
        (Action.TOMBSTONE, "(t._env IS NULL)"),
        (Action.QUARANTINE, "NOT IS_OBJECT(t._env)"),
        (Action.QUARANTINE, "t._op IS NULL"),
        (Action.TRUNCATE, "t._op = 't'"),
        (Action.QUARANTINE, "t._op NOT IN ('c', 'r', 'u', 'd')"),
        (Action.QUARANTINE, "t._op <> 'd' AND ((t._img IS NULL) OR NOT IS_OBJECT(t._img))"),
        (Action.QUARANTINE, 't."id" IS NULL'),
        (
            Action.QUARANTINE,
            "t._has_source_ts AND (t._source_ts_ms IS NULL OR t._source_ts_ms NOT BETWEEN 0 AND 253402300799999)",
        ),
        (Action.DELETE, "t._op = 'd'"),
    ]


def test_each_key_column_and_each_value_column_has_its_rule():
    rules = _rules(COMPOSITE)
    assert (Action.QUARANTINE, 't."order_id" IS NULL') in rules
    assert (Action.QUARANTINE, 't."line_no" IS NULL') in rules
    # A TOAST placeholder is no conversion failure: the stored value is kept.
    assert (Action.QUARANTINE, "t._op <> 'd' AND NOT (t._j_v0 IS NULL) AND t.\"note\" IS NULL AND NOT t._u_v0") in rules


def test_an_unwrapped_tombstone_with_a_key_is_a_delete():
    rules = _rules(table_sql(ONE_COLUMN, format="debezium-unwrap"))
    assert rules[1] == (Action.DELETE, '(t._env IS NULL) AND t."id" IS NOT NULL')


def test_a_key_longer_than_a_postgresql_index_entry_is_quarantined():
    ctx = table_sql(ONE_COLUMN.replace('"integer"', '"varchar(4000)"'), dialect="postgres")
    assert (Action.QUARANTINE, 'OCTET_LENGTH(t."id") > 2600') in _rules(ctx)


def test_the_check_number_then_its_action():
    checks = classification_checks(ONE.d, ONE.table)[:2]
    assert first_match(checks).splitlines() == [
        "CASE",
        "  WHEN t._raw_value IS NOT NULL THEN 1",
        "  WHEN (t._env IS NULL) THEN 2",
        "  ELSE 0",
        "END",
    ]
    assert lookup("t._check_no", ["'a'", "'b'"], "'c'").splitlines() == [
        "CASE t._check_no",
        "  WHEN 1 THEN 'a'",
        "  WHEN 2 THEN 'b'",
        "  ELSE 'c'",
        "END",
    ]


def test_a_one_column_key_may_be_the_bare_kafka_key():
    (key,) = ONE.table.key_columns
    assert (
        kafka_key_field_sql(ONE.d, ONE.table, key) == 'CASE WHEN IS_OBJECT(f._key_env) THEN f._key_env."id" ELSE f._key_env END'
    )
    order_id = COMPOSITE.table.key_columns[0]
    assert kafka_key_field_sql(COMPOSITE.d, COMPOSITE.table, order_id) == 'f._key_env."order_id"'


def test_text_columns_may_hold_the_toast_placeholder():
    (note,) = COMPOSITE.table.value_columns
    assert toastable(note) and not any(toastable(c) for c in COMPOSITE.table.key_columns)
    assert "'__debezium_unavailable_value'" in unavailable_sql(COMPOSITE.d, "f._j_v0", note)


def test_only_images_that_differ_from_the_configured_fields_are_set_aside_for_drift():
    assert drift_image_sql(ONE.d, ONE.table) == (
        "CASE WHEN f._op IN ('c', 'r', 'u') AND IS_OBJECT(f._img)"
        " AND NOT (f._j_i0 IS NOT NULL AND GET_NUMBER_ATTRIBUTES(f._img) = 1) THEN f._img END"
    )

"""Schema drift (sync/sql/procedure/drift.py), pinned for a one-column and a composite-key table."""

from __future__ import annotations

from sync.sql.procedure.drift import drift_sql
from tests.helpers import COMPOSITE_KEY, ONE_COLUMN, assert_lines, table_sql

ONE, COMPOSITE = table_sql(ONE_COLUMN), table_sql(COMPOSITE_KEY)


def test_drift_counts_the_fields_of_the_images_set_aside():
    assert_lines(
        drift_sql(ONE),
        "IF v_drift > 0 THEN",
        'INSERT INTO "cdc"."tag__drift" (table_name, run_started_at, kind, field, events)',
        "SELECT s._drift_img AS img, COUNT(*) OVER () AS images",
        ") x0, UNPIVOT x0.img AS x_value AT x_field",
        "UNION ALL SELECT 'id', 1, 0, 0) u",
    )


def test_every_configured_field_is_counted_when_missing_and_unwrap_metadata_is_not_unknown():
    assert_lines(
        drift_sql(COMPOSITE),
        "UNION ALL SELECT 'order_id', 1, 0, 0 UNION ALL SELECT 'line_no', 1, 0, 0 UNION ALL SELECT 'note', 1, 0, 0) u",
        "WHERE (k.configured = 1 AND k.seen < k.images)",
        "OR (k.configured = 0 AND SUBSTRING(k.field, 1, 2) <> '__');  -- '__' fields: unwrap metadata",
    )

"""A table without a primary key: a pending delete paid by an equal insert
(sync/sql/procedure/keyless_pending.py), pinned for a two-column table. What it does is
tested on a database in tests/test_keyless.py and tests/test_keyless_property.py; here, one
behaviour per line of SQL."""

from __future__ import annotations

from sync.sql.procedure.keyless_pending import PAYS, pay_pending_sql
from tests.helpers import assert_lines, table_sql
from tests.test_keyless import keyless_toml

KEYLESS = table_sql(keyless_toml("kl"))
# A row's content: every column, a NULL told apart from any value.
ROW_HASH = "MD5(COALESCE(MD5(CAST(\"sku\" AS varchar(65535))), 'N') || COALESCE(MD5(CAST(\"qty\" AS varchar(64))), 'N'))"


def test_an_insert_equal_to_a_pending_delete_pays_it_and_is_superseded_with_its_reason():
    assert_lines(
        pay_pending_sql(KEYLESS),
        f'UPDATE "cdc"."kl__stage" s SET _rn = 2, _reason = \'{PAYS}\'',
        "ROW_NUMBER() OVER (PARTITION BY h, pending ORDER BY pos, k_partition, k_offset) AS copy_no,",
        "SUM(pending) OVER (PARTITION BY h) AS pendings",
        "WHERE c.pending = 0 AND c.copy_no <= c.pendings",
    )


def test_the_rows_content_is_hashed_over_every_column():
    assert_lines(pay_pending_sql(KEYLESS), f"SELECT {ROW_HASH}, 0, _source_pos, _kafka_partition, _kafka_offset, _op")


def test_the_paid_deletes_are_forgotten_oldest_first_as_many_as_were_paid():
    assert_lines(
        pay_pending_sql(KEYLESS),
        "ROW_NUMBER() OVER (PARTITION BY _row_hash ORDER BY _source_pos) AS copy_no",
        f'FROM "cdc"."kl__stage" WHERE _reason = \'{PAYS}\' GROUP BY 1) q ON q.h = p.h',
        "WHERE p.copy_no <= q.paid);",
    )

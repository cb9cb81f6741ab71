"""A target key stored twice. Redshift does not enforce primary keys (r_CREATE_TABLE_NEW:
"Uniqueness, primary key, and foreign key constraints are informational only; they are
not enforced by Amazon Redshift"), so a manual insert or a replayed load can leave one;
the procedure must keep working, and take the newest stored row where it reads one. Run
on PostgreSQL with the primary key dropped, which is what Redshift has."""

from __future__ import annotations

import copy

from sync.debezium.events import ChangeStream, PostgresSource
from tests.helpers import feed
from tests.test_debezium_envelopes import TOAST, row, rows, shapes


def _drop_primary_key(wh, table: str) -> None:
    (name,) = wh.query(f"SELECT conname FROM pg_constraint WHERE conrelid = 'cdc.\"{table}\"'::regclass AND contype = 'p'")[0]
    wh.execute(f'ALTER TABLE cdc."{table}" DROP CONSTRAINT "{name}"')


def test_toast_placeholder_takes_the_newest_of_duplicate_stored_rows(wh):
    pipeline = shapes(wh)
    _drop_primary_key(wh, "toast")
    cs = ChangeStream(["id"], PostgresSource(table="t"))
    feed(wh, pipeline, "toast", [cs.insert(row(1, "a", "old bio"))])
    wh.execute('CREATE TABLE cdc.toast_old AS SELECT * FROM cdc."toast"')
    feed(wh, pipeline, "toast", [cs.update(None, row(1, "a", "newest bio"))])
    # The key twice, the older row stored first.
    wh.execute('CREATE TABLE cdc.toast_new AS SELECT * FROM cdc."toast"')
    wh.execute('DELETE FROM cdc."toast"')
    wh.execute('INSERT INTO cdc."toast" SELECT * FROM cdc.toast_old')
    wh.execute('INSERT INTO cdc."toast" SELECT * FROM cdc.toast_new')
    assert wh.scalar('SELECT COUNT(*) FROM cdc."toast" WHERE id = 1') == 2

    run = feed(wh, pipeline, "toast", [cs.update(None, row(1, "a2", TOAST))])  # keeps the stored bio
    assert (run.upserted, run.quarantined) == (1, 0)
    assert rows(wh, "toast") == [(1, "a2", "newest bio")]  # one row again, with the newest value

    run = feed(wh, pipeline, "toast", [cs.update(None, row(1, "a3", "bio 3"))])
    assert run.status == "ok" and rows(wh, "toast") == [(1, "a3", "bio 3")]


def test_a_change_tied_with_an_older_copy_of_a_key_stored_twice_stays_stale(wh):
    """The key stored twice (primary keys are informational on Redshift, see above): a copy
    written at source position P1 and the newest row at P2. A change at P1 (another change
    of P1's transaction) is older than what is stored, so it is stale and nothing
    regresses, though it differs from the older copy at its position: a key's events are
    ordered by their source position (docs/debezium.md, "Ordering")."""
    pipeline = shapes(wh)
    _drop_primary_key(wh, "toast")
    cs = ChangeStream(["id"], PostgresSource(table="t"))
    first = cs.insert(row(1, "a", "bio 1"))
    feed(wh, pipeline, "toast", [first])
    wh.execute('CREATE TABLE cdc.toast_old AS SELECT * FROM cdc."toast"')
    feed(wh, pipeline, "toast", [cs.update(None, row(1, "b", "bio 2"))])
    wh.execute('INSERT INTO cdc."toast" SELECT * FROM cdc.toast_old')  # the key twice: P1 and P2
    assert wh.scalar('SELECT COUNT(*) FROM cdc."toast" WHERE id = 1') == 2

    same_transaction = copy.deepcopy(first)  # at P1, with other values
    same_transaction["value"]["after"] = row(1, "c", "bio 3")
    run = feed(wh, pipeline, "toast", [same_transaction])
    assert (run.upserted, run.stale) == (0, 1)
    assert sorted(rows(wh, "toast")) == [(1, "a", "bio 1"), (1, "b", "bio 2")]  # untouched

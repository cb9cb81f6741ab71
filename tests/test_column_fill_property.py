"""Property: a column added after its values were streamed across TOAST placeholders is
filled with the source's value wherever a retained record carries it, and every other row
is counted as unknown (never a silent NULL), also after later placeholder updates.

The outside contract: Debezium's PostgreSQL connector sends an unchanged TOASTed value as
`__debezium_unavailable_value` ("Handling unchanged Postgres TOAST values", Debezium blog,
2019-10-08); an insert and a change of the value carry it in full, and a NULL is never
TOASTed. With REPLICA IDENTITY DEFAULT a delete's `before` holds only the key. A restart
re-sends a suffix at new offsets ("at-least-once during recovery"), and the topic's
retention drops its oldest records. The expected state is the source's, from the history
alone: a row's value is known when a retained record of its key (a re-sent copy included)
carries it; a row whose writing record is no longer retained is not counted
(docs/operations.md).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.operations.runner import deploy
from sync.operations.unknown_values import unknown_values
from sync.sql.column_fill import column_fill_sql
from sync.warehouse import connect
from tests.helpers import fresh_database, ingest, make_pipeline, sync_one
from tests.test_column_fill_toast import TABLE, WITH_BODY, U, change
from tests.test_property_cdc import _middle_first

KEYS = (1, 2, 3)
steps = st.lists(
    st.tuples(st.sampled_from(["body", "title", "title", "delete"]), st.sampled_from(KEYS), st.sampled_from(["a", "b", None])),
    min_size=1,
    max_size=14,
)


def history(drawn, state: dict, lsn: int) -> tuple[list[dict], int]:
    """The connector's records for the drawn changes, from `state` (key -> body) on."""
    records = []
    for kind, key, body in drawn:
        lsn += 10
        if kind == "delete":
            if key in state:
                del state[key]
                records.append({"partition": 0, "key": {"id": key}, "value": _delete(key, lsn)})
            continue
        if key not in state or kind == "body":
            op = "u" if key in state else "c"
            state[key] = body
            records.append(change(op, key, lsn, body))
        else:  # another column changed: an unchanged TOASTed value is the placeholder
            records.append(change("u", key, lsn, U if state[key] is not None else None, title=f"t{lsn}"))
    return records, lsn


def _delete(key: int, lsn: int) -> dict:
    record = change("d", key, lsn, None)["value"]
    return {**record, "before": {"id": key}, "after": None}


@pytest.fixture(scope="module")
def warehouse(pg_server_dsn):
    with fresh_database(pg_server_dsn, "prop_column_fill") as dsn:
        wh = connect(dsn)
        yield wh
        wh.close()


def _reset(wh) -> None:
    for relation in ("doc", "doc__stream", "doc__stage", "doc__watermark", "doc__deleted"):
        if wh.relation_exists("cdc", relation):
            wh.execute(f'DROP TABLE cdc."{relation}"')
    wh.execute("DROP TABLE IF EXISTS cdc.sync_quarantine, cdc.sync_run_log, cdc.sync_schema_drift")


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(first=steps, later=steps, data=st.data())
def test_added_column_holds_every_known_value_and_counts_the_rest(warehouse, first, later, data):
    wh = warehouse
    _reset(wh)
    narrow, wide = make_pipeline(TABLE), make_pipeline(WITH_BODY)
    deploy(wh, narrow, "test")
    state: dict = {}
    records, lsn = history(first, state, 0)
    resume = data.draw(_middle_first(0, len(records)), label="a restart resumes at (the end: none)")
    delivered = [dict(r) for r in records + records[resume:]]
    for i, r in enumerate(delivered):
        r["offset"] = i
    for batch in (delivered[: len(records)], delivered[len(records) :]):  # the re-sent suffix: a later batch
        if batch:
            ingest(wh, narrow, "doc", batch)
            sync_one(wh, narrow, "doc")
    # Retention drops the oldest records.
    kept = data.draw(_middle_first(0, len(delivered)), label="records dropped by retention")
    wh.execute('DELETE FROM cdc."doc__stream" WHERE kafka_offset < %s', (kept,))
    retained = delivered[kept:]

    # The revision: the column on the target and the stage, the fill, the procedure for it.
    for relation in ("doc", "doc__stage"):
        wh.execute(f'ALTER TABLE cdc."{relation}" ADD COLUMN body varchar(65535)')
    table = wide.table("doc")
    wh.execute(column_fill_sql(wh.dialect.bind_schema("cdc"), wide, table, table.column_by_any_name("body")))
    deploy(wh, wide, "test")

    def carries(r: dict, key: int) -> bool:
        after = r["value"].get("after")
        return r["key"] == {"id": key} and after is not None and after.get("body") != U

    known = {k for k in state if any(carries(r, k) for r in retained)}
    expected = {k: (v if k in known else None) for k, v in state.items()}
    assert dict(wh.query('SELECT id, body FROM cdc."doc"')) == expected
    # The record that wrote each row: the first delivery of its key's last change (a re-sent
    # copy is stale), when retention kept it.
    last = {r["key"]["id"]: i for i, r in enumerate(records)}
    written = {k for k in state if last[k] >= kept}
    unknown = {k for k in written if k not in known and state[k] is not None}
    assert [(u.column, u.rows) for u in unknown_values(wh, wide, "doc")] == ([("body", len(unknown))] if unknown else [])

    # Later changes: placeholders keep what is stored; a carried value makes it known.
    more, _ = history(later, state, lsn)
    known |= {k for k in KEYS if any(carries(r, k) for r in more)}
    written |= {k for k in KEYS if any(r["key"] == {"id": k} for r in more)}
    for i, r in enumerate(more):
        r["offset"] = len(delivered) + i
    ingest(wh, wide, "doc", more)
    sync_one(wh, wide, "doc")
    expected = {k: (v if k in known else None) for k, v in state.items()}
    assert dict(wh.query('SELECT id, body FROM cdc."doc"')) == expected
    unknown = {k for k in written if k in state and k not in known and state[k] is not None}
    assert [(u.column, u.rows) for u in unknown_values(wh, wide, "doc")] == ([("body", len(unknown))] if unknown else [])

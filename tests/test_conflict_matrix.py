"""The conflict matrix, computed from the SQL of every committed example: every pair of
operations that can run at once on one Redshift database (two tables' scheduled CALLs,
a CALL and a replay, a backfill merge, a prune, the streaming view's refresh, ...) is
free of serialization conflicts at both of Redshift's isolation levels.

AWS, "Troubleshooting serializable isolation errors"
(https://docs.aws.amazon.com/redshift/latest/dg/c_serial_isolation-serializable-isolation-troubleshooting.html):
two sessions that each SELECT from one table and INSERT into the other: "The result of
the SELECT statement in each transaction might be affected by the INSERT statement in the
other ... Because there is no order in which the statements can run serially", one is
stopped with error 1023. The remedies: move what need not be atomic out of the
transaction, or "force serialization by locking all tables in each session" (LOCK, taken
first, in one order). Redshift detects conflicts per table, not per row: a `WHERE
table_name = ...` filter does not separate two tables' CALLs on a shared table.
"""

from __future__ import annotations

import os

import pytest

from tests.conflict_matrix import (
    EXAMPLE_NAMES,
    created,
    document,
    documented,
    example_pipeline,
    explain_sql,
    lock_order_violations,
    markdown,
    operations,
    pairs,
    procedures_of,
    statement_access,
    transaction_access,
    verdict,
)


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_no_two_operations_that_can_overlap_form_a_read_write_cycle(example):
    ops = operations(example)
    unsafe = [f"{x.name} + {y.name}: {v.why}" for x, y in pairs(ops) if not (v := verdict(x.access, y.access)).safe]
    assert not unsafe, f"{len(unsafe)} pairs can stop each other with error 1023:\n" + "\n".join(unsafe[:40])


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_every_operation_locks_in_one_global_order_and_never_a_view_or_a_target(example):
    ops = operations(example)
    assert not lock_order_violations(ops)
    pipeline_tables = {op.table for op in ops if op.table}
    for op in ops:
        for lock in op.access.locks:
            relation = lock.split(".", 1)[1]
            # r_LOCK: views cannot be locked, and every LOCK is exclusive (readers wait):
            # never the streaming view, never the target users read.
            assert not relation.endswith("__stream") and relation not in pipeline_tables, (op.name, lock)


def test_the_example_from_the_aws_page_is_a_cycle_and_a_shared_first_lock_serializes_it():
    schemas = {"s"}
    one = [statement_access(sql, schemas, {}) for sql in ("SELECT COUNT(*) FROM s.tab1", "INSERT INTO s.tab2 SELECT 1")]
    two = [statement_access(sql, schemas, {}) for sql in ("SELECT COUNT(*) FROM s.tab2", "INSERT INTO s.tab1 SELECT 1")]
    session1, session2 = one[0].then(one[1]), two[0].then(two[1])
    assert not verdict(session1, session2).safe
    lock = statement_access("LOCK TABLE s.tab1, s.tab2", schemas, {})
    assert verdict(lock.then(session1), lock.then(session2)).safe
    # a lock taken after a read does not serialize: the snapshot is already taken
    assert not verdict(session1.then(lock), session2.then(lock)).safe


@pytest.mark.parametrize(
    "sql, reads, writes",
    [
        ("SELECT COUNT(*) INTO v_n FROM s.q WHERE table_name = 'a'", {"s.q"}, set()),
        ("UPDATE s.q SET handled = 'x' WHERE table_name = 'a'", {"s.q"}, {"s.q"}),
        ("DELETE FROM s.t USING s.stage x WHERE s.t.k = x.k", {"s.t", "s.stage"}, {"s.t"}),
        ("INSERT INTO s.log (a) VALUES (1)", set(), {"s.log"}),
        ("INSERT INTO s.w (a) SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM s.w)", {"s.w"}, {"s.w"}),
        ("SELECT y.img FROM (SELECT s.img FROM s.stage s) x0, UNPIVOT x0.img AS v AT k", {"s.stage"}, set()),
    ],
)
def test_reads_and_writes_are_read_off_the_statement(sql, reads, writes):
    access = statement_access(sql, {"s"}, {})
    assert (set(access.reads), set(access.writes)) == (reads, writes)


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_explain_writes_and_locks_nothing_shared_and_a_shared_stage_would_conflict(example):
    """explain runs the procedure's steps over temporary tables: were its stage the
    table's own, the rolled-back write would still form a cycle with the table's CALL
    (the CALL reads the stage; explain reads the target the CALL writes)."""
    ops = operations(example)
    pipeline = example_pipeline(example)
    schemas = {pipeline.schema, pipeline.source.external_schema}
    procedures = procedures_of(example, schemas)
    for op in (o for o in ops if o.kind == "explain"):
        assert op.access.writes == frozenset() and op.access.locks == (), op
        sync = next(o for o in ops if o.kind == "sync" and o.table == op.table)
        assert verdict(op.access, sync.access).safe
        stage = f'"{pipeline.schema}"."{op.table}__stage"'
        shared = [s.replace('"explain_pending"', stage) for s in explain_sql(pipeline, pipeline.table(op.table))]
        access = transaction_access(shared, schemas, {**procedures, **created(shared, schemas, procedures)})
        assert f"{pipeline.schema}.{op.table}__stage" in access.writes
        assert not verdict(access, sync.access).safe


def test_the_documented_matrix_is_the_computed_one():
    matrix = markdown()
    if os.environ.get("UPDATE_GOLDEN"):
        document(matrix)
    assert documented() == matrix, "docs/redshift.md shows another matrix: rerun with UPDATE_GOLDEN=1 and review the diff"


def test_a_shared_streaming_view_is_pruned_under_the_lock_of_every_table_reading_it():
    """Two tables over one topic read one view (AWS: one streaming materialized view per
    topic). Its prune reads both tables' watermarks and targets while their CALLs read the
    view it deletes from and write their targets: a read-write cycle, serialized by taking
    every sharing table's lock first, in one order."""
    from dataclasses import replace

    ops = {op.name: op for op in operations("shop_routing")}
    view = "shop.customer__stream"
    assert ops["refresh customer"].access.writes == ops["refresh orders"].access.writes == {view}
    prune = ops["prune customer"].access
    assert prune.locks_first == ("shop.customer__watermark", "shop.orders__watermark")
    assert view in prune.writes and view not in ops["prune orders"].access.writes
    call = ops["sync orders"].access
    assert view in call.reads
    assert verdict(prune, call).why == "serialized by LOCK shop.orders__watermark"
    # Without the other table's lock the pair is a cycle Redshift stops with error 1023.
    assert not verdict(replace(prune, locks_first=prune.locks_first[:1]), call).safe

"""Revision planning without a database: pipeline changes and generator changes become
the exact operations of a revision, and its inverse."""

from __future__ import annotations

import copy

import pytest

from sync.schema.plan import RevisionRefused, plan_revision
from sync.schema.state import drifted_objects, pipeline_of, state_for
from tests.helpers import make_pipeline

ORDERS = """
[[tables]]
name = "orders"
topic = "db.public.orders"
primary_key = ["id"]
distkey = "id"
columns = [
  { name = "id", type = "bigint" },
  { name = "note", type = "varchar(20)" },
  { name = "placed", type = "timestamp" },
]
"""


def state(tables: str = ORDERS) -> dict:
    return state_for(make_pipeline(tables), "pipeline.toml")


def test_first_revision_creates_everything_and_downgrade_drops_it_in_reverse():
    two = ORDERS + ORDERS.replace('"orders"', '"lines"').replace("db.public.orders", "db.public.lines")
    plan = plan_revision(None, state(two))
    assert plan.upgrade == ["r.create_pipeline()", 'r.create_table("orders")', 'r.create_table("lines")', "r.replace_views()"]
    assert plan.downgrade == ["r.drop_views()", 'r.drop_table("lines")', 'r.drop_table("orders")', "r.drop_pipeline()"]


def test_identical_states_plan_nothing():
    assert plan_revision(state(), state()).empty


def test_columns_added_dropped_and_keys_moved_in_a_safe_order():
    new = ORDERS.replace('{ name = "note", type = "varchar(20)" },', '{ name = "channel", type = "varchar(8)" },')
    new = new.replace('distkey = "id"', 'distkey = "id"\nsortkey = ["channel"]')
    plan = plan_revision(state(), state(new))
    # the new column exists before it becomes the sort key; the old one leaves the sort key
    # (Redshift cannot drop a sort key column) before it is dropped
    assert plan.upgrade == [
        'r.add_column("orders", "channel")',
        'r.alter_sortkey("orders")',
        'r.drop_column("orders", "note")',
        'r.replace_procedure("orders")',
    ]
    assert plan.downgrade == [
        'r.add_column("orders", "note")',
        "# the values of note dropped by the upgrade come back only for rows whose record the stream still holds",
        'r.alter_sortkey("orders")',
        'r.drop_column("orders", "channel")',
        'r.replace_procedure("orders")',
    ]


def test_dropping_a_key_column_is_refused_with_the_safe_path():
    new = ORDERS.replace('primary_key = ["id"]', 'primary_key = ["placed"]').replace('distkey = "id"', "")
    with pytest.raises(RevisionRefused, match=r"primary key \(id bigint\) -> \(placed timestamp\).*Safe path"):
        plan_revision(state(), state(new))


def test_several_problems_are_reported_together():
    new = ORDERS.replace('"varchar(20)"', '"bigint"').replace('"timestamp"', '"date"')
    with pytest.raises(RevisionRefused) as refused:
        plan_revision(state(), state(new))
    assert "column note: varchar(20) -> bigint" in str(refused.value)
    assert "column placed: timestamp -> date" in str(refused.value)


def test_removed_table_is_dropped_and_downgrade_says_its_data_is_gone():
    two = ORDERS + ORDERS.replace('"orders"', '"lines"').replace("db.public.orders", "db.public.lines")
    plan = plan_revision(state(two), state())
    # the shared views read every table's quarantine and drift tables: made anew without it
    assert plan.upgrade == ["r.drop_views()", 'r.drop_table("lines")', "r.replace_views()"]
    assert plan.downgrade[:2] == ["r.drop_views()", 'r.create_table("lines")'] and "not restored" in plan.downgrade[2]
    assert plan.downgrade[-1] == "r.replace_views()"
    assert plan.warnings


def test_generator_changes_become_replacements_or_warnings():
    recorded = state()
    assert drifted_objects(recorded) == []
    changed = copy.deepcopy(recorded)
    fp = changed["fingerprints"]
    fp["postgres"]["procedure cdc.incremental_sync_orders"] = "0" * 16
    fp["redshift"]["stream cdc.orders__stream"] = "0" * 16
    fp["postgres"]["function cdc.sync_to_text"] = "0" * 16
    fp["postgres"]["table cdc.orders__stage"] = "0" * 16
    fp["redshift"]["table cdc.orders__watermark"] = "0" * 16
    fp["postgres"]["table cdc.orders"] = "0" * 16
    plan = plan_revision(changed, state())
    assert [line for line in plan.upgrade if not line.startswith("#")] == [
        "r.replace_functions()",
        'r.recreate_stream("orders", "redshift")',
        'r.recreate_stage("orders")',
        'r.restyle_watermark("orders")',
        'r.replace_procedure("orders")',
    ]
    assert any("re-reads its topic from offset 0" in line for line in plan.upgrade)
    # The stage is empty between runs and the watermark's style changes in place; a target
    # holds the users' data: its ALTER is left to a person.
    assert len(plan.warnings) == 1 and "table cdc.orders (postgres)" in plan.warnings[0]


def test_new_credentials_recreate_the_source_but_a_new_cluster_is_refused():
    rotated = state_for(make_pipeline(ORDERS), "pipeline.toml")
    rotated["pipeline"]["source"]["iam_role"] = "arn:aws:iam::123456789012:role/rotated"
    plan = plan_revision(state(), state_for(pipeline_of(rotated), "pipeline.toml"))
    assert [line for line in plan.upgrade if not line.startswith("#")] == ["r.recreate_source()"]
    assert [line for line in plan.downgrade if not line.startswith("#")] == ["r.recreate_source()"]

    moved = copy.deepcopy(rotated)
    moved["pipeline"]["source"]["cluster_arn"] = "arn:aws:kafka:us-east-1:123456789012:cluster/other/def"
    with pytest.raises(RevisionRefused, match="the Kafka cluster changed.*Safe path"):
        plan_revision(state(), state_for(pipeline_of(moved), "pipeline.toml"))


def test_an_index_rendered_differently_is_rebuilt_without_its_relation():
    """On PostgreSQL the stream is a table of records: an index of it rendered differently
    is rebuilt on its own, never by re-creating the stream (which would drop the records)."""
    changed = copy.deepcopy(state())
    changed["fingerprints"]["postgres"]["index cdc.orders__s_pos"] = "0" * 16
    plan = plan_revision(changed, state())
    assert [line for line in plan.upgrade if not line.startswith("#")] == [
        'r.recreate_index("orders", "postgres", "orders__s_pos")',
        'r.replace_procedure("orders")',
    ]
    assert any("orders__s_pos is not rebuilt" in line for line in plan.downgrade)

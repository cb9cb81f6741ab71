"""Tables sharing a topic (sync/sql/procedure/routing.py), pinned for the committed example
examples/shop_routing/pipeline.toml (a whole database's topic read by `customer`, the
first table, and `orders`; shards merged into `account` with the router's key field; the
partitions of an unwrapped table in `event`) and for the one-column table without a
route: whose record each record is, the classification rules placed before all others,
and the count of records no table selects. What they do is tested on a database in
tests/test_routing.py, tests/test_routing_property.py and tests/test_routing_unmatched.py;
here, one behaviour per line of SQL.

Debezium, "New Record State Extraction"
(https://debezium.io/documentation/reference/1.9/transformations/event-flattening.html): a
change event's metadata includes "Source information such as the names of the database
and table where the change was made"; the topic routing SMT changes a record's topic and
key, not its value (tests/routing_smt.py quotes the pages)."""

from __future__ import annotations

import tomllib

from sync.config import parse_pipeline
from sync.sql.dialect import dialect_for
from sync.sql.procedure import TableSql
from sync.sql.procedure.classify import first_match, lookup
from sync.sql.procedure.context import Action
from sync.sql.procedure.routing import (
    RouteColumns,
    carried_columns,
    own_drift_image,
    route_columns_sql,
    routing_checks,
    run_log_columns,
    unmatched_outcome,
    unmatched_sql,
)
from sync.sql.procedure.text import Chain
from tests.helpers import EXAMPLES, ONE_COLUMN, assert_lines, table_sql

SHOP_ROUTING = parse_pipeline(tomllib.loads((EXAMPLES / "shop_routing" / "pipeline.toml").read_text()))


def routed(name: str, dialect: str = "redshift") -> TableSql:
    """The procedure context of the example's table `name`."""
    return TableSql(dialect_for(dialect, SHOP_ROUTING.schema), SHOP_ROUTING, SHOP_ROUTING.table(name))


def routes(ctx: TableSql) -> tuple[Chain, RouteColumns]:
    """A batch of one step, extended with the steps that name the routed fields' texts,
    and the columns the next step adds."""
    chain = Chain(ctx.d)
    chain.add("batch", "SELECT * FROM s")
    return chain, route_columns_sql(ctx, chain, "f._env")


def route_sql(ctx: TableSql) -> str:
    chain, columns = routes(ctx)
    return chain.sql() + "\n" + "\n".join(columns.lines)


def rules_sql(ctx: TableSql) -> str:
    """The routing rules as the stage query runs them, first: the number of the first
    that matches, and the reason each gives."""
    checks = routing_checks(ctx)
    return first_match(checks) + "\n" + lookup("t._check_no", [c.reason for c in checks], "NULL")


def actions(ctx: TableSql) -> list[Action]:
    return [c.action for c in routing_checks(ctx)]


def test_a_record_is_its_tables_own_when_every_selector_holds_on_its_source_block():
    assert_lines(
        route_sql(routed("customer")),
        # source.db and source.table, each bounded once and read by name.
        'route_1 AS (SELECT f.*, (CASE WHEN JSON_SIZE(f._env."source"."db") <= 65535 THEN f._env."source"."db" END) AS "_b_r0",',
        '(CASE WHEN JSON_SIZE(f._env."source"."table") <= 65535 THEN f._env."source"."table" END) AS "_b_r1" FROM batch f),',
        # Its own when all its selectors hold; another table's when all of that one's do.
        "CASE WHEN f._x_r0 = 'shop' AND f._x_r1 = 'customers' THEN 'own'"
        " WHEN (f._x_r0 = 'shop' AND f._x_r1 = 'orders') THEN 'other' END AS _routed_to",
    )
    # PostgreSQL reads the members as text in place: no step of their own.
    postgres = route_sql(routed("customer", "postgres"))
    assert "route_1" not in postgres
    assert_lines(
        postgres,
        "CASE WHEN f._env -> 'source' ->> 'db' = 'shop' AND f._env -> 'source' ->> 'table' = 'customers' THEN 'own'"
        " WHEN (f._env -> 'source' ->> 'db' = 'shop' AND f._env -> 'source' ->> 'table' = 'orders') THEN 'other'"
        " END AS _routed_to",
    )


def test_a_list_of_names_selects_any_of_them():
    # Debezium, "Topic Routing": "A logical table might consist of two or more sharded
    # tables: db_shard1.my_table and db_shard2.my_table."
    assert_lines(
        route_sql(routed("account")),
        "CASE WHEN f._x_r0 IN ('shard1', 'shard2') AND f._x_r1 = 'accounts' THEN 'own' END AS _routed_to",
    )


def test_an_unwrapped_record_is_selected_by_the_table_field_extract_new_record_state_adds():
    # Debezium, "New Record State Extraction" (reference 1.0, add.fields): "The fields will be
    # prefixed with “__“ or “__<struct>_“, depending on the specification of the struct."
    assert_lines(
        route_sql(routed("event")),
        'route_1 AS (SELECT f.*, (CASE WHEN JSON_SIZE(f._env."__table") <= 65535 THEN f._env."__table" END) AS "_b_r0" FROM batch f),',
        "CASE WHEN f._x_r0 IN ('events_2025', 'events_2026') THEN 'own' END AS _routed_to",
    )
    assert_lines(
        route_sql(routed("event", "postgres")),
        "CASE WHEN f._env ->> '__table' IN ('events_2025', 'events_2026') THEN 'own' END AS _routed_to",
    )


def test_only_the_first_table_names_a_records_source_within_256_bytes():
    source = "'db=' || COALESCE(f._x_r0, '') || ',table=' || COALESCE(f._x_r1, '')"
    assert_lines(
        route_sql(routed("customer")),
        f"CASE WHEN OCTET_LENGTH({source}) <= 256 THEN {source} ELSE SUBSTRING({source}, 1, 64) END AS _route_source",
    )
    # Any other table only tells its own records from the rest.
    orders = route_sql(routed("orders"))
    assert "_route_source" not in orders and "'other'" not in orders
    assert_lines(orders, "CASE WHEN f._x_r0 = 'shop' AND f._x_r1 = 'orders' THEN 'own' END AS _routed_to")


def test_nothing_of_another_tables_record_is_decoded():
    _, columns = routes(routed("orders"))
    assert columns.only_own("f._key_env", "_key_env") == (
        "CASE WHEN f._x_r0 = 'shop' AND f._x_r1 = 'orders' THEN f._key_env END AS _key_env"
    )


def test_the_first_table_skips_tombstones_routes_the_others_records_and_counts_the_rest_as_unmatched():
    # Debezium, "New Record State Extraction" (reference 1.0): after a delete, "a record with
    # null value and the same key (a “tombstone” message)": it names no table.
    assert_lines(
        rules_sql(routed("customer")),
        "WHEN t._raw_value IS NULL AND (t._env IS NULL) THEN 1",
        "WHEN t._routed_to = 'other' THEN 2",
        "WHEN IS_OBJECT(t._env) AND NOT COALESCE(t._routed_to = 'own', false) THEN 3",
        # An unmatched record's reason is its source.
        "WHEN 3 THEN t._route_source",
    )
    assert_lines(
        rules_sql(routed("customer", "postgres")),
        "WHEN t._raw_value IS NULL AND (t._env IS NULL OR jsonb_typeof(t._env) = 'null') THEN 1",
        "WHEN (jsonb_typeof(t._env) = 'object') AND NOT COALESCE(t._routed_to = 'own', false) THEN 3",
    )
    assert actions(routed("customer")) == [Action.TOMBSTONE, Action.ROUTED, Action.UNMATCHED]
    # Alone on its topic, a routed table has no other table's records to tell apart.
    assert actions(routed("account")) == [Action.TOMBSTONE, Action.UNMATCHED]


def test_any_other_table_of_the_topic_routes_whatever_is_not_its_own():
    assert_lines(
        rules_sql(routed("orders")),
        "WHEN t._routed_to IS NULL THEN 1",
    )
    assert actions(routed("orders")) == [Action.ROUTED]


def test_the_first_table_counts_unmatched_records_per_source_in_its_schema_drift_table():
    assert_lines(
        unmatched_sql(routed("customer")),
        'INSERT INTO "shop"."customer__drift" (table_name, run_started_at, kind, field, events)',
        "SELECT 'customer', v_started,",
        "'unmatched', s._reason, COUNT(*)",
        'FROM "shop"."customer__stage" s',
        "WHERE s._action = 'unmatched'",
        "GROUP BY s._reason;",
    )
    # ... and in its run-log row; any other table's row leaves the column out.
    assert unmatched_outcome(routed("customer")) == {"unmatched": "COUNT(CASE WHEN _action = 'unmatched' THEN 1 END)"}
    assert unmatched_outcome(routed("orders")) == {}
    assert "unmatched" in [c.name for c in run_log_columns(SHOP_ROUTING, SHOP_ROUTING.table("customer"))]
    assert "unmatched" not in [c.name for c in run_log_columns(SHOP_ROUTING, SHOP_ROUTING.table("orders"))]


def test_records_not_the_tables_own_leave_no_row_image_for_schema_drift():
    assert own_drift_image(routed("orders"), "c._drift_img") == (
        "CASE WHEN c._action NOT IN ('routed', 'unmatched') THEN c._drift_img END"
    )


def test_the_stage_carries_whose_record_it_is_and_past_the_classification_only_its_source():
    assert carried_columns(routed("customer"), "t.") == ["t._routed_to", "t._route_source"]
    assert carried_columns(routed("customer"), "t.", final=True) == ["t._route_source"]
    assert carried_columns(routed("orders"), "t.") == ["t._routed_to"]
    assert carried_columns(routed("orders"), "t.", final=True) == []


def test_a_table_without_a_route_gets_no_routing_sql():
    one = table_sql(ONE_COLUMN)
    chain, columns = routes(one)
    assert columns.lines == [] and len(chain.steps) == 1 and columns.only_own("f._img") == "f._img"
    assert routing_checks(one) == [] and carried_columns(one, "t.") == [] and unmatched_outcome(one) == {}
    assert own_drift_image(one, "c._drift_img") == "c._drift_img"
    assert "unmatched" not in [c.name for c in run_log_columns(one.pipeline, one.table)]

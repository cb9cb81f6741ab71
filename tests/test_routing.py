"""Several tables in one topic, with records shaped as Debezium's topic routing SMT emits
them (tests/routing_smt.py quotes the Debezium and Confluent pages): tables that select
their records by `source.db`/`source.table` (full envelope) or by `__table`
(ExtractNewRecordState), read through one streaming view with a watermark each; shards
merged into one target with the router's key field in the key; records no table selects
counted, never dropped; `prune --stream` keeping what any table sharing the view has
not read. One streaming view per topic: AWS, "Streaming ingestion to a materialized view"
(https://docs.aws.amazon.com/redshift/latest/dg/materialized-view-streaming-ingestion.html)
creates one materialized view per topic, and every view re-reads the topic from its start.
"""

from __future__ import annotations

import re

import pytest

from sync.config import ConfigError
from sync.debezium.events import ChangeStream, MySqlSource, PostgresSource
from sync.operations.runner import deploy, prune, status
from sync.sql.dialect import dialect_for
from sync.sql.objects import pipeline_objects
from sync.sql.render import render_files
from sync.warehouse import Warehouse
from tests.helpers import EXAMPLES, REPO, ingest, make_pipeline, sync_one
from tests.routing_smt import BY_LOGICAL_TABLE_ROUTER, TO_LOGICAL_TOPIC_ROUTER, rerouted, unwrapped

WHOLE_DATABASE = """
[[tables]]
name = "customer"
topic = "shop.all"
route = { db = "shop", table = "customers" }
primary_key = ["id"]
order_by = "mysql-binlog"
columns = [{ name = "id", type = "integer" }, { name = "name", type = "varchar(64)" }]

[[tables]]
name = "orders"
topic = "shop.all"
route = { db = "shop", table = "orders" }
primary_key = ["id"]
order_by = "mysql-binlog"
columns = [{ name = "id", type = "integer" }, { name = "total", type = "integer" }]
"""


def sharded(key_field: str) -> str:
    return f"""
[[tables]]
name = "account"
topic = "shop.accounts_all_shards"
route = {{ db = ["shard1", "shard2"], table = "accounts", key_field = "{key_field}" }}
primary_key = ["{key_field}", "id"]
order_by = "mysql-binlog"
distkey = "id"
columns = [
  {{ name = "{key_field}", type = "varchar(255)", target = "source_table" }},
  {{ name = "id", type = "integer" }},
  {{ name = "email", type = "varchar(64)" }},
]
"""


PARTITIONED = """
[[tables]]
name = "event"
topic = "pg.public.events_all"
format = "debezium-unwrap"
route = { table = ["events_2025", "events_2026"] }
primary_key = ["id"]
order_by = "postgres-lsn"
columns = [{ name = "id", type = "bigint" }, { name = "kind", type = "varchar(64)" }]
"""


def mysql(db: str, table: str, pos: int = 154) -> MySqlSource:
    return MySqlSource(server="shop", db=db, table=table, pos=pos)


def deployed(wh: Warehouse, tables_toml: str):
    pipeline = make_pipeline(tables_toml)
    deploy(wh, pipeline, "pipeline.toml")
    return pipeline


def drift(wh: Warehouse, table: str) -> list[tuple]:
    return wh.query(f'SELECT kind, field, events FROM cdc."{table}__drift" ORDER BY kind, field')


def test_tables_reading_one_topic_share_one_streaming_view_named_after_the_first():
    pipeline = make_pipeline(WHOLE_DATABASE + PARTITIONED)
    for dialect in ("postgres", "redshift"):
        streams = [o for o in pipeline_objects(pipeline, dialect, "pipeline.toml") if o.kind == "stream"]
        assert sorted(o.name for o in streams) == ["customer__stream", "event__stream"], dialect
    files = render_files(pipeline, "redshift", "pipeline.toml")
    assert 'FROM "cdc"."customer__stream" s' in files["orders.sql"]
    assert "CREATE MATERIALIZED VIEW" not in files["orders.sql"]


def test_the_committed_example_has_one_materialized_view_per_topic():
    example = EXAMPLES / "shop_routing" / "pipeline.toml"
    topics = set(re.findall(r'^topic = "([^"]+)"', example.read_text(), re.M))
    committed = "".join(p.read_text() for p in sorted((REPO / "sql" / "procedures" / "shop_routing").glob("*.sql")))
    views = re.findall(r"^CREATE MATERIALIZED VIEW (\S+)", committed, re.M)
    assert len(topics) == 3 and len(views) == len(topics) == len(set(views))
    # ... and four tables read them, each with a watermark of its own
    assert len(re.findall(r"^CREATE TABLE IF NOT EXISTS \S+__watermark", committed, re.M)) == 4


def test_two_tables_over_a_whole_database_topic_each_with_its_own_watermark(wh):
    pipeline = deployed(wh, WHOLE_DATABASE)
    customers = ChangeStream(["id"], mysql("shop", "customers"))
    orders = ChangeStream(["id"], mysql("shop", "orders", pos=10_000))
    audit = ChangeStream(["id"], mysql("shop", "audit_log", pos=20_000))
    records = [
        customers.insert({"id": 1, "name": "ann"}),
        orders.insert({"id": 1, "total": 30}),
        audit.insert({"id": 1}),
        customers.insert({"id": 2, "name": "bob"}),
        orders.update(None, {"id": 1, "total": 35}),
        customers.delete({"id": 2, "name": "bob"}),
        customers.tombstone({"id": 2}),
        audit.insert({"id": 2}),
    ]
    # The whole database's topic: the router adds the physical topic to each key.
    physical = {"customers": "shop.shop.customers", "orders": "shop.shop.orders", "audit_log": "shop.shop.audit_log"}
    routed = [rerouted(r, physical[r["value"]["source"]["table"]] if r["value"] else "shop.shop.customers") for r in records]
    ingest(wh, pipeline, "orders", routed)  # the shared view, whichever table names it
    assert wh.scalar("SELECT COUNT(*) FROM cdc.customer__stream") == len(records)

    run = sync_one(wh, pipeline, "customer")
    assert (run.events_read, run.upserted, run.deleted, run.quarantined, run.tombstones) == (8, 1, 1, 0, 1)
    assert wh.query("SELECT id, name FROM cdc.customer ORDER BY id") == [(1, "ann")]
    assert wh.query("SELECT COUNT(*) FROM cdc.orders") == [(0,)]  # its watermark has not moved
    assert wh.query("SELECT kafka_partition, last_offset FROM cdc.orders__watermark") == []

    run = sync_one(wh, pipeline, "orders")
    assert (run.events_read, run.upserted, run.deleted, run.quarantined) == (8, 1, 0, 0)
    assert wh.query("SELECT id, total FROM cdc.orders") == [(1, 35)]  # the delete of customer 2 is not its
    # The audit_log records no table selects: counted once, by the first table of the topic.
    assert drift(wh, "customer") == [("unmatched", "db=shop,table=audit_log", 2)]
    assert drift(wh, "orders") == []
    # ... dated with the run's start: the count joins the run-log row of the run (docs/debezium.md)
    joined = wh.query(
        "SELECT r.events_read, d.events FROM cdc.sync_run_log r JOIN cdc.customer__drift d "
        "ON d.table_name = r.table_name AND d.run_started_at = r.started_at AND d.kind = 'unmatched'"
    )
    assert joined == [(8, 2)]


def test_records_matching_no_table_are_counted_in_status_never_dropped(wh):
    pipeline = deployed(wh, WHOLE_DATABASE)
    other = ChangeStream(["id"], mysql("shop", "invoices"))
    elsewhere = ChangeStream(["id"], mysql("archive", "customers"))
    ingest(wh, pipeline, "customer", [other.insert({"id": 1}), other.insert({"id": 2}), elsewhere.insert({"id": 3, "name": "x"})])
    sync_one(wh, pipeline, "customer")
    sync_one(wh, pipeline, "orders")
    by_table = {s.table: s for s in status(wh, pipeline)}
    assert sorted(by_table["customer"].schema_drift) == [
        ("unmatched", "db=archive,table=customers", 1),
        ("unmatched", "db=shop,table=invoices", 2),
    ]
    assert by_table["orders"].schema_drift == []
    assert wh.query("SELECT COUNT(*) FROM cdc.customer") == [(0,)]


def test_a_record_that_is_no_change_event_is_quarantined_once_by_the_first_table(wh):
    pipeline = deployed(wh, WHOLE_DATABASE)
    ingest(wh, pipeline, "customer", [{"key": None, "value": "not json {"}, {"key": {"id": 1}, "value": [1, 2]}])
    assert sync_one(wh, pipeline, "customer").quarantined == 2
    assert sync_one(wh, pipeline, "orders").quarantined == 0


@pytest.mark.parametrize("key_field", [TO_LOGICAL_TOPIC_ROUTER, BY_LOGICAL_TABLE_ROUTER])
def test_a_sharded_table_merges_its_shards_with_the_routers_key_field_in_the_key(wh, key_field):
    """Equal ids of two shards are two rows: the key field the router adds (by default
    __dbz__sourceIdentifier for ToLogicalTopicRouter, __dbz__physicalTableIdentifier for
    the deprecated ByLogicalTableRouter), holding the physical topic, is part of the key."""
    pipeline = deployed(wh, sharded(key_field))
    shard1 = ChangeStream(["id"], mysql("shard1", "accounts"))
    shard2 = ChangeStream(["id"], mysql("shard2", "accounts", pos=50_000))
    records = [
        rerouted(shard1.insert({"id": 7, "email": "a@1"}), "shard1.shard1.accounts", key_field),
        rerouted(shard2.insert({"id": 7, "email": "a@2"}), "shard2.shard2.accounts", key_field),
        rerouted(shard2.insert({"id": 8, "email": "b@2"}), "shard2.shard2.accounts", key_field),
        rerouted(shard1.delete({"id": 7, "email": "a@1"}), "shard1.shard1.accounts", key_field),
        rerouted(shard1.tombstone({"id": 7}), "shard1.shard1.accounts", key_field),
    ]
    ingest(wh, pipeline, "account", records)
    run = sync_one(wh, pipeline, "account")
    assert (run.upserted, run.deleted, run.quarantined) == (2, 1, 0)
    assert wh.query("SELECT source_table, id, email FROM cdc.account ORDER BY 1, 2") == [
        ("shard2.shard2.accounts", 7, "a@2"),
        ("shard2.shard2.accounts", 8, "b@2"),
    ]
    assert wh.query("SELECT source_table, id FROM cdc.account__deleted") == [("shard1.shard1.accounts", 7)]
    # The key field is in the Kafka key only: the row images never lack it as drift.
    assert drift(wh, "account") == []


def test_without_the_routers_key_field_a_sharded_tables_records_are_quarantined(wh):
    """key.enforce.uniqueness=false and a pipeline table that keys by the router's field:
    the key is missing, so the records wait visibly instead of merging two shards' rows."""
    pipeline = deployed(wh, sharded(TO_LOGICAL_TOPIC_ROUTER))
    shard1 = ChangeStream(["id"], mysql("shard1", "accounts"))
    ingest(wh, pipeline, "account", [rerouted(shard1.insert({"id": 7, "email": "a"}), "x", key_field=None)])
    run = sync_one(wh, pipeline, "account")
    assert (run.upserted, run.quarantined) == (0, 1)
    reason = wh.scalar("SELECT reason FROM cdc.account__quarantine")
    assert reason == f"primary key field {TO_LOGICAL_TOPIC_ROUTER} is missing or not a varchar(255)"


def test_partitions_of_a_postgres_table_unwrapped_with_key_uniqueness_off(wh):
    """A partitioned table's partitions in one topic, key.enforce.uniqueness=false (no key
    field), unwrapped by ExtractNewRecordState with add.fields=table: selected by __table."""
    pipeline = deployed(wh, PARTITIONED)
    p2025 = ChangeStream(["id"], PostgresSource(db="app", table="events_2025"))
    p2026 = ChangeStream(["id"], PostgresSource(db="app", table="events_2026", lsn=90_000_000, commit_lsn=89_999_000))
    other = ChangeStream(["id"], PostgresSource(db="app", table="sessions", lsn=95_000_000, commit_lsn=94_999_000))
    records = [
        p2025.insert({"id": 1, "kind": "view"}),
        p2026.insert({"id": 2, "kind": "click"}),
        other.insert({"id": 3, "kind": "x"}),
        p2025.delete({"id": 1, "kind": "view"}),
        p2025.tombstone({"id": 1}),
    ]
    ingest(wh, pipeline, "event", [unwrapped(rerouted(r, "pg.public.x", key_field=None)) for r in records])
    run = sync_one(wh, pipeline, "event")
    assert (run.upserted, run.deleted, run.quarantined, run.tombstones) == (1, 1, 0, 1)
    assert wh.query("SELECT id, kind FROM cdc.event") == [(2, "click")]
    assert drift(wh, "event") == [("unmatched", "__table=sessions", 1)]


def test_prune_stream_keeps_every_record_a_table_sharing_the_view_has_not_read(wh):
    pipeline = deployed(wh, WHOLE_DATABASE)
    customers = ChangeStream(["id"], mysql("shop", "customers"))
    orders = ChangeStream(["id"], mysql("shop", "orders", pos=10_000))
    ingest(wh, pipeline, "customer", [customers.insert({"id": 1, "name": "a"}), orders.insert({"id": 1, "total": 1})])
    ingest(wh, pipeline, "customer", [customers.update(None, {"id": 1, "name": "b"}), orders.update(None, {"id": 1, "total": 2})])
    sync_one(wh, pipeline, "customer")  # orders has read nothing yet
    wh.execute("UPDATE cdc.customer__stream SET refresh_time = refresh_time - INTERVAL '40 days'")
    assert prune(wh, pipeline, stream=True).stream == {"customer": 0}
    assert wh.scalar("SELECT COUNT(*) FROM cdc.customer__stream") == 4

    sync_one(wh, pipeline, "orders")
    # Read by both now: what no stored row came from goes (offsets 0 and 1 wrote rows that
    # the updates at 2 and 3 replaced: the stored rows are the updates').
    assert prune(wh, pipeline, stream=True).stream == {"customer": 2}
    assert wh.query("SELECT kafka_offset FROM cdc.customer__stream ORDER BY 1") == [(2,), (3,)]


def test_prune_of_a_shared_view_locks_every_sharing_tables_watermark_in_one_order():
    from sync.operations.runner import prune_sql

    pipeline = make_pipeline(WHOLE_DATABASE)
    sql = prune_sql(dialect_for("redshift", "cdc"), pipeline, 30, stream=True)
    assert sql.tables["customer"][0] == 'LOCK TABLE "cdc"."customer__watermark", "cdc"."orders__watermark"'
    assert sql.tables["orders"][0] == 'LOCK TABLE "cdc"."orders__watermark"'
    assert not any("__stream" in s for s in sql.tables["orders"])


def test_tables_without_a_route_keep_their_generated_sql_byte_for_byte():
    base = (EXAMPLES / "salesdb" / "pipeline.toml").read_text()
    import tomllib

    from sync.config import parse_pipeline

    alone = parse_pipeline(tomllib.loads(base))
    renamed = WHOLE_DATABASE.replace('name = "customer"', 'name = "buyer"').replace('name = "orders"', 'name = "purchase"')
    with_routed = parse_pipeline(tomllib.loads(base + renamed))
    for dialect in ("postgres", "redshift"):
        before = render_files(alone, dialect, "pipeline.toml")
        after = render_files(with_routed, dialect, "pipeline.toml")
        for table in ("customer", "orders"):
            assert after[f"{table}.sql"] == before[f"{table}.sql"], (dialect, table)


@pytest.mark.parametrize(
    "tables, message",
    [
        (WHOLE_DATABASE.replace('route = { db = "shop", table = "orders" }\n', ""), "give each of them a route"),
        (WHOLE_DATABASE.replace('table = "orders" }', 'table = "orders", key_field = "x" }'), "is not in primary_key"),
        (
            WHOLE_DATABASE.replace(
                'route = { db = "shop", table = "orders" }', 'route = { field = "__table", values = "orders" }'
            ),
            "field selects on an unwrapped record",
        ),
        (
            WHOLE_DATABASE.replace(
                'order_by = "mysql-binlog"\ncolumns = [{ name = "id", type = "integer" }, { name = "total"',
                'format = "debezium-unwrap"\norder_by = "mysql-binlog"\ncolumns = [{ name = "id", type = "integer" }, { name = "total"',
            ),
            "different formats",
        ),
        (WHOLE_DATABASE.replace('route = { db = "shop", table = "orders" }', "route = { }"), "give db, schema, table"),
        (
            WHOLE_DATABASE.replace('route = { db = "shop", table = "orders" }', 'route = { field = "__table" }'),
            "field and values go together",
        ),
    ],
)
def test_routes_that_cannot_work_are_refused_with_the_setting_named(tables, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        make_pipeline(tables)


SHARDED = (
    '[[tables]]\nname = "account"\ntopic = "shop.accounts_all_shards"\n'
    'route = { db = ["shard1", "shard2"], table = "accounts", key_field = "__dbz__sourceIdentifier" }\n'
    'primary_key = ["__dbz__sourceIdentifier", "id"]\norder_by = "mysql-binlog"\n'
    'columns = [{ name = "__dbz__sourceIdentifier", type = "varchar(255)", target = "source_table" },'
    ' { name = "id", type = "integer" }, { name = "email", type = "varchar(64)" }]\n'
)


@pytest.mark.parametrize("route", ["as configured", "without key_field", "partitions by field"])
def test_deleting_on_truncate_is_refused_for_a_route_that_merges_source_tables(route):
    """A truncate event names one source table ("a truncate event ... source.table", Debezium
    MySQL connector, truncate events) and `on_truncate = "delete"` deletes every stored row:
    with shards (or a partitioned table's partitions) merged into one table, a TRUNCATE of
    one would delete the others' rows. Refused, with the setting named."""
    tables = SHARDED.replace('order_by = "mysql-binlog"\n', 'order_by = "mysql-binlog"\non_truncate = "delete"\n')
    if route == "without key_field":
        tables = tables.replace(', key_field = "__dbz__sourceIdentifier"', "").replace(
            'primary_key = ["__dbz__sourceIdentifier", "id"]', 'primary_key = ["id"]'
        )
    elif route == "partitions by field":
        tables = tables.replace(
            'db = ["shard1", "shard2"], table = "accounts", key_field = "__dbz__sourceIdentifier"',
            'field = "__table", values = ["accounts_2025", "accounts_2026"]',
        ).replace('order_by = "mysql-binlog"', 'format = "debezium-unwrap"\norder_by = "mysql-binlog"')
        tables = tables.replace('primary_key = ["__dbz__sourceIdentifier", "id"]', 'primary_key = ["id"]')
    with pytest.raises(ConfigError, match=re.escape('on_truncate = "delete" deletes every stored row')):
        make_pipeline(tables)
    # The same route keeps truncates from deleting (the default), and one source table may delete.
    assert make_pipeline(tables.replace('on_truncate = "delete"\n', "")).table("account").on_truncate == "ignore"
    single = WHOLE_DATABASE.replace(
        'route = { db = "shop", table = "orders" }\n', 'route = { db = "shop", table = "orders" }\non_truncate = "delete"\n'
    )
    assert make_pipeline(single).table("orders").on_truncate == "delete"


def test_a_table_joining_a_topic_replaces_the_procedures_of_its_tables_and_keeps_the_view():
    """The first table of a topic decides whose records are whose: when another table joins
    the topic its procedure is replaced; the shared view stays (a re-created view re-reads
    the topic from its start)."""
    from sync.schema.plan import RevisionRefused, plan_revision
    from sync.schema.state import state_for

    customer_only = WHOLE_DATABASE.split('[[tables]]\nname = "orders"')[0]
    old = state_for(make_pipeline(customer_only), "pipeline.toml")
    plan = plan_revision(old, state_for(make_pipeline(WHOLE_DATABASE), "pipeline.toml"))
    assert 'r.create_table("orders")' in plan.upgrade
    assert 'r.replace_procedure("customer")' in plan.upgrade
    assert not [op for op in plan.upgrade if "stream" in op]
    # Another table first on the topic would rename the view: refused, with the safe path.
    orders, customer = WHOLE_DATABASE.split('[[tables]]\nname = "orders"')[1], customer_only
    reordered = make_pipeline('[[tables]]\nname = "orders"' + orders + customer)
    with pytest.raises(RevisionRefused, match="keep customer the first table reading topic shop.all"):
        plan_revision(old, state_for(reordered, "pipeline.toml"))

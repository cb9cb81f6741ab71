"""Tables without a primary key (`primary_key = []`): the target is a multiset of rows
(docs/correctness.md, "Tables without a primary key").

What the connectors emit for such a table, as their documentation says it:
- PostgreSQL (Debezium PostgreSQL connector, "Replica identity"): with REPLICA IDENTITY
  DEFAULT, "If a table does not have a primary key, the connector does not emit UPDATE
  or DELETE events for that table. For a table without a primary key, the connector emits
  only create events." With FULL: "Emitted events for UPDATE and DELETE operations
  contain the previous values of all columns in the table." PostgreSQL itself
  (Logical Replication, "Publication"): "A published table must have a replica identity
  configured in order to be able to replicate UPDATE and DELETE operations ... If the
  table does not have any suitable key, then it can be set to replica identity FULL,
  which means the entire row becomes the key."
- MySQL: the connector needs `binlog_row_image=FULL` (Debezium MySQL connector, "Setting
  up MySQL": "binlog_row_image ... must be set to FULL"), so every update and delete
  carries the full before image.
- The Kafka key of a table without a key is null (the key struct is built from the
  primary key: `tableSchema.keyFromColumnData(rowData)` returns null, DBZ-1163), so the
  producer spreads the table over the topic's partitions.
- "After the connector emits a delete event, it also emits a tombstone event" (the
  tombstone has the delete's key, here null, and a null value): it carries nothing.

Positions are unique per change event here (MySQL `file`/`pos`/`row`, PostgreSQL
`sequence`); a restart re-sends a suffix at new offsets, in other partitions too.
"""

from __future__ import annotations

import pytest

from sync.config import ConfigError
from sync.operations.quarantine import Selection, replay
from sync.operations.runner import deploy
from tests.helpers import feed, make_pipeline
from tests.test_delivery_semantics import mysql_source, pg_source, setup
from tests.test_migrations import project, upgraded  # noqa: F401  (fixtures)

COLUMNS = '{ name = "sku", type = "varchar(8)" }, { name = "qty", type = "integer" }'


def keyless_toml(name: str, order_by: str = "mysql-binlog", **options: str) -> str:
    extra = "".join(f'{k} = "{v}"\n' for k, v in options.items())
    return (
        f'[[tables]]\nname = "{name}"\ntopic = "topic.{name}"\nprimary_key = []\norder_by = "{order_by}"\n{extra}'
        f"columns = [{COLUMNS}]\n"
    )


def row(sku: str, qty: int | None) -> dict:
    return {"sku": sku, "qty": qty}


def event(op: str, before: dict | None, after: dict | None, pos: int, partition: int = 0, pg: bool = False) -> dict:
    source = pg_source(pos, pos - 8) if pg else mysql_source(pos)
    value = {"before": before, "after": after, "source": source, "op": op, "ts_ms": source["ts_ms"] + 5}
    return {"partition": partition, "key": None, "value": value}


def tombstone(partition: int = 0) -> dict:
    return {"partition": partition, "key": None, "value": None}


def target(wh, name: str) -> list[tuple]:
    return wh.query(f'SELECT sku, qty FROM cdc."{name}" ORDER BY sku, qty')


def test_duplicate_identical_rows_are_kept_as_many_times_as_in_the_source(wh):
    p = setup(wh, keyless_toml("dup"))
    run = feed(wh, p, "dup", [event("c", None, row("a", 1), 100), event("c", None, row("a", 1), 200, partition=1)])
    assert target(wh, "dup") == [("a", 1), ("a", 1)]
    assert run.upserted == 2
    # A third copy in a later batch, and a re-sent copy of the second (restart) in another partition.
    feed(wh, p, "dup", [event("c", None, row("a", 1), 300, partition=1), event("c", None, row("a", 1), 200, partition=0)])
    assert target(wh, "dup") == [("a", 1), ("a", 1), ("a", 1)]


def test_update_of_one_of_two_identical_rows_changes_one(wh):
    p = setup(wh, keyless_toml("upd"))
    feed(wh, p, "upd", [event("c", None, row("a", 1), 100), event("c", None, row("a", 1), 200)])
    feed(wh, p, "upd", [event("u", row("a", 1), row("a", 5), 300, partition=1)])
    assert target(wh, "upd") == [("a", 1), ("a", 5)]
    # The same update re-sent after a restart (new offset, other partition): stale.
    run = feed(wh, p, "upd", [event("u", row("a", 1), row("a", 5), 300, partition=0)])
    assert target(wh, "upd") == [("a", 1), ("a", 5)]
    assert run.stale == 1


def test_resent_delete_removes_one_row_once(wh):
    """The delete and its tombstone re-sent after a restart: the row it removed stays
    removed, and the identical row left is not removed a second time."""
    p = setup(wh, keyless_toml("del"))
    feed(wh, p, "del", [event("c", None, row("a", 1), 100), event("c", None, row("a", 1), 200)])
    run = feed(wh, p, "del", [event("d", row("a", 1), None, 300), tombstone()])
    assert target(wh, "del") == [("a", 1)]
    assert (run.deleted, run.tombstones, run.quarantined) == (1, 1, 0)
    again = feed(wh, p, "del", [event("d", row("a", 1), None, 300, partition=1), tombstone(partition=1)])
    assert target(wh, "del") == [("a", 1)]
    assert (again.stale, again.deleted, again.quarantined) == (1, 0, 0)


def test_keyless_late_older_event_from_another_partition_is_applied(wh):
    """A null key leaves the partition to the producer ("If no partition or key is present
    choose the sticky partition that changes when the batch is full", Kafka's
    DefaultPartitioner, KIP-480), and Kafka orders records within a partition only: a
    refresh may expose partition 1's newer insert before partition 0's older ones. The
    older events are new to the table and apply; their re-sent copies do not."""
    p = setup(wh, keyless_toml("late"))
    feed(wh, p, "late", [event("c", None, row("b", 2), 300, partition=1)])
    run = feed(wh, p, "late", [event("c", None, row("a", 1), 100), event("u", row("a", 1), row("a", 7), 200)])
    assert (run.stale, run.quarantined) == (0, 0)
    assert target(wh, "late") == [("a", 7), ("b", 2)]
    # A restart re-sends all three at new offsets, in another partition: each is stale.
    again = feed(
        wh,
        p,
        "late",
        [event("c", None, row("a", 1), 100, partition=2), event("u", row("a", 1), row("a", 7), 200, partition=2)]
        + [event("c", None, row("b", 2), 300, partition=2)],
    )
    assert (again.stale, again.upserted) == (3, 0)
    assert target(wh, "late") == [("a", 7), ("b", 2)]


def test_delete_exposed_before_the_insert_of_its_row_is_kept_pending(wh):
    """Partition 1's update (its before image removes a row) and delete are exposed before
    partition 0's older inserts of those rows: they are applied, pending, and the late
    inserts pay them instead of adding rows; a re-sent copy changes nothing."""
    p = setup(wh, keyless_toml("pend"))
    first = feed(
        wh, p, "pend", [event("u", row("a", 1), row("a", 2), 300, partition=1), event("d", row("b", 1), None, 400, partition=1)]
    )
    assert (first.stale, first.quarantined) == (0, 0)
    assert target(wh, "pend") == [("a", 2)]
    feed(
        wh,
        p,
        "pend",
        [event("c", None, row("a", 1), 100), event("c", None, row("b", 1), 200), event("c", None, row("b", 1), 250)],
    )
    assert target(wh, "pend") == [("a", 2), ("b", 1)]
    again = feed(
        wh, p, "pend", [event("d", row("b", 1), None, 400, partition=2), event("c", None, row("a", 1), 100, partition=2)]
    )
    assert (again.stale, again.deleted, again.upserted) == (2, 0, 0)
    assert target(wh, "pend") == [("a", 2), ("b", 1)]


def test_copies_of_one_event_in_one_batch_apply_once(wh):
    p = setup(wh, keyless_toml("copies"))
    records = [event("c", None, row("a", 1), 100), event("c", None, row("b", 2), 200)]
    resent = [dict(r, partition=1) for r in records]
    run = feed(wh, p, "copies", records + resent)
    assert target(wh, "copies") == [("a", 1), ("b", 2)]
    assert run.superseded == 2


def test_insert_then_delete_of_equal_rows_in_one_batch(wh):
    p = setup(wh, keyless_toml("net"))
    feed(wh, p, "net", [event("c", None, row("a", 1), 100)])
    feed(
        wh,
        p,
        "net",
        [
            event("c", None, row("a", 1), 200),
            event("d", row("a", 1), None, 300),
            event("d", row("a", 1), None, 400),
            event("c", None, row("a", None), 500),
            event("u", row("a", None), row("a", None), 600),
        ],
    )
    assert target(wh, "net") == [("a", None)]


def test_postgres_keyless_update_with_full_images(wh):
    p = setup(wh, keyless_toml("pg", order_by="postgres-lsn", replica_identity="full"))
    feed(wh, p, "pg", [event("c", None, row("a", 1), 100, pg=True), event("c", None, row("a", 1), 200, pg=True)])
    feed(wh, p, "pg", [event("u", row("a", 1), row("b", 1), 300, pg=True), event("d", row("a", 1), None, 400, pg=True)])
    assert target(wh, "pg") == [("b", 1)]


def test_update_without_a_before_image_is_quarantined(wh):
    """A source not set up as required (REPLICA IDENTITY DEFAULT sends `before: null`):
    the update cannot say which row it changes, so it is quarantined, not guessed."""
    p = setup(wh, keyless_toml("nobefore", order_by="postgres-lsn", replica_identity="full"))
    feed(wh, p, "nobefore", [event("c", None, row("a", 1), 100, pg=True)])
    run = feed(wh, p, "nobefore", [event("u", None, row("a", 2), 200, pg=True)])
    assert target(wh, "nobefore") == [("a", 1)]
    assert run.quarantined == 1
    reason = wh.query("SELECT reason FROM cdc.sync_quarantine WHERE table_name = 'nobefore'")
    assert reason == [("update without a full before image: the source table needs REPLICA IDENTITY FULL",)]


PLACEHOLDER = "__debezium_unavailable_value"


@pytest.mark.parametrize("image", ["after", "before"])
def test_an_update_with_the_toast_placeholder_in_one_image_is_quarantined_whole(wh, image):
    """Debezium sends the TOAST placeholder in one image of an update even under REPLICA
    IDENTITY FULL: "Unchanged toasted array columns are substituted with placeholder even if
    REPLICA IDENTITY == FULL" (DBZ-7193, debezium/debezium pull request 5069; affected
    versions above 2.0), the before image holding the full row. A row without a primary key
    has no stored value to fill in, so the update is quarantined, and it applies whole or
    not at all: its other image neither removes the row it names (the row was lost before)
    nor adds the changed one."""
    p = setup(wh, keyless_toml("toast", order_by="postgres-lsn", replica_identity="full"))
    feed(wh, p, "toast", [event("c", None, row("a", 1), 100, pg=True)])
    before, after = (row("a", 1), row(PLACEHOLDER, 2)) if image == "after" else (row(PLACEHOLDER, 1), row("b", 2))
    run = feed(wh, p, "toast", [event("u", before, after, 200, pg=True)])
    assert target(wh, "toast") == [("a", 1)]
    assert (run.quarantined, run.deleted, run.upserted) == (1, 0, 0)


def test_a_delete_whose_before_image_does_not_convert_is_quarantined_not_applied_to_another_row(wh):
    """A table without a key: "a delete removes ONE row equal to its before image"
    (docs/correctness.md). A value of the image that does not convert (3,000,000,000 is out
    of an integer's range) must not become NULL and name another row: the delete is
    quarantined with its reason, and the row with NULL stays."""
    p = setup(wh, keyless_toml("conv"))
    feed(wh, p, "conv", [event("c", None, row("a", None), 100), event("c", None, row("a", 3_000_000_000), 200)])
    run = feed(wh, p, "conv", [event("d", row("a", 3_000_000_000), None, 300), tombstone()])
    assert target(wh, "conv") == [("a", None)]
    assert (run.quarantined, run.deleted) == (1, 0)


@pytest.mark.parametrize("before", [None, "not an object"], ids=["null", "string"])
def test_a_delete_without_a_before_image_is_quarantined_not_applied_to_a_row_of_nulls(wh, before):
    """A table without a key names the row a delete removes by its before image (docs/
    correctness.md). A source not set up as required (PostgreSQL's REPLICA IDENTITY DEFAULT:
    "If a table does not have a primary key, the connector does not emit UPDATE or DELETE
    events" there, so only a misconfigured or hand-made record has none) sends `before:
    null`: the delete names no row. It is quarantined with its reason, like an update
    without one, and neither the row it meant nor a row whose values are all NULL goes."""
    p = setup(wh, keyless_toml("nobefore_d", order_by="postgres-lsn", replica_identity="full"))
    feed(wh, p, "nobefore_d", [event("c", None, row("a", 1), 100, pg=True), event("c", None, row(None, None), 200, pg=True)])
    run = feed(wh, p, "nobefore_d", [event("d", before, None, 300, pg=True), tombstone()])
    assert target(wh, "nobefore_d") == [("a", 1), (None, None)]
    assert (run.quarantined, run.deleted) == (1, 0)
    reason = wh.query("SELECT reason FROM cdc.sync_quarantine WHERE table_name = 'nobefore_d'")
    assert reason == [("delete without a full before image: the source table needs REPLICA IDENTITY FULL",)]


def _widened_sku(wh, name: str):
    """The table deployed with sku as varchar(2), then widened to varchar(8) (what a
    widening revision does), so a record quarantined for a long sku can be replayed."""
    for relation in (name, name + "__stage"):
        wh.execute(f'ALTER TABLE cdc."{relation}" ALTER COLUMN sku TYPE varchar(8)')
    wide = make_pipeline(keyless_toml(name))
    deploy(wh, wide, "test")
    return wide


def test_replay_of_a_record_whose_resent_copy_applied_adds_nothing(wh):
    """Quarantined once, a record may still reach the table: a connector restart re-sends it
    ("at-least-once", Debezium) after the column is widened. Its position is then applied,
    and the replay is a copy: stale, not a second row."""
    p = setup(wh, keyless_toml("rq").replace('"varchar(8)"', '"varchar(2)"'))
    insert = event("c", None, row("abc", 1), 100)
    assert feed(wh, p, "rq", [insert]).quarantined == 1
    wide = _widened_sku(wh, "rq")
    feed(wh, wide, "rq", [{**insert, "partition": 1}])
    replay(wh, wide, Selection("rq"))
    assert target(wh, "rq") == [("abc", 1)]


def test_replay_of_a_change_below_a_later_snapshot_adds_nothing(wh):
    """A snapshot taken after the change holds its row: the replayed change is below the
    snapshot's position, in it, and stale."""
    p = setup(wh, keyless_toml("rs").replace('"varchar(8)"', '"varchar(2)"'))
    feed(wh, p, "rs", [event("c", None, row("abc", 1), 100)])
    wide = _widened_sku(wh, "rs")
    reads = [snapshot_read(row("abc", 1), "first", 0, 9000), snapshot_read(row("b", 1), "last", 0, 9001)]
    for read in reads:
        read["value"]["source"]["pos"] = 300
    feed(wh, wide, "rs", reads)
    replay(wh, wide, Selection("rs"))
    assert target(wh, "rs") == [("abc", 1), ("b", 1)]


def test_keyless_true_is_accepted_besides():
    toml = keyless_toml("kl").replace("primary_key = []\n", "keyless = true\n")
    assert make_pipeline(toml).table("kl").is_keyless


@pytest.mark.parametrize(
    ("options", "setting"),
    [
        ({"order_by": "kafka"}, "order_by"),
        ({"order_by": "sqlserver-lsn"}, "order_by"),
        ({"order_by": "postgres-lsn"}, "replica_identity"),
        ({"order_by": "postgres-lsn", "replica_identity": "default"}, "replica_identity"),
        ({"format": "debezium-unwrap"}, "format"),
        ({"delete_mode": "soft"}, "delete_mode"),
        ({"on_truncate": "delete"}, "on_truncate"),
    ],
)
def test_configurations_that_cannot_be_exact_are_refused(options, setting):
    order_by = options.pop("order_by", "mysql-binlog")
    with pytest.raises(ConfigError) as refused:
        make_pipeline(keyless_toml("bad", order_by=order_by, **options))
    assert f"{setting}:" in str(refused.value)


def test_keyless_with_a_key_is_refused():
    toml = keyless_toml("both").replace("primary_key = []\n", 'primary_key = ["sku"]\nkeyless = true\n')
    with pytest.raises(ConfigError, match="keyless"):
        make_pipeline(toml)


def test_the_keyed_reconcile_refuses_a_keyless_table(wh):
    """The keyed reconcile matches rows by key: given a keyless table it refuses, before any
    Spark job (the CLI runs the keyless reconcile for such a table)."""
    from sync.operations.reconcile import run_reconcile

    p = setup(wh, keyless_toml("nokey"))
    with pytest.raises(ValueError, match="reconcile: table 'nokey' has no primary key"):
        run_reconcile(wh, p, "nokey", "/nonexistent", "json")


def test_the_keyless_reconcile_refuses_a_column_it_cannot_hash_alike(wh):
    """A row hash over a `time` column would differ between Spark's text form (the
    snapshot's text, as read) and the warehouse's: refused, naming the type, before any
    Spark job. (Floats hash alike: tests/spark/test_float_text.py.)"""
    from sync.operations.keyless_reconcile import run_keyless_reconcile

    p = setup(wh, keyless_toml("times").replace('"integer"', '"time"'))
    with pytest.raises(ValueError, match="reconcile cannot compare time columns"):
        run_keyless_reconcile(wh, p, "times", "/nonexistent", "json")


def test_keyless_backfill_and_reconcile_sql_parses_for_redshift():
    """Every statement of the keyless backfill's checks and replace, and of its reconcile,
    parses with sqlglot's Redshift dialect; a DELETE names its table without an alias
    (Redshift's DELETE takes none)."""
    import sqlglot
    from sqlglot import exp

    from sync.sql.dialect import dialect_for
    from sync.sql.keyless_backfill import KeylessBackfillSql
    from sync.sql.keyless_reconcile import KeylessReconcileSql

    floats = keyless_toml("floats").replace('"integer"', '"double precision"').replace('"varchar(8)"', '"real"')
    p = make_pipeline(keyless_toml("items") + floats)
    d = dialect_for("redshift").bind_schema(p.schema)
    backfill = KeylessBackfillSql(d, p, p.table("items"))
    reconcile = KeylessReconcileSql(d, p, p.table("items"), 8)
    statements = [backfill.stage_positions(), backfill.held_after(), *[s.sql for s in backfill.merge()]]
    statements += [reconcile.bucket_counts(), reconcile.bucket_rows([1, 2], "0.1"), reconcile.changes_after("0.1")]
    floated = KeylessReconcileSql(d, p, p.table("floats"), 8)  # the floats' canonical text
    statements += [floated.bucket_counts(), floated.bucket_rows([1, 2], "0.1")]
    for sql in statements:
        parsed = sqlglot.parse_one(sql, read="redshift")
        assert not isinstance(parsed, exp.Command), sql
        if isinstance(parsed, exp.Delete):
            assert parsed.this.alias == "", sql


def _keyless_steps(ctx):
    from sync.sql.procedure.keyless_steps import KEYLESS_APPLY_STEPS, KEYLESS_SYNC_STEPS, keyless_apply_batch_sql

    order = []
    for step in KEYLESS_SYNC_STEPS:
        if step.sql is keyless_apply_batch_sql:
            order += [s for s in KEYLESS_APPLY_STEPS if s.applies(ctx)]
        elif step.applies(ctx):
            order.append(step)
    return order


@pytest.mark.parametrize("dialect", ["postgres", "redshift"])
@pytest.mark.parametrize("order_by", ["mysql-binlog", "postgres-lsn"])
def test_keyless_steps_keep_the_stage_contract(dialect, order_by):
    """The stage contract of tests/test_procedure_steps.py over the keyless steps: no step
    reads what only a later one writes, and each declares the stage names its SQL uses."""
    import re

    from sync.sql.dialect import dialect_for
    from sync.sql.procedure.context import Action, TableSql
    from tests.test_procedure_steps import COLUMNS, read_before_written

    pipeline = make_pipeline(keyless_toml("contract", order_by=order_by, replica_identity="full"))
    ctx = TableSql(dialect_for(dialect, pipeline.schema), pipeline, pipeline.table("contract"))
    steps = _keyless_steps(ctx)
    assert read_before_written(steps) == []
    for step in steps:
        sql = step.sql(ctx)
        named = {c for c in COLUMNS if re.search(rf"\b{c}\b", sql)} | {a for a in Action if f"'{a}'" in sql}
        assert named <= step.reads | step.writes, (
            f"{step.sql.__name__} does not declare {sorted(named - step.reads - step.writes)}"
        )


KEYLESS_BLOCK = """[[tables]]
name = "visits"
topic = "salesdb.salesdb.VISITS"
primary_key = []
order_by = "mysql-binlog"
columns = [
  { name = "PAGE", type = "varchar(32)" },
]

"""


def test_a_revision_adds_a_keyless_table_then_a_column_filled_from_the_records_that_wrote_each_row(
    project,  # noqa: F811
    upgraded,  # noqa: F811
    wh,
):
    """`revision` and `deploy` for a table without a primary key: the table is created
    (no PRIMARY KEY), and a column added later is filled for each stored row from the
    record that wrote it, so two identical rows whose records carried different values of
    the new field take each their own; then `reset-positions` (which clears the stored
    positions) leaves deletes able to find their row."""
    from sync.operations.recovery import reset_positions
    from sync.schema.revisions import deploy
    from tests.helpers import ingest, sync_one
    from tests.test_migrations import revise

    anchor = '[[tables]]\nname = "customer"'
    pipeline, _ = revise(upgraded, project, anchor, KEYLESS_BLOCK + anchor, "visits")
    deploy(upgraded, pipeline)
    ingest(
        wh,
        pipeline,
        "visits",
        [
            event("c", None, {"PAGE": "/a", "REF": "ads"}, 100),
            event("c", None, {"PAGE": "/a", "REF": "mail"}, 200, partition=1),
            event("c", None, {"PAGE": "/b"}, 300),
        ],
    )
    sync_one(wh, pipeline, "visits")
    assert wh.query('SELECT page FROM cdc."visits" ORDER BY 1') == [("/a",), ("/a",), ("/b",)]
    add_ref = (
        '  { name = "PAGE", type = "varchar(32)" },\n]',
        '  { name = "PAGE", type = "varchar(32)" },\n  { name = "REF", type = "varchar(8)" },\n]',
    )
    pipeline, _ = revise(upgraded, project, *add_ref, "visits ref")
    deploy(upgraded, pipeline)
    assert wh.query('SELECT page, ref FROM cdc."visits" ORDER BY 1, 2') == [("/a", "ads"), ("/a", "mail"), ("/b", None)]
    # A delete exposed before its row's insert (partition 0 lags): pending across the reset.
    ingest(wh, pipeline, "visits", [event("d", {"PAGE": "/c", "REF": "ads"}, None, 500, partition=1)])
    sync_one(wh, pipeline, "visits")
    reset_positions(wh, pipeline, "visits", apply=True)
    ingest(wh, pipeline, "visits", [event("d", {"PAGE": "/a", "REF": "mail"}, None, 400)])
    sync_one(wh, pipeline, "visits")
    assert wh.query('SELECT page, ref FROM cdc."visits" ORDER BY 1, 2') == [("/a", "ads"), ("/b", None)]
    # The late insert pays the pending delete, and only once: an equal insert later adds its row.
    for pos in (450, 600):
        ingest(wh, pipeline, "visits", [event("c", None, {"PAGE": "/c", "REF": "ads"}, pos)])
        sync_one(wh, pipeline, "visits")
    assert wh.query('SELECT page, ref FROM cdc."visits" ORDER BY 1, 2') == [("/a", "ads"), ("/b", None), ("/c", "ads")]


def snapshot_read(r: dict, marker: str, partition: int, sent_ms: int) -> dict:
    """An initial-snapshot read: every read carries the snapshot's one position ("All read
    events contain the same LSN position"), the first `snapshot = "first"`; `sent_ms`: the
    producer's timestamp (Kafka order across partitions)."""
    record = event("r", None, r, 100, partition=partition)
    record["value"]["source"]["snapshot"] = marker
    return {**record, "timestamp": 1_800_000_000_000 + sent_ms}


def test_snapshot_interrupted_and_run_again_from_its_first_read(wh):
    """ "if the process is interrupted due to connector failure, rebalancing, or other
    reasons, the process restarts after the connector restarts": the reads of the first
    attempt and of the second share one position, and the source holds two identical rows."""
    p = setup(wh, keyless_toml("snap"))
    feed(wh, p, "snap", [snapshot_read(row("a", 1), "first", 0, 1)])
    assert target(wh, "snap") == [("a", 1)]
    run = feed(
        wh,
        p,
        "snap",
        [
            snapshot_read(row("a", 1), "true", 1, 2),
            snapshot_read(row("a", 1), "first", 0, 5000),  # after the restart
            snapshot_read(row("a", 1), "last", 1, 5001),
        ],
    )
    assert target(wh, "snap") == [("a", 1), ("a", 1)]
    assert run.stale == 1  # the first attempt's second read, before the snapshot started again
    feed(wh, p, "snap", [event("u", row("a", 1), row("a", 2), 200)])
    assert target(wh, "snap") == [("a", 1), ("a", 2)]


def test_quarantine_replay_applies_a_record_that_was_never_applied(wh):
    """A record quarantined (here: a value longer than the column) was never applied, so
    once the column is widened, `quarantine replay` applies it although newer events
    moved the table's high-water position past it."""
    from sync.operations.quarantine import Selection, replay
    from sync.operations.runner import deploy

    narrow = keyless_toml("rq").replace('type = "varchar(8)"', 'type = "varchar(2)"')
    p = setup(wh, narrow)
    run = feed(wh, p, "rq", [event("c", None, row("abc", 1), 100), event("c", None, row("b", 2), 200)])
    assert (run.quarantined, target(wh, "rq")) == (1, [("b", 2)])
    for relation in ("rq", "rq__stage"):
        wh.execute(f'ALTER TABLE cdc."{relation}" ALTER COLUMN sku TYPE varchar(8)')
    wide = make_pipeline(keyless_toml("rq"))
    deploy(wh, wide, "test")
    result = replay(wh, wide, Selection("rq"))
    assert result.replayed == 1
    assert target(wh, "rq") == [("abc", 1), ("b", 2)]


def test_a_revision_records_the_replica_identity_a_keyless_postgres_table_needs():
    """Was: the revision left replica_identity out of the state it records, so reading the
    state back refused the table (`revision` and `deploy` failed for a PostgreSQL keyless
    table). Tables that do not set it are recorded as before it existed."""
    from sync.schema.state import pipeline_of, state_for, warehouse_model

    pipeline = make_pipeline(keyless_toml("pgk", order_by="postgres-lsn", replica_identity="full"))
    assert pipeline_of(state_for(pipeline, "x.toml")).table("pgk").replica_identity == "full"
    keyed = make_pipeline(keyless_toml("k").replace("primary_key = []", 'primary_key = ["sku"]'))
    assert "replica_identity" not in warehouse_model(keyed)["tables"][0]


def test_the_readme_example_events_end_as_the_source_does(wh):
    """README, "The pipeline file": examples/keyless_tables/events/price_history.jsonl."""
    import tomllib

    from sync.config import parse_pipeline
    from sync.local.stream import ingest_file
    from sync.operations.runner import deploy
    from tests.helpers import EXAMPLES, sync_one

    folder = EXAMPLES / "keyless_tables"
    pipeline = parse_pipeline(tomllib.loads((folder / "pipeline.toml").read_text()))
    deploy(wh, pipeline, "test")
    ingest_file(wh, pipeline, "price_history", folder / "events" / "price_history.jsonl")
    run = sync_one(wh, pipeline, "price_history")
    assert (run.events_read, run.upserted, run.deleted, run.stale, run.superseded) == (8, 2, 0, 0, 4)
    rows = wh.query(
        "SELECT sku, CAST(price AS varchar(16)), CAST(valid_from AS varchar(10)) FROM audit.price_history ORDER BY 1, 2"
    )
    assert rows == [("A-1", "4.50", "2023-12-10"), ("A-1", "5.00", "2023-12-09")]

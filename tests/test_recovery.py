"""Recovery from events that break ordering, through the command line on a real PostgreSQL:
`reset-positions` after a MySQL failover, `rebase-offsets` after a re-created topic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlglot

from sync.config import load_pipeline
from sync.debezium.events import ChangeStream, MySqlSource, write_jsonl
from sync.sql import recovery
from sync.sql.dialect import dialect_for
from tests.helpers import EXAMPLES
from tests.test_cli import run

PIPELINE = EXAMPLES / "salesdb" / "pipeline.toml"
TARGET = 'SELECT customer_id, name FROM cdc."customer" ORDER BY 1'
REBASE_HINT = "run `redshift-sync rebase-offsets --table customer --yes`"


def _row(i: int, name: str | None = None) -> dict:
    return {"CUST_ID": f"C{i}", "NAME": name or f"name {i}", "MKTSEGMENT": "BUILDING"}


class Cli:
    """The pipeline of the example, deployed on a fresh database, driven as a user does."""

    def __init__(self, dsn: str, tmp: Path):
        self.dsn, self.tmp, self.files = dsn, tmp, 0
        assert self("deploy").returncode == 0

    def __call__(self, *args: str):
        return run(*args, "--config", str(PIPELINE), "--dsn", self.dsn)

    def ingest(self, records: list[dict]) -> None:
        self.files += 1
        path = self.tmp / f"events-{self.files}.jsonl"
        write_jsonl(records, path)
        out = self("ingest", "--table", "customer", "--file", str(path))
        assert out.returncode == 0, out.stderr

    def sync(self) -> dict:
        out = self("sync", "--table", "customer", "--json")
        assert out.returncode == 0, out.stderr
        (summary,) = json.loads(out.stdout)
        self.last_sync_stderr = out.stderr
        return summary


@pytest.fixture
def cli(database_dsn, tmp_path) -> Cli:
    return Cli(database_dsn, tmp_path)


def test_reset_positions_after_a_mysql_failover(cli, wh):
    """MySQL binlog positions belong to one server: "Binary log file names and byte offsets
    are meaningful only on the single server that produced them"
    (https://docs.snowflake.com/en/user-guide/data-integration/openflow/connectors/mysql/gtid),
    and after a failover the Debezium MySQL connector finds the binlog location of the last
    transaction on another server of the cluster and reads that server's binlog from there
    (Debezium user guide, "MySQL is unavailable", "Using GTIDs",
    https://access.redhat.com/documentation/ja-jp/red_hat_integration/2020-q2/html/debezium_user_guide/mysql-is-unavailable_debezium).
    `RESET MASTER` "creates a new binary log file starting at 1"
    (https://dev.mysql.com/doc/refman/8.0/en/reset-master.html)."""
    old_server = ChangeStream(["CUST_ID"], MySqlSource(file_number=42, pos=9_000_000))
    cli.ingest([old_server.insert(_row(1)), old_server.insert(_row(2)), old_server.update(_row(1), _row(1, "v2"))])
    assert cli.sync()["upserted"] == 2

    new_server = ChangeStream(["CUST_ID"], MySqlSource(file_number=1, pos=4, ts_ms=1_800_000_000_000))
    failover = [
        new_server.update(_row(1, "v2"), _row(1, "after failover")),
        new_server.delete(_row(2)),
        new_server.tombstone(_row(2)),
    ]
    assert failover[0]["value"]["source"]["file"] == "mysql-bin.000001"
    cli.ingest(failover)
    before = cli.sync()
    assert (before["stale"], before["upserted"], before["deleted"]) == (2, 0, 0)
    assert wh.query(TARGET) == [("C1", "v2"), ("C2", "name 2")]

    refused = cli("reset-positions", "--table", "customer")
    assert refused.returncode == 1
    assert "clears the stored source positions of 2 row(s) of customer and 0 deleted key(s)" in refused.stderr
    assert "Risk:" in refused.stderr and "Nothing was changed: run it again with --yes" in refused.stderr
    assert wh.scalar('SELECT COUNT(*) FROM cdc."customer" WHERE "_source_pos" IS NULL') == 0
    assert wh.scalar("SELECT COUNT(*) FROM cdc.sync_run_log WHERE status = 'reset-positions'") == 0

    done = cli("reset-positions", "--table", "customer", "--yes")
    assert done.returncode == 0, done.stderr
    assert "cleared the stored source positions of 2 row(s) of customer and 0 deleted key(s)" in done.stdout
    logged = wh.query(
        "SELECT events_read, upserted, deleted, watermark_before, watermark_after FROM cdc.sync_run_log "
        "WHERE status = 'reset-positions'"
    )
    assert logged == [(0, 2, 0, "0:5", "0:5")]

    later = [
        new_server.update(_row(1, "after failover"), _row(1, "v3")),
        new_server.delete(_row(2)),
        new_server.tombstone(_row(2)),
    ]
    cli.ingest(later)
    after = cli.sync()
    assert (after["stale"], after["upserted"], after["deleted"]) == (0, 1, 1)
    assert wh.query(TARGET) == [("C1", "v3")]
    stored = wh.scalar('SELECT "_source_pos" FROM cdc."customer__deleted" WHERE customer_id = %s', ("C2",))
    assert int(stored.split(".")[0]) == 1  # mysql-bin.000001

    # New positions are stored: a replay of the same events is stale again.
    cli.ingest(later)
    assert cli.sync()["stale"] == 2
    assert wh.query(TARGET) == [("C1", "v3")]


def test_reset_positions_clears_the_deleted_keys_too(cli, wh):
    old_server = ChangeStream(["CUST_ID"], MySqlSource(file_number=42))
    cli.ingest([old_server.insert(_row(1)), old_server.delete(_row(1)), old_server.tombstone(_row(1))])
    cli.sync()
    assert wh.scalar('SELECT COUNT(*) FROM cdc."customer__deleted" WHERE "_source_pos" IS NOT NULL') == 1
    done = cli("reset-positions", "--table", "customer", "--yes")
    assert "of 0 row(s) of customer and 1 deleted key(s)" in done.stdout
    assert wh.query("SELECT upserted, deleted FROM cdc.sync_run_log WHERE status = 'reset-positions'") == [(0, 1)]

    new_server = ChangeStream(["CUST_ID"], MySqlSource(file_number=1, pos=4))
    cli.ingest([new_server.insert(_row(1, "back on the new server"))])
    assert cli.sync()["upserted"] == 1
    assert wh.query(TARGET) == [("C1", "back on the new server")]


def test_reset_positions_refuses_a_table_in_kafka_order(tmp_path, database_dsn):
    kafka_order = tmp_path / "pipeline.toml"
    kafka_order.write_text(PIPELINE.read_text().replace('order_by = "mysql-binlog"', 'order_by = "kafka"'))
    out = run("reset-positions", "--table", "customer", "--yes", "--config", str(kafka_order), "--dsn", database_dsn)
    assert out.returncode == 2 and 'has order_by = "kafka": it stores no source positions to reset' in out.stderr


def test_rebase_offsets_after_the_topic_is_re_created(cli, wh):
    """A re-created topic starts its offsets again: "When you remove and recreate a topic
    the offsets are thus reset, but an existing consumer will not use the new offsets until
    they pass the old highwater offset"
    (https://github.com/confluentinc/confluent-kafka-python/issues/455). Redshift's
    streaming views carry `refresh_time`, "the time the refresh started", per record
    (https://docs.aws.amazon.com/redshift/latest/dg/materialized-view-streaming-ingestion-getting-started-MSK.html)."""
    source = ChangeStream(["CUST_ID"], MySqlSource())
    cli.ingest([source.insert(_row(i)) for i in range(10)])
    first = cli.sync()
    assert (first["events_read"], first["watermark_after"]) == (10, "0:9")

    # The topic is deleted and created again: the connector's next events start at offset 0.
    recreated = [{**source.insert(_row(100 + i)), "offset": i} for i in range(5)]
    cli.ingest(recreated)
    warning = (
        f"partition 0: 5 records refreshed after the watermark have offsets at or below it (topic re-created?): {REBASE_HINT}"
    )
    status = cli("status")
    assert status.returncode == 0
    assert f"customer: {warning}" in " ".join(status.stdout.split())
    assert "│ customer │   10 │       0 │" in status.stdout  # pending 0: the records are invisible to sync

    skipped = cli.sync()
    assert skipped["events_read"] == 0
    assert f"warning: customer: {warning}" in " ".join(cli.last_sync_stderr.split())

    refused = cli("rebase-offsets", "--table", "customer")
    assert refused.returncode == 1
    assert "would re-base the watermark of customer" in refused.stderr
    assert "partition 0: last offset 9 -> -1 (5 record(s) refreshed after the watermark)" in refused.stderr
    assert "Nothing was changed: run it again with --yes" in refused.stderr
    assert wh.scalar('SELECT last_offset FROM cdc."customer__watermark"') == 9

    done = cli("rebase-offsets", "--table", "customer", "--yes")
    assert done.returncode == 0, done.stderr
    assert "partition 0: last offset 9 -> -1" in done.stdout
    assert wh.query(
        "SELECT events_read, watermark_before, watermark_after FROM cdc.sync_run_log WHERE status = 'rebase-offsets'"
    ) == [(0, "0:9", "0:-1")]
    assert REBASE_HINT not in cli("status").stdout

    applied = cli.sync()
    assert (applied["events_read"], applied["upserted"], applied["watermark_after"]) == (5, 5, "0:4")
    assert wh.scalar('SELECT COUNT(*) FROM cdc."customer"') == 15
    assert wh.scalar('SELECT COUNT(*) FROM cdc."customer" WHERE _kafka_offset <= 4 AND customer_id LIKE %s', ("C10_",)) == 5
    again = cli.sync()
    assert (again["events_read"], again["upserted"]) == (0, 0)
    assert REBASE_HINT not in cli.last_sync_stderr
    # pending counts what the sync reads: the old topic's records (offsets above the new
    # watermark, refreshed before it) are not pending
    assert "│ customer │   15 │       0 │" in cli("status").stdout


def test_rebase_offsets_takes_care_of_partitions_without_new_records(cli, wh):
    """Partition 1 had records before the topic was re-created and none since: its first
    record after the rebase is at offset 0, and must be read. Partition 2 is new (the
    re-created topic has more partitions): its records are read from the first."""
    source = ChangeStream(["CUST_ID"], MySqlSource())
    cli.ingest(
        [{**source.insert(_row(i)), "partition": 0} for i in range(6)]
        + [{**source.insert(_row(50 + i)), "partition": 1} for i in range(3)]
    )
    assert cli.sync()["watermark_after"] == "0:5,1:2"

    cli.ingest(
        [{**source.insert(_row(100 + i)), "partition": 0, "offset": i} for i in range(2)]
        + [{**source.insert(_row(150)), "partition": 2, "offset": 0}]
    )
    done = cli("rebase-offsets", "--table", "customer", "--yes")
    assert done.returncode == 0, done.stderr
    assert "partition 0: last offset 5 -> -1 (2 record(s) refreshed after the watermark)" in done.stdout
    assert "partition 1: last offset 2 -> -1 (0 record(s) refreshed after the watermark)" in done.stdout
    assert "partition 2: last offset - -> -1 (1 record(s) refreshed after the watermark)" in done.stdout
    assert wh.query('SELECT kafka_partition, last_offset FROM cdc."customer__watermark" ORDER BY 1') == [
        (0, -1),
        (1, -1),
        (2, -1),
    ]
    assert cli.sync()["events_read"] == 3

    cli.ingest([{**source.insert(_row(200)), "partition": 1, "offset": 0}])
    late = cli.sync()
    assert (late["events_read"], late["upserted"], late["watermark_after"]) == (1, 1, "0:1,1:0,2:0")
    assert wh.scalar('SELECT COUNT(*) FROM cdc."customer"') == 13


def test_rebase_offsets_refuses_when_nothing_is_new(cli):
    source = ChangeStream(["CUST_ID"], MySqlSource())
    never_synced = cli("rebase-offsets", "--table", "customer", "--yes")
    assert never_synced.returncode == 1 and "has no watermark yet: nothing to rebase" in never_synced.stderr
    cli.ingest([source.insert(_row(1))])
    cli.sync()
    out = cli("rebase-offsets", "--table", "customer", "--yes")
    assert out.returncode == 1 and "no record was refreshed after the watermark: nothing to rebase" in out.stderr


CONTROL_COLUMNS = {"kafka_partition", "last_offset", "last_refresh_time", "item__", "order__", "pos__"}


@pytest.mark.parametrize("table_name", ["customer", "orders"])
def test_recovery_sql_is_redshift_sql_with_every_identifier_quoted(table_name):
    from datetime import datetime

    pipeline, _ = load_pipeline(PIPELINE)
    table = pipeline.table(table_name)
    d = dialect_for("redshift", pipeline.schema)
    at = datetime(2026, 11, 24, 3, 0, 0, 123456)
    statements = [
        recovery.watermark_text_sql(d, pipeline, table),
        recovery.watermark_rows_sql(d, pipeline, table),
        recovery.offset_regressions_sql(d, pipeline, table),
        recovery.new_records_sql(d, pipeline, table),
        recovery.run_log_sql(d, pipeline, table, recovery.REBASE_OFFSETS, at, "0:9", "0:-1"),
        *recovery.positioned_rows_sql(d, pipeline, table),
        *recovery.reset_positions_sql(d, pipeline, table),
        *recovery.rebase_offsets_sql(d, pipeline, table, at, {0: 3, 2: 0}, {0, 1}),
    ]
    # The history's positions and the run log's reset row (what a history rebuild checks).
    statements[-1:-1] = [
        recovery.history_positions_sql(d, pipeline, table, apply=False),
        recovery.history_positions_sql(d, pipeline, table, apply=True),
        recovery.reset_positions_logged_sql(d, pipeline, table),
    ]
    assert len(recovery.reset_positions_sql(d, pipeline, table)) == (2 if table.delete_mode == "hard" else 1)
    for statement in statements:
        tree = sqlglot.parse_one(statement, read="redshift")
        for column in tree.find_all(sqlglot.exp.Column):
            # columns of the generator's own control tables may go unquoted (fixed names)
            assert isinstance(column.this, sqlglot.exp.Star) or column.this.quoted or column.name in CONTROL_COLUMNS, (
                column.sql(),
                statement,
            )
        for relation in tree.find_all(sqlglot.exp.Table):
            assert relation.this.quoted, (relation.sql(), statement)
    assert "LISTAGG" in statements[0] and "TIMEOFDAY()" in statements[-1]
    assert recovery.lock_sql(d, pipeline, table) == f'LOCK TABLE "cdc"."{table_name}__watermark";'

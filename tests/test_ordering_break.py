"""Ordering breaks detected, not discovered: MySQL binlog files renumbered mid-stream make
every later event stale; after `ordering_break_runs` such runs `sync`, `status` and the
Lambda say so with the `reset-positions` command, and running it brings the target equal
to the source.

MySQL binlog positions belong to one server: "Binary log file names and byte offsets are
meaningful only on the single server that produced them"
(https://docs.snowflake.com/en/user-guide/data-integration/openflow/connectors/mysql/gtid);
after a failover the Debezium MySQL connector reads another server's binlog, and
`RESET MASTER` "creates a new binary log file starting at 1"
(https://dev.mysql.com/doc/refman/8.0/en/reset-master.html): the positions restart lower.
"""

from __future__ import annotations

import json
import re
import tomllib

import pytest

from sync.aws import lambda_handler
from sync.config import parse_pipeline
from sync.debezium.events import ChangeStream, MySqlSource
from sync.operations.ordering import ordering_breaks, readable_position
from sync.operations.runner import deploy
from tests.helpers import EXAMPLES, feed, local_lambda, metric_lines
from tests.test_recovery import PIPELINE, TARGET, Cli, _row

COMMAND = re.compile(r"`(redshift-sync reset-positions [^`]*)`")


@pytest.fixture
def cli(database_dsn, tmp_path) -> Cli:
    return Cli(database_dsn, tmp_path)


def source_rows(source: dict[str, str]) -> list[tuple[str, str]]:
    return sorted(source.items())


def test_renumbered_binlog_files_are_reported_and_the_printed_command_repairs(cli, wh, database_dsn, monkeypatch, capsys):
    source: dict[str, str] = {}
    old_server = ChangeStream(["CUST_ID"], MySqlSource(file_number=42, pos=9_000_000))
    cli.ingest([old_server.insert(_row(1)), old_server.insert(_row(2)), old_server.insert(_row(3))])
    source.update({"C1": "name 1", "C2": "name 2", "C3": "name 3"})
    assert cli.sync()["upserted"] == 3

    # The failover: mysql-bin.000001 on the new primary, three syncs of changes to stored keys.
    new_server = ChangeStream(["CUST_ID"], MySqlSource(file_number=1, pos=4, ts_ms=1_800_000_000_000))
    batches = [
        [new_server.update(_row(1), _row(1, "a"))],
        [new_server.update(_row(2), _row(2, "b")), new_server.update(_row(1, "a"), _row(1, "c"))],
        [new_server.delete(_row(3)), new_server.tombstone(_row(3))],
    ]
    changes = [{"C1": "a"}, {"C2": "b", "C1": "c"}, {"C3": None}]
    for i, (batch, change) in enumerate(zip(batches, changes, strict=True), start=1):
        cli.ingest(batch)
        for key, name in change.items():
            source.pop(key) if name is None else source.__setitem__(key, name)
        run = cli.sync()
        assert (run["upserted"], run["deleted"]) == (0, 0) and run["stale"] > 0
        assert ("ordering break" in cli.last_sync_stderr) == (i == 3), cli.last_sync_stderr
    assert wh.query(TARGET) != source_rows(source)

    warning = cli.last_sync_stderr
    assert "customer: ordering break: the last 3 runs applied nothing, 4 record(s) older than the stored positions" in warning
    assert "newest read 1.4" in warning and "newest stored 42.9000" in warning  # binlog file.pos.row
    (command,) = COMMAND.findall(warning.replace("\n", ""))
    assert command == "redshift-sync reset-positions --table customer --reread-from 0:2 --yes"

    st = cli("status", "--json")
    (customer,) = [r for r in json.loads(st.stdout) if r["table"] == "customer"]
    assert customer["ordering_break"]["command"] == command and customer["ordering_break"]["stale"] == 4
    assert any("ordering break" in w for w in customer["warnings"])
    assert "ordering break" in cli("status").stdout

    # The Lambda's run reads nothing new: the streak stands, the metric says so.
    local_lambda(monkeypatch, PIPELINE, database_dsn)
    lambda_handler.handler({"tables": ["customer", "orders"]}, None)
    lines = metric_lines(capsys.readouterr().out)
    assert lines["customer"]["OrderingBreak"] == 1 and command in lines["customer"]["ordering_break"]
    assert lines["orders"]["OrderingBreak"] == 0 and "ordering_break" not in lines["orders"]
    assert "OrderingBreak" in {m["Name"] for m in lines["customer"]["_aws"]["CloudWatchMetrics"][0]["Metrics"]}

    done = cli(*command.removeprefix("redshift-sync ").split())
    assert done.returncode == 0, done.stderr
    assert "the next sync reads again the records after 0:2" in done.stdout
    after = cli.sync()
    assert wh.query(TARGET) == source_rows(source)
    assert (after["events_read"], after["stale"]) == (5, 0) and "ordering break" not in cli.last_sync_stderr
    assert json.loads(cli("status", "--json").stdout)[0]["ordering_break"] is None


def test_the_number_of_runs_is_configurable_and_a_run_that_applies_ends_the_streak(wh):
    text = PIPELINE.read_text().replace("[source]", "[operations]\nordering_break_runs = 2\n\n[source]", 1)
    pipeline = parse_pipeline(tomllib.loads(text))
    deploy(wh, pipeline, "pipeline.toml")
    old, new = (
        ChangeStream(["CUST_ID"], MySqlSource(file_number=n, pos=p, ts_ms=1_800_000_000_000)) for n, p in ((42, 9), (1, 4))
    )
    feed(wh, pipeline, "customer", [old.insert(_row(1))])

    def breaks() -> list:
        return ordering_breaks(wh.query, wh.dialect, pipeline, ["customer", "orders"])

    feed(wh, pipeline, "customer", [new.update(_row(1), _row(1, "x"))])
    assert breaks() == []
    feed(wh, pipeline, "customer", [new.update(_row(1, "x"), _row(1, "y"))])
    (found,) = breaks()
    assert (found.table, found.runs, found.stale, found.reread_from) == ("customer", 2, 2, "0:0")
    feed(wh, pipeline, "customer", [new.insert(_row(7))])  # a new key applies: the streak ends
    assert breaks() == []


def test_a_suffix_re_sent_after_a_restart_is_no_ordering_break(wh):
    """Debezium delivers "exactly-once delivery normally, at-least-once during recovery"
    (MySQL connector documentation): after a restart it re-sends what follows its last
    committed offset, and a long suffix spans several syncs. Each applies nothing and finds
    its records stale, as after a failover; but every record repeats the key and position
    of one read before, so no reset-positions is advised. A renumbering among copies is."""
    text = PIPELINE.read_text().replace("[source]", "[operations]\nordering_break_runs = 2\n\n[source]", 1)
    pipeline = parse_pipeline(tomllib.loads(text))
    deploy(wh, pipeline, "pipeline.toml")
    server = ChangeStream(["CUST_ID"], MySqlSource(file_number=42, pos=9, ts_ms=1_800_000_000_000))
    sent = [server.insert(_row(1)), server.update(_row(1), _row(1, "x")), server.insert(_row(2))]
    feed(wh, pipeline, "customer", sent)

    def breaks() -> list:
        return ordering_breaks(wh.query, wh.dialect, pipeline, ["customer", "orders"])

    for record in sent[:2]:  # the re-sent suffix, one record per sync
        run = feed(wh, pipeline, "customer", [record])
        assert (run.upserted, run.stale) == (0, 1)
    assert breaks() == []
    renumbered = ChangeStream(["CUST_ID"], MySqlSource(file_number=1, pos=4, ts_ms=1_800_000_000_000))
    feed(wh, pipeline, "customer", [sent[2], renumbered.update(_row(2), _row(2, "y"))])
    (found,) = breaks()
    assert (found.table, found.stale) == ("customer", 2)


@pytest.mark.parametrize(
    ("position", "readable"),
    [("00000000000000000001.00000000000000000150.00000000000000000000", "1.150.0"), (None, "none")],
)
def test_positions_read_as_their_numbers(position, readable):
    assert readable_position(position) == readable


def test_tables_in_kafka_order_are_never_checked():
    text = (EXAMPLES / "salesdb" / "pipeline.toml").read_text().replace('order_by = "mysql-binlog"', 'order_by = "kafka"')
    pipeline = parse_pipeline(tomllib.loads(text))
    assert ordering_breaks(lambda sql: pytest.fail(sql), None, pipeline, ["customer"]) == []

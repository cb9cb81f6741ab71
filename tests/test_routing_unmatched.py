"""Records of a shared topic that no configured table selects, counted in the run log
through the CLI: the run-log row of the topic's first table has them in `unmatched` (the
other tables' rows, and every table alone on its topic, leave it NULL), `sync` and
`status` print the count, and a run log made before the column existed gains it through
a revision.

The topic is a whole MySQL database routed into one topic by Debezium's topic routing SMT
(`topic.regex`/`topic.replacement`, https://debezium.io/documentation/reference/stable/transformations/topic-routing.html):
its records keep their `source.db` and `source.table`
(https://debezium.io/documentation/reference/stable/connectors/mysql.html#mysql-events).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sync.cli.app import app
from sync.config import load_pipeline
from sync.debezium.events import ChangeStream, MySqlSource, write_jsonl
from sync.schema.run_log import run_log_label
from sync.schema.state import object_digest
from sync.sql import schemas
from sync.sql.dialect import DIALECTS, dialect_for
from sync.sql.objects import run_log_sql
from sync.warehouse import Warehouse
from tests.helpers import cli_project

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "shop_routing" / "pipeline.toml"


@pytest.fixture
def project(tmp_path: Path, database_dsn: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    return cli_project(tmp_path, EXAMPLE, database_dsn, monkeypatch)


def cli(*args: str) -> str:
    out = CliRunner().invoke(app, list(args))
    assert out.exit_code == 0, out.output
    return out.output


def shop(table: str, pos: int) -> ChangeStream:
    return ChangeStream(["id"], MySqlSource(server="shop", db="shop", table=table, pos=pos))


def ingest_mixed(project: Path) -> None:
    """Into shop.all: a customer, an order, and three change events of `audit_log`, which
    no table of the pipeline selects, and the tombstone after its delete."""
    audit = shop("audit_log", 9_000)
    records = [
        shop("customers", 154).insert({"id": 1, "name": "ada"}),
        audit.insert({"id": 1, "what": "login"}),
        shop("orders", 5_000).insert({"id": 7, "customer_id": 1, "total": "AZI="}),
        audit.insert({"id": 2, "what": "logout"}),
        audit.delete({"id": 1, "what": "login"}),
        audit.tombstone({"id": 1}),  # carries nothing: a tombstone, never unmatched
    ]
    write_jsonl(records, project / "events.jsonl")
    cli("ingest", "--table", "customer", "--file", str(project / "events.jsonl"))


def run_log(wh: Warehouse) -> dict[str, list]:
    rows = wh.query("SELECT table_name, events_read, unmatched FROM shop.sync_run_log ORDER BY run_id")
    out: dict[str, list] = {}
    for table, read, unmatched in rows:
        out.setdefault(table, []).append((read, unmatched))
    return out


def test_unmatched_records_are_counted_in_the_run_log_and_status(project, wh):
    cli("revision", "-m", "shop")
    cli("deploy")
    ingest_mixed(project)
    summaries = {s["table"]: s for s in json.loads(cli("sync", "--table", "customer", "--table", "orders", "--json"))}
    assert (summaries["customer"]["upserted"], summaries["customer"]["unmatched"]) == (1, 3)
    assert (summaries["orders"]["upserted"], summaries["orders"]["unmatched"]) == (1, None)
    # The run-log row of the first table of the topic counts them; the other table's
    # row, which reads the same records and leaves them to it, holds NULL.
    assert run_log(wh) == {"customer": [(6, 3)], "orders": [(6, None)]}
    status = cli("status")
    assert "customer: last run read 3 record(s) of the topic no table's route selects" in status
    assert "customer: records of the topic no table's route selects: db=shop,table=audit_log (3 event(s))" in status
    assert "orders: last run" not in status
    # The next call reads nothing new: its row counts none.
    cli("sync", "--table", "customer")
    assert run_log(wh)["customer"] == [(6, 3), (0, 0)]
    assert "customer: last run read" not in cli("status")


def test_sync_prints_the_count_of_unmatched_records(project):
    cli("revision", "-m", "shop")
    cli("deploy")
    ingest_mixed(project)
    out = CliRunner().invoke(app, ["sync", "--table", "customer"])
    assert out.exit_code == 0, out.output
    assert "customer: 3 record(s) of the topic no table's route selects (by source: status)" in out.output


def as_earlier_run_log(project: Path, wh: Warehouse) -> None:
    """The deployment as a version without the column made it: the revision's fingerprint
    of the run log that of the earlier layout, and the run log without the column."""
    pipeline = load_pipeline(project / "pipeline.toml")[0]
    earlier = tuple(c for c in schemas.RUN_LOG if c.name != "unmatched")
    (revision,) = (project / "versions").glob("*.py")
    text = revision.read_text()
    for dialect in DIALECTS:
        now = object_digest(run_log_sql(dialect_for(dialect, "shop"), "shop"))
        before = object_digest(run_log_sql(dialect_for(dialect, "shop"), "shop", earlier))
        assert f"'{run_log_label(pipeline)}': '{now}'" in text
        text = text.replace(f"'{run_log_label(pipeline)}': '{now}'", f"'{run_log_label(pipeline)}': '{before}'")
    revision.write_text(text)
    wh.execute("ALTER TABLE shop.sync_run_log DROP COLUMN unmatched")


def test_a_run_log_made_before_the_column_gains_it_through_a_revision(project, wh):
    cli("revision", "-m", "shop")
    cli("deploy")
    cli("sync", "--table", "customer")
    as_earlier_run_log(project, wh)

    out = cli("revision", "-m", "run log counts unmatched records")
    (written,) = [p for p in (project / "versions").glob("*.py") if "run_log_counts" in p.name]
    text = written.read_text()
    assert 'r.add_run_log_column("unmatched")' in text and 'r.drop_run_log_column("unmatched")' in text
    assert "differently from the last revision" not in out  # no statement left to write by hand
    cli("deploy")
    assert run_log(wh) == {"customer": [(0, None)]}  # the row written before is kept, NULL
    ingest_mixed(project)
    cli("sync", "--table", "customer")
    assert run_log(wh) == {"customer": [(0, None), (6, 3)]}
    # The column is where a new run log has it, last: both have one column order.
    columns = wh.query(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'shop' "
        "AND table_name = 'sync_run_log' ORDER BY ordinal_position"
    )
    assert [c for (c,) in columns] == schemas.names(schemas.RUN_LOG)

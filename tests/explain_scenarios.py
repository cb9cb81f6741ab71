"""The scenarios of `redshift-sync explain` through the command line, on any warehouse:
tests/test_explain.py runs them on PostgreSQL, tests/test_redshift_live.py on Redshift
(the sources they follow are quoted in tests/test_explain.py). Records reach the table's
stream as the warehouse receives them: `redshift-sync ingest` into the embedded
warehouse's stream, a refresh of the streaming view's stand-in on Redshift
(sync/operations/stream_stand_in.py); everything else runs through the CLI."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from sync.debezium.events import ChangeStream, MySqlSource, PostgresSource, write_jsonl
from sync.operations.ordering import readable_position
from sync.operations.verify import Scratch
from sync.warehouse import Warehouse, connect
from tests.helpers import make_pipeline, pipeline_toml
from tests.test_cli import run

TABLES = """
[[tables]]
name = "customer"
topic = "salesdb.salesdb.CUSTOMER"
format = "debezium"
primary_key = ["CUST_ID"]
order_by = "mysql-binlog"
columns = [
  { name = "CUST_ID", type = "varchar(64)", target = "customer_id" },
  { name = "NAME", type = "varchar(8)" },
]

[[tables]]
name = "moves"
topic = "pg.inventory.moves.flat"
format = "debezium-unwrap"
primary_key = ["move_id", "region"]
order_by = "postgres-lsn"
columns = [
  { name = "move_id", type = "bigint" },
  { name = "region", type = "varchar(8)" },
  { name = "quantity", type = "integer" },
]

[[tables]]
name = "notes"
topic = "pg.inventory.notes"
format = "debezium"
primary_key = ["id"]
order_by = "postgres-lsn"
columns = [
  { name = "id", type = "integer" },
  { name = "body", type = "varchar(1000)" },
]
on_truncate = "delete"
"""
TOAST = "__debezium_unavailable_value"


class Cli:
    """A pipeline of three tables deployed in a schema of a database, then driven as a user
    does: the command line, connected through $REDSHIFT_SYNC_DSN."""

    def __init__(self, dsn: str, tmp: Path, schema: str, append: Callable[[Cli, str, list[dict]], None]):
        self.dsn, self.tmp, self.schema, self.files = dsn, tmp, schema, 0
        self._append = append
        self.env = {"REDSHIFT_SYNC_DSN": dsn}
        self.config = tmp / "pipeline.toml"
        self.config.write_text(pipeline_toml(TABLES, schema))

    def __call__(self, *args: str):
        return run(*args, "--config", str(self.config), env=self.env)

    def ingest(self, table: str, records: list[dict]) -> None:
        """The records as one refresh of the table's stream."""
        self._append(self, table, records)

    def cli_ingest(self, table: str, records: list[dict]) -> None:
        """`redshift-sync ingest` of the records (the embedded warehouse's stream)."""
        self.files += 1
        path = self.tmp / f"events-{self.files}.jsonl"
        write_jsonl(records, path)
        out = self("ingest", "--table", table, "--file", str(path))
        assert out.returncode == 0, out.stderr

    def sync(self, table: str) -> dict:
        out = self("sync", "--table", table, "--json")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)[0]

    def explain(self, table: str, *key: str) -> list[dict]:
        out = self("explain", "--table", table, *(a for k in key for a in ("--key", k)), "--json")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["entries"]

    def text(self, table: str, *key: str) -> str:
        out = self("explain", "--table", table, *(a for k in key for a in ("--key", k)))
        assert out.returncode == 0, out.stderr
        return out.stdout

    def query(self, sql: str) -> list[tuple]:
        """`sql` ({schema}: the pipeline's schema, quoted) on a connection of its own."""
        wh = connect(self.dsn)
        try:
            return [tuple(row) for row in wh.query(sql.format(schema=wh.dialect.q(self.schema)))]
        finally:
            wh.close()


def scratch_cli(dsn: str, wh: Warehouse, schema: str, tmp: Path) -> Cli:
    """The pipeline deployed in `schema` as `doctor --verify` deploys (on Redshift the
    streaming views replaced by their stand-ins), each delivery one refresh of the stream:
    how tests/test_redshift_live.py runs the scenarios."""
    scratch = Scratch(wh, wh.dialect.name, schema, lambda: connect(dsn))
    pipeline = scratch.deploy_pipeline(make_pipeline(TABLES, schema=schema))
    return Cli(dsn, tmp, schema, lambda _, table, records: scratch.append(pipeline, table, records))


def at(entries: list[dict], partition: int, offset: int) -> dict:
    (entry,) = [
        e for e in entries if e["origin"] == "stream" and (e["kafka_partition"], e["kafka_offset"]) == (partition, offset)
    ]
    return entry


def stored(entries: list[dict], origin: str = "stored row") -> dict:
    (entry,) = [e for e in entries if e["origin"] == origin]
    return entry


def customer(name: str) -> dict:
    return {"CUST_ID": "C1", "NAME": name}


def a_replayed_stale_event_and_a_pending_record(cli: Cli) -> None:
    cs = ChangeStream(["CUST_ID"], MySqlSource())
    insert = cs.insert(customer("a"))
    cli.ingest("customer", [insert, cs.update(customer("a"), customer("b"))])  # offsets 0, 1
    assert cli.sync("customer")["upserted"] == 1
    # A connector restart re-sends the insert (offset 2) alone: older than what is stored.
    cli.ingest("customer", [insert])
    entries = cli.explain("customer", "CUST_ID=C1")
    position = readable_position(stored(entries)["source_pos"])
    assert stored(entries)["values"]["name"] == "b"
    replay = at(entries, 0, 2)
    assert replay["pending"] and replay["outcome"] == "stale"
    assert replay["verdict"] == f"pending: above the watermark, would be stale: not newer than the stored position {position}"
    assert at(entries, 0, 1)["verdict"] == "applied: it wrote the stored row"
    assert at(entries, 0, 0)["verdict"] == (
        f"read earlier: older than the stored position {position} (superseded or stale then, or applied and replaced since)"
    )
    # What explain said is what the sync does.
    assert cli.sync("customer")["stale"] == 1
    after = cli.explain("customer", "CUST_ID=C1")
    assert not at(after, 0, 2)["pending"] and at(after, 0, 2)["outcome"] == "older"
    assert stored(after)["kafka_offset"] == 1

    # A pending record (offset 3): the next CALL applies it; the text output names it.
    cli.ingest("customer", [cs.update(customer("b"), customer("c"))])
    entries = cli.explain("customer", "CUST_ID=C1")
    assert at(entries, 0, 3)["verdict"] == "pending: above the watermark, would be applied (upsert)"
    assert "would be applied (upsert)" in cli.text("customer", "CUST_ID=C1")
    assert cli.sync("customer")["upserted"] == 1
    assert at(cli.explain("customer", "CUST_ID=C1"), 0, 3)["verdict"] == "applied: it wrote the stored row"


def a_tie_inside_a_compressed_mysql_transaction(cli: Cli) -> None:
    source = MySqlSource()
    cs = ChangeStream(["CUST_ID"], source)
    first = cs.insert(customer("a"))
    second = cs.update(customer("a"), customer("b"))
    second["value"]["source"] = dict(first["value"]["source"])  # one compressed event: one position
    cli.ingest("customer", [first])
    assert cli.sync("customer")["upserted"] == 1
    cli.ingest("customer", [second])
    entries = cli.explain("customer", "CUST_ID=C1")
    position = readable_position(stored(entries)["source_pos"])
    assert readable_position(at(entries, 0, 1)["source_pos"]) == position
    assert at(entries, 0, 1)["verdict"] == (
        "pending: above the watermark, would be applied (upsert): another change at the stored position "
        f"{position} (one transaction), in Kafka order"
    )
    assert cli.sync("customer")["upserted"] == 1
    after = cli.explain("customer", "CUST_ID=C1")
    assert stored(after)["values"]["name"] == "b" and at(after, 0, 1)["outcome"] == "applied"
    assert "at the stored position" in at(after, 0, 0)["verdict"]


def unwrap(record: dict, deleted: bool = False) -> dict:
    """ExtractNewRecordState's value of a PostgreSQL envelope record (add.fields=op,lsn,
    source.ts_ms; delete.tombstone.handling.mode=rewrite*)."""
    v = record["value"]
    image = v["before"] if deleted else v["after"]
    src = v["source"]
    flat = {**image, "__op": v["op"], "__source_ts_ms": src["ts_ms"], "__lsn": src["lsn"], "__sequence": src["sequence"]}
    return {**record, "value": {**flat, "__deleted": "true" if deleted else "false"}}


def move(quantity: int) -> dict:
    return {"move_id": 7, "region": "eu", "quantity": quantity}


def a_redundant_tombstone_and_a_tombstone_only_delete(cli: Cli) -> None:
    cs = ChangeStream(["move_id", "region"], PostgresSource(table="moves"))
    cli.ingest("moves", [unwrap(cs.insert(move(1))), unwrap(cs.update(None, move(2)))])  # 0, 1
    assert cli.sync("moves")["upserted"] == 1
    # rewrite-with-tombstone: the delete event, then its tombstone (2, 3).
    cli.ingest("moves", [unwrap(cs.delete(move(2)), deleted=True), cs.tombstone(move(2))])
    key = ("move_id=7", "region=eu")
    entries = cli.explain("moves", *key)
    assert at(entries, 0, 2)["verdict"] == "pending: above the watermark, would be applied (delete)"
    assert at(entries, 0, 3)["verdict"] == "pending: above the watermark, would be redundant tombstone after its delete event"
    run = cli.sync("moves")
    assert (run["deleted"], run["tombstones"]) == (1, 1)
    after = cli.explain("moves", *key)
    assert stored(after, "remembered delete")["kafka_offset"] == 2
    assert at(after, 0, 2)["verdict"] == "applied: it wrote the remembered delete"

    # The key again, then deleted by a tombstone alone (`tombstone` mode): placed at the
    # newest position seen for the key, the insert's.
    cli.ingest("moves", [unwrap(cs.insert(move(3)))])  # 4
    assert cli.sync("moves")["upserted"] == 1
    cli.ingest("moves", [cs.tombstone(move(3))])  # 5
    entries = cli.explain("moves", *key)
    position = readable_position(stored(entries)["source_pos"])
    assert at(entries, 0, 5)["outcome"] == "tombstone-only delete"
    assert (
        at(entries, 0, 5)["verdict"]
        == f"pending: above the watermark, would be tombstone-only delete placed at position {position}"
    )
    assert cli.sync("moves")["deleted"] == 1
    after = cli.explain("moves", *key)
    assert readable_position(stored(after, "remembered delete")["source_pos"]) == position
    assert at(after, 0, 5)["verdict"] == "applied: it wrote the remembered delete"


def a_toast_placeholder_and_a_quarantined_record(cli: Cli) -> None:
    cs = ChangeStream(["id"], PostgresSource(table="notes"))
    # Never known: the placeholder has no earlier value (no row stored, none in the batch).
    cli.ingest("notes", [cs.update(None, {"id": 1, "body": TOAST})])
    entries = cli.explain("notes", "id=1")
    assert at(entries, 0, 0)["outcome"] == "quarantined"
    assert at(entries, 0, 0)["verdict"].startswith(
        "pending: above the watermark, would be quarantined: no earlier value is known for the TOAST placeholder"
    )
    assert cli.sync("notes")["quarantined"] == 1
    after = cli.explain("notes", "id=1")
    assert at(after, 0, 0)["outcome"] == "quarantined" and "TOAST" in at(after, 0, 0)["verdict"]
    (quarantined,) = [e for e in after if e["origin"] == "quarantine"]
    assert quarantined["kafka_offset"] == 0 and quarantined["verdict"].endswith("(waiting)")

    # Known: the stored value stays, the rest applies.
    cli.ingest("notes", [cs.insert({"id": 2, "body": "long text"})])
    cli.sync("notes")
    cli.ingest("notes", [cs.update(None, {"id": 2, "body": TOAST})])
    entries = cli.explain("notes", "id=2")
    assert at(entries, 0, 2)["verdict"] == (
        "pending: above the watermark, would be applied (upsert), keeping the stored value of body (TOAST placeholder)"
    )
    cli.sync("notes")
    assert stored(cli.explain("notes", "id=2"))["values"]["body"] == "long text"

    # A value that does not fit its column.
    cs = ChangeStream(["CUST_ID"], MySqlSource())
    cli.ingest("customer", [cs.insert(customer("far too long"))])
    entries = cli.explain("customer", "CUST_ID=C1")
    assert at(entries, 0, 0)["outcome"] == "quarantined"
    reason = at(entries, 0, 0)["verdict"].removeprefix("pending: above the watermark, would be quarantined: ")
    assert "NAME" in reason
    cli.sync("customer")
    after = cli.explain("customer", "CUST_ID=C1")
    assert at(after, 0, 0)["verdict"] == f"quarantined: {reason}"
    assert not [e for e in after if e["origin"] == "stored row"]


def a_record_a_newer_truncate_voids_and_explain_writes_nothing(cli: Cli) -> None:
    """A truncate's rule writes the target and the deleted keys: explain's copies take it,
    the target keeps its row until the sync."""
    cs = ChangeStream(["id"], PostgresSource(table="notes"))
    cli.ingest("notes", [cs.insert({"id": 3, "body": "kept"})])
    cli.sync("notes")
    cli.ingest("notes", [cs.update(None, {"id": 3, "body": "changed"}), cs.truncate()])
    entries = cli.explain("notes", "id=3")
    assert at(entries, 0, 1)["verdict"] == "pending: above the watermark, would be voided by a newer truncate of the table"
    assert cli.query('SELECT id, body FROM {schema}."notes"') == [(3, "kept")]
    assert cli.query('SELECT COUNT(*) FROM {schema}."notes__deleted"') == [(0,)]
    run = cli.sync("notes")
    assert (run["stale"], run["truncates"]) == (1, 1)
    after = cli.explain("notes", "id=3")
    assert not [e for e in after if e["origin"] == "stored row"]
    assert stored(after, "remembered delete")["kafka_partition"] is None  # recorded at the truncate's position


def an_unknown_key_field_is_refused(cli: Cli) -> None:
    out = cli("explain", "--table", "moves", "--key", "move_id=7")
    assert out.returncode != 0 and "region" in out.stderr


SCENARIOS = [
    a_replayed_stale_event_and_a_pending_record,
    a_tie_inside_a_compressed_mysql_transaction,
    a_redundant_tombstone_and_a_tombstone_only_delete,
    a_toast_placeholder_and_a_quarantined_record,
    a_record_a_newer_truncate_voids_and_explain_writes_nothing,
    an_unknown_key_field_is_refused,
]

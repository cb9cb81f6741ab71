"""Column policies through the command line, on any warehouse: tests/test_policies.py runs
these scenarios on PostgreSQL, tests/test_redshift_live.py on Redshift. hash, mask and drop
in the target and in the quarantine's redacted payload, a policy added to a stored column
by a revision (its stored values converted), and key rotation.

The pipeline is examples/customers_pii/pipeline.toml in the schema given. Deployed as a
user deploys it (`revision`, `deploy`) on a database of its own; in a scratch schema (the
live suite's way) as `doctor --verify` deploys, a revision then applied as the script
`deploy --sql --dialect ENGINE` prints for a DBA to run. The events are shaped as
Debezium's MySQL connector emits them: "before" and "after" hold the row images, "source"
the binlog position (https://debezium.io/documentation/reference/stable/connectors/mysql.html#mysql-events):
both images carry every column, so both must be redacted."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from sync.config import parse_pipeline
from sync.debezium.events import ChangeStream, MySqlSource
from sync.operations.verify import Scratch
from sync.sql.statements import split_statements
from sync.warehouse import Warehouse, connect
from tests import explain_scenarios

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "customers_pii" / "pipeline.toml"
SECRET = "s3cr3t-policy-key-" + "k" * 20
SECRET2 = "another-policy-key-" + "z" * 20
ALICE = {"id": 1, "email": "alice@example.com", "phone": "+1 555 0100", "birth_year": 1980, "ssn": "123-45-6789", "country": "US"}
CLEAR = ("alice@example.com", "555 0100", "1980", "123-45-6789")
HASH = ', policy = "hash" },    # joinable'
MASK = ", policy = \"mask\" },    # '****'"
DROP = ', policy = "drop" },'


def keyed(secret: str, value: str) -> str:
    """The documented construction: SHA-256(key || ':' || SHA-256(key || ':' || value)), hex."""
    inner = hashlib.sha256(f"{secret}:{value}".encode()).hexdigest()
    return hashlib.sha256(f"{secret}:{inner}".encode()).hexdigest()


def customers() -> ChangeStream:
    return ChangeStream(["id"], MySqlSource(db="crm", table="customers"))


def example_text(schema: str, policies: bool = True) -> str:
    """The example pipeline file in `schema`; without its policies on `customers`."""
    text = EXAMPLE.read_text().replace('schema = "crm"', f'schema = "{schema}"')
    for policy, clear in ((HASH, " },    # joinable"), (MASK, " },"), (DROP, " },")):
        assert policy in text
        text = text if policies else text.replace(policy, clear)
    return text


class PolicyCli(explain_scenarios.Cli):
    """The example deployed in a schema, driven through the command line. `scratch`: the
    schema is a scratch one (Scratch.deploy_pipeline, revisions applied from their script);
    without it the database is the pipeline's own (`deploy`)."""

    def __init__(self, dsn: str, tmp: Path, schema: str, scratch: Scratch | None = None):
        append = (lambda c, t, r: scratch.append(c.pipeline(), t, r)) if scratch else explain_scenarios.Cli.cli_ingest
        super().__init__(dsn, tmp, schema, append)
        self.scratch, self.head = scratch, ""
        self.env.update(REDSHIFT_SYNC_VERSIONS=str(tmp / "versions"), POLICY_KEY=SECRET)
        self.write(policies=True)

    def write(self, policies: bool) -> None:
        self.config.write_text(example_text(self.schema, policies))

    def pipeline(self) -> Any:
        import tomllib

        return parse_pipeline(tomllib.loads(self.config.read_text()))

    def ok(self, *args: str) -> str:
        out = self(*args)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def revision(self, message: str) -> str:
        out = self.ok("revision", "-m", message)
        self.head = re.search(r"\(revision\s+(\w+)\)", out).group(1)
        return out

    def deploy_with_key(self) -> None:
        """The pipeline file deployed, then a key made from $POLICY_KEY."""
        self.revision("initial")
        if self.scratch:
            self.scratch.deploy_pipeline(self.pipeline())
        else:
            self.ok("deploy")
        self.ok("policy", "rotate-key", "--secret-env", "POLICY_KEY")

    def upgrade(self, message: str) -> str:
        """The next revision of the pipeline file, applied; its plan."""
        previous = self.head
        plan = self.revision(message)
        if not self.scratch:
            self.ok("deploy")
            return plan
        script = self.ok("deploy", "--sql", "--dialect", self.scratch.engine, "--from", previous)
        for statement in split_statements(script):
            if "alembic_version" not in statement and statement.strip().rstrip(";").upper() not in ("BEGIN", "COMMIT"):
                self.scratch.wh.execute(statement)
        return plan

    def ingest_sync(self, table: str, records: list[dict]) -> dict:
        self.ingest(table, records)
        return self.sync(table)

    def payloads(self, table: str) -> list[dict]:
        """The waiting quarantined records' payloads, oldest first (`quarantine list`)."""
        listed = json.loads(self.ok("quarantine", "list", "--table", table, "--json"))
        return [json.loads(r["value"]) for r in listed["records"]]

    def every_written_value(self) -> str:
        wh = connect(self.dsn)
        try:
            return every_written_value(wh, self.schema)
        finally:
            wh.close()


def every_written_value(wh: Warehouse, schema: str) -> str:
    """The text of every row of every table the tool writes in `schema` (all but the
    streams, which hold the topic's records as Redshift's streaming views do)."""
    q = wh.dialect.q(schema)
    names = wh.query(
        f"SELECT table_name FROM information_schema.tables WHERE table_schema = '{schema}' AND table_type = 'BASE TABLE'"
    )
    rows = [wh.query(f"SELECT * FROM {q}.{wh.dialect.q(n)}") for (n,) in names if not n.endswith("__stream")]
    return "\n".join(_text(v) for table in rows for row in table for v in row)


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return value if isinstance(value, str) else json.dumps(value, default=str)


def scratch_cli(dsn: str, wh: Warehouse, schema: str, tmp: Path) -> PolicyCli:
    """How tests/test_redshift_live.py runs the scenarios."""
    return PolicyCli(dsn, tmp, schema, Scratch(wh, wh.dialect.name, schema, lambda: connect(dsn)))


def no_clear_value(cli: PolicyCli) -> None:
    written = cli.every_written_value()
    assert not [v for v in CLEAR if v in written]


def hash_mask_and_drop_in_the_target_and_the_quarantine(cli: PolicyCli) -> None:
    cli.deploy_with_key()
    s = customers()
    bob = {**ALICE, "id": 2, "email": "bob@example.com", "phone": None}
    # The last update's "USA" does not fit char(2): quarantined with its payload, redacted.
    records = [s.insert(ALICE), s.insert(bob), s.update(ALICE, {**ALICE, "country": "CA"})]
    run = cli.ingest_sync("customers", [*records, s.update(ALICE, {**ALICE, "country": "USA"})])
    assert (run["upserted"], run["quarantined"]) == (2, 1)
    assert cli.query("SELECT id, email, phone, birth_year, country FROM {schema}.customers ORDER BY id") == [
        (1, keyed(SECRET, "alice@example.com"), "****", 0, "CA"),
        (2, keyed(SECRET, "bob@example.com"), None, 0, "US"),  # a NULL stays NULL
    ]
    columns = "SELECT column_name FROM information_schema.columns WHERE table_schema = '{s}' AND table_name = 'customers'"
    assert "ssn" not in {c for (c,) in cli.query(columns.format(s=cli.schema))}  # drop: never a column
    assert cli.query("SELECT kind, field FROM {schema}.sync_schema_drift") == []  # a dropped field is known
    (payload,) = cli.payloads("customers")
    for image in ("before", "after"):
        assert payload[image]["email"] == keyed(SECRET, "alice@example.com")
        assert payload[image]["phone"] == "****" and payload[image]["birth_year"] == "0"
        assert payload[image]["ssn"] is None
    assert payload["after"]["country"] == "USA"  # no policy: kept, so the reason can be checked
    # An unwrapped topic's field (ExtractNewRecordState: the row's fields are the value's members).
    login = {"login_id": 7, "customer_id": 1, "ip_address": "10.1.2.3", "logged_in_at": 1_700_000_000_000, "__deleted": "false"}
    assert cli.ingest_sync("logins", [{"partition": 0, "key": {"login_id": 7}, "value": login}])["upserted"] == 1
    assert cli.query("SELECT ip_address FROM {schema}.logins") == [(keyed(SECRET, "10.1.2.3"),)]
    no_clear_value(cli)


def a_policy_added_by_a_revision_converts_stored_values(cli: PolicyCli) -> None:
    cli.write(policies=False)
    cli.deploy_with_key()
    s = customers()
    cli.ingest_sync("customers", [s.insert(ALICE), s.update(ALICE, {**ALICE, "country": "USA"})])  # the update: quarantined
    assert cli.query("SELECT email, phone, ssn FROM {schema}.customers") == [("alice@example.com", "+1 555 0100", "123-45-6789")]

    cli.write(policies=True)
    plan = cli.upgrade("column policies")
    assert 'apply_policy("customers", "email")' in plan and 'drop_column("customers", "ssn")' in plan
    assert cli.query("SELECT email, phone FROM {schema}.customers") == [(keyed(SECRET, "alice@example.com"), "****")]
    (payload,) = cli.payloads("customers")
    assert payload["after"]["email"] == keyed(SECRET, "alice@example.com") and payload["before"]["phone"] == "****"
    no_clear_value(cli)
    # New records take the policies too.
    cli.ingest_sync("customers", [s.insert({**ALICE, "id": 4})])
    assert cli.query("SELECT email FROM {schema}.customers WHERE id = 4") == [(keyed(SECRET, "alice@example.com"),)]


def a_rotated_key_hashes_new_values_and_stored_ones_keep_theirs(cli: PolicyCli) -> None:
    cli.deploy_with_key()
    s = customers()
    cli.ingest_sync("customers", [s.insert(ALICE)])
    cli.env["POLICY_KEY"] = SECRET2
    assert "policy key 2 in use" in cli.ok("policy", "rotate-key", "--secret-env", "POLICY_KEY")
    cli.ingest_sync("customers", [s.insert({**ALICE, "id": 3})])
    assert cli.query("SELECT id, email FROM {schema}.customers ORDER BY id") == [
        (1, keyed(SECRET, "alice@example.com")),
        (3, keyed(SECRET2, "alice@example.com")),
    ]
    # Without --secret-env the key is random, and never printed.
    out = cli.ok("policy", "rotate-key")
    assert "policy key 3 in use (generated)" in out
    ((generated,),) = cli.query("SELECT secret FROM {schema}.sync_policy_key WHERE key_id = 3")
    assert len(generated) == 64 and generated not in out


SCENARIOS = [
    hash_mask_and_drop_in_the_target_and_the_quarantine,
    a_policy_added_by_a_revision_converts_stored_values,
    a_rotated_key_hashes_new_values_and_stored_ones_keep_theirs,
]

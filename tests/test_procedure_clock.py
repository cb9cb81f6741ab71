"""The procedure's clock: every time it writes is UTC, whatever the caller's session time
zone, and the caller's zone is the same after the CALL.

Redshift's clock functions answer in the session's time zone ("GETDATE returns the current
date and time in the current session time zone (UTC by default)", r_GETDATE; TIMEOFDAY
likewise), and a database user can have another zone for every session ("ALTER USER
dbuser SET timezone to 'America/New_York'", r_timezone_config). Kafka timestamps are UTC,
so a run under another zone would store wrong times and a lag off by hours. CREATE
PROCEDURE's SET clause "causes the specified configuration_parameter to be set to the
specified value when the procedure is entered ... [and] restores configuration_parameter
to its earlier value when the procedure exits" (r_CREATE_PROCEDURE).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from sync.debezium.events import ChangeStream, MySqlSource
from sync.operations.runner import deploy
from sync.sql.dialect import dialect_for
from sync.sql.objects import table_objects
from tests.helpers import ingest, make_pipeline, sync_one

CUSTOMER = """
[[tables]]
name = "customer"
topic = "salesdb.salesdb.CUSTOMER"
primary_key = ["CUST_ID"]
order_by = "mysql-binlog"
columns = [
  { name = "CUST_ID", type = "varchar(64)" },
  { name = "NAME", type = "varchar(256)" },
]
"""


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Kolkata"])
def test_times_are_utc_under_another_session_time_zone(wh, zone):
    pipeline = make_pipeline(CUSTOMER)
    deploy(wh, pipeline, "test")
    cs = ChangeStream(["CUST_ID"], MySqlSource())
    ingest(wh, pipeline, "customer", [cs.insert({"CUST_ID": "C1", "NAME": "one"})])
    wh.execute(f"SET timezone TO '{zone}'")
    before = datetime.now(UTC).replace(tzinfo=None)
    run = sync_one(wh, pipeline, "customer")
    after = datetime.now(UTC).replace(tzinfo=None)

    slack = timedelta(seconds=5)
    started, finished = wh.query("SELECT started_at, finished_at FROM cdc.sync_run_log")[0]
    (synced,) = wh.query('SELECT _synced_at FROM cdc."customer"')[0]
    (updated,) = wh.query('SELECT updated_at FROM cdc."customer__watermark"')[0]
    for value in (started, finished, synced, updated):
        assert before - slack <= value <= after + slack, (zone, value, before)
    # The record was produced moments ago: a lag computed in another zone is off by hours.
    assert run.lag_seconds is not None and abs(run.lag_seconds) < 60
    assert wh.scalar("SHOW timezone") == zone


@pytest.mark.parametrize("dialect", ["postgres", "redshift"])
def test_every_procedure_pins_utc_and_reads_the_clock_twice(dialect):
    d = dialect_for(dialect, "cdc")
    pipeline = make_pipeline(CUSTOMER)
    procedures = [o for o in table_objects(d, pipeline, pipeline.tables[0], "test") if o.kind == "procedure"]
    assert len(procedures) == 3
    clock = "TIMEOFDAY()" if dialect == "redshift" else "clock_timestamp()"
    for p in procedures:
        assert p.sql.rstrip().endswith("$$ LANGUAGE plpgsql\nSET timezone TO 'UTC';"), p.name
        # The call's time once the lock is held, and the run log's end: nothing else.
        assert p.sql.count(clock) <= 2, (p.name, p.sql.count(clock))


def test_the_procedures_settings_end_with_its_transaction():
    """Redshift's SET: "LOCAL: Specifies that the setting is valid for the current
    transaction" (r_SET); a plain SET is "valid for the current session", so a setting the
    procedure made that way stayed in the caller's session after the CALL (a user's who
    ran CALL by hand). The sync procedure sets what it needs with SET LOCAL only, and so
    does the record isolation's, which reads a record's fields by name in a transaction
    of its own; the CREATE PROCEDURE's one SET clause pins the time zone
    (r_CREATE_PROCEDURE). The scheduled procedure only calls the sync."""
    d = dialect_for("redshift", "cdc")
    pipeline = make_pipeline(CUSTOMER)
    procedures = {o.arguments: o for o in table_objects(d, pipeline, pipeline.tables[0], "test") if o.kind == "procedure"}
    assert sorted(procedures) == ["", "bigint", "varchar"]
    for arguments in ("bigint", "varchar"):
        body = procedures[arguments].sql.split("BEGIN", 1)[1].rsplit("$$", 1)[0]
        settings = [line.strip() for line in body.splitlines() if line.strip().startswith("SET ")]
        assert settings == [
            "SET LOCAL enable_case_sensitive_identifier TO true;",
            "SET LOCAL cast_super_null_on_error TO on;",
        ], arguments

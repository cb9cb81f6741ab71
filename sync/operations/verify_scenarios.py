"""The scenarios `doctor --verify` runs: one per row of docs/redshift.md (its number), each
the behaviour that row says the generated SQL relies on, checked on the warehouse at hand.
A scenario raises AssertionError (or the engine's error) when the warehouse behaves
otherwise, and NotApplicable where this engine does not have the behaviour."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from sync.debezium.events import ChangeStream, MySqlSource, PostgresSource
from sync.debezium.vocabulary import TOAST_PLACEHOLDER, Semantic
from sync.operations.runner import sync
from sync.operations.verify import NotApplicable, Scenario, Scratch
from sync.sql.dialect import quote_literal
from sync.sql.names import SCHEMA_DRIFT

CUSTOMER = """
[[tables]]
name = "customer"
topic = "salesdb.salesdb.CUSTOMER"
primary_key = ["CUST_ID"]
order_by = "mysql-binlog"
distkey = "customer_id"
columns = [
  { name = "CUST_ID", type = "varchar(64)", target = "customer_id" },
  { name = "NAME", type = "varchar(256)" },
]
"""

TOAST = """
[[tables]]
name = "toast"
topic = "pg.public.toast"
primary_key = ["id"]
order_by = "postgres-lsn"
columns = [
  { name = "id", type = "integer" },
  { name = "name", type = "varchar(64)" },
  { name = "bio", type = "varchar(256)" },
]
"""

TYPED = f"""
[[tables]]
name = "typed"
topic = "db.public.typed"
primary_key = ["id"]
order_by = "mysql-binlog"
columns = [
  {{ name = "id", type = "integer" }},
  {{ name = "small", type = "smallint" }},
  {{ name = "released", type = "date", semantic = "{Semantic.DATE}" }},
  {{ name = "note", type = "varchar(8)" }},
]
"""


def _customer(s: Scratch) -> tuple[Any, ChangeStream]:
    return s.deploy(CUSTOMER), ChangeStream(["CUST_ID"], MySqlSource())


def regexp_without_a_match(s: Scratch) -> None:
    got = s.wh.scalar(f"SELECT {s.d.regex_group(quote_literal('[null,1]'), '^[[]([0-9]+)')}")
    assert got is None, f"a pattern that matches nothing gave {got!r}, not NULL"


def json_text_over_varchar(s: Scratch) -> None:
    if not s.d.streaming_ingestion:
        raise NotApplicable("PostgreSQL's text has no 65,535-byte limit")
    half = json.dumps(list(range(10_000, 17_000)))  # about 42 KB: two make about 84 KB of JSON
    big = "ARRAY_CONCAT(JSON_PARSE(%s), JSON_PARSE(%s))"
    text = s.d.json_get_text("t.x", "k").replace('t.x."k"', "t.v")
    got = s.wh.scalar(f"SELECT {text} FROM (SELECT {big} AS v) t", (half, half))
    assert got is None, "JSON text past VARCHAR's limit was read instead of NULL"


def values_that_do_not_convert(s: Scratch) -> None:
    pipeline, cs = s.deploy(TYPED), ChangeStream(["id"], MySqlSource(table="typed"))
    good = {"id": 1, "small": 7, "released": 19000, "note": "fine"}
    bad = [{"small": 40000}, {"small": "seven"}, {"released": 10**12}, {"note": "x" * 9}, {"small": 1.5}]
    records = [cs.insert(good)] + [cs.insert({**good, "id": 2 + i, **b}) for i, b in enumerate(bad)]
    run = s.feed(pipeline, "typed", records)
    assert (run.upserted, run.quarantined) == (1, len(bad)), f"upserted {run.upserted}, quarantined {run.quarantined}"


def multi_byte_op(s: Scratch) -> None:
    pipeline, cs = _customer(s)
    rec = cs.insert({"CUST_ID": "A", "NAME": "a"})
    run = s.feed(pipeline, "customer", [{**rec, "value": {**rec["value"], "op": "é" * 100}}])
    assert run.quarantined == 1, f"a 200-byte op was not quarantined (quarantined {run.quarantined})"


def lock_leaves_the_target_readable(s: Scratch) -> None:
    s.deploy(CUSTOMER)
    reader = s.connect()
    try:
        with s.wh.transaction():
            s.wh.execute(f"LOCK TABLE {s.name('customer__watermark')}{s.d.lock_mode}")
            reader.execute("SET statement_timeout TO 20000")
            assert reader.scalar(f"SELECT COUNT(*) FROM {s.name('customer')}") == 0
    finally:
        reader.close()


def clock_has_microseconds(s: Scratch) -> None:
    samples = [s.wh.scalar(f"SELECT {s.d.now()}") for _ in range(5)]
    assert any(t.microsecond for t in samples), f"no microseconds in {samples}"
    skew = abs((samples[-1] - datetime.now(UTC).replace(tzinfo=None)).total_seconds())
    assert skew < 300, f"the clock reads {samples[-1]}, {skew:.0f} s from UTC here"


def watermark_summary_of_many_partitions(s: Scratch) -> None:
    pipeline = s.deploy(CUSTOMER)
    rows = ", ".join(f"({p}, 1000000000000, TIMESTAMP '2025-01-01 00:00:00', NULL)" for p in range(3000))
    s.wh.execute(f"INSERT INTO {s.name('customer__watermark')} VALUES {rows}")
    (run,) = sync(s.wh, pipeline, ["customer"])
    assert run.status == "ok", run.error
    summary = run.watermark_after or ""
    if s.d.long_text_type == "text":  # no length limit: every partition is listed
        assert summary.count(",") == 2999, summary[-80:]
    else:
        assert summary.endswith(" more)") and len(summary.encode()) <= 65535, summary[-80:]


def case_sensitive_identifiers(s: Scratch) -> None:
    if not s.d.streaming_ingestion:
        raise NotApplicable("PostgreSQL keeps quoted identifiers' case without a setting")
    value = str(s.wh.scalar("SELECT current_setting('enable_case_sensitive_identifier')")).lower()
    assert value in ("on", "true"), (
        "enable_case_sensitive_identifier is off for new sessions: streaming views refreshed automatically "
        "fold the topic's upper-case field names; set it in the parameter group (r_enable_case_sensitive_identifier)"
    )


def drop_procedure(s: Scratch) -> None:
    s.deploy(CUSTOMER)
    qualified = s.name("incremental_sync_customer")
    s.wh.execute(s.d.drop_procedure(qualified))
    try:
        s.wh.execute(f"CALL {qualified}()")
    except Exception:  # noqa: BLE001 - the call must fail: the procedure is gone
        return
    raise AssertionError("the dropped procedure could still be called")


def analyze_in_the_procedure(s: Scratch) -> None:
    pipeline, cs = _customer(s)
    run = s.feed(pipeline, "customer", [cs.insert({"CUST_ID": f"K{i}", "NAME": "n"}) for i in range(1001)])
    assert run.upserted == 1001, f"upserted {run.upserted} of 1001"


def key_stored_twice(s: Scratch) -> None:
    if s.d.indexed_primary_key:
        raise NotApplicable("PostgreSQL enforces primary keys: a key cannot be stored twice")
    pipeline, cs = s.deploy(TOAST), ChangeStream(["id"], PostgresSource(table="toast"))
    s.feed(pipeline, "toast", [cs.insert({"id": 1, "name": "a", "bio": "old bio"})])
    s.wh.execute(f"INSERT INTO {s.name('toast')} SELECT * FROM {s.name('toast')}")
    s.feed(pipeline, "toast", [cs.update(None, {"id": 1, "name": "a2", "bio": TOAST_PLACEHOLDER})])
    got = s.wh.query(f"SELECT id, name, bio FROM {s.name('toast')}")
    assert got == [(1, "a2", "old bio")], got


def unknown_field_is_drift(s: Scratch) -> None:
    pipeline, cs = _customer(s)
    s.feed(pipeline, "customer", [cs.insert({"CUST_ID": "A", "NAME": "a", "Extra": 1})])
    got = s.wh.query(f"SELECT kind, field, events FROM {s.name(SCHEMA_DRIFT)}")
    assert got == [("unknown", "Extra", 1)], got


def parquet_into_super(s: Scratch) -> None:
    raise NotApplicable("needs an S3 bucket and an IAM role for COPY: the backfill's own live run covers it")


def procedure_pins_utc(s: Scratch) -> None:
    pipeline, cs = _customer(s)
    s.wh.execute("SET timezone TO 'America/New_York'")
    if s.d.procedure_settings:  # SET LOCAL in the procedure: its transaction's only (r_SET)
        s.wh.execute("SET enable_case_sensitive_identifier TO false")
    started = time.time()
    s.feed(pipeline, "customer", [cs.insert({"CUST_ID": "A", "NAME": "a"})])
    zone = str(s.wh.scalar("SELECT current_setting('timezone')"))
    assert zone == "America/New_York", f"the CALL left the session's time zone at {zone}"
    if s.d.procedure_settings:
        case = str(s.wh.scalar("SELECT current_setting('enable_case_sensitive_identifier')")).lower()
        assert case in ("off", "false"), f"the CALL left enable_case_sensitive_identifier {case} in the session"
    (logged,) = s.wh.query(f"SELECT started_at FROM {s.name('sync_run_log')}")[0]
    skew = abs(logged.replace(tzinfo=UTC).timestamp() - started)
    assert skew < 300, f"the run log's start {logged} is {skew:.0f} s from UTC"


def watermark_distribution(s: Scratch) -> None:
    if not s.d.streaming_ingestion:
        raise NotApplicable("PostgreSQL has no distribution style")
    s.deploy(CUSTOMER)
    style = s.wh.scalar(
        'SELECT diststyle FROM svv_table_info WHERE "schema" = %s AND "table" = %s', (s.schema, "customer__watermark")
    )
    assert str(style).upper().startswith("AUTO"), f"the watermark's distribution style is {style}"


FLOATS = """
[[tables]]
name = "floats"
topic = "db.public.floats"
primary_key = ["id"]
order_by = "mysql-binlog"
columns = [{ name = "id", type = "integer" }, { name = "r", type = "real" }, { name = "d", type = "double" }]
"""


def float_ranges(s: Scratch) -> None:
    pipeline, cs = s.deploy(FLOATS), ChangeStream(["id"], MySqlSource(table="floats"))
    inside = {"id": 1, "r": 1e30, "d": 1e300}
    # Past REAL's largest value, and below its smallest (rounds to zero), on every engine.
    outside = [{"id": 2, "r": 1e39, "d": 1.0}, {"id": 3, "r": 1e-50, "d": 1.0}]
    run = s.feed(pipeline, "floats", [cs.insert(r) for r in (inside, *outside)])
    assert (run.upserted, run.quarantined) == (1, 2), f"upserted {run.upserted}, quarantined {run.quarantined}"


def varchar_widened_in_place(s: Scratch) -> None:
    table = s.name("widen")
    s.wh.execute(f"CREATE TABLE {table} (v varchar(8))")
    s.wh.execute(f"INSERT INTO {table} VALUES ('12345678')")
    s.wh.execute(f"ALTER TABLE {table} ALTER COLUMN v TYPE varchar(16)")  # autocommit: no transaction block
    s.wh.execute(f"INSERT INTO {table} VALUES ('1234567890123456')")
    got = sorted(r[0] for r in s.wh.query(f"SELECT v FROM {table}"))
    assert got == ["12345678", "1234567890123456"], got


SCENARIOS = (
    Scenario(1, "REGEXP_SUBSTR without a match is NULL after NULLIF", regexp_without_a_match),
    Scenario(2, "JSON text past VARCHAR's limit reads as NULL, not an error", json_text_over_varchar),
    Scenario(3, "values that do not convert are quarantined, never fatal", values_that_do_not_convert),
    Scenario(4, "a column's length counts bytes", multi_byte_op),
    Scenario(5, "the procedure's lock leaves the target readable", lock_leaves_the_target_readable),
    Scenario(6, "the procedure's clock has microseconds and reads UTC", clock_has_microseconds),
    Scenario(7, "the watermark summary of 3,000 partitions fits its column", watermark_summary_of_many_partitions),
    Scenario(8, "new sessions keep identifiers' case (auto refresh)", case_sensitive_identifiers),
    Scenario(9, "DROP PROCEDURE as the dialect spells it", drop_procedure),
    Scenario(10, "ANALYZE runs inside the procedure", analyze_in_the_procedure),
    Scenario(11, "a key stored twice is replaced by one row", key_stored_twice),
    Scenario(12, "an unknown field is counted as drift", unknown_field_is_drift),
    Scenario(13, "COPY of Parquet text into SUPER", parquet_into_super),
    Scenario(14, "the procedure pins UTC and restores the caller's time zone and settings", procedure_pins_utc),
    Scenario(15, "the watermark is DISTSTYLE AUTO", watermark_distribution),
    Scenario(16, "reals and doubles outside the engine's range are quarantined", float_ranges),
    Scenario(17, "a VARCHAR is widened in place", varchar_widened_in_place),
)

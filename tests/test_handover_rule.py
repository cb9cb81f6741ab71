"""The handover rule (`sync/sql/handover.py`) is one rule in two renderings: the SQL the
backfill's merge runs and the Python reconcile runs. They must agree on every combination
of known and unknown positions and times, on real PostgreSQL.

What the rule encodes comes from Debezium's documentation: with
`delete.tombstone.handling.mode=tombstone` a delete is "a record with null value" (no
`__source_ts_ms`, no position), so its only time is the Kafka record's timestamp, which
the producer sets when it sends the record, after the commit ("New Record State
Extraction", options table; `shared/reference/debezium.md`)."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sync.operations.reconcile import compare_rows, warehouse_rows
from sync.sql.buckets import ReconcileSql
from sync.sql.dialect import dialect_for
from sync.sql.handover import DELETE_TIME, ROW_TIME, Recency, Stamp, held_time_sql, kept_sql, recency

T0 = datetime(2024, 5, 1, 12)
times = st.none() | st.integers(0, 2).map(lambda m: T0 + timedelta(minutes=m))
positions = st.none() | st.integers(0, 2).map(lambda p: f"{p:020d}.{p % 2:020d}")


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.sampled_from([ROW_TIME, DELETE_TIME]),
    st.tuples(positions, times, times),  # held: position, source time, Kafka timestamp
    st.tuples(positions, times),  # snapshot row: position, source time
)
def test_sql_and_python_renderings_agree(wh, columns, held, snap):
    pos, source_ts, kafka_ts = held
    kept, held_time = wh.query(
        f"SELECT {kept_sql('t', 's', held_time_sql('t', columns))}, {held_time_sql('t', columns)}\n"
        "FROM (SELECT CAST(%s AS varchar(64)) AS _source_pos, CAST(%s AS timestamp) AS _source_ts,"
        " CAST(%s AS timestamp) AS _kafka_timestamp) t,\n"
        "     (SELECT CAST(%s AS varchar(64)) AS _source_pos, CAST(%s AS timestamp) AS _source_ts) s",
        (pos, source_ts, kafka_ts, *snap),
    )[0]
    dated_by = {"_source_ts": source_ts, "_kafka_timestamp": kafka_ts}
    assert held_time == next((dated_by[c] for c in columns if dated_by[c] is not None), None)
    age = recency(Stamp(pos, held_time), Stamp(*snap))
    assert kept == (age is not Recency.OLDER), (age, held, snap)


def test_a_tombstone_is_dated_by_its_kafka_timestamp(wh):
    """The case reconcile got wrong: a delete with no source time and no position, produced
    after the snapshot row's commit, is newer than the snapshot row."""
    (held_time,) = wh.query(
        f"SELECT {held_time_sql('t', DELETE_TIME)} FROM (SELECT NULL::timestamp AS _source_ts, %s AS _kafka_timestamp) t", (T0,)
    )[0]
    assert recency(Stamp(None, held_time), Stamp(None, T0 - timedelta(minutes=5))) is Recency.NEWER
    assert recency(Stamp(None, None), Stamp(None, T0)) is Recency.UNKNOWN
    assert recency(Stamp("2", T0), Stamp("1", T0 + timedelta(days=1))) is Recency.NEWER  # positions decide first


def test_reconcile_dates_a_tombstone_by_its_kafka_timestamp(deployed):
    """A positionless delete produced after the snapshot row explains the key's absence; one
    produced before it does not (the snapshot's row is newer: the stream lost its insert)."""
    wh, pipeline = deployed
    for key, kafka_ts in (("after", T0 + timedelta(minutes=5)), ("before", T0 - timedelta(minutes=5))):
        wh.execute("INSERT INTO cdc.customer__deleted (customer_id, _kafka_timestamp) VALUES (%s, %s)", (key, kafka_ts))
    rec = ReconcileSql(dialect_for("postgres", "cdc"), pipeline, pipeline.table("customer"), 1, [])
    snapshot = {key: ("", Stamp(None, T0)) for key in ("after", "before")}
    diffs = {d.key: (d.explained, d.why) for d in compare_rows(snapshot, warehouse_rows(wh, rec, [0]), T0, False)}
    assert diffs == {"after": (True, "deleted by the stream after the snapshot"), "before": (False, "not in the warehouse")}

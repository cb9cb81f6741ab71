"""Semantic types decoded in SQL on PostgreSQL, against the exact expected values and the
plain-Python reference decoder (which the backfill uses)."""

from __future__ import annotations

import json
from datetime import date, datetime
from decimal import Decimal

import pytest

from sync.debezium.decode import UndecodableValue, conform_decimal, decode_value
from sync.local.stream import KafkaRecord, ingest_records
from sync.operations.runner import deploy, sync
from tests.cases import (
    NTS,
    SEMANTIC_DECODINGS,
    SEMANTIC_UNDECODABLE,
    VSD,
    ZONED,
    base64_decimal,
    reference_value,
    semantic_column,
    zoned_text,
)
from tests.helpers import make_pipeline


def _tables() -> tuple[str, list[tuple[str, list]]]:
    groups: dict[tuple, list] = {}
    for semantic, typ, scale, pairs in SEMANTIC_DECODINGS:
        groups.setdefault((semantic, typ, scale), []).extend(("ok", v, e) for v, e in pairs)
    for semantic, typ, scale, values in SEMANTIC_UNDECODABLE:
        groups.setdefault((semantic, typ, scale), []).extend(("bad", v, None) for v in values)
    toml, tables = [], []
    for i, ((semantic, typ, scale), rows) in enumerate(groups.items()):
        toml.append(
            f'[[tables]]\nname = "s{i}"\ntopic = "t{i}"\nprimary_key = ["id"]\n'
            f'columns = [{{ name = "id", type = "integer" }}, {semantic_column("val", typ, semantic, scale)}]\n'
        )
        tables.append((f"s{i}", [(semantic, typ, scale, *row) for row in rows]))
    return "\n".join(toml), tables


def _record(offset: int, row: dict) -> tuple[KafkaRecord, bool]:
    value = {"before": None, "after": row, "source": {"ts_ms": 1}, "op": "c"}
    return KafkaRecord(0, offset, None, json.dumps({"id": row["id"]}).encode(), json.dumps(value).encode()), True


def test_semantic_types_decode_exactly_and_like_the_reference(wh):
    toml, tables = _tables()
    pipeline = make_pipeline(toml)
    deploy(wh, pipeline, "test")
    wh.execute("SET TIME ZONE 'America/Sao_Paulo'")  # results must not depend on the session zone
    for name, rows in tables:
        ingest_records(wh, pipeline, name, [_record(i, {"id": i, "val": r[4]}) for i, r in enumerate(rows)])
    for run in sync(wh, pipeline):
        assert run.status == "ok", run.error
    wh.execute("SET TIME ZONE 'UTC'")
    for name, rows in tables:
        stored = dict(wh.query(f'SELECT id, val FROM cdc."{name}"'))
        reasons = dict(wh.query("SELECT kafka_offset, reason FROM cdc.sync_quarantine WHERE table_name = %s", (name,)))
        for i, (semantic, typ, scale, kind, value, expected) in enumerate(rows):
            label = f"{semantic} {typ} {value!r}"
            if kind == "bad":
                assert i not in stored, label
                assert reasons[i] == f"field val does not convert from {semantic} to {typ}", label
                with pytest.raises(UndecodableValue):
                    reference_value(semantic, typ, scale, value)
                continue
            got = stored[i]
            if isinstance(got, memoryview):
                got = bytes(got)
            assert got == expected, label
            assert reference_value(semantic, typ, scale, value) == expected, label


@pytest.mark.parametrize(
    ("typ", "semantic", "message"),
    [
        ("integer", "io.debezium.time.Date", "column d: semantic io.debezium.time.Date decodes to a date"),
        (
            "timestamp",
            "io.debezium.time.MicroDuration",
            "column d: semantic io.debezium.time.MicroDuration is a number of microseconds",
        ),
    ],
)
def test_semantic_type_must_fit_its_column(typ, semantic, message):
    from sync.sql.objects import pipeline_objects

    pipeline = make_pipeline(
        '[[tables]]\nname = "x"\ntopic = "x"\nprimary_key = ["id"]\n'
        f'columns = [{{ name = "id", type = "integer" }}, {{ name = "d", type = "{typ}", semantic = "{semantic}" }}]\n'
    )
    with pytest.raises(ValueError, match=message):
        pipeline_objects(pipeline, "postgres", "test")


def test_semantic_primary_key_decodes_from_image_and_kafka_key(wh):
    pipeline = make_pipeline(
        '[[tables]]\nname = "k"\ntopic = "k"\nprimary_key = ["code"]\n'
        'columns = [{ name = "code", type = "decimal(20,0)", semantic = "org.apache.kafka.connect.data.Decimal", scale = 0 },'
        ' { name = "day", type = "date", semantic = "io.debezium.time.Date" }]\n'
    )
    deploy(wh, pipeline, "test")

    def record(offset: int, key: str, value: dict | None) -> tuple[KafkaRecord, bool]:
        return KafkaRecord(
            0, offset, None, json.dumps({"code": key}).encode(), json.dumps(value).encode() if value else None
        ), True

    ingest_records(
        wh,
        pipeline,
        "k",
        [
            record(0, "BVqlTTjlJn7q", {"before": None, "after": {"code": "BVqlTTjlJn7q", "day": 19000}, "op": "c"}),
            record(1, "/w==", {"before": None, "after": {"code": "/w==", "day": -1}, "op": "c"}),
        ],
    )
    sync(wh, pipeline)
    assert wh.query("SELECT code, day FROM cdc.k ORDER BY code") == [
        (Decimal(-1), date(1969, 12, 31)),
        (Decimal(98765432109876543210), date(2022, 1, 8)),
    ]
    # a delete whose before is null: the key is decoded from the Kafka key
    ingest_records(wh, pipeline, "k", [record(2, "/w==", {"before": None, "after": None, "op": "d"})])
    (run,) = sync(wh, pipeline)
    assert run.deleted == 1
    assert wh.query("SELECT code FROM cdc.k") == [(Decimal(98765432109876543210),)]


def test_property_sql_and_reference_decoders_agree(wh):
    """Random decimals (up to 38 digits, any scale, negative too), epoch timestamps and zoned texts:
    the warehouse's SQL and the Python reference give the same values."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    pipeline = make_pipeline(
        '[[tables]]\nname = "p"\ntopic = "p"\nprimary_key = ["id"]\ncolumns = [{ name = "id", type = "integer" },'
        ' { name = "vsd", type = "decimal(38,6)", semantic = "io.debezium.data.VariableScaleDecimal" },'
        ' { name = "ts", type = "timestamp", semantic = "io.debezium.time.NanoTimestamp" },'
        ' { name = "z", type = "timestamp", semantic = "io.debezium.time.ZonedTimestamp" }]\n'
    )
    deploy(wh, pipeline, "test")
    unscaled = st.one_of(st.integers(-(10**6), 10**6), st.integers(-(10**38) + 1, 10**38 - 1))
    zoned = st.builds(
        zoned_text,
        st.datetimes(datetime(1900, 1, 1), datetime(2200, 1, 1)),
        st.one_of(st.just(""), st.from_regex(r"\A[0-9]{1,9}\Z")),
        st.one_of(st.integers(-14 * 60, 14 * 60).map(lambda m: m * 60), st.integers(-14 * 3600, 14 * 3600)),
    )
    row = st.tuples(unscaled, st.integers(-40, 40), st.integers(-(2**62), 2**62), zoned)
    offsets = iter(range(10**6))

    @settings(max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(row, min_size=20, max_size=20))
    def check(values):
        wh.execute("DELETE FROM cdc.p")
        records = []
        for i, (u, scale, ns, z) in enumerate(values):
            after = {"id": i, "vsd": {"scale": scale, "value": base64_decimal(u)}, "ts": ns, "z": z}
            records.append(_record(next(offsets), after))
        ingest_records(wh, pipeline, "p", records)
        (run,) = sync(wh, pipeline)
        assert run.status == "ok", run.error
        stored = {r[0]: r[1:] for r in wh.query("SELECT id, vsd, ts, z FROM cdc.p")}
        quarantined = run.quarantined
        expected_quarantine = 0
        for i, (u, scale, ns, z) in enumerate(values):
            try:
                want = (
                    conform_decimal(decode_value(VSD, None, {"scale": scale, "value": base64_decimal(u)}), 38, 6),
                    decode_value(NTS, None, ns),
                    decode_value(ZONED, None, z),
                )
            except UndecodableValue:
                expected_quarantine += 1
                assert i not in stored
                continue
            assert stored[i] == want, (u, scale, ns, z)
        assert quarantined == expected_quarantine

    check()

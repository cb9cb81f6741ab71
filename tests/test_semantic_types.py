"""Semantic types decoded in SQL on PostgreSQL, against the exact expected values and the
plain-Python reference decoder (which the backfill uses)."""

from __future__ import annotations

import json
from datetime import date, datetime, time, timezone
from decimal import Decimal

import pytest

from sync.runner import deploy, sync
from sync.semantic import UndecodableValue, conform_decimal, decode_for_column, decode_value
from sync.stream import KafkaRecord, ingest_records
from tests.helpers import make_pipeline

DATE = "io.debezium.time.Date"
DEC = "org.apache.kafka.connect.data.Decimal"
VSD = "io.debezium.data.VariableScaleDecimal"
ZONED = "io.debezium.time.ZonedTimestamp"
MAX38 = Decimal(10**38 - 1)

# (semantic, column type, scale, [(json value, expected value)])
CASES = [
    (
        DATE,
        "date",
        None,
        [(19000, date(2022, 1, 8)), (-1, date(1969, 12, 31)), (-25567, date(1900, 1, 1)), (0, date(1970, 1, 1))],
    ),
    (DATE, "timestamp", None, [(19000, datetime(2022, 1, 8))]),
    ("io.debezium.time.Time", "time", None, [(45296789, time(12, 34, 56, 789000)), (0, time(0))]),
    (
        "io.debezium.time.MicroTime",
        "time",
        None,
        [(45296789000, time(12, 34, 56, 789000)), (86399999999, time(23, 59, 59, 999999))],
    ),
    ("io.debezium.time.NanoTime", "time", None, [(45296789123456, time(12, 34, 56, 789123))]),
    (
        "io.debezium.time.Timestamp",
        "timestamp",
        None,
        [
            (1600000000250, datetime(2020, 9, 13, 12, 26, 40, 250000)),
            (-1, datetime(1969, 12, 31, 23, 59, 59, 999000)),
            (-2208988800000, datetime(1900, 1, 1)),
        ],
    ),
    (
        "io.debezium.time.MicroTimestamp",
        "timestamp",
        None,
        [
            (1700000000654321, datetime(2023, 11, 14, 22, 13, 20, 654321)),
            (-1000000000000001, datetime(1938, 4, 24, 22, 13, 19, 999999)),
            (1529507596945104, datetime(2018, 6, 20, 15, 13, 16, 945104)),
        ],
    ),
    (
        "io.debezium.time.NanoTimestamp",
        "timestamp",
        None,
        [
            (1700000000654321987, datetime(2023, 11, 14, 22, 13, 20, 654321)),
            (-1500, datetime(1969, 12, 31, 23, 59, 59, 999999)),
        ],
    ),
    (
        "io.debezium.time.MicroTimestamp",
        "timestamptz",
        None,
        [
            (1700000000654321, datetime(2023, 11, 14, 22, 13, 20, 654321, tzinfo=timezone.utc)),
        ],
    ),
    (
        ZONED,
        "timestamptz",
        None,
        [
            ("2023-03-23T22:00:10.123456Z", datetime(2023, 3, 23, 22, 0, 10, 123456, tzinfo=timezone.utc)),
            ("2023-03-23T07:10:00Z", datetime(2023, 3, 23, 7, 10, tzinfo=timezone.utc)),
            ("2023-03-23T12:00:00+05:30", datetime(2023, 3, 23, 6, 30, tzinfo=timezone.utc)),
            ("1969-07-20T20:17:40.123456789-04:00", datetime(1969, 7, 21, 0, 17, 40, 123456, tzinfo=timezone.utc)),
            ("2023-01-01T00:00:00.5+00:00", datetime(2023, 1, 1, 0, 0, 0, 500000, tzinfo=timezone.utc)),
        ],
    ),
    (ZONED, "timestamp", None, [("2023-12-31T23:30:00.1-01:00", datetime(2024, 1, 1, 0, 30, 0, 100000))]),
    ("io.debezium.time.Year", "integer", None, [(2023, 2023), (1901, 1901)]),
    (
        DEC,
        "decimal(12,2)",
        2,
        [("/+0peQ==", Decimal("-12345.67")), ("AA==", Decimal("0.00")), ("D9I=", Decimal("40.50")), ("C+o=", Decimal("30.50"))],
    ),
    (
        DEC,
        "decimal(38,0)",
        0,
        [
            ("BVqlTTjlJn7q", Decimal(98765432109876543210)),
            ("SztMqFqGxHoJiiI//////w==", MAX38),
            ("tMSzV6V5O4X2dd3AAAAAAQ==", Decimal(-(10**38 - 1))),
            ("K2c=", Decimal(11111)),
            ("/w==", Decimal(-1)),
        ],
    ),
    (DEC, "decimal(10,1)", 1, [("Cw==", Decimal("1.1"))]),
    (DEC, "decimal(12,3)", 3, [("ALxfFg==", Decimal("12345.110"))]),
    (DEC, "decimal(38,38)", 38, [("SztMqFqGxHoJiiI//////w==", Decimal("0." + "9" * 38))]),
    (
        VSD,
        "decimal(20,4)",
        None,
        [
            ({"scale": 3, "value": "ALxfFg=="}, Decimal("12345.1100")),
            ({"scale": 0, "value": "/w=="}, Decimal("-1.0000")),
            ({"scale": 6, "value": "/+0peQ=="}, Decimal("-1.2346")),
        ],
    ),
    # decimal.handling.mode = string / double: no semantic, the plain conversion.
    (None, "decimal(12,2)", None, [("-12345.67", Decimal("-12345.67")), (-12345.67, Decimal("-12345.67"))]),
    ("io.debezium.data.Json", "super", None, [('{"a": [1, 2], "b": null}', {"a": [1, 2], "b": None}), ("[]", [])]),
    ("io.debezium.data.Json", "varchar(100)", None, [('{"a":1}', '{"a":1}')]),
    ("io.debezium.data.Enum", "varchar(16)", None, [("RED", "RED")]),
    ("io.debezium.data.EnumSet", "varchar(16)", None, [("a,b", "a,b")]),
    (
        "io.debezium.data.Uuid",
        "varchar(36)",
        None,
        [("0b4f7d4e-4d1e-4f7a-9d2a-3f8e6f3b9a11", "0b4f7d4e-4d1e-4f7a-9d2a-3f8e6f3b9a11")],
    ),
    ("bytes", "varbyte(16)", None, [("AQID", b"\x01\x02\x03")]),
    ("boolean-int", "boolean", None, [(1, True), (0, False)]),
]

# (semantic, column type, scale, json value) that cannot be decoded: quarantined, named.
BAD = [
    (DATE, "date", None, "abc"),
    (DEC, "decimal(12,2)", 2, "!!notbase64"),
    (DEC, "decimal(12,2)", 2, 12345),
    (DEC, "decimal(38,0)", 0, "AEs7TKhahsR6CYoiQAAAAAA="),  # 10**38: 39 digits
    (ZONED, "timestamptz", None, "2023-03-23 22:00:10"),
    ("io.debezium.time.MicroTime", "time", None, 86400000000),
    (VSD, "decimal(20,4)", None, {"scale": 2}),
    ("io.debezium.time.NanoTimestamp", "timestamp", None, 2**63),  # not a bigint
    (ZONED, "timestamptz", None, "2023-03-23T24:00:00Z"),
    (ZONED, "timestamptz", None, "2016-12-31T23:59:60Z"),
    ("io.debezium.data.Json", "varchar(100)", None, "{bad"),
    ("io.debezium.data.Json", "varchar(100)", None, {"a": 1}),
    ("io.debezium.data.Enum", "varchar(16)", None, "é" * 9),  # 18 bytes
    ("io.debezium.time.Year", "smallint", None, 40000),
]


def _tables() -> tuple[str, list[tuple[str, list]]]:
    groups: dict[tuple, list] = {}
    for semantic, typ, scale, values in CASES:
        groups.setdefault((semantic, typ, scale), []).extend(("ok", v, e) for v, e in values)
    for semantic, typ, scale, value in BAD:
        groups.setdefault((semantic, typ, scale), []).append(("bad", value, None))
    toml, tables = [], []
    for i, ((semantic, typ, scale), rows) in enumerate(groups.items()):
        extra = (f', semantic = "{semantic}"' if semantic else "") + (f", scale = {scale}" if scale is not None else "")
        toml.append(
            f'[[tables]]\nname = "s{i}"\ntopic = "t{i}"\nprimary_key = ["id"]\n'
            f'columns = [{{ name = "id", type = "integer" }}, {{ name = "val", type = "{typ}"{extra} }}]\n'
        )
        tables.append((f"s{i}", [(semantic, typ, scale, *row) for row in rows]))
    return "\n".join(toml), tables


def _record(offset: int, row: dict) -> tuple[KafkaRecord, bool]:
    value = {"before": None, "after": row, "source": {"ts_ms": 1}, "op": "c"}
    return KafkaRecord(0, offset, None, json.dumps({"id": row["id"]}).encode(), json.dumps(value).encode()), True


def _reference(semantic, typ, scale, value):
    if semantic is None:  # decimal.handling.mode = string / double: the plain number
        p, s = (int(x) for x in typ[8:-1].split(","))
        return conform_decimal(Decimal(str(value)), p, s)
    return decode_for_column(semantic, scale, typ, value)


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
                    _reference(semantic, typ, scale, value)
                continue
            got = stored[i]
            if isinstance(got, memoryview):
                got = bytes(got)
            assert got == expected, label
            assert _reference(semantic, typ, scale, value) == expected, label


def test_semantic_type_must_fit_its_column():
    from sync.sql.objects import pipeline_objects

    pipeline = make_pipeline(
        '[[tables]]\nname = "x"\ntopic = "x"\nprimary_key = ["id"]\n'
        'columns = [{ name = "id", type = "integer" }, { name = "d", type = "integer", semantic = "io.debezium.time.Date" }]\n'
    )
    with pytest.raises(ValueError, match="column d: semantic io.debezium.time.Date decodes to a date"):
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


def _base64_decimal(unscaled: int) -> str:
    import base64

    length = max(1, (unscaled.bit_length() + 8) // 8)  # minimal two's complement, as BigInteger.toByteArray
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()


def test_property_sql_and_reference_decoders_agree(wh):
    """Random decimals (up to 38 digits, any scale), epoch timestamps and zoned texts:
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
    unscaled = st.integers(-(10**38) + 1, 10**38 - 1)
    zoned = st.builds(
        lambda dt, digits, off: (
            dt.strftime("%Y-%m-%dT%H:%M:%S")
            + (f".{digits}" if digits else "")
            + ("Z" if off == 0 else f"{'+' if off > 0 else '-'}{abs(off) // 60:02d}:{abs(off) % 60:02d}")
        ),
        st.datetimes(datetime(1900, 1, 1), datetime(2200, 1, 1)),
        st.one_of(st.just(""), st.from_regex(r"\A[0-9]{1,9}\Z")),
        st.integers(-14 * 60, 14 * 60),
    )
    row = st.tuples(unscaled, st.integers(0, 38), st.integers(-(2**62), 2**62), zoned)
    offsets = iter(range(10**6))

    @settings(max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(row, min_size=20, max_size=20))
    def check(values):
        wh.execute("DELETE FROM cdc.p")
        records = []
        for i, (u, scale, ns, z) in enumerate(values):
            after = {"id": i, "vsd": {"scale": scale, "value": _base64_decimal(u)}, "ts": ns, "z": z}
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
                    conform_decimal(decode_value(VSD, None, {"scale": scale, "value": _base64_decimal(u)}), 38, 6),
                    decode_value("io.debezium.time.NanoTimestamp", None, ns),
                    decode_value(ZONED, None, z),
                )
            except UndecodableValue:
                expected_quarantine += 1
                assert i not in stored
                continue
            assert stored[i] == want, (u, scale, ns, z)
        assert quarantined == expected_quarantine

    check()

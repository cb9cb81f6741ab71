"""The SQL Server, Oracle and Db2 connectors' types, end to end: schema-bearing change
events -> `infer` -> deploy -> sync on the embedded PostgreSQL, each value against the
exact value the source held and against the reference decoder (which the backfill uses).

The values are those of Debezium's own connector tests, which pin what each connector
emits for a column of each type (debezium/debezium @ aad5519902997a3627fe296f77ea6d3452e9acce):
- SQL Server: debezium-connector-sqlserver/src/test/java/io/debezium/connector/sqlserver/
  AbstractSqlServerDatatypesTest.java, EXPECTED_FP and EXPECTED_DATE_TIME;
- Oracle: debezium-connector-oracle/src/test/java/io/debezium/connector/oracle/
  AbstractOracleDatatypesTest.java, EXPECTED_INT, EXPECTED_FP and EXPECTED_TIME;
- Db2: debezium/debezium-connector-db2 @ 087e6fdadd0b14a1705db14d7032701d2ae938f1,
  src/test/java/io/debezium/connector/db2/DatatypesFromSnapshotIT.java (DECFLOAT as
  VariableScaleDecimal), and documentation/modules/ROOT/pages/connectors/db2.adoc,
  "Timestamp types" (TIMESTAMP '2018-06-20 15:13:16.945104' -> Timestamp 1529507596000).
The connectors' data type mapping pages (documentation/modules/ROOT/pages/connectors/
oracle.adoc "Data type mappings", sqlserver.adoc "Data type mappings") give the schema
of each field. Values marked "constructed" follow those pages where the tests show none.
"""

from __future__ import annotations

import base64
import json
from datetime import date, datetime, time, timezone
from decimal import Decimal
from typing import Any

import pytest

from sync.debezium.decode import UndecodableValue, decode_for_column
from sync.debezium.infer import infer_block
from sync.debezium.vocabulary import field_reason
from sync.local.stream import ingest_file
from sync.operations.runner import deploy, sync
from tests.helpers import EXAMPLES, make_pipeline

UTC = timezone.utc
SAMPLES = EXAMPLES / "connector_types"
DEC = "org.apache.kafka.connect.data.Decimal"
VSD = "io.debezium.data.VariableScaleDecimal"


def b64(unscaled: int) -> str:
    """Kafka Connect Decimal bytes as the JsonConverter writes them: base64 of
    BigInteger.toByteArray (minimal big-endian two's complement)."""
    length = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()


def field(name: str, typ: str, semantic: str | None = None, **params: str) -> dict[str, Any]:
    f: dict[str, Any] = {"type": typ, "optional": name != "ID", "field": name}
    if semantic:
        f["name"] = semantic
    if params:
        f["parameters"] = params
    return f


def decimal_field(name: str, scale: int, precision: int) -> dict[str, Any]:
    return field(name, "bytes", DEC, scale=str(scale), **{"connect.decimal.precision": str(precision)})


def vsd_field(name: str) -> dict[str, Any]:
    return {
        **field(name, "struct", VSD),
        "fields": [
            {"type": "int32", "optional": False, "field": "scale"},
            {"type": "bytes", "optional": False, "field": "value"},
        ],
    }


# connector -> [(Connect field, JSON value, inferred column type, exact stored value)]
ORACLE = [
    (field("VAL_NUMBER_18_NEGATIVE_SCALE", "int64"), 999_99999_99999_99900, "bigint", 999_99999_99999_99900),
    # NUMBER(36, -2): P - S >= 19, a Connect Decimal with scale -2 (38 integer digits).
    (
        decimal_field("VAL_NUMBER_36_NEGATIVE_SCALE", -2, 36),
        b64(int("9" * 36)),
        "decimal(38,0)",
        Decimal(int("9" * 36 + "00")),
    ),
    # FLOAT and NUMBER without precision: VariableScaleDecimal.
    (vsd_field("VAL_F"), {"scale": 2, "value": b64(333)}, "decimal(38,10)", Decimal("3.33")),
    (vsd_field("VAL_NUM_VS"), {"scale": 3, "value": b64(77323)}, "decimal(38,10)", Decimal("77.323")),
    # NUMBER without precision holding 12E+5: Oracle's NUMBER keeps the exponent, so the
    # BigDecimal has scale -5 (constructed).
    (vsd_field("VAL_NUM_EXP"), {"scale": -5, "value": b64(12)}, "decimal(38,10)", Decimal(1_200_000)),
    (field("VAL_BD", "double"), 2.22, "double precision", 2.22),
    # DATE carries a time of day: Timestamp (ms), not Date.
    (field("VAL_DATE", "int64", "io.debezium.time.Timestamp"), 1522108800_000, "timestamp", datetime(2018, 3, 27)),
    (field("VAL_MAX_DATE", "int64", "io.debezium.time.Timestamp"), 71_863_286_400_000, "timestamp", datetime(4247, 4, 5)),
    (
        field("VAL_TS_PRECISION9", "int64", "io.debezium.time.NanoTimestamp"),
        1522154096 * 1_000_000_000 + 125456789,
        "timestamp",
        datetime(2018, 3, 27, 12, 34, 56, 125456),
    ),
    (
        field("VAL_TSTZ", "string", "io.debezium.time.ZonedTimestamp"),
        "2018-03-27T01:34:56.007891-11:00",
        "timestamptz",
        datetime(2018, 3, 27, 12, 34, 56, 7891, tzinfo=UTC),
    ),
    # A region's historic local mean time has an offset with seconds (constructed: Java's
    # ISO offset of Africa/Monrovia before 1972).
    (
        field("VAL_TSTZ_REGION", "string", "io.debezium.time.ZonedTimestamp"),
        "1970-01-01T00:00:00-00:44:30",
        "timestamptz",
        datetime(1970, 1, 1, 0, 44, 30, tzinfo=UTC),
    ),
    # INTERVAL: microseconds (MicroDuration), or ISO-8601 text with interval.handling.mode=string.
    (field("VAL_INT_YTM", "int64", "io.debezium.time.MicroDuration"), -110451600_000_000, "bigint", -110451600_000_000),
    (field("VAL_INT_DTS", "int64", "io.debezium.time.MicroDuration"), -93784_560_000, "bigint", -93784_560_000),
    (field("VAL_INT_STR", "string", "io.debezium.time.Interval"), "P1Y2M3DT4H5M6.78S", "varchar(64)", "P1Y2M3DT4H5M6.78S"),
]
SQLSERVER = [
    (field("val_tinyint", "int16"), 22, "smallint", 22),
    (
        decimal_field("val_smallmoney", 4, 10),
        b64(53230),
        "decimal(10,4)",
        Decimal("5.3230"),
    ),
    (
        decimal_field("val_money", 4, 19),
        b64(63230),
        "decimal(19,4)",
        Decimal("6.3230"),
    ),
    (field("val_date", "int32", "io.debezium.time.Date"), 17_725, "date", date(2018, 7, 13)),
    (field("val_time_p2", "int32", "io.debezium.time.Time"), 37_425_680, "time", time(10, 23, 45, 680000)),
    (field("val_time", "int64", "io.debezium.time.MicroTime"), 37_425_678_900, "time", time(10, 23, 45, 678900)),
    # TIME(7): NanoTime; the 100 ns digit is truncated (both warehouses store microseconds).
    (field("val_time_p7", "int64", "io.debezium.time.NanoTime"), 37_425_678_901_200, "time", time(10, 23, 45, 678901)),
    (
        field("val_datetime2", "int64", "io.debezium.time.NanoTimestamp"),
        1_531_481_025_340_000_000,
        "timestamp",
        datetime(2018, 7, 13, 11, 23, 45, 340000),
    ),
    (
        field("val_datetimeoffset", "string", "io.debezium.time.ZonedTimestamp"),
        "2018-07-13T12:23:45.456+11:00",
        "timestamptz",
        datetime(2018, 7, 13, 1, 23, 45, 456000, tzinfo=UTC),
    ),
    (
        field("val_datetime", "int64", "io.debezium.time.Timestamp"),
        1_531_488_225_780,
        "timestamp",
        datetime(2018, 7, 13, 13, 23, 45, 780000),
    ),
    (
        field("val_smalldatetime", "int64", "io.debezium.time.Timestamp"),
        1_531_491_840_000,
        "timestamp",
        datetime(2018, 7, 13, 14, 24),
    ),
    # rowversion / timestamp: binary(8), bytes in base64 (constructed: row version 2001).
    (field("val_rowversion", "bytes"), "AAAAAAAAB9E=", "varbyte", b"\x00\x00\x00\x00\x00\x00\x07\xd1"),
    (
        field("val_uuid", "string"),
        "F9168C5E-CEB2-4FAA-B6BF-329BF39FA1E4",
        "varchar(65535)",
        "F9168C5E-CEB2-4FAA-B6BF-329BF39FA1E4",
    ),
]
DB2 = [
    (vsd_field("DF"), {"scale": 0, "value": b64(1)}, "decimal(38,10)", Decimal(1)),
    # DECFLOAT(34) 3.012345678901234567890123456789 in a decimal(38,10): rounded half away from zero.
    (vsd_field("DF34"), {"scale": 30, "value": b64(3012345678901234567890123456789)}, "decimal(38,10)", Decimal("3.0123456789")),
    # DECFLOAT keeps the exponent: 1E+10 is unscaled 1, scale -10 (constructed).
    (vsd_field("DF_EXP"), {"scale": -10, "value": b64(1)}, "decimal(38,10)", Decimal(10**10)),
    (field("TS", "int64", "io.debezium.time.Timestamp"), 1529507596000, "timestamp", datetime(2018, 6, 20, 15, 13, 16)),
    (field("XMLDOC", "string", "io.debezium.data.Xml"), "<a>1</a>", "varchar(65535)", "<a>1</a>"),
]

# connector -> [(field name, JSON value)] that do not decode: quarantined, never a NULL.
UNDECODABLE = {
    "oracle": [
        ("VAL_NUMBER_36_NEGATIVE_SCALE", b64(int("9" * 37))),  # 39 digits at scale -2
        ("VAL_NUM_EXP", {"scale": -39, "value": b64(1)}),  # 10**39
        ("VAL_NUM_EXP", {"scale": -2, "value": b64(10**37)}),  # 40 digits
        ("VAL_INT_YTM", "P1Y"),
        ("VAL_INT_DTS", 1.5),
        # BINARY_DOUBLE NaN and infinity: the JsonConverter (Jackson) writes them as strings.
        ("VAL_BD", "NaN"),
        ("VAL_BD", "Infinity"),
    ],
    "sqlserver": [("val_datetimeoffset", "2018-07-13 12:23:45.456 +11:00")],
    "db2": [("DF_EXP", {"scale": -2147483648, "value": b64(1)})],
}
CONNECTORS = {"oracle": ORACLE, "sqlserver": SQLSERVER, "db2": DB2}


def _message(connector: str, cases: list, offset: int, row: dict[str, Any]) -> dict[str, Any]:
    key_field = field("ID", "int32")
    row_schema = {"type": "struct", "optional": True, "name": "src.T.Value", "fields": [key_field] + [c[0] for c in cases]}
    value_schema = {
        "type": "struct",
        "optional": False,
        "name": "src.T.Envelope",
        "fields": [
            {**row_schema, "field": "before"},
            {**row_schema, "field": "after"},
            {
                "type": "struct",
                "optional": False,
                "name": f"io.debezium.connector.{connector}.Source",
                "fields": [],
                "field": "source",
            },
            {"type": "string", "optional": False, "field": "op"},
        ],
    }
    payload = {"before": None, "after": row, "source": {"connector": connector, "ts_ms": 1531481025000}, "op": "c"}
    return {
        "partition": 0,
        "offset": offset,
        "key": {
            "schema": {"type": "struct", "optional": False, "name": "src.T.Key", "fields": [key_field]},
            "payload": {"ID": row["ID"]},
        },
        "value": {"schema": value_schema, "payload": payload},
    }


def _stored(value: Any) -> Any:
    return bytes(value) if isinstance(value, memoryview) else value


def sample_text(connector: str) -> str:
    """The connector's change events, one row with every value, then one row per
    undecodable value: the sample file examples/connector_types/<connector>.jsonl."""
    cases = CONNECTORS[connector]
    good = {"ID": 1, **{f["field"]: value for f, value, _, _ in cases}}
    rows = [good] + [{**good, "ID": i, name: value} for i, (name, value) in enumerate(UNDECODABLE[connector], start=2)]
    return "".join(json.dumps(_message(connector, cases, i, row)) + "\n" for i, row in enumerate(rows))


@pytest.mark.parametrize("connector", sorted(CONNECTORS))
def test_connector_types_infer_and_decode_exactly(wh, connector):
    cases = CONNECTORS[connector]
    sample = SAMPLES / f"{connector}.jsonl"
    assert sample.read_text() == sample_text(connector), "refresh it: python -m tests.test_debezium_connector_types"

    block = infer_block(sample, "t", "src.T")
    for f, _, typ, _ in cases:
        assert f'{{ name = "{f["field"]}", type = "{typ}"' in block, (f["field"], block)
    pipeline = make_pipeline(block)
    table = pipeline.table("t")
    deploy(wh, pipeline, "test")
    ingest_file(wh, pipeline, "t", sample)
    (run,) = sync(wh, pipeline)
    assert (run.status, run.upserted, run.quarantined) == ("ok", 1, len(UNDECODABLE[connector])), run.error

    targets = [table.column_by_any_name(f["field"]) for f, _, _, _ in cases]
    wh.execute("SET TIME ZONE 'UTC'")
    (stored,) = wh.query(f"SELECT {', '.join(c.target_name for c in targets)} FROM cdc.t")
    for (f, value, _, expected), col, got in zip(cases, targets, stored, strict=True):
        assert _stored(got) == expected, f["field"]
        if col.semantic:
            assert decode_for_column(col.semantic, col.scale, col.type, value) == expected, f["field"]

    reasons = dict(wh.query("SELECT kafka_offset, reason FROM cdc.sync_quarantine WHERE table_name = 't'"))
    for offset, (name, value) in enumerate(UNDECODABLE[connector], start=1):
        col = table.column_by_any_name(name)
        assert reasons[offset] == field_reason(col.name, col.semantic, col.sql_type), name
        if col.semantic:
            with pytest.raises(UndecodableValue):
                decode_for_column(col.semantic, col.scale, col.type, value)


if __name__ == "__main__":  # rewrite the sample files from the cases above
    for name in CONNECTORS:
        (SAMPLES / f"{name}.jsonl").write_text(sample_text(name))

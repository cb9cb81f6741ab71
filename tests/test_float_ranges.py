"""Reals and doubles: each engine stores what its own range holds, and quarantines the rest
(never a failed CALL, never a valid value quarantined for good). Cases: tests/cases.py
FLOAT_RANGE_CASES, with the documentation they come from."""

from __future__ import annotations

import json
import struct
from decimal import Decimal

import pytest

from sync.debezium.decode import UndecodableValue, conform_float
from sync.debezium.vocabulary import field_reason
from sync.local.stream import KafkaRecord, ingest_records
from sync.operations.runner import deploy, sync
from sync.sql.dialect import LOADABLE_FLOAT_RANGES, PostgresDialect, RedshiftDialect
from sync.sql.types import parse_type
from tests.cases import FLOAT_RANGE_CASES
from tests.helpers import make_pipeline


def _as_stored(typ: str, text: str) -> float:
    """The IEEE value a column of `typ` holds for the number `text`."""
    value = float(text)
    return struct.unpack("f", struct.pack("f", value))[0] if typ == "real" else value


def _record(offset: int, typ: str, text: str) -> tuple[KafkaRecord, bool]:
    value = f'{{"before": null, "after": {{"id": {offset}, "{typ}_v": {text}}}, "source": {{"ts_ms": 1}}, "op": "c"}}'
    return KafkaRecord(0, offset, None, json.dumps({"id": offset}).encode(), value.encode()), True


def test_java_float_max_value_is_stored(wh):
    """Float.MAX_VALUE, Float.MIN_NORMAL and subnormals as Java prints them are stored on
    PostgreSQL; what rounds to infinity or zero is quarantined, and the run succeeds."""
    pipeline = make_pipeline(
        "\n".join(
            f'[[tables]]\nname = "{typ}_t"\ntopic = "{typ}_topic"\nprimary_key = ["id"]\n'
            f'columns = [{{ name = "id", type = "integer" }}, {{ name = "{typ}_v", type = "{typ}" }}]\n'
            for typ in ("real", "double")
        )
    )
    deploy(wh, pipeline, "test")
    # Below the smallest double: rounds to zero, which PostgreSQL refuses.
    cases = {
        typ: [c for c in [*FLOAT_RANGE_CASES, ("double", "2.0E-324", False, False)] if c[0] == typ] for typ in ("real", "double")
    }
    for typ, rows in cases.items():
        ingest_records(wh, pipeline, f"{typ}_t", [_record(i, typ, text) for i, (_, text, _, _) in enumerate(rows)])
    for run in sync(wh, pipeline):
        assert run.status == "ok", run.error
    for typ, rows in cases.items():
        stored = dict(wh.query(f'SELECT id, "{typ}_v"::double precision FROM cdc."{typ}_t"'))
        reasons = dict(wh.query("SELECT kafka_offset, reason FROM cdc.sync_quarantine WHERE table_name = %s", (f"{typ}_t",)))
        for i, (_, text, on_postgres, _) in enumerate(rows):
            if on_postgres:
                assert stored.get(i) == _as_stored(typ, text), text
            else:
                assert i not in stored, text
                assert reasons[i] == field_reason(f"{typ}_v", None, parse_type(typ)), text


@pytest.mark.parametrize(("typ", "text", "on_postgres", "on_redshift"), FLOAT_RANGE_CASES)
def test_reference_decoder_holds_each_engines_float_range(typ, text, on_postgres, on_redshift):
    for ranges, stored in ((PostgresDialect.float_ranges, on_postgres), (RedshiftDialect.float_ranges, on_redshift)):
        if stored:
            assert conform_float(Decimal(text), typ, ranges) == float(text)
        else:
            with pytest.raises(UndecodableValue):
                conform_float(Decimal(text), typ, ranges)
    # A backfill's files hold what every engine stores.
    assert (LOADABLE_FLOAT_RANGES == RedshiftDialect.float_ranges) or on_postgres


def test_redshift_float_ranges_are_the_documented_ones():
    """Numeric types, Floating-Point types: REAL "has a precision of about 6 digits, and a
    range of around 1E-37 to 1E+37"; DOUBLE PRECISION "a range of around 1E-307 to 1E+308"."""
    assert {f: tuple(Decimal(x) for x in r) for f, r in RedshiftDialect.float_ranges.items()} == {
        "real": (Decimal("1E+37"), Decimal("1E-37")),
        "double": (Decimal("1E+308"), Decimal("1E-307")),
    }
    d = RedshiftDialect()
    for typ in ("real", "double"):
        sql = d.cast_json("v", parse_type(typ))
        # The range test is inside the cast's argument: the cast never sees a value outside.
        assert sql.startswith("CAST(CASE WHEN (ABS(CAST(v AS double precision)) <= 1e"), sql
        assert sql.endswith(f"THEN v END AS {d.type_sql(parse_type(typ))})"), sql

"""Hostile Kafka records through ingest and one sync, checked against the reference model:
non-JSON and truncated JSON, invalid UTF-8 and NUL bytes, huge strings, deep nesting,
wrong types per column, missing or null keys, unknown ops, SQL in values. Every record
is either applied exactly as the model says or quarantined with a reason; the run never
fails and no field silently becomes NULL."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.local.stream import KafkaRecord, ingest_records
from sync.operations.runner import deploy, sync
from tests.cdc_model import TopicModel
from tests.helpers import make_pipeline
from tests.reliability_support import normalised, reliability_counts, target_rows  # noqa: F401 (fixture)

TABLE = """[[tables]]
name = "item"
topic = "shop.shop.ITEM"
primary_key = ["ID"]
delete_mode = "{mode}"
order_by = "mysql-binlog"
columns = [
  {{ name = "ID", type = "bigint", target = "id" }},
  {{ name = "NAME", type = "varchar(16)" }},
  {{ name = "NOTE", type = "varchar(65535)" }},
  {{ name = "QTY", type = "smallint" }},
  {{ name = "PRICE", type = "decimal(10,2)" }},
  {{ name = "SCORE", type = "double" }},
  {{ name = "FLAG", type = "boolean" }},
]
"""

SQL_TEXT = ["'); DROP TABLE cdc.item; --", '"; DELETE FROM cdc.item; --', "$$; SELECT 1; $$", "\\'", "a'b", "%s %(x)s"]
HUGE = "x" * 65_536  # one byte over VARCHAR(65535)
# NUL characters get their own damage case below; in ordinary text they would dominate.
texts = st.text(st.characters(blacklist_characters="\x00"), max_size=24)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, -1, 32767, 32768, -32769, 2**63 - 1, 2**63]),
    st.decimals(allow_nan=False, allow_infinity=False, places=None).filter(lambda d: abs(d.adjusted()) < 400),
    st.sampled_from([Decimal("1e999"), Decimal("1e-400"), Decimal("12345678.125"), Decimal("0.005"), Decimal("-0.0")]),
    texts,
    st.sampled_from(["12", " 3.5 ", "1e3", "true", "0", "", "NaN", "١٢", *SQL_TEXT]),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts.map(lambda t: t[:5]), inner, max_size=3),
    max_leaves=6,
)
text_values = st.one_of(
    st.none(), st.booleans(), st.integers(), texts, st.sampled_from([*SQL_TEXT, HUGE[:65_535], HUGE, "é" * 8, "é" * 9])
)
VALID = {
    "NAME": texts.map(lambda t: t[:5]) | st.sampled_from(SQL_TEXT[:4]),
    "NOTE": texts | st.sampled_from([*SQL_TEXT, HUGE[:65_535]]),
    "QTY": st.integers(-(2**15), 2**15 - 1),
    "PRICE": st.decimals(min_value=-(10**7), max_value=10**7, places=2) | st.sampled_from(["19.99", 7]),
    "SCORE": st.floats(allow_nan=False, allow_infinity=False, width=32) | st.integers(),
    "FLAG": st.booleans() | st.sampled_from([0, 1]),
}
EDGES = {
    "NAME": st.sampled_from(["é" * 8, "é" * 9, "x" * 16, "x" * 17, 12345, False]),
    "NOTE": st.sampled_from([HUGE[:65_535], HUGE, "é" * 32_768, "é" * 32_767 + "x", 10**30]),
    "QTY": st.sampled_from([32767, -32768, 32768, -32769, 1.5, 2.0, "7", " 8 ", "1e3", True]),
    "PRICE": st.sampled_from(
        [Decimal("99999999.99"), Decimal("99999999.995"), Decimal("0.005"), Decimal("1e8"), "-0.015", "1e-3"]
    ),
    "SCORE": st.sampled_from(
        [Decimal("1e999"), Decimal("1e-400"), Decimal("1.7976931348623157e308"), Decimal("1e309"), "-1e-330", "2.5e-308", 0]
    ),
    "FLAG": st.sampled_from([0, 1, 2, -1, "true", Decimal("1.0"), None]),
}
# Mostly values of the right type, then edges of the type, else anything: wrong types,
# out of range, hostile text.
FIELDS = {
    name: st.one_of(valid, valid, EDGES[name], text_values if name in ("NAME", "NOTE") else json_values)
    for name, valid in VALID.items()
}
MISSING = object()


@st.composite
def row_images(draw: Any) -> dict[str, Any] | None:
    if draw(st.integers(0, 29)) == 0:
        return draw(st.sampled_from([None, [], "row", 5]))
    image: dict[str, Any] = {}
    key = draw(st.one_of(*[st.integers(1, 3)] * 6, st.sampled_from([MISSING, None, "2", 2.5, "x", True, 2**64])))
    if key is not MISSING:
        image["ID"] = key
    for name, values in FIELDS.items():
        if draw(st.booleans()):
            image[name] = draw(values)
    return image


@st.composite
def records(draw: Any) -> list[dict[str, Any]]:
    """A batch of records for keys 1-3: plausible Debezium events, half of them damaged."""
    n = draw(st.integers(1, 25))
    positions = draw(st.permutations(range(n)))
    out = []
    for i in range(n):
        op = draw(st.sampled_from(["c", "r", "u", "u", "u", "d", "d", "c"] * 3 + ["t", "x", "", None, 1, "C"]))
        image = draw(row_images())
        event: dict[str, Any] = {
            "before": image if op == "d" else None,
            "after": None if op == "d" else image,
            "source": {"file": "mysql-bin.000007", "pos": 1000 + 10 * positions[i], "row": 0, "ts_ms": 1_700_000_000_000},
            "op": op,
        }
        if op is None:
            del event["op"]
        value: Any = event
        if draw(st.booleans()):
            value = {"schema": {"type": "struct"}, "payload": event}
        key: Any = {"ID": draw(st.sampled_from([1, 2, 3, None]))} if draw(st.booleans()) else None
        damage = draw(st.integers(0, 19))
        text = json.dumps(value, default=str).encode()
        if damage == 0:
            value = text[: draw(st.integers(0, max(0, len(text) - 1)))]  # truncated JSON
        elif damage == 1:
            value = draw(st.binary(max_size=40))  # random bytes, often not UTF-8
        elif damage == 2:
            value = None  # tombstone
        elif damage == 3:
            value = text.replace(b'"op"', b'"op\\u0000"', 1) if draw(st.booleans()) else text[:-1] + b', "n": "a\\u0000b"}'
        elif damage == 4:
            depth = draw(st.sampled_from([50, 5000]))
            value = text[:-1] + b', "deep": ' + b"[" * depth + b"]" * depth + b"}"
        else:
            value = text
        if draw(st.integers(0, 9)) == 0:
            key = draw(st.binary(max_size=10))
        else:
            key = json.dumps(key).encode() if key is not None else None
        out.append({"partition": draw(st.integers(0, 1)), "key": key, "value": value})
    offsets: dict[int, int] = {}
    for rec in out:
        rec["offset"] = offsets.get(rec["partition"], 0)
        offsets[rec["partition"]] = rec["offset"] + 1
    return out


def _dumps(value: Any) -> Any:
    return value if value is None or isinstance(value, bytes) else json.dumps(value, default=str).encode()


def _fresh(wh, pipeline) -> None:
    for (name,) in wh.query("SELECT tablename FROM pg_tables WHERE schemaname = 'cdc'"):
        wh.execute(f'DELETE FROM cdc."{name}"')


@pytest.mark.parametrize("mode", ["hard", "soft"])
def test_hostile_records_apply_or_quarantine_exactly_as_the_model(wh, mode, reliability_counts):
    pipeline = make_pipeline(TABLE.format(mode=mode))
    table = pipeline.tables[0]
    deploy(wh, pipeline, "test")

    @settings(max_examples=60)
    @given(batch=records())
    def check(batch: list[dict[str, Any]]) -> None:
        _fresh(wh, pipeline)
        ingest_records(
            wh,
            pipeline,
            table.name,
            ((KafkaRecord(r["partition"], r["offset"], None, r["key"], _dumps(r["value"])), True) for r in batch),
        )
        (run,) = sync(wh, pipeline, [table.name])
        assert run.status == "ok", run.error
        assert run.events_read == len(batch)
        model = TopicModel(table).add(batch)
        assert target_rows(wh, pipeline, table) == normalised(model.rows())
        expected = model.quarantine()
        got = {
            (int(p), int(o)): r for p, o, r in wh.query("SELECT kafka_partition, kafka_offset, reason FROM cdc.sync_quarantine")
        }
        assert sorted(got) == sorted(expected)
        for where, (kind, field) in expected.items():
            if field is not None:
                assert field in got[where], (kind, field, got[where])  # the reason names the field
        # Nothing quarantined without the record itself to look at.
        assert wh.scalar("SELECT COUNT(*) FROM cdc.sync_quarantine WHERE payload IS NULL AND raw_value IS NULL") == 0
        reliability_counts["fuzz cases tried"] += len(batch)

    check()

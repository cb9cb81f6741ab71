"""`ingest` stores a record's value as the line wrote it when jsonb reads that text as it
reads the value written back out, and writes it out again otherwise: the stored rows are
the same either way. jsonb "does not preserve white space, does not preserve the order
of object keys, and does not keep duplicate object keys. If duplicate keys are specified
in the input, only the last value is kept" (PostgreSQL, JSON Types); a number is stored
as numeric, with the digits and scale it is written with. JSON allows any whitespace
between tokens, escapes in strings (`\\u00e9`, `\\/`) and exponents in numbers (RFC 8259,
sections 2, 6 and 7): lines written in every such way are stored as before."""

from __future__ import annotations

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from sync.local.json_members import members
from sync.local.stream import parse_line
from sync.local.values import loads_exact, parsed_json

numbers = st.one_of(
    st.integers(-(10**30), 10**30).map(str),
    st.decimals(allow_nan=False, allow_infinity=False).map(str),
    st.sampled_from(["0.0000001", "-0", "-0.0", "1.50", "1e5", "1.5E+3", "2e-7", "1E400", "0e-20000", "100.000"]),
)
texts = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6)


def _render(value: object, rnd: random.Random) -> str:
    """JSON text of `value` in a random style: whitespace, escapes, duplicated names."""
    space = lambda: rnd.choice(["", "", " ", "\n  ", "\t"])  # noqa: E731
    if isinstance(value, tuple):  # a number, as written
        return value[0]
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=rnd.random() < 0.3).replace("/", "\\/" if rnd.random() < 0.2 else "/")
    if isinstance(value, list):
        return "[" + space() + ("," + space()).join(_render(v, rnd) for v in value) + space() + "]"
    if isinstance(value, dict):
        items = [(k, v) for k, v in value.items()]
        if items and rnd.random() < 0.2:
            items.insert(0, (items[-1][0], [("1",)]))  # a duplicate name, overridden by the last
        return (
            "{"
            + space()
            + ("," + space()).join(f"{_render(k, rnd)}{space()}:{space()}{_render(v, rnd)}" for k, v in items)
            + space()
            + "}"
        )
    return json.dumps(value)


values = st.recursive(
    st.one_of(st.none(), st.booleans(), numbers.map(lambda n: (n,)), texts),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)),
    max_leaves=12,
)


@settings(max_examples=300)
@given(value=values.filter(lambda v: isinstance(v, (dict, list))), seed=st.integers(0, 2**32))
def test_members_read_what_the_plain_parse_reads(value, seed):
    rnd = random.Random(seed)
    text = _render(value, rnd)
    line = '{"partition": 0,' + rnd.choice(["", " "]) + '"key": {"id": 1}, "value":' + rnd.choice(["", " "]) + text + "}"
    walked = members(line)
    assert walked is not None
    obj, found = walked
    assert obj == loads_exact(line)
    assert loads_exact(found["value"][0]) == obj["value"]


def test_the_value_is_stored_as_when_it_is_written_out_again(wh):
    stored_text = lambda text: wh.scalar("SELECT CAST(CAST(%s AS jsonb) AS text)", (text,))  # noqa: E731

    @settings(max_examples=300)
    @given(value=values, seed=st.integers(0, 2**32))
    def check(value, seed):
        rnd = random.Random(seed)
        text = _render(value, rnd)
        record, well_formed = parse_line(('{"key": {"id": 1}, "value": ' + text + "}").encode(), 1)
        assert well_formed
        raw, before = parsed_json(loads_exact(text))  # the value written out again
        assert (record.stored.payload is None) == (before.payload is None)
        if before.payload is None:
            assert record.stored.raw == before.raw and record.value == raw
        else:
            assert stored_text(record.stored.payload) == stored_text(before.payload)
            assert loads_exact(record.value.decode()) == loads_exact(raw.decode())

    check()

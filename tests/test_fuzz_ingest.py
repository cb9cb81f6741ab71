"""The `ingest` reader on hostile input: random bytes, JSON that is not a record, records
with wrong field types. A line is either ingested (whole, as a raw value, when it is not
a record) or the refresh is rejected with a message naming the line; never half a
refresh, never a traceback."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.local.stream import KCAT_KEYS, RECORD_KEYS, ingest_file, parse_line
from sync.warehouse import WarehouseError
from tests.cli_runs import run_cli
from tests.helpers import EXAMPLES
from tests.reliability_support import reliability_counts  # noqa: F401 (fixture)

EDGE_NUMBERS = st.sampled_from([-1, 0, 7, 2**31, 2**63 - 1, 2**63, 10**20, -(10**15), 253402300799999, 253402300800000, 1.5])
field_values = st.one_of(
    EDGE_NUMBERS,
    EDGE_NUMBERS,
    EDGE_NUMBERS,
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
record_objects = st.fixed_dictionaries(
    {"value": st.one_of(st.none(), st.text(max_size=10), st.dictionaries(st.text(max_size=4), st.integers(), max_size=3))},
    optional={name: field_values for name in ("partition", "offset", "timestamp", "key", "headers")},
)
kcat_objects = st.fixed_dictionaries(
    {"payload": st.one_of(st.none(), st.text(max_size=10))},
    optional={name: field_values for name in ("topic", "partition", "offset", "ts", "key", "tstype")},
)


def _line(obj: object) -> bytes:
    return json.dumps(obj, allow_nan=True).encode()


lines = st.one_of(
    st.binary(max_size=60).filter(lambda b: b"\n" not in b and b"\r" not in b),
    record_objects.map(_line),
    kcat_objects.map(_line),
    st.sampled_from(
        [
            b"{",
            b"[]",
            b"null",
            b"{}",
            b'{"value": 1e999}',
            b'{"value": NaN}',
            b'{"value": "\\u0000"}',
            b'{"value": "\\ud800"}',
            b'{"offset": 1}',
            b"\xff\xfe",
            b"\x00",
            b'{"value": {"a": ' + b"[" * 3000 + b"]" * 3000 + b"}}",
        ]
    ),
)


@settings(max_examples=500)
@given(line=lines)
def test_parse_line_returns_a_record_or_names_the_line(line, reliability_counts):
    try:
        record, _ = parse_line(line, 7)
    except ValueError as exc:
        assert str(exc).startswith("line 7: "), exc
    else:
        wrapped = _wrapped_value(line)
        if wrapped is _NOT_A_WRAPPER:
            assert record.value == line  # kept whole: nothing on the line is lost
        else:
            assert (record.value is None) == (wrapped is None), (line, record)
    reliability_counts["fuzz cases tried"] += 1


_NOT_A_WRAPPER = object()


def _reject_constant(name: str) -> None:
    raise ValueError(name)


def _wrapped_value(line: bytes) -> object:
    """The value of a record (or kcat) wrapper line, else _NOT_A_WRAPPER."""
    try:
        obj = json.loads(line.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return _NOT_A_WRAPPER
    if not (
        isinstance(obj, dict) and ("value" in obj or "payload" in obj) and (set(obj) <= RECORD_KEYS or set(obj) <= KCAT_KEYS)
    ):
        return _NOT_A_WRAPPER
    return obj.get("payload" if "payload" in obj else "value")


def _stream_rows(wh) -> int:
    return int(wh.scalar('SELECT COUNT(*) FROM cdc."customer__stream"'))


def test_random_files_ingest_whole_or_not_at_all(deployed, tmp_path, reliability_counts):
    wh, pipeline = deployed

    @settings(max_examples=80)
    @given(batch=st.lists(lines, min_size=1, max_size=12))
    def check(batch: list[bytes]) -> None:
        path = tmp_path / "events.jsonl"
        path.write_bytes(b"\n".join(batch) + b"\n")
        before = _stream_rows(wh)
        try:
            result = ingest_file(wh, pipeline, "customer", path)
        except (ValueError, WarehouseError) as exc:
            assert str(exc).startswith("line "), exc  # the message says which line is wrong
            assert _stream_rows(wh) == before  # and nothing of the refresh was kept
        else:
            assert result.records == sum(1 for line in batch if line.strip())
            assert _stream_rows(wh) == before + result.records
        reliability_counts["fuzz cases tried"] += len(batch)

    check()


@pytest.mark.parametrize(
    "line",
    [
        b'{"partition": 9223372036854775808, "value": {}}',
        b'{"offset": 9223372036854775808, "value": {}}',
        b'{"timestamp": 100000000000000000000, "value": {}}',
        b'{"timestamp": -100000000000000000000, "value": {}}',
        b'{"timestamp": 253402300800000, "value": {}}',
        b'{"ts": 253402300800000, "payload": "x"}',
    ],
)
def test_numbers_out_of_range_name_the_line(deployed, tmp_path, line):
    wh, pipeline = deployed
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"value": {}}\n' + line + b"\n")
    with pytest.raises(ValueError, match="^line 2: "):
        ingest_file(wh, pipeline, "customer", path)
    assert _stream_rows(wh) == 0


@pytest.mark.parametrize(
    "content,code,needle",
    [
        (b'{"partition": -1, "value": {}}\n', 1, "line 1"),
        (b'{"value": {}}\n{"offset": "x", "value": {}}\n', 1, "line 2"),
        (b"\xff\xfe garbage\n{\n", 0, "not record objects"),
    ],
)
def test_cli_ingest_reports_without_traceback(database_dsn, tmp_path, content, code, needle):
    events = tmp_path / "events.jsonl"
    events.write_bytes(content)
    config = EXAMPLES / "salesdb" / "pipeline.toml"
    run = lambda *args: run_cli(*args, "--config", str(config), "--dsn", database_dsn)  # noqa: E731
    assert run("deploy").returncode == 0
    result = run("ingest", "--table", "customer", "--file", str(events))
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert needle in result.stderr + result.stdout

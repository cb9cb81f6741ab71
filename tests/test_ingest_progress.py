"""A long `ingest` says how far it is (a bar on a terminal, a line every few seconds
otherwise), and parses each line once: the value the line's parse gave is written out and
stored, never parsed again (what kept ingest at 9x a raw COPY of the same records;
`python -m benchmarks --phase ingest` measures the ratio)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from sync.cli.progress import ProgressLines, ingest_progress
from sync.local.stream import PROGRESS_EVERY, ingest_file, read_records
from sync.local.values import DECODER


def write_lines(path: Path, count: int) -> Path:
    lines = [{"key": {"id": i}, "value": {"op": "c", "after": {"id": i, "amount": "1.50"}}} for i in range(count)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_reading_reports_records_and_bytes_every_thousand_records_and_at_the_end(tmp_path):
    path = write_lines(tmp_path / "e.jsonl", 2 * PROGRESS_EVERY + 500)
    calls: list[tuple[int, int]] = []
    assert sum(1 for _ in read_records(path, lambda r, b: calls.append((r, b)))) == 2500
    assert [r for r, _ in calls] == [1000, 2000, 2500]
    assert calls[-1][1] == path.stat().st_size
    assert calls[0][1] < calls[1][1] < calls[2][1]


def test_without_a_terminal_a_line_every_period_with_records_size_speed_and_time_left():
    out = io.StringIO()
    now = [100.0]
    lines = ProgressLines(Console(file=out, width=200), total_bytes=400_000_000, every=10, clock=lambda: now[0])
    now[0] = 105.0
    lines.update(10_000, 50_000_000)
    assert out.getvalue() == ""  # nothing before the first period
    now[0] = 110.0
    lines.update(20_000, 100_000_000)
    assert out.getvalue() == "ingest: 20,000 records, 100.0 of 400.0 MB (25 %), 10.0 MB/s, 30.0 s left\n"
    now[0] = 115.0
    lines.update(30_000, 150_000_000)
    assert out.getvalue().count("\n") == 1  # the next line waits for the next period


def test_on_a_terminal_a_progress_bar_counts_records():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with ingest_progress(console, total_bytes=1_000_000) as progress:
        progress(1234, 500_000)
    assert "1,234 records" in out.getvalue()


def test_a_json_value_is_parsed_once_per_line(tmp_path, monkeypatch, deployed):
    """The line's parse gives the value's and the key's stored form: ingest does not parse
    them again from their bytes. A string value is the record's raw bytes and is parsed."""
    wh, pipeline = deployed
    path = tmp_path / "e.jsonl"
    record = {"key": {"CUST_ID": "C1"}, "value": {"op": "c", "after": {"CUST_ID": "C1", "NAME": "n", "MKTSEGMENT": "X"}}}
    path.write_text(json.dumps(record) + "\n" + json.dumps({"value": "not JSON {"}) + "\n")
    scanned: list[str] = []  # the text of each JSON value the decoder reads
    scan = DECODER.scan_once

    def spy(text: str, start: int):
        try:
            value, end = scan(text, start)
        except StopIteration:
            scanned.append(f"not JSON: {text[start:]}")
            raise
        scanned.append(text[start:end])
        return value, end

    monkeypatch.setattr(DECODER, "scan_once", spy)
    result = ingest_file(wh, pipeline, "customer", path)
    assert (result.records, result.unparseable_values) == (2, 1)
    # each part of a line once, and the string value (the record's raw bytes) once: nothing again
    assert scanned == [json.dumps(record["key"]), json.dumps(record["value"]), '"not JSON {"', "not JSON: not JSON {"]
    stored = wh.query('SELECT payload, key_payload FROM cdc."customer__stream" ORDER BY kafka_offset')
    assert stored[0] == (record["value"], record["key"]) and stored[1] == (None, None)


@pytest.mark.parametrize("text", ['{"n": 1E+131072}', '{"n": 1e-20000}', '{"s": "\\u0000"}'])
def test_values_jsonb_cannot_hold_stay_raw_on_the_single_parse(tmp_path, deployed, text):
    wh, pipeline = deployed
    path = tmp_path / "e.jsonl"
    path.write_text('{"key": {"CUST_ID": "C1"}, "value": ' + text + "}\n")
    assert ingest_file(wh, pipeline, "customer", path).unparseable_values == 1

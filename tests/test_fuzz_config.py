"""The pipeline file is input: whatever it holds, loading it either gives a pipeline whose
SQL generates in both dialects, or a ConfigError naming the key; never another
exception, and no accepted name can carry SQL."""

from __future__ import annotations

import copy
import re
import tomllib
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sync.config import ConfigError, load_pipeline, parse_pipeline
from sync.sql.objects import pipeline_objects
from tests.helpers import EXAMPLES
from tests.reliability_support import reliability_counts  # noqa: F401 (fixture)

EXAMPLE = tomllib.loads((EXAMPLES / "salesdb" / "pipeline.toml").read_text())
HOSTILE_TEXT = [
    "",
    " ",
    "x",
    "X",
    "a" * 64,
    "a" * 300,
    "cdc",
    "customer",
    "sync_run_log",
    "a__b",
    "_x",
    "1abc",
    'x"; DROP TABLE t; --',
    "x'; DROP TABLE t; --",
    "x;y",
    "x y",
    "x\\y",
    "x\x00y",
    "é",
    "ID$",
    "$$",
    "varchar(64)",
    "varchar(0)",
    "varchar(99999999999999999999)",
    "decimal(40,2)",
    "decimal(5,9)",
    "decimal(0,0)",
    "decimal(18)",
    "char(5000)",
    "varbyte(0)",
    "timestamp(3)",
    "double precision",
    "int4 ",
    "super",
    "mysql-binlog",
    "kafka",
    "soft",
    "hard",
    "debezium-unwrap",
    "delete",
    "iam",
    "mtls",
    "none",
    "msk",
    "arn:aws:iam::123456789012:role/r",
    "arn:aws:kafka:us-east-1:123456789012:cluster/x/y",
    "host:9092",
    "io.debezium.time.Date",
    "org.apache.kafka.connect.data.Decimal",
]
scalars = st.one_of(
    st.sampled_from(HOSTILE_TEXT),
    st.text(max_size=12),
    st.integers(-(2**70), 2**70),
    st.booleans(),
    st.floats(allow_nan=True),
    st.datetimes(),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["name", "type", "x", "target"]), inner, max_size=3)
    ),
    max_leaves=5,
)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, prefix + (i,))
    return out


PATHS = _paths(EXAMPLE)


def _apply(data: dict, path: tuple, how: str, value: Any) -> dict:
    """`data` with one edit at `path`: replace the value, delete the key, or add an
    unknown key next to it (in a list, every edit is a replacement)."""
    data = copy.deepcopy(data)
    parent = data
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if how == "delete" and isinstance(parent, dict):
        del parent[last]
    elif how == "extra" and isinstance(parent, dict):
        parent["unexpected_" + str(last)] = value
    else:
        parent[last] = value
    return data


def _check_generates(data: dict) -> None:
    pipeline = parse_pipeline(data)
    for dialect in ("postgres", "redshift"):
        for obj in pipeline_objects(pipeline, dialect, "fuzz"):
            assert obj.sql.strip()
    names = [pipeline.schema, pipeline.source.external_schema]
    for t in pipeline.tables:
        names += [t.name, *t.primary_key, *[c.name for c in t.columns], *[c.target_name for c in t.columns]]
    for name in names:
        assert not set(name) & set("\"'; \\\x00-()"), name  # nothing that could end a quoted name


@settings(max_examples=400)
@given(path=st.sampled_from(PATHS), how=st.sampled_from(["replace", "replace", "delete", "extra"]), value=values)
def test_any_single_edit_parses_or_names_the_key(path, how, value, reliability_counts):
    data = _apply(EXAMPLE, path, how, value)
    if isinstance(path[-1], int):
        how = "replace"
    try:
        _check_generates(data)
    except ConfigError as exc:
        message = str(exc)
        key = next((p for p in reversed(path) if isinstance(p, str)), None)
        if how == "extra":
            assert "unexpected_" in message and "unknown key" in message, message
        elif key is not None:
            # The message names the key that was edited, or the key whose rule it broke
            # (a table's cross-field rules are reported against that table).
            table_or_source_rule = re.search(r"^\s*(tables\[\d+\] \([^)]*\)|source): ", message, re.M)
            assert key in message or table_or_source_rule, (path, message)
    reliability_counts["fuzz cases tried"] += 1


@settings(max_examples=150)
@given(edits=st.lists(st.tuples(st.sampled_from(PATHS), st.sampled_from(["replace", "delete"]), values), min_size=2, max_size=6))
def test_many_edits_never_raise_anything_but_config_error(edits, reliability_counts):
    data = EXAMPLE
    for path, how, value in edits:
        try:
            data = _apply(data, path, how, value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit removed or replaced the path
    try:
        _check_generates(data)
    except ConfigError:
        pass
    reliability_counts["fuzz cases tried"] += 1


@settings(max_examples=150)
@given(content=st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode)))
def test_random_files_raise_nothing_but_config_error(tmp_path_factory, content, reliability_counts):
    path = tmp_path_factory.mktemp("cfg") / "pipeline.toml"
    path.write_bytes(content)
    try:
        load_pipeline(path)
    except ConfigError as exc:
        assert str(path) in str(exc)
    reliability_counts["fuzz cases tried"] += 1


@settings(max_examples=150)
@given(cut=st.integers(0, 2000), junk=st.sampled_from(["", "]", "[[tables]]", "= 1", '"', "\x00", "\n[pipeline]\nschema=1"]))
def test_damaged_example_file_raises_nothing_but_config_error(tmp_path_factory, cut, junk, reliability_counts):
    text = (EXAMPLES / "salesdb" / "pipeline.toml").read_text()
    path = tmp_path_factory.mktemp("cfg") / "pipeline.toml"
    path.write_text(text[:cut] + junk + text[cut:][len(junk) :], encoding="utf-8")
    try:
        load_pipeline(path)
    except ConfigError as exc:
        assert str(path) in str(exc)
    reliability_counts["fuzz cases tried"] += 1

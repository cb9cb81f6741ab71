"""Debezium's vocabulary is spelled once, in sync/debezium/vocabulary.py: no other module of the
package or the backfill writes a semantic type name, an encoding pattern, the TOAST
placeholder or a shared quarantine reason as a literal of its own (docstrings aside)."""

from __future__ import annotations

import ast

import pytest

from sync.debezium import vocabulary as v
from tests.helpers import REPO

MODULES = sorted(p for folder in ("sync", "backfill") for p in (REPO / folder).rglob("*.py") if p.name != "vocabulary.py")
# Texts that only the vocabulary may hold: every name of the two enums and the reasons,
# the patterns, the placeholder in each of its forms.
OWNED = [
    *(str(s) for s in v.Semantic if "." in s),
    *(str(s) for s in v.SchemaName),
    *(str(r) for r in v.Reason),
    v.BASE64_PATTERN,
    v.ZONED_PATTERN,
    v.NUMBER_PATTERN,
    *v.TOAST_PLACEHOLDER_TEXTS,
]


def _literals(tree: ast.AST) -> list[ast.Constant]:
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_debezium_vocabulary_is_not_spelled_again(path):
    found = [
        f"{path.relative_to(REPO)}:{node.lineno}: {text!r}"
        for node in _literals(ast.parse(path.read_text()))
        for text in OWNED
        if text in node.value
    ]
    assert not found, "use sync.debezium.vocabulary instead of:\n" + "\n".join(found)


def test_the_vocabulary_knows_every_form_of_the_placeholder():
    # docs/debezium.md, "TOAST placeholders": text, bytea (base64 of the same bytes), text[].
    assert v.TOAST_PLACEHOLDER_TEXTS == (
        "__debezium_unavailable_value",
        "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==",
        '["__debezium_unavailable_value"]',
    )


@pytest.mark.parametrize(
    ("semantic", "column_type", "reason"),
    [
        (None, "varchar(64)", "primary key field k is missing or not a varchar(64)"),
        (None, "integer", "primary key field k is missing or not an integer"),
        (
            "io.debezium.time.Date",
            "date",
            "primary key field k is missing or does not convert from io.debezium.time.Date to date",
        ),
    ],
)
def test_a_key_fields_reason_reads_as_a_sentence(semantic, column_type, reason):
    # The quarantine reason a user reads in `quarantine list`, worded alike by the procedure
    # and the backfill; it read "not a integer" and "not a io.debezium.time.Date date".
    assert v.key_reason("k", semantic, column_type) == reason

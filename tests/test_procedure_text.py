"""The layout of the generated SQL (sync/sql/procedure/text.py): the stage query's chain
of named steps, and long lines broken where SQL reads a line break as a space."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sync.sql.dialect import dialect_for
from sync.sql.procedure.text import Chain, wrap_long_lines

REDSHIFT, POSTGRES = dialect_for("redshift", "cdc"), dialect_for("postgres", "cdc")


def test_a_chain_is_a_with_clause_each_step_reading_the_one_before():
    chain = Chain(REDSHIFT)
    chain.add("batch", "SELECT s.a\nFROM t s")
    chain.extend("batch", {})  # nothing to name: no step
    chain.extend_levels("batch", [{"b": "f.a + 1"}, {"c": "f.b * 2"}])
    assert chain.sql().splitlines() == [
        "WITH batch AS (SELECT s.a FROM t s),",
        'batch_1 AS (SELECT f.*, f.a + 1 AS "b" FROM batch f),',
        'batch_2 AS (SELECT f.*, f.b * 2 AS "c" FROM batch_1 f)',
    ]


def test_a_step_too_wide_for_one_line_lists_its_columns_under_its_name():
    chain = Chain(REDSHIFT)
    chain.add("batch", "SELECT s.a,\n       s.b\nFROM t s\nWHERE s.a > 0")
    chain.add("wide", f"SELECT f.a + {'1' * 140} AS v\nFROM batch f")
    assert chain.sql().splitlines() == [
        "WITH batch AS (SELECT s.a,",
        "    s.b",  # the SELECT list 2 deeper than FROM and WHERE
        "  FROM t s",
        "  WHERE s.a > 0),",
        "wide AS (",  # the first line would not fit beside the name
        f"  SELECT f.a + {'1' * 140} AS v",
        "  FROM batch f)",
    ]


def test_on_postgresql_each_step_is_fenced_so_its_values_are_computed_once():
    # PostgreSQL inlines a CTE that is read once; OFFSET 0 keeps it a subquery of its own.
    chain = Chain(POSTGRES)
    chain.add("batch", "SELECT 1 AS a")
    chain.extend("batch_1", {"b": "f.a"})
    assert chain.sql().splitlines() == [
        "WITH batch AS (SELECT 1 AS a OFFSET 0),",
        'batch_1 AS (SELECT f.*, f.a AS "b" FROM batch f OFFSET 0)',
    ]


def test_a_long_line_breaks_before_a_connective_outside_parentheses():
    line = "  WHERE " + " AND ".join(f"(s.column_{i} = t.column_{i} OR s.column_{i} IS NULL)" for i in range(6))
    lines = wrap_long_lines(line, 100).splitlines()
    assert all(len(ln) <= 100 for ln in lines)
    assert all(ln.startswith("      AND (") for ln in lines[1:])  # 4 more than the line's own indent
    assert " ".join(ln.strip() for ln in lines) == line.strip()


def test_quotes_and_comments_are_never_broken():
    literal = "'" + "a b " * 30 + "'"
    line = f"  SELECT {literal} AS x, 1 AS y  -- {'word ' * 30}"
    lines = wrap_long_lines(line, 60).splitlines()
    assert any(literal in ln for ln in lines)  # the literal stays whole on a line of its own
    assert lines[-1].strip() == "-- " + ("word " * 30).strip()  # the comment stays whole
    # A line that starts inside a literal (one that spans lines) is left as it is.
    spanning = "SELECT 'first line\n" + "x " * 100 + "' AS v"
    assert wrap_long_lines(spanning, 60) == spanning


# Words and quoted literals (with spaces inside), as a generated line holds them.
_WORDS = st.lists(
    st.one_of(st.from_regex(r"[a-z_]{1,12}", fullmatch=True), st.from_regex(r"'[a-z ]{0,20}'", fullmatch=True), st.just("AND")),
    min_size=1,
    max_size=60,
)


@given(_WORDS, st.integers(min_value=20, max_value=160))
def test_wrapping_keeps_every_token_and_each_literal_whole(words, width):
    line = "    " + " ".join(words)
    wrapped = wrap_long_lines(line, width).splitlines()
    assert " ".join(" ".join(ln.split()) for ln in wrapped) == " ".join(line.split())
    for word in words:
        if word.startswith("'"):
            assert any(word in ln for ln in wrapped)

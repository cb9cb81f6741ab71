"""The Redshift delta lives in one place and is listed where it lives.

`sync.sql.dialect.redshift` documents every override of `RedshiftDialect`, one line each;
these tests keep that list true in both directions, and keep engine branches out of the
rest of the package (the one exception: which driver a DSN connects with).
"""

from __future__ import annotations

import re

import pytest

from sync.sql.dialect import DIALECTS, PostgresDialect, RedshiftDialect, dialect_for, redshift
from sync.sql.types import ALIASES, parse_type
from tests.helpers import REPO


def _overrides() -> set[str]:
    return {name for name in vars(RedshiftDialect) if not name.startswith("_")}


def _listed() -> set[str]:
    assert redshift.__doc__
    body = redshift.__doc__.split("Values (the capabilities block):", 1)[1]
    return set(re.findall(r"`([a-z0-9_]+)`(?=[,:])", body))  # the names a line starts with


def test_every_override_is_listed_in_the_module_docstring():
    assert _overrides() - _listed() == set()


def test_every_listed_name_is_an_override():
    assert _listed() - _overrides() == set()


def test_every_override_exists_in_the_base():
    # A name only the derived class has would be a capability no caller can ask the base for.
    assert [name for name in _overrides() if not hasattr(PostgresDialect, name)] == []


@pytest.mark.parametrize("name", list(DIALECTS))
def test_every_column_type_has_a_spelling_and_a_conversion(name):
    d = dialect_for(name, "cdc")
    for family in sorted(set(ALIASES.values())):
        t = parse_type(family)
        placeholder = re.compile(r"\{[a-z_]+\}")  # a template value left unfilled
        assert d.type_sql(t) and not placeholder.search(d.type_sql(t)), family
        cast = d.cast_json('p."x"', t)
        assert 'p."x"' in cast and not placeholder.search(cast), (family, cast)


def test_an_unknown_dialect_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown dialect 'oracle'; choose one of: postgres, redshift"):
        dialect_for("oracle")


ENGINE_BRANCH = re.compile(r"""(==|!=|\bin)\s*\(?["'](redshift|postgres)["']|isinstance\([^)]*Dialect\)""")


def test_nothing_outside_the_dialect_package_branches_on_the_engine():
    # sync/warehouse.py picks the driver from the DSN's scheme: connection set-up.
    allowed = {REPO / "sync" / "warehouse.py"}
    found = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in sorted((REPO / "sync").rglob("*.py"))
        if "dialect" not in path.relative_to(REPO / "sync").parts and path not in allowed
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if ENGINE_BRANCH.search(line)
    ]
    assert found == []


def test_nothing_outside_the_warehouse_touches_its_connection():
    found = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for folder in ("sync", "backfill", "benchmarks", "tests")
        for path in sorted((REPO / folder).rglob("*.py"))
        if path.name != "warehouse.py"
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if re.search(r"\bwh\.(_?conn|_describe)\b|\.conn\.(cursor|transaction)\(", line)
    ]
    assert found == []

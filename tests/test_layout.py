"""README's layout table matches the package tree: every module a row names exists in
that row's folder, and every module of a folder is named in its row."""

from __future__ import annotations

import re

from tests.helpers import REPO

ROW = re.compile(r"^\| `(sync/[a-z_/]*)` \| (.*) \|$", re.M)
NAME = re.compile(r"`([a-z_0-9]+(?:\.py|/))`")


def _rows() -> dict[str, set[str]]:
    readme = (REPO / "README.md").read_text()
    return {folder: set(NAME.findall(text)) for folder, text in ROW.findall(readme)}


def _tree(folder: str) -> set[str]:
    root = REPO / folder
    modules = {p.name for p in root.glob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    packages = {p.name + "/" for p in root.iterdir() if (p / "__init__.py").exists()}
    return modules | packages


def test_the_readme_layout_table_names_every_module_of_the_package():
    rows = _rows()
    assert {"sync/", "sync/sql/", "sync/cli/"} <= set(rows)
    for folder, names in rows.items():
        listed_packages = {f"{folder}{n}" for n in names if n.endswith("/")}
        tree = _tree(folder) - {n.rsplit("/", 2)[-2] + "/" for n in rows if n.startswith(folder) and n != folder}
        assert names - tree == set(), f"{folder}: the README names modules that are not there"
        assert tree - names == set(), f"{folder}: modules the README's layout table does not name"
        for package in listed_packages:
            assert (REPO / package / "__init__.py").exists(), package


def test_every_package_of_sync_has_a_row():
    rows = _rows()
    packages = {str(p.parent.relative_to(REPO)) + "/" for p in (REPO / "sync").rglob("__init__.py")}
    # a package named in its parent's row (sync/sql/dialect/) needs no row of its own
    named_in_parent = {f"{folder}{n}" for folder, names in rows.items() for n in names if n.endswith("/")}
    assert packages - set(rows) - named_in_parent == set()

"""Every file of the repository that the docs or the generated SQL name exists.

The paths are read from the texts themselves (links, and words that start with one of the
repository's top-level folders), so moving a module, a test or an example without
updating what names it fails here instead of leaving a dangling reference."""

from __future__ import annotations

import fnmatch
import posixpath
import re
import subprocess

import pytest

from tests.helpers import REPO

# The texts a reader follows: docs, deployment templates, the examples, the committed
# generated SQL and the project file (fnmatch: `*` also matches across folders).
TEXTS = (
    "README.md",
    "*/README.md",
    "docs/*.md",
    "deploy/*",
    "examples/*",
    "sql/procedures/*.sql",
    "tests/golden/*.sql",
    "pyproject.toml",
)
# Files the docs show a documented command creating in the reader's checkout.
CREATED_BY_COMMANDS = {
    "migrations/versions/20261124_e0d1883b176d_customer_discount_longer_names.py": "`redshift-sync revision` in docs/operations.md",
}
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_CODE = re.compile(r"`([^`\n]+)`")


def repository_files() -> set[str]:
    """The files git tracks, plus new ones it does not ignore, relative to the repository."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=REPO,
            capture_output=True,
            check=True,
        ).stdout
    except (FileNotFoundError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the repository's files are unknown")
    return {name for name in out.decode().split("\0") if name and (REPO / name).exists()}


def _path_words(roots: set[str]) -> re.Pattern[str]:
    # A word starting with a top-level folder and a slash (not preceded by a path, an
    # identifier or a URL part); `*` stands for a glob.
    alternatives = "|".join(re.escape(r) for r in sorted(roots, key=len, reverse=True))
    return re.compile(rf"(?<![\w./:@$<-])(?:\./)?((?:{alternatives})/[\w.*/-]*)")


def references(text: str, source: str, roots: set[str]) -> set[str]:
    """The repository paths a text names: link targets (relative to the text's folder) and
    words rooted at a top-level folder that name a file (an extension), a folder (a
    trailing slash) or stand alone in backticks."""
    found = set()
    for target in _LINK.findall(text) if source.endswith(".md") else []:
        target = target.split("#", 1)[0]
        if target and not re.match(r"^[a-z][a-z0-9+.-]*:", target):
            found.add(posixpath.normpath(posixpath.join(posixpath.dirname(source), target)))
    in_code = {m.strip() for m in _CODE.findall(text)}
    for match in _path_words(roots).finditer(text):
        word = match.group(1).rstrip(".,;:")
        if word.endswith("/") or "." in word.rsplit("/", 1)[-1] or word in in_code:
            found.add(word)
    return found


def dangling(reference: str, files: set[str]) -> bool:
    folder = reference.rstrip("/")
    if "*" in folder:
        return not fnmatch.filter(files, folder)
    return folder not in files and not any(name.startswith(folder + "/") for name in files)


def test_every_file_the_docs_and_the_generated_sql_name_exists():
    files = repository_files()
    roots = {name.split("/", 1)[0] for name in files if "/" in name}
    texts = sorted({name for pattern in TEXTS for name in files if fnmatch.fnmatch(name, pattern)})
    assert {"README.md", "docs/operations.md", "sql/procedures/salesdb/customer.sql"} <= set(texts)
    missing, checked = [], 0
    for source in texts:
        for reference in sorted(references((REPO / source).read_text(encoding="utf-8"), source, roots)):
            checked += 1
            if dangling(reference, files) and reference not in CREATED_BY_COMMANDS:
                missing.append(f"{source}: {reference}")
    assert checked > 50
    assert not missing, "named but not in the repository:\n" + "\n".join(missing)


def test_a_moved_module_leaves_its_references_dangling():
    files = {"docs/a.md", "sync/sql/dialects.py", "tests/test_x.py", "benchmarks/results/2026-01-01-run.json"}
    roots = {"backfill", "benchmarks", "docs", "sync", "tests"}
    text = (
        "See [the dialects](../sync/sql/dialects.py#L3), `sync/dialects.py`, tests/test_x.py, "
        "`benchmarks/results/2026-01-01*.json`, the folder sync/sql/, backfill/reconcile in prose "
        "and https://example.com/docs/b.md."
    )
    found = references(text, "docs/a.md", roots)
    assert found == {
        "sync/sql/dialects.py",
        "sync/dialects.py",
        "tests/test_x.py",
        "benchmarks/results/2026-01-01*.json",
        "sync/sql/",
    }
    assert [r for r in sorted(found) if dangling(r, files)] == ["sync/dialects.py"]

"""Every file and module of the repository that the docs or the generated SQL name exists.

The paths are read from the texts themselves (links, words that start with one of the
repository's top-level folders, dotted module names such as a Lambda handler, `from ...
import` lines), so moving a module, a test or an example without updating what names it
fails here instead of leaving a dangling reference."""

from __future__ import annotations

import ast
import fnmatch
import posixpath
import re
import subprocess
import tomllib
from collections.abc import Callable

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
    "migrations/versions/20261126_15beec27d6c6_redshift_sync_upgrade.py": "`redshift-sync revision` in docs/operations.md",
    "migrations/versions/20261126_94d1c71e01ea_doc_body.py": "`redshift-sync revision` in docs/operations.md",
    "migrations/versions/20261126_761821490d7a_wider_n_and_label.py": "`redshift-sync revision` in docs/operations.md",
    "migrations/versions/20261126_db9314170b7e_initial.py": "`redshift-sync revision` in docs/backfill-on-aws.md",
}
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_CODE = re.compile(r"`([^`\n]+)`")
_FROM_IMPORT = re.compile(r"^\s*from\s+([\w.]+)\s+import\s+([\w, ]+)", re.M)
_FILE_SUFFIXES = {"py", "zip", "toml", "md", "json", "jsonl", "yaml", "txt", "whl"}


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


def module_references(text: str, packages: set[str]) -> set[tuple[str, tuple[str, ...]]]:
    """(dotted name, names imported from it) a text names: `package.module.attribute`,
    `package.module:function` (entry points) and `from package.module import a, b`."""
    alternatives = "|".join(re.escape(p) for p in sorted(packages))
    found = set()
    for match in re.finditer(rf"(?<![\w./-])((?:{alternatives})(?:\.[A-Za-z_]\w*)+)(?::(\w+))?", text):
        if match.group(1).rsplit(".", 1)[-1] not in _FILE_SUFFIXES:
            found.add((match.group(1), (match.group(2),) if match.group(2) else ()))
    for module, names in _FROM_IMPORT.findall(text):
        if module.split(".", 1)[0] in packages:
            found.add((module, tuple(n.strip() for n in names.split(",") if n.strip())))
    return found


def defined_names(source: str) -> set[str]:
    """The names a module defines or imports at its top level."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def undefined(
    dotted: str, names: tuple[str, ...], files: set[str], package_dirs: dict[str, str], read: Callable[[str], str]
) -> bool:
    """Whether no module file holds `dotted` (the longest prefix that is a module, the rest
    a name it defines) and every one of `names`."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        package = max((k for k in package_dirs if parts[:end][: k.count(".") + 1] == k.split(".")), key=len, default=None)
        folder = "/".join([package_dirs[package], *parts[package.count(".") + 1 : end]]) if package else "/".join(parts[:end])
        module = next((m for m in (f"{folder}.py", f"{folder}/__init__.py") if m in files), None)
        wanted = [*parts[end : end + 1], *names]
        if module:
            submodules = {m for m in wanted if f"{folder}/{m}.py" in files or f"{folder}/{m}/__init__.py" in files}
            return not set(wanted) - submodules <= defined_names(read(module))
        if package and not wanted and any(f.startswith(folder + "/") for f in files):
            return False  # a data package (package-dir) without __init__.py
    return True


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


def test_every_module_and_name_the_docs_and_templates_name_exists():
    files = repository_files()
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    package_dirs = project["tool"]["setuptools"]["package-dir"]
    packages = {f.split("/", 1)[0] for f in files if f.count("/") == 1 and f.endswith("/__init__.py")}
    packages |= {k.split(".", 1)[0] for k in package_dirs}
    texts = sorted({name for pattern in TEXTS for name in files if fnmatch.fnmatch(name, pattern)})
    missing, checked = [], 0
    for source in texts:
        for dotted, names in sorted(module_references((REPO / source).read_text(encoding="utf-8"), packages)):
            checked += 1
            if undefined(dotted, names, files, package_dirs, lambda m: (REPO / m).read_text(encoding="utf-8")):
                missing.append(f"{source}: {dotted}{' import ' + ', '.join(names) if names else ''}")
    assert checked > 10
    assert not missing, "named but not defined in the repository:\n" + "\n".join(missing)


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


def test_a_moved_module_leaves_its_dotted_names_dangling():
    sources = {
        "sync/__init__.py": "",
        "sync/aws/__init__.py": "",
        "sync/aws/lambda_handler.py": "import json\n\n\ndef handler(event, context):\n    pass\n",
        "sync/cli/app.py": "def main():\n    pass\n",
        "examples/salesdb/pipeline.toml": "",
    }
    text = (
        "Handler: sync.lambda_handler.handler (moved), sync.aws.lambda_handler.handler, `sync.cli.app:main`,\n"
        "sync.cli.app:gone, the data package sync.examples, redshift_sync.zip, sync.cli.app.py\n"
        "from sync.aws.lambda_handler import handler, json\nfrom sync.cli.app import main, missing\nfrom sync.aws import lambda_handler\n"
    )
    found = module_references(text, {"sync"})
    assert found == {
        ("sync.lambda_handler.handler", ()),
        ("sync.aws.lambda_handler.handler", ()),
        ("sync.cli.app", ("main",)),
        ("sync.cli.app", ("gone",)),
        ("sync.examples", ()),
        ("sync.aws.lambda_handler", ()),
        ("sync.aws.lambda_handler", ("handler", "json")),
        ("sync.cli.app", ()),
        ("sync.cli.app", ("main", "missing")),
        ("sync.aws", ()),
        ("sync.aws", ("lambda_handler",)),
    }
    dangling_names = [
        (d, n) for d, n in sorted(found) if undefined(d, n, set(sources), {"sync.examples": "examples"}, sources.__getitem__)
    ]
    assert dangling_names == [
        ("sync.cli.app", ("gone",)),
        ("sync.cli.app", ("main", "missing")),
        ("sync.lambda_handler.handler", ()),
    ]

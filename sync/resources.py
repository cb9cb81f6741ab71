"""Files the commands need besides code: the alembic environment (env.py, the revision
template, the example pipeline's revisions) and the examples (pipeline files, events and
snapshot of the demo).

In a checkout they are the top-level `migrations/` and `examples/` folders; a built wheel
carries the same folders inside the package (pyproject.toml maps them to
`sync/migrations` and `sync/examples`), so every command works from an installed package.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def relative_to_cwd(path: Path) -> str:
    """`path` relative to the working directory when it is below it, else as given: what
    people and committed files see does not depend on where a checkout lives."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def bundled(name: str) -> Path:
    """The folder `name` (migrations | examples): inside the installed package, else at
    the top of the checkout."""
    for candidate in (PACKAGE_DIR / name, PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"{name}/ is missing from this installation (looked in {PACKAGE_DIR} and {PACKAGE_DIR.parent}): reinstall redshift-sync"
    )

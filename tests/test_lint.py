"""ruff, as configured in pyproject.toml: lint and format over the whole repository."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.helpers import REPO


def _ruff(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("ruff", path=str(REPO / ".venv" / "bin")) or shutil.which("ruff")
    command = [exe] if exe else [sys.executable, "-m", "ruff"]
    return subprocess.run([*command, *args], cwd=REPO, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args", [("check", "."), ("format", "--check", ".")], ids=["lint", "format"])
def test_ruff_is_clean(args):
    out = _ruff(*args)
    assert out.returncode == 0, out.stdout + out.stderr

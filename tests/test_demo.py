"""`redshift-sync demo` as a newcomer runs it: a fresh home, the embedded warehouse."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_demo_runs_end_to_end_with_a_readable_summary(tmp_path):
    env = {**os.environ, "REDSHIFT_SYNC_HOME": str(tmp_path)}
    env.pop("REDSHIFT_SYNC_DSN", None)
    out = subprocess.run(
        [sys.executable, "-m", "sync", "demo"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600
    )
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    for heading in ("1. deploy", "2. ingest and sync", "3. target tables", "4. status", "demo finished"):
        assert heading in text
    assert "Globex Corporation" in text and "C104" in text
    assert "sync again with nothing new: read 0 events" in text
    assert "Traceback" not in out.stderr
    # A second run starts from scratch and gives the same tables.
    again = subprocess.run(
        [sys.executable, "-m", "sync", "demo"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600
    )
    assert again.returncode == 0
    cut = lambda s: s[s.index("3. target tables") : s.index("4. status")]  # noqa: E731
    assert cut(again.stdout) == cut(text)

"""Virtual environments with other PySpark versions, for the tests that prove the backfill
runs on the Spark versions AWS runs: Glue 5.1 (Spark 3.5.6), EMR 7.x (Spark 3.5.x) and
EMR 8 (`emr-spark-8.0.0`, Spark 4.0.2). The project's own venv has the newest PySpark.

Each is made once in a cache folder outside the work tree (several GB together):
`$REDSHIFT_SYNC_TEST_VENVS`, else `$XDG_CACHE_HOME/redshift-sync/venvs`, else
`~/.cache/redshift-sync/venvs`; delete it to reclaim the space. A venv with PySpark alone
(`-bare`) is shared by every checkout and brought up to date with pip on every use (a file
lock keeps two test workers from installing at the same time). The project runs on it
through an overlay of one checkout (its name carries a hash of the checkout's path): a venv
with no packages of its own whose path file lists the PySpark venv, the checkout and the
packages of the venv running the tests, in that order, so the project and its test tools
are never installed a second time."""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# pyspark version -> venv folder
SPARK_VERSIONS = {"3.5.6": "spark35", "4.0.2": "spark40"}
VENVS_ENV_VAR = "REDSHIFT_SYNC_TEST_VENVS"
# Set for the runs of tests/spark in a side venv (tests/test_spark_versions.py).
SIDE_RUN_ENV_VAR = "REDSHIFT_SYNC_TEST_SPARK_SIDE_RUN"


# The tests a side venv runs (file, test function): every line of backfill/ that the quick
# Spark tests run on the driver is run by one of them (a greedy cover of the per-test line
# coverage, `python scripts/side_run_cover.py`), and the property tests, whose drawn values
# meet each version's casts and functions (ANSI mode is on by default from Spark 4.0). The
# rest call the same Spark API with other data; they run on the newest PySpark with the
# rest of the suite.
SIDE_RUN_TESTS = {
    ("test_keyless_backfill.py", "test_a_cluster_run_folder_loads_the_same_multiset"),
    ("test_backfill_merge.py", "test_cli_backfill_parquet_and_spark_submit_job"),
    ("test_backfill_snapshot_gaps.py", "test_plain_json_export_loads_with_values_decoded"),
    ("test_keyless_reconcile_floats.py", "test_float_columns_reconcile_by_row_hash_and_a_one_bit_change_is_found"),
    ("test_backfill_tombstones.py", "test_snapshot_without_any_source_time_never_replaces_a_stream_row"),
    ("test_reconcile.py", "test_changed_value_needs_a_checksum_to_be_seen"),
    ("test_row_topics.py", "test_the_topic_archive_gives_the_same_table_as_the_stream"),
    ("test_backfill_snapshot_gaps.py", "test_snapshot_older_than_a_column_loads_it_as_null_with_a_note"),
    ("test_semantic_parity.py", "test_typed_snapshot_columns_still_encoded_are_decoded"),
    ("test_source_positions.py", "test_backfill_positions_equal_the_procedures"),
    ("test_backfill_snapshot_gaps.py", "test_plain_json_export_is_rejected_as_wire_encoding_with_a_hint"),
    ("test_backfill_snapshot_gaps.py", "test_snapshot_without_the_key_column_is_refused"),
    ("test_inputs.py", "test_s3_sink_layout_recovers_every_offset"),
    ("test_semantic_parity.py", "test_bytes_columns_are_refused_with_a_clear_message"),
    ("test_row_topics.py", "test_snapshot_rows_hand_over_to_the_stream_by_the_column"),
    ("test_backfill_snapshot_gaps.py", "test_values_decoded_is_refused_for_change_events"),
    # the property tests
    ("test_canonical.py", "test_spark_and_postgres_agree"),
    ("test_float_text.py", "test_a_double_has_one_exact_text_in_spark_and_postgres"),
    ("test_float_text.py", "test_a_real_has_the_text_of_its_double_in_spark_and_postgres"),
    ("test_semantic_parity.py", "test_property_spark_decodes_like_the_reference"),
}


def property_examples(count: int) -> int:
    """A Spark property test's example count: a quarter of it (at least 5) in a side venv.
    The side runs prove the job on the API an older PySpark offers, which a few examples
    exercise in full; the newest PySpark runs every example with the rest of the suite."""
    return max(5, count // 4) if os.environ.get(SIDE_RUN_ENV_VAR) == "1" else count


def venvs_folder() -> Path:
    """Where the side venvs live: never inside the work tree."""
    given = os.environ.get(VENVS_ENV_VAR)
    if given:
        return Path(given)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "redshift-sync" / "venvs"


def venv_path(version: str, with_project: bool) -> Path:
    checkout = hashlib.sha256(str(REPO).encode()).hexdigest()[:10]
    return venvs_folder() / (f"{SPARK_VERSIONS[version]}-{checkout}" if with_project else f"{SPARK_VERSIONS[version]}-bare")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for a child Python: nothing of this process's Spark or pytest set-up
    (a PYSPARK_PYTHON pointing at this venv would run the wrong PySpark on the workers) but
    the drivers' JVM options (SPARK_SUBMIT_OPTS, tests/conftest.py)."""
    drop = ("PYSPARK_", "SPARK_", "PYTEST_", "PYTHONPATH", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop) or k == "SPARK_SUBMIT_OPTS"}
    env.update(extra)
    return env


def site_packages_of(venv: Path) -> Path:
    (found,) = sorted((venv / "lib").glob("python*/site-packages"))[-1:]
    return found


def spark_venv(version: str, with_project: bool = True) -> Path:
    """The Python of a venv with `pyspark==version` (and the project with its test tools,
    unless `with_project` is false: then PySpark alone)."""
    bare = venv_path(version, with_project=False)
    python = bare / "bin" / "python"
    bare.parent.mkdir(parents=True, exist_ok=True)
    with open(bare.parent / f"{bare.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(bare)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", f"pyspark=={version}"],
            check=True,
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
    return overlay(version, bare) if with_project else python


def overlay(version: str, bare: Path) -> Path:
    """A venv without packages of its own (a few kB, made in a second): its path file puts
    the PySpark venv first, then this checkout and the packages of the venv running the
    tests (their PySpark shadowed), so nothing is installed twice."""
    venv = venv_path(version, with_project=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        dirs = [site_packages_of(bare), REPO, Path(sysconfig.get_paths()["purelib"])]
        line = "import site; " + "; ".join(f"site.addsitedir({str(d)!r})" for d in dirs)
        (site_packages_of(venv) / "redshift_sync_overlay.pth").write_text(line + "\n")
    return venv / "bin" / "python"

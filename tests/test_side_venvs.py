"""The side venvs of the Spark-version tests (several GB) live in a cache folder outside
the work tree, and a venv holding one checkout's editable install is never shared with
another checkout."""

from __future__ import annotations

from pathlib import Path

from tests import spark_envs
from tests.helpers import REPO


def test_side_venvs_live_in_the_user_cache_outside_the_work_tree(monkeypatch, tmp_path):
    monkeypatch.delenv(spark_envs.VENVS_ENV_VAR, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    for version in spark_envs.SPARK_VERSIONS:
        for with_project in (True, False):
            venv = spark_envs.venv_path(version, with_project)
            assert venv.parent == tmp_path / ".cache" / "redshift-sync" / "venvs"
            assert not venv.resolve().is_relative_to(REPO.resolve())


def test_the_cache_folder_follows_xdg_and_the_override(monkeypatch, tmp_path):
    monkeypatch.delenv(spark_envs.VENVS_ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert spark_envs.venvs_folder() == tmp_path / "xdg" / "redshift-sync" / "venvs"
    monkeypatch.setenv(spark_envs.VENVS_ENV_VAR, "/srv/venvs")
    assert spark_envs.venvs_folder() == Path("/srv/venvs")


def test_only_pyspark_alone_venvs_are_shared_between_checkouts(monkeypatch):
    bare = spark_envs.venv_path("3.5.6", with_project=False)
    mine = spark_envs.venv_path("3.5.6", with_project=True)
    monkeypatch.setattr(spark_envs, "REPO", Path("/elsewhere/checkout"))
    assert spark_envs.venv_path("3.5.6", with_project=False) == bare
    assert spark_envs.venv_path("3.5.6", with_project=True) != mine


def test_the_overlay_of_a_checkout_installs_nothing_and_puts_the_version_s_pyspark_first(monkeypatch, tmp_path):
    # The overlay's path file, as Python's `site` reads it ("Lines starting with import are
    # executed"): the PySpark venv, then the checkout, then the test venv's packages.
    monkeypatch.setenv(spark_envs.VENVS_ENV_VAR, str(tmp_path))
    bare = tmp_path / "spark35-bare"
    (bare / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    python = spark_envs.overlay("3.5.6", bare)
    site_packages = spark_envs.site_packages_of(python.parent.parent)
    (pth,) = site_packages.iterdir()
    dirs = pth.read_text().split("site.addsitedir(")[1:]
    assert [d.split("'")[1] for d in dirs][:2] == [str(bare / "lib" / "python3.11" / "site-packages"), str(REPO)]

"""`Warehouse.transaction()` on both connection kinds: the psycopg one, and the
BEGIN/COMMIT/ROLLBACK statements used for Redshift (run here on PostgreSQL)."""

from __future__ import annotations

import dataclasses

import pytest


@pytest.mark.parametrize("driver", ["psycopg", "redshift_connector"])
def test_commits_on_success_and_rolls_back_with_the_blocks_error(wh, driver):
    wh.execute("CREATE TABLE tx_probe (n int)")
    w = dataclasses.replace(wh, driver=driver)
    with w.transaction():
        w.execute("INSERT INTO tx_probe VALUES (1)")
    with pytest.raises(RuntimeError, match="the block's own error"):
        with w.transaction():
            w.execute("INSERT INTO tx_probe VALUES (2)")
            raise RuntimeError("the block's own error")
    assert wh.query("SELECT n FROM tx_probe") == [(1,)]

"""A 1,000,000-row Parquet snapshot backfills locally (times are reported, not asserted)."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from sync.operations.backfill import run_backfill

pytestmark = [pytest.mark.spark, pytest.mark.slow]
ROWS = 1_000_000


def test_million_row_parquet_snapshot(deployed, spark, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    wh, pipeline = deployed
    ids = pa.array(range(ROWS), pa.int64())
    keys = pc.binary_join_element_wise("C", pc.utf8_lpad(pc.cast(ids, pa.string()), 8, "0"), "")
    segments = pa.array(["BUILDING", "MACHINERY", "HOUSEHOLD", "AUTOMOBILE"] * (ROWS // 4))
    pq.write_table(
        pa.table({"customer_id": keys, "name": pc.binary_join_element_wise("name ", keys, ""), "mktsegment": segments}),
        tmp_path / "big.parquet",
        row_group_size=250_000,
    )
    started = time.perf_counter()
    result = run_backfill(wh, pipeline, "customer", str(tmp_path / "big.parquet"), "parquet", datetime(2024, 1, 1), spark=spark)
    seconds = time.perf_counter() - started
    assert (result.staged, result.loaded, result.rejected) == (ROWS, ROWS, 0)
    assert wh.scalar('SELECT COUNT(DISTINCT customer_id) FROM cdc."customer"') == ROWS
    assert wh.query('SELECT name, mktsegment FROM cdc."customer" WHERE customer_id = %s', ("C00123457",)) == [
        ("name C00123457", "MACHINERY")
    ]
    with capsys.disabled():
        print(f"\n1,000,000-row Parquet backfill: {seconds:.1f} s")

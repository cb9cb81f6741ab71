"""Loading the staged Parquet into PostgreSQL with COPY FROM STDIN (no Spark needed)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sync.backfill import copy_parquet_into, transaction
from sync.warehouse import WarehouseError


def parts(tmp_path, *tables: pa.Table) -> list:
    files = []
    for i, table in enumerate(tables):
        path = tmp_path / f"part-{i:05d}.parquet"
        pq.write_table(table, path, row_group_size=2)  # several record batches per file
        files.append(path)
    return files


def test_every_row_of_every_part_is_copied_with_nulls_and_quotes(wh, tmp_path):
    wh.execute("CREATE TABLE load_target (k varchar(8), note varchar(32), n bigint)")
    files = parts(
        tmp_path,
        pa.table({"k": ["a", "b", "c"], "note": ['say "hi"', "", None], "n": [1, None, 3]}),
        pa.table({"k": ["d", "e"], "note": ["x,y", "line\nbreak"], "n": [4, 5]}),
    )
    messages: list[str] = []
    with transaction(wh):
        assert copy_parquet_into(wh, "load_target", files, messages.append) == 5
    assert wh.query("SELECT k, note, n FROM load_target ORDER BY k") == [
        ("a", 'say "hi"', 1), ("b", "", None), ("c", None, 3), ("d", "x,y", 4), ("e", "line\nbreak", 5),
    ]
    assert messages == ["COPY part 1/2: 3 rows so far", "COPY part 2/2: 5 rows so far"]


def test_a_row_the_stage_refuses_fails_the_load_and_names_it(wh, tmp_path):
    wh.execute("CREATE TABLE load_target (k varchar(8), n bigint)")
    files = parts(tmp_path, pa.table({"k": ["a", "b"], "n": ["1", "not a number"]}))
    with pytest.raises(WarehouseError, match="loading the backfill stage failed.*not a number"):
        with transaction(wh):
            copy_parquet_into(wh, "load_target", files, lambda _: None)
    assert wh.scalar("SELECT COUNT(*) FROM load_target") == 0

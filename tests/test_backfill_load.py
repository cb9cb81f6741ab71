"""Loading the staged Parquet into PostgreSQL with COPY FROM STDIN (no Spark needed)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sync.operations.backfill import copy_parquet_into, part_files
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
    with wh.transaction():
        assert copy_parquet_into(wh, "load_target", files, messages.append) == 5
    assert wh.query("SELECT k, note, n FROM load_target ORDER BY k") == [
        ("a", 'say "hi"', 1),
        ("b", "", None),
        ("c", None, 3),
        ("d", "x,y", 4),
        ("e", "line\nbreak", 5),
    ]
    assert messages == ["COPY part 1/2: 3 rows so far", "COPY part 2/2: 5 rows so far"]


def test_a_row_the_stage_refuses_fails_the_load_and_names_it(wh, tmp_path):
    wh.execute("CREATE TABLE load_target (k varchar(8), n bigint)")
    files = parts(tmp_path, pa.table({"k": ["a", "b"], "n": ["1", "not a number"]}))
    with pytest.raises(WarehouseError, match="loading the backfill stage failed.*not a number"):
        with wh.transaction():
            copy_parquet_into(wh, "load_target", files, lambda _: None)
    assert wh.scalar("SELECT COUNT(*) FROM load_target") == 0


def snapshot_parts(tmp_path, keys: list[str]) -> list:
    """Stage part files of the example's customer table, as the Spark job writes them."""
    from datetime import datetime

    n = len(keys)
    return parts(
        tmp_path,
        pa.table(
            {
                "customer_id": keys,
                "name": [f"name {k}" for k in keys],
                "mktsegment": ["BUILDING"] * n,
                "_source_ts": pa.array([datetime(2024, 1, 1)] * n, pa.timestamp("us")),
                "_source_pos": pa.array([None] * n, pa.string()),
                "_kafka_partition": pa.array([None] * n, pa.int64()),
                "_kafka_offset": pa.array([None] * n, pa.int64()),
                "_delete": [False] * n,
            }
        ),
    )


def primary_key(wh) -> list[tuple]:
    return wh.query(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'cdc.customer'::regclass AND contype = 'p'"
    )


def test_an_empty_target_loads_without_its_index_and_gets_its_primary_key_back(deployed, tmp_path):
    from sync.operations.backfill import load_and_merge

    wh, pipeline = deployed
    table = pipeline.table("customer")
    before = primary_key(wh)
    messages: list[str] = []
    snapshot_parts(tmp_path, ["C1", "C2", "C3"])
    counts = load_and_merge(wh, pipeline, table, part_files(tmp_path), messages.append)
    assert counts["loaded"] == 3
    assert primary_key(wh) == before == [("customer_pkey", "PRIMARY KEY (customer_id)")]
    assert any("without its primary-key index" in m for m in messages)
    with pytest.raises(WarehouseError, match="duplicate key"):
        wh.execute("INSERT INTO cdc.customer (customer_id, _synced_at) VALUES ('C1', now())")

    # A target with rows keeps its index during the load.
    messages.clear()
    second = tmp_path / "second"
    second.mkdir()
    snapshot_parts(second, ["C4"])
    assert load_and_merge(wh, pipeline, table, part_files(second), messages.append)["loaded"] == 1
    assert not any("without its primary-key index" in m for m in messages)
    assert wh.scalar("SELECT COUNT(*) FROM cdc.customer") == 4


def test_a_stage_that_breaks_the_primary_key_rolls_the_whole_load_back(deployed, tmp_path):
    from sync.operations.backfill import load_and_merge

    wh, pipeline = deployed
    snapshot_parts(tmp_path, ["C1", "C1"])  # the Spark job never writes this; the key still holds
    with pytest.raises(WarehouseError):
        load_and_merge(wh, pipeline, pipeline.table("customer"), part_files(tmp_path), lambda _: None)
    assert wh.scalar("SELECT COUNT(*) FROM cdc.customer") == 0
    assert primary_key(wh) == [("customer_pkey", "PRIMARY KEY (customer_id)")]


def test_a_stage_left_with_an_older_shape_is_made_anew(deployed, tmp_path):
    from sync.operations.backfill import load_and_merge

    wh, pipeline = deployed
    wh.execute("CREATE TABLE cdc.customer__backfill (customer_id varchar(8))")  # e.g. before a revision
    snapshot_parts(tmp_path, ["C1"])
    assert load_and_merge(wh, pipeline, pipeline.table("customer"), part_files(tmp_path), lambda _: None)["loaded"] == 1
    assert wh.query("SELECT customer_id, name FROM cdc.customer") == [("C1", "name C1")]

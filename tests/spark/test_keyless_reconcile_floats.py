"""Reconcile of a table without a primary key whose columns are floats, through the CLI on
real Spark and real PostgreSQL: the stream writes the rows (PostgreSQL reads each JSON
number as the column's type), the snapshot is read by Spark, and the row hashes agree for
values whose texts the engines print differently (1e21, 1e-7, 0.1, -0.0, 1e-300, -1e308;
within the ranges every warehouse stores, which the backfill loads: Redshift's DOUBLE
PRECISION has no subnormals, "around 1E-307 to 1E+308", r_Numeric_types201).
A stored double one bit off is a difference. Debezium's MySQL connector sends FLOAT and
DOUBLE columns as JSON numbers (schema types float32 and float64: "Mappings for MySQL basic
data types", https://debezium.io/documentation/reference/stable/connectors/mysql.html).
Before floats had a canonical text, reconcile refused such a table."""

from __future__ import annotations

import math

import pytest

from tests.helpers import pipeline_toml
from tests.spark.test_keyless_backfill import reconcile, snapshot_reads, write_records
from tests.test_delivery_semantics import setup
from tests.test_keyless import event, feed

pytestmark = pytest.mark.spark

TOML = """[[tables]]
name = "items"
topic = "topic.items"
primary_key = []
order_by = "mysql-binlog"
columns = [{ name = "sku", type = "varchar(16)" }, { name = "r", type = "real" }, { name = "d", type = "double precision" }]
"""
ROWS = [
    {"sku": "a", "r": 0.1, "d": 1e21},
    {"sku": "a", "r": 0.1, "d": 1e21},  # a duplicate row
    {"sku": "b", "r": 1e-7, "d": 1e-7},
    {"sku": "c", "r": -0.0, "d": 1.0000000000000001e-300},
    {"sku": "d", "r": 1e30, "d": 0.1},
    {"sku": "e", "r": None, "d": -1e308},
]


def test_float_columns_reconcile_by_row_hash_and_a_one_bit_change_is_found(wh, tmp_path):
    (tmp_path / "pipeline.toml").write_text(pipeline_toml(TOML))
    pipeline, config = setup(wh, TOML), str(tmp_path / "pipeline.toml")
    feed(wh, pipeline, "items", [event("c", None, r, 100 + 10 * i, partition=i % 2) for i, r in enumerate(ROWS)])
    snap = write_records(tmp_path / "snap.jsonl", snapshot_reads(ROWS))  # at position 1000: after them all
    code, report, output = reconcile(wh, config, snap, "--json")
    assert code == 0, output
    assert (report["snapshot_rows"], report["warehouse_rows"], report["differences"]) == (6, 6, [])

    wh.execute(f"""UPDATE cdc."items" SET d = {math.nextafter(0.1, 1.0)!r} WHERE sku = 'd'""")
    code, report, output = reconcile(wh, config, snap, "--json")
    assert code == 1, output
    found = sorted((d["kind"], d["row"]["sku"], d["row"]["d"]) for d in report["differences"])
    assert found == [("extra", "d", math.nextafter(0.1, 1.0)), ("missing", "d", 0.1)]

"""`infer` from messages without schemas. Kafka Connect's JsonConverter with
`value.converter.schemas.enable=false` writes the payload alone (no `{"schema", "payload"}`
wrapper), so no Connect type or semantic name reaches the sample: every type is guessed
from the values and said to be, and what values cannot settle is flagged. Debezium's
`decimal.handling.mode` (connector documentation: `precise` | `double` | `string`) decides
how a DECIMAL arrives: base64 bytes, a JSON number, or a string of digits."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from sync.debezium.infer import infer_block
from tests.helpers import EXAMPLES

ORDERS = EXAMPLES / "salesdb" / "events" / "orders-1.jsonl"


def columns(block: str) -> dict[str, str]:
    (table,) = tomllib.loads(block)["tables"]
    return {c["name"]: c["type"] for c in table["columns"]}


def test_the_shipped_salesdb_events_infer_with_every_type_marked_a_guess():
    block = infer_block(ORDERS, "orders", "salesdb.salesdb.ORDERS")
    (table,) = tomllib.loads(block)["tables"]
    assert (table["format"], table["primary_key"], table["order_by"]) == ("debezium", ["ORDER_ID"], "mysql-binlog")
    assert columns(block) == {
        "ORDER_ID": "bigint",
        "CUST_ID": "varchar(65535)",
        "STATUS": "varchar(65535)",
        "TOTAL": "varchar(65535)",
        "PLACED_AT": "varchar(65535)",
    }
    guessed = [line.split()[2].rstrip(":") for line in block.splitlines() if line.startswith("# GUESS ")]
    assert guessed == list(columns(block))
    assert "schemas.enable=false" in block
    assert "# CHECK TOTAL: every value reads as a number" in block
    assert "# CHECK PLACED_AT: every value reads as an ISO 8601 time" in block


def write(path: Path, values: list[dict]) -> Path:
    path.write_text("".join(json.dumps({"key": {"id": i}, "value": v}) + "\n" for i, v in enumerate(values)))
    return path


def test_ambiguous_fields_are_flagged_never_typed_silently(tmp_path):
    rows = [
        {"id": 1, "mixed": 1, "empty": None, "price": 1.5, "flag": True, "tags": ["a"], "amount": 2},
        {"id": 2, "mixed": "x", "empty": None, "price": 2, "flag": False, "tags": [], "amount": 3.25},
    ]
    block = infer_block(write(tmp_path / "rows.jsonl", rows), "t", "db.public.t", ["id"])
    assert columns(block) == {
        "id": "bigint",
        "mixed": "varchar(65535)",
        "empty": "varchar(65535)",
        "price": "double precision",
        "flag": "boolean",
        "tags": "super",
        "amount": "double precision",
    }
    assert "# CHECK mixed: values of several JSON types (1 integer, 1 string)" in block
    assert "# CHECK empty: only nulls in the sample (2)" in block
    assert "# GUESS price: from 2 number value(s) (a DECIMAL in decimal.handling.mode=double arrives so too)" in block
    assert tomllib.loads(block)["tables"][0]["format"] == "row"


def test_an_unwrapped_topic_keeps_its_rows_without_the_metadata_fields(tmp_path):
    rows = [{"id": 1, "name": "a", "__op": "c", "__lsn": 10}, {"id": 2, "name": "b", "__op": "u", "__lsn": 11}]
    block = infer_block(write(tmp_path / "unwrap.jsonl", rows), "t", "db.public.t")
    (table,) = tomllib.loads(block)["tables"]
    assert table["format"] == "debezium-unwrap" and table["primary_key"] == ["id"]
    assert columns(block) == {"id": "bigint", "name": "varchar(65535)"}

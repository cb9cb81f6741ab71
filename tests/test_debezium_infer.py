"""`infer` on captured schema-bearing messages: the printed block deploys and syncs them."""

from __future__ import annotations

import json
from datetime import date, datetime
from decimal import Decimal

from typer.testing import CliRunner

from sync.cli.app import app
from sync.local.stream import ingest_file
from sync.operations.runner import sync
from tests.helpers import make_pipeline


def _field(name: str, typ: str, semantic: str | None = None, optional: bool = True, **params: str) -> dict:
    f = {"type": typ, "optional": optional, "field": name}
    if semantic:
        f["name"] = semantic
    if params:
        f["parameters"] = params
    return f


ROW_FIELDS = [
    _field("CustId", "int32", optional=False),
    _field("Name", "string"),
    _field("Balance", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2", **{"connect.decimal.precision": "10"}),
    _field("Joined", "int32", "io.debezium.time.Date"),
    _field("UpdatedAt", "int64", "io.debezium.time.MicroTimestamp"),
    _field("LastLogin", "string", "io.debezium.time.ZonedTimestamp"),
    _field("Prefs", "string", "io.debezium.data.Json"),
    _field("Tier", "string", "io.debezium.data.Enum", allowed="GOLD,SILVER"),
    _field("_active", "int16"),
    _field("Photo", "bytes"),
    _field("Score", "double"),
]


def _message(op: str, after: dict, pos: int) -> dict:
    row_schema = {"type": "struct", "fields": ROW_FIELDS, "optional": True, "name": "shop.shop.CUSTOMERS.Value"}
    value_schema = {
        "type": "struct",
        "optional": False,
        "name": "shop.shop.CUSTOMERS.Envelope",
        "fields": [
            {**row_schema, "field": "before"},
            {**row_schema, "field": "after"},
            {"type": "struct", "fields": [], "optional": False, "name": "io.debezium.connector.mysql.Source", "field": "source"},
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }
    source = {"connector": "mysql", "ts_ms": 1700000000000, "file": "mysql-bin.000003", "pos": pos, "row": 0, "snapshot": "false"}
    key_schema = {"type": "struct", "name": "shop.shop.CUSTOMERS.Key", "optional": False, "fields": [ROW_FIELDS[0]]}
    return {
        "partition": 0,
        "key": {"schema": key_schema, "payload": {"CustId": after["CustId"]}},
        "value": {"schema": value_schema, "payload": {"before": None, "after": after, "source": source, "op": op, "ts_ms": 1}},
    }


ROW = {
    "CustId": 7,
    "Name": "Ada",
    "Balance": "/+0peQ==",
    "Joined": 19000,
    "UpdatedAt": 1700000000654321,
    "LastLogin": "2023-03-23T12:00:00.5+05:30",
    "Prefs": '{"lang": "en"}',
    "Tier": "GOLD",
    "_active": 1,
    "Photo": "AQID",
    "Score": 2.5,
}


def test_infer_prints_a_block_that_deploys_and_syncs(wh, tmp_path):
    sample = tmp_path / "sample.jsonl"
    sample.write_text(
        "\n".join(json.dumps(m) for m in [_message("c", ROW, 100), _message("u", {**ROW, "Name": "Ada L"}, 200)]) + "\n"
    )
    result = CliRunner().invoke(app, ["infer", "--sample", str(sample), "--table", "customers", "--topic", "shop.shop.CUSTOMERS"])
    assert result.exit_code == 0, result.output
    block = result.output
    assert 'primary_key = ["CustId"]' in block and 'order_by = "mysql-binlog"' in block
    assert '{ name = "Balance", type = "decimal(10,2)", semantic = "org.apache.kafka.connect.data.Decimal", scale = 2 }' in block
    assert '{ name = "_active", type = "smallint", target = "active" }' in block

    # the block as it would be pasted into a pipeline file, then `revision` and `deploy`
    config = tmp_path / "pipeline.toml"
    config.write_text('[pipeline]\nschema = "cdc"\n[source]\nkind = "kafka"\nuri = "b:9092"\nauthentication = "none"\n\n' + block)
    versions = tmp_path / "versions"
    made = CliRunner().invoke(app, ["revision", "-m", "customers", "-c", str(config), "--versions", str(versions)])
    assert made.exit_code == 0, made.output
    deployed = CliRunner().invoke(app, ["deploy", "-c", str(config), "--dsn", wh.dsn, "--versions", str(versions)])
    assert deployed.exit_code == 0 and "applied" in deployed.output, deployed.output
    pipeline = make_pipeline(block)
    ingest_file(wh, pipeline, "customers", sample)
    (run,) = sync(wh, pipeline)
    assert (run.status, run.upserted, run.quarantined) == ("ok", 1, 0), run.error
    got = wh.query(
        "SELECT custid, name, balance, joined, updatedat, lastlogin AT TIME ZONE 'UTC', prefs, tier, active, photo, score "
        "FROM cdc.customers"
    )
    assert [tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in got] == [
        (
            7,
            "Ada L",
            Decimal("-12345.67"),
            date(2022, 1, 8),
            datetime(2023, 11, 14, 22, 13, 20, 654321),
            datetime(2023, 3, 23, 6, 30, 0, 500000),
            {"lang": "en"},
            "GOLD",
            1,
            b"\x01\x02\x03",
            2.5,
        )
    ]
    assert wh.scalar("SELECT COUNT(*) FROM cdc.sync_schema_drift") == 0


def test_infer_explains_a_sample_without_schemas(tmp_path):
    sample = tmp_path / "plain.jsonl"
    sample.write_text(json.dumps({"partition": 0, "key": {"id": 1}, "value": {"after": {"id": 1}, "op": "c"}}) + "\n")
    result = CliRunner().invoke(app, ["infer", "--sample", str(sample), "--table", "t", "--topic", "t"])
    # Without schemas (schemas.enable=false) the types are guessed from the values, and said to be.
    assert result.exit_code == 0, result.output
    assert "# No schema in the messages (schemas.enable=false)" in result.output
    assert "# GUESS id: from 1 integer value(s)" in result.output


def test_infer_refuses_a_sample_with_no_row_at_all(tmp_path):
    sample = tmp_path / "tombstones.jsonl"
    sample.write_text(json.dumps({"partition": 0, "key": {"id": 1}, "value": None}) + "\n")
    result = CliRunner().invoke(app, ["infer", "--sample", str(sample), "--table", "t", "--topic", "t"])
    assert result.exit_code == 1
    assert "no change event or row in the sample" in result.output


def test_infer_unwrapped_postgres_messages(tmp_path):
    fields = [
        _field("id", "int64", optional=False),
        _field("amount", "struct", "io.debezium.data.VariableScaleDecimal"),
        _field("__op", "string"),
        _field("__lsn", "int64"),
        _field("__deleted", "string"),
    ]
    value = {
        "schema": {"type": "struct", "name": "pg.public.t.Value", "optional": False, "fields": fields},
        "payload": {"id": 1, "amount": {"scale": 2, "value": "D9I="}, "__op": "c", "__lsn": 5, "__deleted": "false"},
    }
    sample = tmp_path / "flat.jsonl"
    sample.write_text(json.dumps(value) + "\n")  # a bare message: no key, so --primary-key
    result = CliRunner().invoke(app, ["infer", "-s", str(sample), "-t", "t", "--topic", "pg.public.t", "--primary-key", "id"])
    assert result.exit_code == 0, result.output
    assert 'format = "debezium-unwrap"' in result.output and 'order_by = "postgres-lsn"' in result.output
    assert "# NOTE amount: variable-scale number" in result.output and "__lsn" not in result.output.split("columns")[1]
    make_pipeline(result.output)  # a valid pipeline table

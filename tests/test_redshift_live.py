"""Opt-in: the generated Redshift SQL on a real Redshift. Set REDSHIFT_SYNC_TEST_REDSHIFT_DSN
(redshift+redshift_connector://user:password@host:5439/dev) to run it; it works in a
scratch schema and drops it afterwards. The streaming materialized view is replaced by a
plain table with the same columns, filled with JSON_PARSE, so no MSK cluster is needed."""

from __future__ import annotations

import json
import os
import uuid

import pytest

from sync.debezium import ChangeStream, MySqlSource
from sync.runner import sync
from sync.sql.objects import pipeline_objects
from tests.conftest import make_pipeline

DSN = os.environ.get("REDSHIFT_SYNC_TEST_REDSHIFT_DSN")
pytestmark = [pytest.mark.redshift, pytest.mark.skipif(not DSN, reason="REDSHIFT_SYNC_TEST_REDSHIFT_DSN is not set")]

TABLE = '''
[[tables]]
name = "customer"
topic = "salesdb.salesdb.CUSTOMER"
primary_key = ["CUST_ID"]
order_by = "mysql-binlog"
distkey = "customer_id"
columns = [
  { name = "CUST_ID", type = "varchar(64)", target = "customer_id" },
  { name = "NAME", type = "varchar(256)" },
]
'''


def test_procedure_on_real_redshift():
    from sync.warehouse import connect

    schema = "rs_test_" + uuid.uuid4().hex[:8]
    pipeline = make_pipeline(TABLE, schema=schema)
    wh = connect(DSN)
    try:
        for obj in pipeline_objects(pipeline, "redshift", "test"):
            if obj.kind == "external_schema":
                continue
            if obj.kind == "stream":
                wh.execute(
                    f'CREATE TABLE "{schema}"."customer__stream" (kafka_partition bigint, kafka_offset bigint, '
                    "kafka_timestamp_type char(1), kafka_timestamp timestamp, kafka_key varbyte(1024), kafka_headers super, "
                    "refresh_time timestamp, payload super, raw_value varbyte(65535), key_payload super)"
                )
                continue
            wh.execute(obj.sql)
        cs = ChangeStream(["CUST_ID"], MySqlSource())
        records = [cs.insert({"CUST_ID": "A", "NAME": "a"}), cs.update({"CUST_ID": "A", "NAME": "a"}, {"CUST_ID": "A", "NAME": "b"}),
                   cs.insert({"CUST_ID": "B", "NAME": "x"}), cs.delete({"CUST_ID": "B", "NAME": "x"})]
        for offset, rec in enumerate(records):
            wh.execute(
                f'INSERT INTO "{schema}"."customer__stream" VALUES (0, %s, \'C\', GETDATE(), NULL, NULL, GETDATE(), JSON_PARSE(%s), NULL, JSON_PARSE(%s))',
                (offset, json.dumps(rec["value"]), json.dumps(rec["key"])),
            )
        (run,) = sync(wh, pipeline, ["customer"])
        assert run.status == "ok", run.error
        assert wh.query(f'SELECT customer_id, name FROM "{schema}"."customer"') == [("A", "b")]
    finally:
        wh.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        wh.close()

"""Writes the sample messages of the jdbc_pagila example (run from the repository root):

    python examples/jdbc_pagila/make_events.py

The messages are shaped like the Confluent JDBC source connector's output with the
JsonConverter (schemas.enable=true): the value is the row as the poll read it, its schema
a struct named after the table with Kafka Connect Timestamps as milliseconds since the
epoch; the key, made by ValueToKey + ExtractField$Key, is the bare address_id with its
schema ({"schema":{"type":"int32","optional":false},"payload":100}). Rows 100-102 and
their values are the pagila rows of the query-based CDC walk-through "Hydrating a Data
Lake using Query-based CDC with Apache Kafka Connect and Kubernetes on AWS", which shows
that connector's messages and keys (the output of its "Connector Source #2"). The value schema's shape (a struct named after the table, Timestamps as
{"type":"int64","optional":false,"name":"org.apache.kafka.connect.data.Timestamp",
"version":1}) is the one printed in the Apache Kafka wiki's JsonConverter proposal page
(cwiki.apache.org, a message with create_ts/update_ts of 1501834166000).

Refreshes, as the streaming view would read them:
  address-1: the first poll (the whole table), then a poll with an update of 100 and of 102
  address-2: a task restart: the connector polls again from an older committed offset,
             re-reading rows already delivered (the same values), and 102, updated again
             within the same millisecond (the same last_update, other values); a producer
             retry's late copy of 100's first version; a tombstone, which a query-based
             topic never carries from the connector; a row whose last_update is not a
             time; a message written without the schemas wrapper (schemas.enable=false)
  payment-1: mode=incrementing, no Kafka key: three payments, then a restart re-reading
             the last one
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent / "events"
TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"

ADDRESS_FIELDS = [
    ("address_id", "int32", False, None),
    ("address", "string", False, None),
    ("address2", "string", True, None),
    ("district", "string", False, None),
    ("city_id", "int32", False, None),
    ("postal_code", "string", True, None),
    ("phone", "string", False, None),
    ("last_update", "int64", False, TIMESTAMP),
]
PAYMENT_FIELDS = [
    ("payment_id", "int64", False, None),
    ("customer_id", "int32", False, None),
    ("amount", "double", False, None),
    ("payment_date", "int64", False, TIMESTAMP),
]


def schema(name: str, fields: list[tuple]) -> dict:
    def field(f: str, t: str, optional: bool, logical: str | None) -> dict:
        return {"type": t, "optional": optional, **({"name": logical, "version": 1} if logical else {}), "field": f}

    return {"type": "struct", "fields": [field(*f) for f in fields], "optional": False, "name": name}


def address(row: dict | None, wrapped: bool = True, key: int | None = None) -> dict:
    key = row["address_id"] if row is not None else key
    value = {"schema": schema("address", ADDRESS_FIELDS), "payload": row} if wrapped and row is not None else row
    return {"key": {"schema": {"type": "int32", "optional": False}, "payload": key}, "value": value}


def payment(row: dict) -> dict:
    return {"key": None, "value": {"schema": schema("payment", PAYMENT_FIELDS), "payload": row}}


def addresses() -> dict[str, list[dict]]:
    t0, t1, t2 = 1487151930000, 1628815418508, 1628815420117
    a100 = {"address_id": 100, "address": "1308 Arecibo Way", "address2": "", "district": "Georgia",
            "city_id": 41, "postal_code": "30695", "phone": "6171054059", "last_update": t0}  # fmt: skip
    a101 = {"address_id": 101, "address": "1599 Plock Drive", "address2": "", "district": "Tete",
            "city_id": 534, "postal_code": "71986", "phone": "817248913162", "last_update": t0}  # fmt: skip
    a102 = {"address_id": 102, "address": "669 Firozabad Loop", "address2": "", "district": "Abu Dhabi",
            "city_id": 12, "postal_code": "92265", "phone": "412903167998", "last_update": t0}  # fmt: skip
    a100b = {**a100, "address2": "Apartment #1234", "last_update": t1}
    a102b = {**a102, "phone": "412903167999", "last_update": t2}
    a102c = {**a102b, "district": "Dubai"}  # updated again within the same millisecond
    a103 = {**a101, "address_id": 103, "address": "1 Nowhere Lane", "last_update": "soon"}
    a104 = {**a101, "address_id": 104, "address": "47 MySakila Drive", "last_update": t2}
    return {
        "address-1": [address(a100), address(a101), address(a102), address(a100b), address(a102b)],
        "address-2": [
            address(a101),  # the restart's poll from t0: the same values again
            address(a100b),
            address(a102c),
            address(a100),  # a producer retry's late copy of 100's first version
            address(None, key=101),  # a tombstone
            address(a103),
            address(a104, wrapped=False),
        ],
    }


def payments() -> dict[str, list[dict]]:
    rows = [
        {"payment_id": 16050, "customer_id": 269, "amount": 1.99, "payment_date": 1170307462000},
        {"payment_id": 16051, "customer_id": 269, "amount": 0.99, "payment_date": 1170446086000},
        {"payment_id": 16052, "customer_id": 269, "amount": 6.99, "payment_date": 1170465524000},
    ]
    return {"payment-1": [payment(r) for r in rows] + [payment(rows[-1])]}


def main() -> None:
    HERE.mkdir(exist_ok=True)
    for name, records in {**addresses(), **payments()}.items():
        with (HERE / f"{name}.jsonl").open("w") as fh:
            for record in records:
                fh.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()

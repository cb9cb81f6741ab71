"""Kafka records as Debezium's topic routing SMT emits them: the record moves to the
logical topic with its value unchanged (so the `source` block, or ExtractNewRecordState's
`__db`/`__table` fields, still name the physical table), and with
key.enforce.uniqueness=true (the default) the key gains one field.

Debezium, "Topic routing" (https://debezium.io/documentation/reference/stable/transformations/topic-routing.html,
"Ensuring unique keys across records routed to the same topic"): "the topic routing
transformation inserts a field into change event keys. By default, the name of the
inserted field is __dbz__physicalTableIdentifier. The value of the inserted field is the
default destination topic name." And for a partitioned PostgreSQL table: "Because each
key in a partitioned table is guaranteed to be unique, configure
key.enforce.uniqueness=false so that the SMT does not add a key field to ensure unique
keys."

Confluent, "ToLogicalTopicRouter (Debezium) SMT Usage Reference"
(https://docs.confluent.io/cloud/current/connectors/transforms/tologicaltopicrouter.html):
"ToLogicalTopicRouter is the current Debezium implementation of topic routing. It
supersedes the older ByLogicalTableRouter SMT ..., which is Debezium deprecated. ... the
default value of key.field.name is __dbz__sourceIdentifier for ToLogicalTopicRouter and
__dbz__physicalTableIdentifier for ByLogicalTableRouter".
"""

from __future__ import annotations

from typing import Any

from sync.route import ROUTER_KEY_FIELDS

TO_LOGICAL_TOPIC_ROUTER = ROUTER_KEY_FIELDS["io.debezium.transforms.ToLogicalTopicRouter"]
BY_LOGICAL_TABLE_ROUTER = ROUTER_KEY_FIELDS["io.debezium.transforms.ByLogicalTableRouter"]


def rerouted(record: dict[str, Any], physical_topic: str, key_field: str | None = TO_LOGICAL_TOPIC_ROUTER) -> dict[str, Any]:
    """`record` (as `ChangeStream` builds it) after the routing SMT: the key gains
    `key_field` holding the physical table's topic (None: key.enforce.uniqueness=false,
    the key unchanged); a key with the schemas wrapper gains the field in its schema too.
    The value, a tombstone's null included, is the record's own."""
    key = record["key"]
    if key_field is None or key is None:
        return dict(record)
    if isinstance(key, dict) and "schema" in key and "payload" in key:
        fields = [*key["schema"].get("fields", []), {"type": "string", "optional": False, "field": key_field}]
        key = {"schema": {**key["schema"], "fields": fields}, "payload": {**key["payload"], key_field: physical_topic}}
    else:
        key = {**key, key_field: physical_topic}
    return {**record, "key": key}


def unwrapped(record: dict[str, Any]) -> dict[str, Any]:
    """`record` (a full envelope) after ExtractNewRecordState with
    add.fields=table,lsn,source.ts_ms and delete.tombstone.handling.mode=rewrite: the row
    image, `__deleted`, and the added source fields (`table` -> `__table`)."""
    value = record["value"]
    if value is None:
        return dict(record)
    source, deleted = value["source"], value["op"] == "d"
    row = value["before"] if deleted else value["after"]
    flat = {
        **row,
        "__table": source["table"],
        "__lsn": source["lsn"],
        "__source_ts_ms": source["ts_ms"],
        "__deleted": "true" if deleted else "false",
    }
    return {**record, "value": flat}

"""A stand-in for a topic's streaming materialized view on Redshift, where no topic is at
hand (`doctor --verify`, tests/test_redshift_live.py): a plain table with the view's
columns (sync/sql/objects.py), filled as a refresh of the view fills it. One refresh
has one `refresh_time`, later than the one before; each partition's offsets go on from
its last; `kafka_key` holds the key's bytes and `key_payload` the key parsed, `payload`
the value parsed, NULL for a tombstone (the view's `JSON_PARSE(CASE WHEN
CAN_JSON_PARSE(kafka_value) THEN kafka_value END)`)."""

from __future__ import annotations

import json
from typing import Any

from sync.warehouse import Warehouse

COLUMNS = (
    "kafka_partition bigint, kafka_offset bigint, kafka_timestamp_type char(1), kafka_timestamp timestamp, "
    "kafka_key varbyte(1024), kafka_headers super, refresh_time timestamp, payload super, raw_value varbyte(65535), "
    "key_payload super"
)
# The n-th refresh's refresh_time: n seconds after this.
REFRESH_EPOCH = "TIMESTAMP '2026-01-01 00:00:00'"


def create(wh: Warehouse, relation: str) -> None:
    """The stand-in table `relation` (qualified and quoted)."""
    wh.execute(f"CREATE TABLE {relation} ({COLUMNS})")


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


def append_refresh(wh: Warehouse, relation: str, records: list[dict[str, Any]], refresh: int) -> None:
    """The records ({partition, key, value}; partition 0 when absent) as the `refresh`-th
    refresh of the stand-in `relation`."""
    last = dict(wh.query(f"SELECT kafka_partition, MAX(kafka_offset) FROM {relation} GROUP BY kafka_partition"))
    for rec in records:
        partition = rec.get("partition", 0)
        offset = last[partition] = last.get(partition, -1) + 1
        key = _json(rec.get("key"))
        wh.execute(
            f"INSERT INTO {relation} VALUES (%s, %s, 'C', GETDATE(), TO_VARBYTE(%s, 'utf8'), NULL, "
            f"{REFRESH_EPOCH} + %s * INTERVAL '1 second', JSON_PARSE(%s), NULL, JSON_PARSE(%s))",
            (partition, offset, key, refresh, _json(rec.get("value")), key),
        )

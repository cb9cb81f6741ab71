"""Kafka's default partitioner for keyed records, as the Java producer computes it.

`BuiltInPartitioner.partitionForKey`: `Utils.toPositive(Utils.murmur2(serializedKey)) %
numPartitions` (apache/kafka, clients/.../producer/internals/BuiltInPartitioner.java;
before 3.3 the same line in DefaultPartitioner). The mapping depends on the partition
count, so a topic whose partition count grows sends a key's later records to another
partition ("The default partitioner's mapping logic ... changes when the partition count
increases", KAFKA-20030). `murmur2` is `Utils.murmur2` (seed 0x9747b28c), pinned by
Kafka's own UtilsTest vectors in tests/test_kafka_partitioner.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def _signed(n: int) -> int:
    n &= _MASK
    return n - (1 << 32) if n & 0x80000000 else n


def murmur2(data: bytes) -> int:
    """`org.apache.kafka.common.utils.Utils.murmur2`: a 32-bit signed hash."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24  # Java's >>> on the 32-bit value
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = data[whole:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return _signed(h)


def to_positive(n: int) -> int:
    """`Utils.toPositive`: `number & 0x7fffffff`."""
    return n & 0x7FFFFFFF


def partition_for(key_bytes: bytes, partitions: int) -> int:
    return to_positive(murmur2(key_bytes)) % partitions


def json_key(key: Mapping[str, Any]) -> bytes:
    """The key bytes Kafka Connect's JsonConverter (`schemas.enable=false`) writes for a
    key struct: compact JSON, fields in schema order."""
    return json.dumps(dict(key), separators=(",", ":"), ensure_ascii=False).encode()

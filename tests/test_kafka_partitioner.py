"""The murmur2 partitioner of the delivery generator is Kafka's: the vectors are those of
Kafka's own `UtilsTest.testMurmur2` (apache/kafka, clients/src/test/java/org/apache/kafka/
common/utils/UtilsTest.java)."""

from __future__ import annotations

import pytest

from tests.kafka_partitioner import json_key, murmur2, partition_for, to_positive

UTILS_TEST = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    bytes([ord("a"), ord("b"), ord("c")]): 479470107,
}


@pytest.mark.parametrize("data", list(UTILS_TEST))
def test_murmur2_matches_kafka_utils_test(data):
    assert murmur2(data) == UTILS_TEST[data]


def test_partition_is_to_positive_hash_modulo_the_partition_count():
    h = murmur2(b"foobar")
    assert to_positive(h) == h & 0x7FFFFFFF >= 0
    assert [partition_for(b"foobar", n) for n in (3, 4)] == [(h & 0x7FFFFFFF) % 3, (h & 0x7FFFFFFF) % 4]


def test_json_key_is_compact_in_field_order():
    assert json_key({"ID": 1, "REGION": "eu"}) == b'{"ID":1,"REGION":"eu"}'

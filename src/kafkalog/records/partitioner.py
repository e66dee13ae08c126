"""Kafka's default partitioner for keyed records: ``toPositive(murmur2(key)) % partitions``, and
Java's ``String.hashCode``, which places a group in ``__consumer_offsets`` and orders a HashMap.

Why: a record written by kafkalog must land in the partition a Java producer would choose, so
consumers keyed by partition (and Spark jobs switching between ``kafka`` and ``kafkalog``) see the
same placement. murmur2 with Kafka's seed is Kafka's own algorithm, so it is written here.
Refuses: null keys (callers use sticky or round-robin placement for those).
"""

from __future__ import annotations

from kafkalog.errors import InvalidArgumentError

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``, as a signed 32-bit int."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    end = length - length % 4
    for i in range(0, end, 4):
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length % 4
    if tail == 3:
        h ^= data[end + 2] << 16
    if tail >= 2:
        h ^= data[end + 1] << 8
    if tail >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    if partitions < 1:
        raise InvalidArgumentError(f"a topic needs at least one partition, not {partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: 31-polynomial over UTF-16 code units, as a signed int32."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & _MASK
    return h - (1 << 32) if h >= 1 << 31 else h

"""Helpers shared by the storage tests."""

from __future__ import annotations

from kafkalog import MemoryRecords, Record


def batch(offset: int, n: int = 1, ts: int = 1000, value: bytes = b"value", **kw: object) -> bytes:
    """A v2 batch of ``n`` records at ``offset`` with timestamps ts, ts+1, ..."""
    recs = [
        Record(value + b"-%d" % (offset + i), key=b"k%d" % (offset + i), timestamp=ts + i)
        for i in range(n)
    ]
    return bytes(MemoryRecords.build(recs, base_offset=offset, **kw))  # type: ignore[arg-type]

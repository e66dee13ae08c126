"""Round-trip properties: every magic x codec x (null key, null value, headers, timestamps)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalog import CompressionType, MemoryRecords, Record, TimestampType
from kafkalog.testing.strategies import codecs_for, records

CASES = [(m, c) for m in (0, 1, 2) for c in codecs_for(m)]


@pytest.mark.parametrize(("magic", "codec"), CASES, ids=[f"v{m}-{c.kafka_name}" for m, c in CASES])
@given(data=st.data())
def test_round_trip(magic: int, codec: CompressionType, data: st.DataObject) -> None:
    recs = data.draw(records(magic))
    base = data.draw(st.integers(min_value=0, max_value=2**40))
    mr = MemoryRecords.build(recs, magic=magic, compression=codec, base_offset=base)
    batches = list(MemoryRecords(bytes(mr)).batches())
    if magic < 2 and codec is CompressionType.NONE:
        assert len(batches) == len(recs)  # legacy uncompressed: one entry per record
    else:
        (batch,) = batches
        assert batch.compression is codec
        assert (batch.base_offset, batch.last_offset) == (base, base + len(recs) - 1)
    out = [r for b in batches for r in b]
    assert [r.offset for r in out] == list(range(base, base + len(recs)))
    assert [r.key for r in out] == [r.key for r in recs]
    assert [r.value for r in out] == [r.value for r in recs]
    assert [list(r.headers) for r in out] == [list(r.headers) for r in recs]
    assert [r.timestamp for r in out] == [-1 if r.timestamp is None else r.timestamp for r in recs]
    assert all(b.is_valid() for b in batches)


@given(recs=records(2), append_time=st.integers(min_value=0, max_value=2**45))
def test_log_append_time_round_trip(recs: list[Record], append_time: int) -> None:
    mr = MemoryRecords.build(
        recs,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=append_time,
        compression="lz4",
    )
    (batch,) = mr.batches()
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert {r.timestamp for r in batch} == {append_time}

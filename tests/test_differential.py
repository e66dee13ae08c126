"""Differential tests against kafka-python's independent record codec, in both directions.

kafka-python's builders write base offset 0 and partition leader epoch 0 and never leave a
timestamp unset, so the generated records always carry one (v1/v2). Uncompressed output must be
byte-identical; compressed output must decode on the other side (compressors differ in bytes).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords as KpMemoryRecords

from kafkalog import CompressionType, MemoryRecords, Record

CASES = [
    (magic, codec)
    for magic in (0, 1, 2)
    for codec in CompressionType
    if not (codec is CompressionType.ZSTD and magic < 2)
]

payloads = st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=100, max_size=600))


@st.composite
def kp_records(draw: st.DrawFn, magic: int) -> list[Record]:
    n = draw(st.integers(min_value=1, max_value=12))
    base_ts = draw(st.integers(min_value=0, max_value=2**45))
    out = []
    for _ in range(n):
        hdrs = (
            draw(st.lists(st.tuples(st.text(max_size=8), st.binary(max_size=8)), max_size=3))
            if magic == 2
            else []
        )
        ts = base_ts + draw(st.integers(min_value=-1000, max_value=10**6)) if magic else None
        out.append(
            Record(
                draw(payloads),
                key=draw(payloads),
                headers=hdrs,
                timestamp=max(ts, 0) if ts is not None else None,
            )
        )
    return out


def kp_build(records: list[Record], magic: int, codec: CompressionType) -> bytes:
    if magic == 2:
        b2 = DefaultRecordBatchBuilder(2, int(codec), False, -1, -1, -1, 2**30)
        for i, r in enumerate(records):
            b2.append(i, r.timestamp, r.key, r.value, list(r.headers))
        return bytes(b2.build())
    b = LegacyRecordBatchBuilder(magic, int(codec), 2**30)
    for i, r in enumerate(records):
        b.append(i, r.timestamp, r.key, r.value)
    return bytes(b.build())


def kp_decode(data: bytes) -> list[tuple[object, ...]]:
    out = []
    mr = KpMemoryRecords(data)
    while (batch := mr.next_batch()) is not None:
        for r in batch:
            ts = -1 if r.timestamp is None else r.timestamp
            out.append((r.offset, ts, r.key, r.value, [tuple(h) for h in (r.headers or [])]))
    return out


def our_decode(data: bytes) -> list[tuple[object, ...]]:
    return [
        (r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers])
        for r in MemoryRecords(data).records()
    ]


def expected(records: list[Record]) -> list[tuple[object, ...]]:
    return [
        (
            i,
            -1 if r.timestamp is None else r.timestamp,
            r.key,
            r.value,
            [tuple(h) for h in r.headers],
        )
        for i, r in enumerate(records)
    ]


@pytest.mark.parametrize(("magic", "codec"), CASES, ids=[f"v{m}-{c.kafka_name}" for m, c in CASES])
@given(data=st.data())
def test_ours_decodes_kafka_python(magic: int, codec: CompressionType, data: st.DataObject) -> None:
    records = data.draw(kp_records(magic))
    assert our_decode(kp_build(records, magic, codec)) == expected(records)


@pytest.mark.parametrize(("magic", "codec"), CASES, ids=[f"v{m}-{c.kafka_name}" for m, c in CASES])
@given(data=st.data())
def test_kafka_python_decodes_ours(magic: int, codec: CompressionType, data: st.DataObject) -> None:
    records = data.draw(kp_records(magic))
    ours = bytes(
        MemoryRecords.build(records, magic=magic, compression=codec, partition_leader_epoch=0)
    )
    assert kp_decode(ours) == expected(records)


@pytest.mark.parametrize("magic", [0, 1, 2])
@given(data=st.data())
def test_uncompressed_bytes_are_identical(magic: int, data: st.DataObject) -> None:
    records = data.draw(kp_records(magic))
    ours = bytes(MemoryRecords.build(records, magic=magic, partition_leader_epoch=0))
    assert ours == kp_build(records, magic, CompressionType.NONE)

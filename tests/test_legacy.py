"""Legacy v0/v1 messages: wrappers, inner offsets and timestamps (Kafka's LegacyRecord,
AbstractLegacyRecordBatch)."""

from __future__ import annotations

import struct

import pytest

from kafkalog import CorruptRecordError, InvalidRecordError, MemoryRecords, Record, TimestampType
from kafkalog.records import LegacyRecordBatch, compression
from kafkalog.records.crc import crc32
from kafkalog.records.legacy import encode_message
from kafkalog.types import CompressionType


def wrapper(
    magic: int, wrapper_offset: int, inner_offsets: list[int], codec: str = "gzip"
) -> bytes:
    ct = CompressionType.parse(codec)
    inner = b"".join(
        encode_message(magic, off, 0, 1000 + i if magic else -1, None, b"r%d" % i)
        for i, off in enumerate(inner_offsets)
    )
    return encode_message(
        magic,
        wrapper_offset,
        int(ct),
        2000 if magic else -1,
        None,
        compression.compress(ct, inner, magic=magic),
    )


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4"])
def test_v1_inner_offsets_are_relative_to_the_last(codec: str) -> None:
    (batch,) = MemoryRecords(wrapper(1, 52, [0, 1, 2], codec)).batches()
    assert isinstance(batch, LegacyRecordBatch)
    assert [r.offset for r in batch] == [50, 51, 52]
    assert (batch.base_offset, batch.last_offset) == (50, 52)
    assert [r.timestamp for r in batch] == [1000, 1001, 1002]  # CreateTime: each its own


def test_v1_wrapper_offset_zero_means_base_zero() -> None:
    (batch,) = MemoryRecords(wrapper(1, 0, [0, 1, 2])).batches()
    assert [r.offset for r in batch] == [0, 1, 2]


def test_v1_wrapper_offset_below_last_relative_is_invalid() -> None:
    (batch,) = MemoryRecords(wrapper(1, 1, [0, 1, 2])).batches()
    with pytest.raises(CorruptRecordError, match="below the last inner"):
        list(batch)


def test_v0_inner_offsets_are_absolute() -> None:
    (batch,) = MemoryRecords(wrapper(0, 9, [7, 8, 9], "lz4")).batches()
    assert [r.offset for r in batch] == [7, 8, 9]
    assert all(r.timestamp == -1 for r in batch)


def test_v1_log_append_time_wrapper_timestamp_wins() -> None:
    mr = MemoryRecords.build(
        [Record(b"a", timestamp=1), Record(b"b", timestamp=2)],
        magic=1,
        compression="gzip",
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=999,
        base_offset=3,
    )
    (batch,) = mr.batches()
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME and batch.max_timestamp == 999
    assert [(r.offset, r.timestamp) for r in batch] == [(3, 999), (4, 999)]


def test_v1_create_time_wrapper_timestamp_is_the_max() -> None:
    mr = MemoryRecords.build(
        [Record(b"a", timestamp=5), Record(b"b", timestamp=3)], magic=1, compression="snappy"
    )
    (batch,) = mr.batches()
    assert batch.max_timestamp == 5 and batch.last_offset == 1


def test_wrapper_with_null_value_or_no_inner_messages_is_invalid() -> None:
    null = encode_message(1, 0, int(CompressionType.GZIP), 0, None, None)
    (batch,) = MemoryRecords(null).batches()
    with pytest.raises(CorruptRecordError, match="null value"):
        list(batch)
    empty = encode_message(1, 0, 1, 0, None, compression.compress(CompressionType.GZIP, b""))
    (batch,) = MemoryRecords(empty).batches()
    with pytest.raises(CorruptRecordError, match="no records"):
        list(batch)


def test_compressed_inner_message_is_invalid() -> None:
    inner = encode_message(1, 0, int(CompressionType.GZIP), 0, None, b"x")
    outer = encode_message(1, 0, 1, 0, None, compression.compress(CompressionType.GZIP, inner))
    (batch,) = MemoryRecords(outer).batches()
    with pytest.raises(CorruptRecordError, match="compressed message"):
        list(batch)


def test_zstd_wrapper_is_refused_on_read() -> None:
    msg = encode_message(1, 0, int(CompressionType.ZSTD), 0, None, b"\x28\xb5\x2f\xfd")
    (batch,) = MemoryRecords(msg).batches()
    with pytest.raises(Exception, match="magic 2"):
        list(batch)


def test_legacy_crc_covers_magic_to_end() -> None:
    msg = encode_message(1, 5, 0, 7, b"k", b"v")
    (stored,) = struct.unpack_from(">I", msg, 12)
    assert stored == crc32(msg[16:])
    (batch,) = MemoryRecords(msg).batches()
    assert batch.is_valid()


def test_v0_cannot_take_timestamps_or_headers() -> None:
    with pytest.raises(InvalidRecordError, match="timestamps"):
        MemoryRecords.build([Record(b"a", timestamp=5)], magic=0)
    with pytest.raises(InvalidRecordError, match="headers"):
        MemoryRecords.build([Record(b"a", headers=[("h", b"")])], magic=1)

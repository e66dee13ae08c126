"""The one scanner: valid prefix and stop reason, never an exception mid-stream."""

from __future__ import annotations

import struct

import pytest

from kafkalog import CorruptRecordError, MemoryRecords, Record
from kafkalog.records import BatchScanner, ScanStop, next_batch_size


def batches(n: int, magic: int = 2) -> list[bytes]:
    return [
        bytes(
            MemoryRecords.build(
                [Record(b"value-%d" % i, key=b"k", timestamp=i if magic else None)],
                magic=magic,
                base_offset=i,
            )
        )
        for i in range(n)
    ]


def test_clean_end_mixed_magics() -> None:
    parts = batches(2, 0) + batches(2, 1) + batches(2, 2)
    data = b"".join(parts)
    scanner = BatchScanner(data)
    got = list(scanner)
    assert [b.magic for b in got] == [0, 0, 1, 1, 2, 2]
    assert [b.position for b in got] == [sum(map(len, parts[:i])) for i in range(6)]
    assert scanner.stop is ScanStop.END and scanner.valid_bytes == len(data)
    assert scanner.error is None and scanner.batches_read == 6


@pytest.mark.parametrize("extra", range(0, 7))
def test_trailing_partial_bytes_are_ignored(extra: int) -> None:
    parts = batches(3)
    data = b"".join(parts) + parts[0][:extra]
    scanner = BatchScanner(data)
    assert len(list(scanner)) == 3
    assert scanner.valid_bytes == len(data) - extra
    assert scanner.stop is (ScanStop.END if extra == 0 else ScanStop.TRUNCATED)


def test_partial_batch_whose_header_is_complete_is_truncated_not_corrupt() -> None:
    parts = batches(2)
    data = parts[0] + parts[1][:-1]
    scanner = BatchScanner(data)
    assert len(list(scanner)) == 1 and scanner.stop is ScanStop.TRUNCATED


def test_bad_size_bad_magic_and_bad_crc_are_reported() -> None:
    good = b"".join(batches(2))
    first = len(batches(1)[0])
    small = bytearray(good)
    struct.pack_into(">i", small, first + 8, 5)
    magic = bytearray(good)
    magic[first + 16] = 7
    crc = bytearray(good)
    crc[first + 30] ^= 0x01
    for data, stop in (
        (small, ScanStop.BAD_SIZE),
        (magic, ScanStop.BAD_MAGIC),
        (crc, ScanStop.BAD_CRC),
    ):
        scanner = BatchScanner(data)
        assert len(list(scanner)) == 1
        assert scanner.stop is stop and scanner.stop.is_corruption
        assert scanner.valid_bytes == first
        assert scanner.error is not None and scanner.error.position == first
        assert scanner.error.offset == 1


def test_v2_batch_smaller_than_its_header_is_bad_size() -> None:
    data = bytearray(batches(1)[0])
    struct.pack_into(">i", data, 8, 30)
    scanner = BatchScanner(data)
    assert list(scanner) == [] and scanner.stop is ScanStop.BAD_SIZE


def test_max_batch_size() -> None:
    data = b"".join(batches(2))
    scanner = BatchScanner(data, max_batch_size=10)
    assert list(scanner) == [] and scanner.stop is ScanStop.BAD_SIZE


def test_crc_check_can_be_skipped() -> None:
    data = bytearray(batches(1)[0])
    data[-1] ^= 0xFF
    assert list(BatchScanner(data, verify_crc=False))
    assert not list(BatchScanner(data))


def test_deep_scan_stops_at_malformed_records() -> None:
    good = batches(1)[0]
    bad = bytearray(MemoryRecords.build([Record(b"abc")], base_offset=1).buffer)
    bad[57:61] = (2).to_bytes(4, "big")  # declares two records, holds one
    from kafkalog.records.batch import CRC_OFFSET, CRC_START
    from kafkalog.records.crc import crc32c

    struct.pack_into(">I", bad, CRC_OFFSET, crc32c(bytes(bad[CRC_START:])))
    data = good + bytes(bad)
    assert len(list(BatchScanner(data))) == 2  # shallow: the CRC is fine
    deep = BatchScanner(data, deep=True)
    assert len(list(deep)) == 1 and deep.stop is ScanStop.BAD_RECORDS
    assert deep.valid_bytes == len(good)


def test_start_and_end_bound_the_scan() -> None:
    parts = batches(3)
    data = b"".join(parts)
    scanner = BatchScanner(data, start=len(parts[0]), end=len(parts[0]) + len(parts[1]))
    (only,) = list(scanner)
    assert only.base_offset == 1 and scanner.stop is ScanStop.END


def test_memory_records_batches_raise_on_damage() -> None:
    data = bytearray(b"".join(batches(2)))
    data[-3] ^= 0x10
    got = []
    with pytest.raises(CorruptRecordError, match="crc"):
        for b in MemoryRecords(data).batches():
            got.append(b)
    assert len(got) == 1


def test_next_batch_size_probe() -> None:
    good = batches(1)[0]
    assert next_batch_size(good[:11]) is None
    assert next_batch_size(good[:16]) is None
    assert next_batch_size(good[:17]) == len(good)
    with pytest.raises(CorruptRecordError):
        next_batch_size(b"\x00" * 8 + struct.pack(">i", 13))
    bad_magic = bytearray(good)
    bad_magic[16] = 3
    with pytest.raises(CorruptRecordError, match="magic"):
        next_batch_size(bytes(bad_magic))


def test_scanner_accepts_any_buffer_without_copying() -> None:
    data = bytearray(b"".join(batches(2)))
    (first, _) = list(BatchScanner(memoryview(data)))
    data[12:16] = b"\x00\x00\x00\x09"  # partition leader epoch, outside the CRC
    assert first.buffer[12:16].tobytes() == b"\x00\x00\x00\x09"

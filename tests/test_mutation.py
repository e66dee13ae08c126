"""Every single-byte change a batch's CRC covers is detected (Kafka's DefaultRecordBatch.isValid).

Bytes 0-7 (base offset) and 12-15 (partition leader epoch) lie outside the v2 CRC, as in Kafka,
so the broker can rewrite them in place: changes there must NOT invalidate the batch. A change to
the size (8-11) or the magic (16) must end in a typed kafkalog error, never a wrong batch.
"""

from __future__ import annotations

import pytest

from kafkalog import CorruptRecordError, KafkaLogError, MemoryRecords, Record
from kafkalog.records import BatchScanner, ScanStop, decode_batch

RECORDS = [
    Record(
        b"value-%d" % i, key=b"key-%d" % i, headers=[("h", b"x")], timestamp=1_700_000_000_000 + i
    )
    for i in range(4)
]
XORS = (0x01, 0x80, 0xFF)


def batch_bytes(codec: str, magic: int = 2) -> bytes:
    recs = (
        RECORDS
        if magic == 2
        else [Record(r.value, r.key, (), r.timestamp if magic else None) for r in RECORDS]
    )
    return bytes(MemoryRecords.build(recs, magic=magic, compression=codec, base_offset=3))


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_byte_the_crc_covers_is_detected(codec: str) -> None:
    data = batch_bytes(codec)
    for pos in range(21, len(data)):
        for xor in XORS:
            mutated = bytearray(data)
            mutated[pos] ^= xor
            scanner = BatchScanner(mutated)
            assert list(scanner) == [], f"change at byte {pos} went unnoticed"
            assert scanner.stop is ScanStop.BAD_CRC
            with pytest.raises(CorruptRecordError):
                decode_batch(mutated)


@pytest.mark.parametrize("pos", [*range(0, 8), *range(12, 16)])
def test_base_offset_and_leader_epoch_are_outside_the_crc(pos: int) -> None:
    mutated = bytearray(batch_bytes("lz4"))
    mutated[pos] ^= 0x5A
    batch = decode_batch(mutated)
    assert batch.is_valid()


@pytest.mark.parametrize("magic", [0, 1, 2])
@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_size_and_magic_changes_are_typed_errors(magic: int, codec: str) -> None:
    data = batch_bytes(codec, magic)
    first = next(iter(MemoryRecords(data).batches()))
    one = bytes(first.buffer)
    for pos in (*range(8, 12), 16):
        for xor in XORS:
            mutated = bytearray(one)
            mutated[pos] ^= xor
            with pytest.raises(KafkaLogError):
                batch = decode_batch(mutated)
                list(batch)  # a changed magic may still frame; its records must not decode
            scanner = BatchScanner(mutated, deep=True)
            assert list(scanner) == [], f"byte {pos} ^ {xor:#x} still yielded a batch"


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_crc_covers_magic_to_end(magic: int) -> None:
    data = batch_bytes("none", magic)
    one = bytes(next(iter(MemoryRecords(data).batches())).buffer)
    for pos in range(16, len(one)):
        mutated = bytearray(one)
        mutated[pos] ^= 0x01
        assert list(BatchScanner(mutated)) == [], f"change at byte {pos} went unnoticed"

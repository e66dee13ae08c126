"""Batches captured from real Kafka brokers (see golden/README.md) decode field for field."""

from __future__ import annotations

from conftest import golden_bytes
from kafkalog import MemoryRecords, RecordBatch, TimestampType
from kafkalog.records import LegacyRecordBatch, ScanStop, decode_control_key
from kafkalog.types import ControlRecordType


def test_broker_v2_batches() -> None:
    data = golden_bytes("broker-v2.hex")
    scanner = MemoryRecords(data + b"\x00" * 4).scan()
    batches = list(scanner)
    assert scanner.valid_bytes == 299 and scanner.stop is ScanStop.TRUNCATED
    assert [type(b) for b in batches] == [RecordBatch] * 4
    assert all(b.is_valid() for b in batches)
    first = list(batches[0])
    assert [(r.offset, r.key, r.value, list(r.headers)) for r in first] == [(0, None, b"123", [])]
    assert first[0].timestamp == 1503229838908
    assert batches[0].timestamp_type is TimestampType.CREATE_TIME
    assert batches[0].partition_leader_epoch == 1
    second = list(batches[1])
    assert [(r.offset, r.value) for r in second] == [(1, b""), (2, b"")]
    assert second[1].timestamp - second[0].timestamp == 168  # the two-byte delta 0xd0 0x02
    assert [r.value for r in batches[2]] == [b"123"]
    (hdr,) = batches[3]
    assert hdr.value == b"hdr" and list(hdr.headers) == [("hkey", b"hval")]


def test_broker_v1_messages() -> None:
    data = golden_bytes("broker-v1.hex")
    scanner = MemoryRecords(data + b"\x00" * 4).scan()
    batches = list(scanner)
    assert scanner.valid_bytes == 142
    assert all(isinstance(b, LegacyRecordBatch) and b.magic == 1 for b in batches)
    recs = [r for b in batches for r in b]
    assert [(r.offset, r.value) for r in recs] == [(0, b"123"), (1, b""), (2, b""), (3, b"123")]
    assert recs[0].timestamp == 1503648000942
    assert batches[0].crc == 1199974594
    assert all(b.is_valid() for b in batches)


def test_broker_v0_messages() -> None:
    data = golden_bytes("broker-v0.hex")
    scanner = MemoryRecords(data + b"\x00" * 4).scan()
    batches = list(scanner)
    assert scanner.valid_bytes == 110
    recs = [r for b in batches for r in b]
    assert [(r.offset, r.value, r.timestamp) for r in recs] == [
        (0, b"123", -1),
        (1, b"", -1),
        (2, b"", -1),
        (3, b"123", -1),
    ]
    assert batches[0].crc == -22012481 & 0xFFFFFFFF
    assert batches[0].timestamp_type is TimestampType.NO_TIMESTAMP_TYPE


def test_abort_marker_sample() -> None:
    """kafka-python's control sample is hand-made (timestamps 9999999) and its stored CRC does not
    match its bytes; kafka-python never checks. We must flag it, and still decode it when asked."""
    data = golden_bytes("broker-abort-marker-v2.hex")
    scanner = MemoryRecords(data).scan()
    assert list(scanner) == [] and scanner.stop is ScanStop.BAD_CRC
    assert scanner.error is not None and "crc" in str(scanner.error)
    (batch,) = MemoryRecords(data).batches(verify_crc=False)
    assert batch.is_control and not batch.is_transactional and not batch.is_valid()
    assert batch.max_timestamp == 9999999
    (rec,) = batch
    key = decode_control_key(rec.key)
    assert key.version == 0 and key.type is ControlRecordType.ABORT
    assert rec.value == b"opaque-control-message"


def test_our_encoding_of_broker_v2_data_is_identical() -> None:
    """Rebuilding each captured uncompressed batch from its decoded fields gives the same bytes."""
    data = golden_bytes("broker-v2.hex")
    for batch in MemoryRecords(data).batches():
        assert isinstance(batch, RecordBatch)
        rebuilt = MemoryRecords.build(
            list(batch),
            base_offset=batch.base_offset,
            partition_leader_epoch=batch.partition_leader_epoch,
        )
        assert bytes(rebuilt) == bytes(batch.buffer)

"""Fixed byte vectors of every record format: byte-exact on encode and decode."""

from __future__ import annotations

import pytest

from kafkalog import CompressionType, MemoryRecords, Record, RecordBatch, TimestampType
from kafkalog.records import LegacyRecordBatch, build_end_txn_marker, decode_end_txn_marker
from kafkalog.types import ControlRecordType


def h(*parts: str) -> bytes:
    return bytes.fromhex("".join("".join(parts).split()))


VECTOR_A = h(
    "00000000000000000000003a0000000002e99b8dd80000000000000000018bcfe568000000018bcfe568",
    "00ffffffffffffffffffffffffffff00000001",
    "10000000026b027600",
)
VECTOR_B = h(
    "00000000000000640000004a000000030243801e2800000000000100000000000003e800000000000003ed",
    "ffffffffffffffffffffffffffff00000002",
    "0e0000000102610020000a02066b6579010402680278026e01",
)
VECTOR_C = h("00000000000000050000001839268c3301000000018bcfe56800000000016b0000000176")
VECTOR_D = h("00000000000000070000001387a77ab20000ffffffff0000000568656c6c6f")
# As first written down, the marker vector was 77 bytes where a marker batch has 78: the "00" ending
# maxTimestamp (the byte vector A carries at the start of its second piece) is missing. The
# printed CRC fbd2ae74 covers that byte and matches this 78-byte form, which settles the intent.
VECTOR_E = h(
    "000000000000000a000000420000000202fbd2ae740030000000000000018bcfe568000000018bcfe568",
    "000000000000000005 0001 ffffffff 00000001",
    "2000000008000000010c00000000000700",
)
VECTOR_E_PRINTED_CRC = 0xFBD2AE74
TS = 1_700_000_000_000


def test_vector_a_encode_decode() -> None:
    mr = MemoryRecords.build([Record(b"v", key=b"k", timestamp=TS)], partition_leader_epoch=0)
    assert bytes(mr) == VECTOR_A and len(VECTOR_A) == 70
    (batch,) = MemoryRecords(VECTOR_A).batches()
    assert isinstance(batch, RecordBatch)
    assert (batch.base_offset, batch.last_offset, batch.partition_leader_epoch) == (0, 0, 0)
    assert batch.timestamp_type is TimestampType.CREATE_TIME
    assert batch.max_timestamp == TS and batch.compression is CompressionType.NONE
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    assert not batch.is_transactional and not batch.is_control
    assert batch.delete_horizon_ms is None
    (rec,) = batch
    assert (rec.offset, rec.timestamp, rec.key, rec.value, list(rec.headers)) == (
        0,
        TS,
        b"k",
        b"v",
        [],
    )


def test_vector_b_encode_decode() -> None:
    records = [
        Record(b"a", timestamp=1000),
        Record(None, key=b"key", timestamp=1005, headers=[("h", b"x"), ("n", None)]),
    ]
    mr = MemoryRecords.build(records, base_offset=100, partition_leader_epoch=3)
    assert bytes(mr) == VECTOR_B and len(VECTOR_B) == 86
    (batch,) = MemoryRecords(VECTOR_B).batches()
    assert (batch.base_offset, batch.last_offset, batch.partition_leader_epoch) == (100, 101, 3)
    assert batch.max_timestamp == 1005
    first, second = batch
    assert (first.offset, first.timestamp, first.key, first.value) == (100, 1000, None, b"a")
    assert list(first.headers) == []
    assert (second.offset, second.timestamp, second.key, second.value) == (101, 1005, b"key", None)
    assert list(second.headers) == [("h", b"x"), ("n", None)]


def test_vector_c_v1_message() -> None:
    mr = MemoryRecords.build([Record(b"v", key=b"k", timestamp=TS)], magic=1, base_offset=5)
    assert bytes(mr) == VECTOR_C and len(VECTOR_C) == 36
    (batch,) = MemoryRecords(VECTOR_C).batches()
    assert isinstance(batch, LegacyRecordBatch)
    assert batch.magic == 1 and batch.last_offset == 5 and batch.base_offset == 5
    assert batch.timestamp_type is TimestampType.CREATE_TIME and batch.crc == 0x39268C33
    (rec,) = batch
    assert (rec.offset, rec.timestamp, rec.key, rec.value) == (5, TS, b"k", b"v")


def test_vector_d_v0_message() -> None:
    mr = MemoryRecords.build([Record(b"hello")], magic=0, base_offset=7)
    assert bytes(mr) == VECTOR_D and len(VECTOR_D) == 31
    (batch,) = MemoryRecords(VECTOR_D).batches()
    assert batch.magic == 0 and batch.timestamp_type is TimestampType.NO_TIMESTAMP_TYPE
    (rec,) = batch
    assert (rec.offset, rec.timestamp, rec.key, rec.value) == (7, -1, None, b"hello")


def test_vector_e_commit_marker() -> None:
    marker = build_end_txn_marker(
        offset=10,
        producer_id=5,
        producer_epoch=1,
        marker=ControlRecordType.COMMIT,
        coordinator_epoch=7,
        timestamp=TS,
        partition_leader_epoch=2,
    )
    assert marker == VECTOR_E and len(marker) == 78
    (batch,) = MemoryRecords(VECTOR_E).batches()
    assert batch.crc == VECTOR_E_PRINTED_CRC and batch.is_valid()
    assert batch.is_control and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (5, 1, -1)
    (rec,) = batch
    decoded = decode_end_txn_marker(rec.key, rec.value)
    assert decoded.type is ControlRecordType.COMMIT and decoded.coordinator_epoch == 7


@pytest.mark.parametrize("vector", [VECTOR_A, VECTOR_B, VECTOR_C, VECTOR_D, VECTOR_E])
def test_vectors_rebuild_byte_exact_from_decoded(vector: bytes) -> None:
    """Decoding then re-encoding each vector reproduces it exactly."""
    (batch,) = MemoryRecords(vector).batches()
    if batch.is_control:
        return  # covered by test_vector_e_commit_marker
    rebuilt = MemoryRecords.build(
        list(batch),
        magic=batch.magic,
        base_offset=batch.base_offset,
        partition_leader_epoch=batch.partition_leader_epoch,
    )
    assert bytes(rebuilt) == vector

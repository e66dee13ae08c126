"""v2 batch behaviours, as Kafka's DefaultRecordBatch and DefaultRecordBatchTest have them."""

from __future__ import annotations

import pytest

from kafkalog import (
    CorruptRecordError,
    InvalidRecordError,
    MemoryRecords,
    Record,
    RecordBatch,
    TimestampType,
)
from kafkalog.records import (
    RECORD_BATCH_OVERHEAD,
    RecordBatchBuilder,
    build_empty_batch,
    decode_control_key,
    decode_end_txn_marker,
)
from kafkalog.records.batch import decrement_sequence, increment_sequence
from kafkalog.types import INT32_MAX, CompressionType, ControlRecordType

TS = 1_700_000_000_000


def one_batch(data: bytes | bytearray) -> RecordBatch:
    (batch,) = MemoryRecords(data).batches()
    assert isinstance(batch, RecordBatch)
    return batch


def sample(n: int = 3, **kw: object) -> bytearray:
    recs = [Record(b"v%d" % i, key=b"k%d" % i, timestamp=TS + i) for i in range(n)]
    return bytearray(bytes(MemoryRecords.build(recs, **kw)))  # type: ignore[arg-type]


def test_header_fields_and_attribute_bits() -> None:
    data = sample(
        5,
        base_offset=42,
        compression="gzip",
        producer_id=7,
        producer_epoch=3,
        base_sequence=11,
        is_transactional=True,
        partition_leader_epoch=9,
    )
    batch = one_batch(data)
    h = batch.header
    assert (h.base_offset, h.last_offset, h.next_offset, h.records_count) == (42, 46, 47, 5)
    assert h.magic == 2 and h.compression is CompressionType.GZIP
    assert h.attributes == 0x11  # gzip | transactional
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (7, 3, 11, 15)
    assert h.partition_leader_epoch == 9 and h.is_transactional and not h.is_control
    assert h.base_timestamp == TS and h.max_timestamp == TS + 4
    assert batch.size_in_bytes == len(data)


def test_set_last_offset_keeps_crc_valid() -> None:
    batch = one_batch(sample(3))
    batch.set_last_offset(102)
    assert (batch.base_offset, batch.last_offset) == (100, 102)
    assert batch.is_valid()
    assert [r.offset for r in batch] == [100, 101, 102]


def test_set_partition_leader_epoch_keeps_crc_valid() -> None:
    batch = one_batch(sample(2))
    batch.set_partition_leader_epoch(17)
    assert batch.partition_leader_epoch == 17 and batch.is_valid()


def test_set_log_append_time_recomputes_crc_and_every_record_reports_it() -> None:
    data = sample(3)
    batch = one_batch(data)
    old_crc = batch.crc
    batch.set_max_timestamp(TimestampType.LOG_APPEND_TIME, 1234)
    assert batch.header.attributes & 0x08 and batch.max_timestamp == 1234
    assert batch.crc != old_crc and batch.is_valid()
    assert [r.timestamp for r in batch] == [1234, 1234, 1234]
    assert one_batch(data).timestamp_type is TimestampType.LOG_APPEND_TIME


def test_set_max_timestamp_without_change_leaves_bytes_alone() -> None:
    data = sample(3)
    before = bytes(data)
    one_batch(data).set_max_timestamp(TimestampType.CREATE_TIME, TS + 2)
    assert bytes(data) == before


def test_no_timestamp_type_is_rejected_for_v2() -> None:
    with pytest.raises(InvalidRecordError):
        one_batch(sample(1)).set_max_timestamp(TimestampType.NO_TIMESTAMP_TYPE, 0)


def test_read_only_buffers_cannot_be_mutated() -> None:
    (batch,) = MemoryRecords(bytes(sample(1))).batches()
    assert isinstance(batch, RecordBatch)
    with pytest.raises(InvalidRecordError, match="read-only"):
        batch.set_last_offset(5)


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4"])
@pytest.mark.parametrize("delta", [-1, 1])
def test_wrong_record_count_fails_iteration(codec: str, delta: int) -> None:
    data = sample(3, compression=codec)
    data[57:61] = (3 + delta).to_bytes(4, "big")
    (batch,) = MemoryRecords(data).batches(verify_crc=False)
    with pytest.raises(CorruptRecordError):
        list(batch)


def test_negative_record_count_is_corrupt() -> None:
    data = sample(1)
    data[57:61] = (-1).to_bytes(4, "big", signed=True)
    (batch,) = MemoryRecords(data).batches(verify_crc=False)
    with pytest.raises(CorruptRecordError, match="negative"):
        list(batch)


def test_sequences_wrap_at_int32_max() -> None:
    assert increment_sequence(INT32_MAX, 1) == 0
    assert increment_sequence(INT32_MAX - 1, 3) == 1
    assert decrement_sequence(0, 1) == INT32_MAX
    assert decrement_sequence(5, 2) == 3
    batch = one_batch(sample(3, producer_id=1, producer_epoch=0, base_sequence=INT32_MAX - 1))
    assert batch.last_sequence == 0  # MAX-1, MAX, 0
    assert one_batch(sample(3)).last_sequence == -1


def test_empty_batch_header() -> None:
    data = build_empty_batch(
        base_offset=10,
        last_offset_delta=4,
        max_timestamp=TS,
        producer_id=3,
        producer_epoch=2,
        base_sequence=5,
        is_transactional=True,
        partition_leader_epoch=1,
    )
    assert len(data) == RECORD_BATCH_OVERHEAD
    batch = one_batch(data)
    assert batch.is_valid() and list(batch) == []
    h = batch.header
    assert (h.batch_length, h.records_count, h.base_timestamp, h.max_timestamp) == (49, 0, -1, TS)
    assert (h.base_offset, h.last_offset, h.producer_id, h.base_sequence) == (10, 14, 3, 5)
    assert h.last_sequence == 9


def test_control_batch_round_trip() -> None:
    builder = RecordBatchBuilder(
        base_offset=3, producer_id=9, producer_epoch=4, is_transactional=True, is_control=True
    )
    builder.append_end_txn_marker(ControlRecordType.ABORT, coordinator_epoch=12, timestamp=TS)
    batch = one_batch(builder.build())
    assert batch.is_control and batch.is_transactional and batch.header.attributes == 0x30
    (rec,) = batch
    key = decode_control_key(rec.key)
    assert (key.version, key.type) == (0, ControlRecordType.ABORT)
    marker = decode_end_txn_marker(rec.key, rec.value)
    assert marker.type is ControlRecordType.ABORT and marker.coordinator_epoch == 12


def test_unknown_control_types_are_tolerated_on_read() -> None:
    key = decode_control_key(b"\x00\x00\x00\x63")
    assert key.type is ControlRecordType.UNKNOWN and key.type_id == 99
    assert decode_control_key(b"\x00\x05\x00\x01").type is ControlRecordType.COMMIT  # v5 read as v0
    with pytest.raises(CorruptRecordError):
        decode_control_key(b"\xff\xff\x00\x00")
    with pytest.raises(CorruptRecordError):
        decode_control_key(b"\x00\x00")
    with pytest.raises(CorruptRecordError):
        decode_end_txn_marker(b"\x00\x00\x00\x01", b"\x00\x00")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"is_transactional": True}, "producer id"),
        ({"producer_id": 1, "producer_epoch": -1, "base_sequence": 0}, "epoch"),
        ({"producer_id": 1, "producer_epoch": 0, "base_sequence": -1}, "sequence"),
        ({"base_offset": -1}, "base offset"),
        ({"timestamp_type": TimestampType.LOG_APPEND_TIME}, "log_append_time"),
    ],
)
def test_builder_refuses_what_kafka_refuses(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidRecordError, match=message):
        RecordBatchBuilder(**kwargs)  # type: ignore[arg-type]


def test_builder_refuses_markers_outside_transactional_control_batches() -> None:
    with pytest.raises(InvalidRecordError, match="transactional control"):
        RecordBatchBuilder().append_end_txn_marker(ControlRecordType.COMMIT, 0, TS)


def test_builder_refuses_non_increasing_offsets() -> None:
    builder = RecordBatchBuilder(base_offset=10)
    builder.append(b"a", offset=12)
    with pytest.raises(InvalidRecordError, match="not above"):
        builder.append(b"b", offset=12)


def test_sparse_offsets_are_kept() -> None:
    builder = RecordBatchBuilder(base_offset=10)
    for off in (10, 13, 20):
        builder.append(b"x", offset=off)
    batch = one_batch(builder.build())
    assert [r.offset for r in batch] == [10, 13, 20] and batch.last_offset == 20


def test_log_append_time_build_reports_append_time_and_last_offset() -> None:
    mr = MemoryRecords.build(
        [Record(b"a", timestamp=5), Record(b"b", timestamp=9)],
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=777,
        base_offset=4,
    )
    batch = one_batch(bytes(mr))
    assert (batch.max_timestamp, batch.last_offset) == (777, 5)
    assert [r.timestamp for r in batch] == [777, 777]


def test_create_time_build_reports_max_record_timestamp() -> None:
    mr = MemoryRecords.build([Record(b"a", timestamp=9), Record(b"b", timestamp=5)])
    assert one_batch(bytes(mr)).max_timestamp == 9


def test_delete_horizon_keeps_record_timestamps() -> None:
    builder = RecordBatchBuilder(delete_horizon_ms=TS + 86_400_000)
    builder.append(b"a", key=b"k", timestamp=TS)
    builder.append(None, key=b"k", timestamp=TS + 5)
    batch = one_batch(builder.build())
    assert batch.delete_horizon_ms == TS + 86_400_000 and batch.header.attributes & 0x40
    assert [r.timestamp for r in batch] == [TS, TS + 5]


def test_null_and_empty_keys_and_values_differ() -> None:
    recs = [Record(None, key=None), Record(b"", key=b""), Record(None, key=b""), Record(b"", None)]
    out = list(one_batch(bytes(MemoryRecords.build(recs))))
    assert [(r.key, r.value) for r in out] == [(None, None), (b"", b""), (b"", None), (None, b"")]


def test_header_with_null_value_and_empty_key() -> None:
    rec = Record(b"v", headers=[("", None), ("ü", b"")])
    (out,) = one_batch(bytes(MemoryRecords.build([rec])))
    assert list(out.headers) == [("", None), ("ü", b"")]


def test_none_timestamp_is_written_as_minus_one() -> None:
    batch = one_batch(bytes(MemoryRecords.build([Record(b"a")])))
    assert batch.max_timestamp == -1 and batch.base_timestamp == -1
    assert [r.timestamp for r in batch] == [-1]


def test_empty_builder_builds_nothing() -> None:
    assert RecordBatchBuilder().build() == b""
    assert bytes(MemoryRecords.build([])) == b""


@pytest.mark.parametrize(
    "record",
    [
        Record("text"),  # type: ignore[arg-type]
        Record(b"v", key=42),  # type: ignore[arg-type]
        Record(b"v", timestamp="now"),  # type: ignore[arg-type]
        Record(b"v", headers=[(None, b"x")]),  # type: ignore[list-item]
        Record(b"v", headers=[("h", "text")]),  # type: ignore[list-item]
    ],
)
def test_wrong_types_are_typed_errors(record: Record) -> None:
    from kafkalog import InvalidArgumentError

    with pytest.raises(InvalidArgumentError):
        MemoryRecords.build([record])


def test_memory_records_needs_a_buffer() -> None:
    from kafkalog import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="bytes-like"):
        MemoryRecords("not bytes")  # type: ignore[arg-type]

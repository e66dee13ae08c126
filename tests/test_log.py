"""The partition Log: cases from Kafka's UnifiedLogTest and LocalLogTest."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import pytest

from kafkalog import (
    CorruptRecordError,
    InvalidConfigError,
    InvalidRecordError,
    ManualClock,
    MemoryRecords,
    OffsetOutOfRangeError,
    Record,
    RecordTooLargeError,
    TimestampType,
)
from kafkalog.errors import (
    InvalidTimestampError,
    OffsetsOutOfOrderError,
    RecordBatchTooLargeError,
    UnexpectedAppendOffsetError,
)
from kafkalog.log.config import LogConfig
from kafkalog.log.log import Log
from kafkalog.log.producer_batches import ProducerFields
from kafkalog.log.roll import RollReason, new_segment_base, roll_reason
from storage_helpers import batch

NOW = 1_700_000_000_000


def open_log(path: Path, clock: ManualClock | None = None, **props: object) -> Log:
    config = LogConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})
    return Log.open(path / "topic-0", config, clock or ManualClock(NOW))


def recs(n: int, start: int = 0, size: int = 10, ts: int | None = NOW) -> list[Record]:
    return [Record(b"x" * size, key=b"k%d" % (start + i), timestamp=ts) for i in range(n)]


def test_append_assigns_offsets_and_reads_back(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    info = log.append(recs(3))
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 2, 1 * 3)
    info = log.append(recs(2, 3))
    assert (info.first_offset, info.last_offset) == (3, 4)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 5, 5)
    assert [r.offset for r in log.read_records(0)] == [0, 1, 2, 3, 4]
    assert [r.key for r in log.read_records(3)] == [b"k3", b"k4"]


def test_none_timestamps_take_the_clock(tmp_path: Path) -> None:
    clock = ManualClock(NOW + 5)
    log = open_log(tmp_path, clock)
    log.append([Record(b"v")])
    assert log.read_records(0)[0].timestamp == NOW + 5


def test_log_append_time_topic(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = open_log(tmp_path, clock, message_timestamp_type="LogAppendTime")
    info = log.append(recs(2, ts=5))
    assert info.log_append_time == NOW and info.max_timestamp == NOW
    (b,) = log.read(0, 10**6).records.records().batches()  # type: ignore[union-attr]
    assert b.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in b] == [NOW, NOW]


def test_size_based_roll(tmp_path: Path) -> None:
    one = len(MemoryRecords.build(recs(1), base_offset=0))
    log = open_log(tmp_path, internal_segment_bytes=one * 3)
    for i in range(10):
        log.append(recs(1, i))
    assert log.number_of_segments == 4
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 9]


def test_time_based_roll_uses_record_timestamps_and_jitter(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_ms=1000)
    log.append(recs(1, ts=NOW))
    log.append(recs(1, ts=NOW + 1000))  # waited exactly segment.ms: no roll
    assert log.number_of_segments == 1
    log.append(recs(1, ts=NOW + 1001))
    assert log.number_of_segments == 2


def test_empty_segments_never_roll_for_time(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = open_log(tmp_path, clock, segment_ms=10)
    log.roll()
    clock.advance(1000)
    log.append(recs(1, ts=NOW + 1000))
    assert log.number_of_segments == 1


class SegmentFacts(NamedTuple):
    """The active segment, as the roll rule sees it."""

    base_offset: int
    size: int
    time_waited_for_roll: int
    roll_jitter_ms: int
    offset_index_full: bool
    time_index_full: bool


class RollParams(NamedTuple):
    """The incoming append, as the roll rule sees it."""

    max_segment_bytes: int
    max_segment_ms: int
    messages_size: int
    max_offset_in_messages: int


@pytest.mark.parametrize(
    ("facts", "params", "reason"),
    [
        (SegmentFacts(0, 90, 0, 0, False, False), RollParams(100, 10, 11, 5), RollReason.SIZE),
        (SegmentFacts(0, 89, 0, 0, False, False), RollParams(100, 10, 11, 5), None),
        (SegmentFacts(0, 1, 11, 0, False, False), RollParams(100, 10, 1, 5), RollReason.TIME),
        (SegmentFacts(0, 1, 11, 2, False, False), RollParams(100, 10, 1, 5), RollReason.TIME),
        (SegmentFacts(0, 1, 8, 2, False, False), RollParams(100, 10, 1, 5), None),
        (SegmentFacts(0, 0, 999, 0, False, False), RollParams(100, 10, 1, 5), None),
        (
            SegmentFacts(0, 1, 0, 0, True, False),
            RollParams(100, 10, 1, 5),
            RollReason.OFFSET_INDEX_FULL,
        ),
        (
            SegmentFacts(0, 1, 0, 0, False, True),
            RollParams(100, 10, 1, 5),
            RollReason.TIME_INDEX_FULL,
        ),
        (
            SegmentFacts(0, 0, 0, 0, False, False),
            RollParams(100, 10, 1, 2**31),
            RollReason.OFFSET_OVERFLOW,
        ),
    ],
)
def test_roll_rule_table(
    facts: SegmentFacts, params: RollParams, reason: RollReason | None
) -> None:
    assert roll_reason(*facts, *params) is reason


def test_new_segment_base() -> None:
    assert new_segment_base(None, 10) == 10
    assert new_segment_base(2**31 + 1, 1) == 2**31 + 1
    assert new_segment_base(5, 10) == 10


def test_too_large_appends(tmp_path: Path) -> None:
    log = open_log(tmp_path, max_message_bytes=200, internal_segment_bytes=300)
    with pytest.raises(RecordTooLargeError):
        log.append([Record(b"x" * 500)])
    with pytest.raises(RecordTooLargeError):
        log.append_records(MemoryRecords.build([Record(b"x" * 500)]))
    log.append(recs(8, size=40))  # split over several batches, each <= max.message.bytes
    assert log.log_end_offset == 8 and log.number_of_segments > 1
    big = MemoryRecords.build(recs(10, size=40), base_offset=log.log_end_offset)
    with pytest.raises(RecordBatchTooLargeError):
        log.append_as_follower(big)  # followers skip max.message.bytes, not segment.bytes


@pytest.mark.parametrize("idempotent", [False, True])
def test_a_split_append_reports_the_batch_of_its_max_timestamp(
    tmp_path: Path, idempotent: bool
) -> None:
    """The greatest timestamp in the first of several batches, and again in a later one: the
    append reports it with the last offset of the first batch holding it, as Kafka's
    LogAppendInfo.shallowOffsetOfMaxTimestamp does (one write or several)."""
    log = open_log(tmp_path, max_message_bytes=200)
    stamps = [NOW + 9, NOW, NOW + 1, NOW + 2, NOW + 9, NOW + 3, NOW, NOW + 4]
    records = [Record(b"x" * 40, key=b"k%d" % i, timestamp=t) for i, t in enumerate(stamps)]
    producer = ProducerFields(7, 0, 0) if idempotent else None
    info = log.append(records, producer=producer)
    batches = list(MemoryRecords(log.read(0, 1 << 20).records.read()).batches())
    assert info.batch_count == len(batches) > 2
    first_top = next(b for b in batches if b.max_timestamp == NOW + 9)
    assert first_top.base_offset == 0 and batches[-1].max_timestamp < NOW + 9
    assert info.max_timestamp == NOW + 9
    assert info.shallow_offset_of_max_timestamp == first_top.last_offset
    assert (info.first_offset, info.last_offset) == (0, 7)
    assert log.list_offsets(-3) is not None and log.list_offsets(-3).offset == 0
    # what the segment keeps for its time index: the same batch, from the write
    assert log.active_segment._max_timestamp_so_far() == (NOW + 9, first_top.last_offset)


def test_a_leader_append_ignores_the_offsets_its_records_carry(tmp_path: Path) -> None:
    """Records read elsewhere carry offsets of any size or type; the leader gives its own and
    writes the bytes it writes for the same records without them."""
    odd = [Record(b"v%d" % i, b"k", timestamp=NOW, offset=o) for i, o in enumerate(
        [2**70, True, -7, 9, 2**63 - 1]
    )]  # fmt: skip
    plain = [Record(r.value, r.key, timestamp=NOW) for r in odd]
    logs = [open_log(tmp_path / name) for name in ("odd", "plain")]
    for log, records in zip(logs, (odd, plain), strict=True):
        for chunk in (records[:2], records[2:3], records[3:4], records[4:]):
            log.append(chunk)  # 9 alone at offset 3: an offset the encoder could mistake
    odd_bytes, plain_bytes = (log.read(0, 1 << 20).records.read() for log in logs)
    assert odd_bytes == plain_bytes
    assert [r.offset for r in logs[0].read_records(0)] == [0, 1, 2, 3, 4]


def test_follower_accepts_batches_above_max_message_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path, max_message_bytes=100)
    log.append_as_follower(MemoryRecords.build(recs(3, size=60)))
    assert log.log_end_offset == 3


def test_compacted_topic_requires_keys(tmp_path: Path) -> None:
    log = open_log(tmp_path, cleanup_policy="compact")
    with pytest.raises(InvalidRecordError, match="record 1"):
        log.append([Record(b"a", key=b"k"), Record(b"b")])
    for codec in ("none", "gzip"):
        with pytest.raises(InvalidRecordError, match="without key"):
            log.append_records(
                MemoryRecords.build([Record(b"a", key=b"k"), Record(b"b")], compression=codec)
            )
    log.append_records(MemoryRecords.build([Record(b"a", key=b"k")], compression="gzip"))
    assert log.log_end_offset == 1


def test_timestamp_bounds(tmp_path: Path) -> None:
    log = open_log(
        tmp_path, message_timestamp_before_max_ms=1000, message_timestamp_after_max_ms=10
    )
    with pytest.raises(InvalidTimestampError):
        log.append(recs(1, ts=NOW - 1001))
    with pytest.raises(InvalidTimestampError):
        log.append_records(MemoryRecords.build(recs(1, ts=NOW + 11)))
    log.append(recs(1, ts=NOW - 1000))
    assert log.log_end_offset == 1


def test_leader_path_assigns_offsets_in_place_and_recompresses(tmp_path: Path) -> None:
    log = open_log(tmp_path, compression_type="lz4")
    log.append(recs(2))
    info = log.append_records(MemoryRecords.build(recs(3), compression="gzip"), leader_epoch=4)
    assert (info.first_offset, info.last_offset) == (2, 4)
    (b,) = MemoryRecords(log.read(2, 10**6).read()).batches()
    assert b.compression.kafka_name == "lz4" and b.partition_leader_epoch == 4
    assert b.base_offset == 2 and b.is_valid()
    producer = open_log(tmp_path / "p")
    producer.append_records(MemoryRecords.build(recs(3), compression="zstd"))
    (b,) = MemoryRecords(producer.read(0, 10**6).read()).batches()
    assert b.compression.kafka_name == "zstd"  # compression.type=producer keeps the codec


def test_leader_rejects_bad_producer_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    with pytest.raises(InvalidRecordError, match="base offset 0"):
        log.append_records(MemoryRecords.build(recs(1), base_offset=5))
    two = bytes(MemoryRecords.build(recs(1))) * 2
    with pytest.raises(InvalidRecordError, match="exactly one"):
        log.append_records(two)
    corrupt = bytearray(MemoryRecords.build(recs(2)).buffer)
    corrupt[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append_records(bytes(corrupt))
    assert log.log_end_offset == 0


def test_leader_converts_legacy_input_to_v2(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_records(MemoryRecords.build(recs(3), magic=1))
    (b,) = MemoryRecords(log.read(0, 10**6).read()).batches()
    assert b.magic == 2 and [r.offset for r in b] == [0, 1, 2]


def test_follower_append_rules(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_follower(batch(0, 3))
    with pytest.raises(UnexpectedAppendOffsetError) as err:
        log.append_as_follower(batch(2, 2))
    assert (err.value.first_offset, err.value.last_offset) == (2, 3)
    with pytest.raises(OffsetsOutOfOrderError):
        log.append_as_follower(batch(10, 2) + batch(5, 2))
    log.append_as_follower(batch(100, 2))  # a gap above the log end is fine
    assert log.log_end_offset == 102
    assert [r.offset for r in log.read_records(50)] == [100, 101]


def test_follower_append_far_offset_rolls_to_that_base(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_follower(batch(0))
    log.append_as_follower(batch(2**31 + 1))
    assert [s.base_offset for s in log.segments] == [0, 2**31 + 1]


def test_reads_and_offset_out_of_range(tmp_path: Path) -> None:
    log = open_log(tmp_path, internal_segment_bytes=400)
    for i in range(10):
        log.append(recs(1, i))
    assert log.read(10, 1000).records is None  # at the log end: empty
    with pytest.raises(OffsetOutOfRangeError):
        log.read(11, 1000)
    log.maybe_increment_log_start_offset(4)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 1000)
    assert log.read(4, 0, min_one_message=False).records is None
    one = log.read(4, 1, min_one_message=False)
    assert one.size == 1 and one.first_entry_incomplete
    whole = log.read(4, 1, min_one_message=True)
    assert MemoryRecords(whole.read()).first_batch().base_offset == 4  # type: ignore[union-attr]
    assert log.read(5, 100, max_offset=5).records is None


def test_reads_stop_at_the_high_watermark(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.auto_high_watermark = False
    log.append(recs(3))
    log.append(recs(3, 3))  # two batches: offsets 0-2 and 3-5
    log.update_high_watermark(3)
    assert [r.offset for r in log.read_records(0)] == [0, 1, 2]  # the batch above HW is not read
    assert log.read(3, 10**6).records is None
    assert log.update_high_watermark(100) == 6  # clamped to the log end
    assert log.update_high_watermark(-5) == 0  # and to the log start


def test_truncate_to(tmp_path: Path) -> None:
    log = open_log(tmp_path, internal_segment_bytes=400)
    for i in range(12):
        log.append(recs(1, i))
    segments = log.number_of_segments
    assert log.truncate_to(5)
    assert log.log_end_offset == 5 and log.number_of_segments < segments
    assert [r.offset for r in log.read_records(0)][-1] <= 4
    assert not log.truncate_to(50)
    log.append(recs(1, 5))
    assert log.log_end_offset == 6
    assert (
        log.active_segment.offset_index.length
        == log.config.segment_index_bytes - log.config.segment_index_bytes % 8
    )


def test_truncate_below_first_segment_is_full_truncation(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.truncate_fully_and_start_at(10)
    log.append_as_follower(batch(10, 3))
    assert log.segments.base_offsets == (10,)
    log.truncate_to(5)
    assert (log.log_start_offset, log.log_end_offset, log.number_of_segments) == (5, 5, 1)


def test_roll_rules(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.roll()  # replaces the empty active segment at the same base
    assert log.number_of_segments == 1
    log.append(recs(2))
    log.roll()
    assert [s.base_offset for s in log.segments] == [0, 2]
    stale = tmp_path / "topic-0" / "00000000000000000010.log"
    stale.write_bytes(b"junk")
    log.append(recs(8, 2))
    log.roll()
    assert log.active_segment.base_offset == 10 and log.active_segment.size == 0


def test_roll_advances_the_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(recs(3))
    assert log.recovery_point == 0
    log.roll()
    assert log.recovery_point == 3


def test_flush_messages_policy(tmp_path: Path) -> None:
    log = open_log(tmp_path, flush_messages=2)
    log.append(recs(1))
    assert log.recovery_point == 0
    log.append(recs(1, 1))
    assert log.recovery_point == 2


def test_flush_ms_policy(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = open_log(tmp_path, clock, flush_ms=1000)
    log.append(recs(1))
    assert log.recovery_point == 0 and not log.flush_if_due()
    clock.advance(1000)
    assert log.flush_if_due() and log.recovery_point == 1
    clock.advance(1000)
    log.append(recs(1, 1))  # due at append time too
    assert log.recovery_point == 2


def test_flush_creates_active_index_files(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(recs(1))
    log.flush()
    assert log.active_segment.offset_index_file.exists()


def test_log_start_offset_cannot_pass_the_high_watermark(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(recs(5))
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(6)
    assert log.maybe_increment_log_start_offset(3) and log.log_start_offset == 3


def test_kafka_layout_after_close(tmp_path: Path) -> None:
    log = open_log(tmp_path, internal_segment_bytes=500, index_interval_bytes=100)
    for i in range(20):
        log.append(recs(1, i), leader_epoch=2)
    log.close()
    d = tmp_path / "topic-0"
    names = sorted(os.listdir(d))
    for seg in log.segments:
        stem = f"{seg.base_offset:020d}"
        assert f"{stem}.log" in names
        assert os.path.getsize(d / f"{stem}.index") % 8 == 0
        assert os.path.getsize(d / f"{stem}.index") < log.config.segment_index_bytes  # trimmed
        assert os.path.getsize(d / f"{stem}.timeindex") % 12 == 0
    assert (d / "leader-epoch-checkpoint").read_text() == "0\n1\n2 0\n"


def test_appends_without_an_epoch_keep_the_partitions_latest(tmp_path: Path) -> None:
    """A log a Kafka broker left at epoch 2 gets new batches at epoch 2 (data, producer
    batches, markers), not 0: an older epoch would cut epoch 2 out of the epoch cache, as
    Kafka's LeaderEpochFileCache drops entries that are not below a new one."""
    log = open_log(tmp_path)
    assert log.append(recs(1)).last_leader_epoch == 0  # a new log starts at 0
    log.append(recs(1), leader_epoch=2)
    log.append(recs(1))
    log.append_records(MemoryRecords.build(recs(2)))
    pid = ProducerFields(7, 0, 0, is_transactional=True)
    log.append(recs(1), producer=pid)
    log.append_end_txn_marker(7, 0, "COMMIT")
    epochs = [b.partition_leader_epoch for b in log.read(0, 1 << 20).records.records().batches()]
    assert epochs == [0, 2, 2, 2, 2, 2]
    assert log.leader_epochs() == [(0, 0), (2, 1)]


def test_config_errors_name_the_key() -> None:
    with pytest.raises(InvalidConfigError, match=r"segment\.bytes"):
        LogConfig.from_properties({"segment.bytes": "ten"})
    with pytest.raises(InvalidConfigError, match="unknown"):
        LogConfig.from_properties({"segment.byte": 1})
    with pytest.raises(InvalidConfigError, match=r"cleanup\.policy"):
        LogConfig.from_properties({"cleanup.policy": "archive"})
    with pytest.raises(InvalidConfigError, match=r"compression\.type"):
        LogConfig.from_properties({"compression.type": "brotli"})


def test_config_from_properties_file(tmp_path: Path) -> None:
    path = tmp_path / "topic.properties"
    path.write_text(
        "# a comment\nsegment.bytes=2097152\nretention.ms: -1\n\ncleanup.policy=compact\n"
    )
    config = LogConfig.from_properties(path)
    assert (config.segment_bytes, config.retention_ms, config.compact) == (2 << 20, -1, True)
    assert config.overrides == {
        "segment.bytes": "2097152",
        "retention.ms": "-1",
        "cleanup.policy": "compact",
    }
    defaults = LogConfig()
    assert defaults.segment_bytes == 1073741824 and defaults.max_message_bytes == 1048588
    assert len(defaults.to_properties()) == 36


def test_bad_arguments_are_typed_errors(tmp_path: Path) -> None:
    from kafkalog import InvalidArgumentError

    log = open_log(tmp_path)
    with pytest.raises(InvalidArgumentError):
        log.read(0, -1)
    with pytest.raises(InvalidArgumentError):
        log.truncate_to(-1)
    with pytest.raises(InvalidArgumentError):
        log.list_offsets(-7)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    with pytest.raises(InvalidRecordError):
        log.append([])
    log.close()
    from kafkalog import LogClosedError

    with pytest.raises(LogClosedError):
        log.append(recs(1))

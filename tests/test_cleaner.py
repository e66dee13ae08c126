"""Compaction (Kafka's LogCleaner; cases from LogCleanerTest): the filter primitive, the offset
map, the pure selection rules, and cleaning rounds on real logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalog import Log, LogConfig, ManualClock, ProducerFields, Record
from kafkalog.cleaner import Cleaner, CleanerConfig, DigestOffsetMap, LogCleaner
from kafkalog.cleaner.manager import CleaningState
from kafkalog.cleaner.selection import (
    CleanerSegment,
    CompactionSettings,
    OffsetsToClean,
    cleanable_offsets,
    group_segments_by_size,
    log_to_clean,
    max_compaction_delay,
)
from kafkalog.cleaner.throttler import Throttler
from kafkalog.errors import InvalidConfigError, InvalidRecordError, LogCleaningAbortedError
from kafkalog.log.cleanable import CleanableLog
from kafkalog.records import MemoryRecords
from kafkalog.records.batch import RecordBatch
from kafkalog.records.builder import RecordBatchBuilder
from kafkalog.records.filter import (
    BatchRetention,
    BatchRetentionResult,
    filter_buffer,
)
from kafkalog.records.scanner import AnyBatch
from kafkalog.types import (
    INT32_MAX,
    CompressionType,
    IsolationLevel,
    TimestampType,
    TopicPartition,
)

NOW = 1_700_000_000_000
TP = TopicPartition("t", 0)


# --- helpers ---------------------------------------------------------------------------------


def compact_config(**extra: object) -> LogConfig:
    props = {
        "cleanup.policy": "compact",
        "internal.segment.bytes": "1024",
        "delete.retention.ms": "1000",
        "min.cleanable.dirty.ratio": "0.01",  # clean whenever anything is dirty
    }
    props.update({k: str(v) for k, v in extra.items()})
    return LogConfig.from_properties(props)


def open_log(tmp_path: Path, clock: ManualClock, **extra: object) -> Log:
    return Log.open(tmp_path / "t-0", compact_config(**extra), clock)


def cleaner_for(log: Log, clock: ManualClock, **config: object) -> LogCleaner:
    values: dict[str, object] = {"dedupe_buffer_size": 1 << 20, "io_buffer_size": 4096}
    values.update(config)
    return LogCleaner(CleanerConfig(**values), lambda: {TP: log}, clock)  # type: ignore[arg-type]


def put(log: Log, clock: ManualClock, key: str | None, value: str | None) -> int:
    rec = Record(None if value is None else value.encode(), None if key is None else key.encode())
    rec.timestamp = clock.milliseconds()
    return log.append([rec]).first_offset


def three_keys_log(tmp_path: Path, clock: ManualClock) -> Log:
    log = open_log(tmp_path, clock)
    for i in range(30):
        put(log, clock, f"k{i % 3}", f"v{i}")
    log.roll()
    return log


def batches(log: Log) -> list[AnyBatch]:
    return [b for s in log.segments for b in s.batches()]


def data(log: Log) -> list[tuple[int, str | None, str | None]]:
    """Every data record still in the log: (offset, key, value)."""
    out = []
    for b in batches(log):
        if b.is_control:
            continue
        for r in b.records():
            key = None if r.key is None else r.key.decode()
            out.append((r.offset, key, None if r.value is None else r.value.decode()))
    return out


def latest(log: Log) -> dict[str, str | None]:
    return {k: v for _, k, v in data(log) if k is not None}


def force_clean(cleaner: LogCleaner) -> None:
    """Clean regardless of the dirty ratio (tests set min.cleanable.dirty.ratio low instead)."""
    for result in cleaner.run_once():
        assert result.error is None, result.error


# --- the filter primitive (items 16-21) ------------------------------------------------------


class KeepKeys:
    def __init__(self, keep: set[bytes], retention: BatchRetention, now: int = NOW) -> None:
        self.keep, self.retention = keep, retention
        self.current_time, self.delete_retention_ms = now, 1000

    def check_batch_retention(self, batch: AnyBatch) -> BatchRetentionResult:
        return BatchRetentionResult(self.retention)

    def should_retain_record(self, batch: AnyBatch, record: Record) -> bool:
        return record.key in self.keep


def producer_batch(
    codec: str = "none", ts_type: TimestampType = TimestampType.CREATE_TIME
) -> bytes:
    b = RecordBatchBuilder(
        compression=codec,
        base_offset=100,
        producer_id=7,
        producer_epoch=3,
        base_sequence=40,
        is_transactional=True,
        partition_leader_epoch=5,
        timestamp_type=ts_type,
        log_append_time=NOW + 5 if ts_type is TimestampType.LOG_APPEND_TIME else None,
    )
    for i in range(4):
        b.append(f"v{i}".encode(), key=f"k{i}".encode(), timestamp=NOW + i, offset=100 + 2 * i)
    return b.build()


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4", "zstd", "snappy"])
def test_filtering_keeps_producer_fields_flags_codec_and_offset_range(codec: str) -> None:
    src = producer_batch(codec)
    out = filter_buffer(src, KeepKeys({b"k0", b"k2"}, BatchRetention.DELETE_EMPTY))
    (batch,) = MemoryRecords(bytes(out.output)).batches()
    assert isinstance(batch, RecordBatch)
    h = batch.header
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 3, 40)
    assert (h.is_transactional, h.partition_leader_epoch, h.compression.name) == (
        True,
        5,
        CompressionType.parse(codec).name,
    )
    assert (batch.base_offset, batch.last_offset) == (100, 106)  # the range survives (item 19)
    assert [r.offset for r in batch.records()] == [100, 104]
    assert batch.last_sequence == 40 + 6
    assert batch.is_valid()


def test_filtering_keeps_log_append_time() -> None:
    src = producer_batch(ts_type=TimestampType.LOG_APPEND_TIME)
    out = filter_buffer(src, KeepKeys({b"k1"}, BatchRetention.DELETE_EMPTY))
    (batch,) = MemoryRecords(bytes(out.output)).batches()
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert batch.max_timestamp == NOW + 5


def test_all_kept_without_tombstones_is_copied_verbatim() -> None:
    src = producer_batch("gzip")
    out = filter_buffer(src, KeepKeys({b"k0", b"k1", b"k2", b"k3"}, BatchRetention.DELETE_EMPTY))
    assert bytes(out.output) == src
    assert out.batches_rewritten == 0


def test_retain_empty_writes_the_61_byte_header_and_delete_empty_drops() -> None:
    src = producer_batch()
    kept = filter_buffer(src, KeepKeys(set(), BatchRetention.RETAIN_EMPTY))
    assert len(kept.output) == 61
    (batch,) = MemoryRecords(bytes(kept.output)).batches()
    assert isinstance(batch, RecordBatch)
    assert (batch.base_offset, batch.last_offset, batch.last_sequence) == (100, 106, 46)
    assert batch.max_timestamp == NOW + 3
    assert batch.records() == []
    assert filter_buffer(src, KeepKeys(set(), BatchRetention.DELETE_EMPTY)).output == b""
    assert filter_buffer(src, KeepKeys({b"k0"}, BatchRetention.DELETE)).output == b""


def test_delete_horizon_rewrites_the_base_timestamp_but_keeps_record_timestamps() -> None:
    b = RecordBatchBuilder(base_offset=0)
    b.append(b"v", key=b"a", timestamp=NOW - 50)
    b.append(None, key=b"b", timestamp=NOW - 40)
    out = filter_buffer(b.build(), KeepKeys({b"a", b"b"}, BatchRetention.DELETE_EMPTY))
    (batch,) = MemoryRecords(bytes(out.output)).batches()
    assert isinstance(batch, RecordBatch)
    assert batch.delete_horizon_ms == NOW + 1000  # item 21
    assert [r.timestamp for r in batch.records()] == [NOW - 50, NOW - 40]


def test_sparse_offsets_survive_a_second_filter() -> None:
    first = filter_buffer(producer_batch(), KeepKeys({b"k1", b"k3"}, BatchRetention.DELETE_EMPTY))
    again = filter_buffer(bytes(first.output), KeepKeys({b"k3"}, BatchRetention.DELETE_EMPTY))
    (batch,) = MemoryRecords(bytes(again.output)).batches()
    assert [r.offset for r in batch.records()] == [106]


def test_legacy_batches_are_filtered_keeping_offsets() -> None:
    from kafkalog.records.legacy import build_legacy

    recs = [Record(b"v%d" % i, key=b"k%d" % i, timestamp=NOW) for i in range(4)]
    src = build_legacy(recs, magic=1, compression_type=CompressionType.GZIP, base_offset=10)
    out = filter_buffer(src, KeepKeys({b"k1", b"k3"}, BatchRetention.DELETE_EMPTY))
    got = [(r.offset, r.key) for b in MemoryRecords(bytes(out.output)).batches() for r in b]
    assert got == [(11, b"k1"), (13, b"k3")]
    with pytest.raises(InvalidRecordError):
        build_legacy(recs[:2], magic=1, compression_type=CompressionType.NONE, offsets=[5, 5])


# --- the offset map --------------------------------------------------------------------------


def test_offset_map_capacity_follows_kafkas_slot_math() -> None:
    m = DigestOffsetMap(24 * 100, load_factor=0.9)
    assert (m.slots, m.usable_capacity) == (100, 90)
    m.put(b"a", 5)
    m.put(b"a", 9)
    assert (m.get(b"a"), m.get(b"b"), m.size, m.latest_offset) == (9, -1, 1, 9)
    m.clear()
    assert (m.size, m.latest_offset) == (0, -1)
    with pytest.raises(InvalidConfigError, match="dedupe"):
        DigestOffsetMap(24, load_factor=0.9)


# --- the pure selection rules (item 107, 109, 113) -------------------------------------------


SEGMENTS = [
    CleanerSegment(0, 100, NOW - 10_000, NOW - 20_000),
    CleanerSegment(10, 100, NOW - 5_000, NOW - 9_000),
    CleanerSegment(20, 100, NOW - 100, NOW - 4_000),
    CleanerSegment(30, 10, NOW, NOW),  # active
]


def offsets(checkpoint: int | None, lso: int = 35, lag: int = 0, start: int = 0) -> OffsetsToClean:
    return cleanable_offsets(
        SEGMENTS,
        checkpoint,
        log_start_offset=start,
        log_end_offset=35,
        last_stable_offset=lso,
        settings=CompactionSettings(min_compaction_lag_ms=lag),
        now=NOW,
    )


def test_dirty_range_stops_at_the_active_segment_the_lso_and_the_min_lag() -> None:
    assert offsets(None) == OffsetsToClean(0, 30)
    assert offsets(10).first_uncleanable_dirty_offset == 30
    assert offsets(None, lso=12).first_uncleanable_dirty_offset == 12
    assert offsets(None, lag=1000).first_uncleanable_dirty_offset == 20
    assert offsets(None, lag=6000).first_uncleanable_dirty_offset == 10
    assert offsets(25, lso=12).first_uncleanable_dirty_offset == 25  # never below the dirty offset


def test_an_out_of_range_checkpoint_resets_to_the_log_start() -> None:
    assert offsets(3, start=5) == OffsetsToClean(5, 30, force_update_checkpoint=True)
    assert offsets(99) == OffsetsToClean(0, 30, force_update_checkpoint=True)


def test_dirty_ratio_and_eligibility() -> None:
    ltc = log_to_clean(SEGMENTS, offsets(10), need_compaction_now=False)
    assert (ltc.clean_bytes, ltc.cleanable_bytes, ltc.first_uncleanable_offset) == (100, 200, 30)
    assert ltc.is_eligible(0.5) and not ltc.is_eligible(0.67)
    rounded = log_to_clean(SEGMENTS, offsets(10, lso=25), need_compaction_now=False)
    assert rounded.first_uncleanable_offset == 20  # rounded down to a segment base
    forced = log_to_clean(SEGMENTS, offsets(20), need_compaction_now=True)
    assert forced.cleanable_ratio < 0.5 and forced.is_eligible(0.99)


def test_max_compaction_lag_forces_cleaning_of_old_dirty_data() -> None:
    assert max_compaction_delay(SEGMENTS, 0, 30_000, NOW) == 0
    assert max_compaction_delay(SEGMENTS, 0, 15_000, NOW) == 5_000
    assert max_compaction_delay(SEGMENTS, 10, 15_000, NOW) == 0


def test_grouping_honours_log_and_index_sizes_and_the_int32_span() -> None:
    segs = [CleanerSegment(i * 10, 40, offset_index_size=8, time_index_size=12) for i in range(5)]
    sizes = [[s.base_offset for s in g] for g in group_segments_by_size(segs, 100, 1000, 50)]
    assert sizes == [[0, 10], [20, 30], [40]]
    by_index = group_segments_by_size(segs, 10_000, 24, 50)
    assert [[s.base_offset for s in g] for g in by_index] == [[0, 10], [20, 30], [40]]
    wide = [CleanerSegment(0, 10), CleanerSegment(INT32_MAX, 10), CleanerSegment(INT32_MAX + 5, 0)]
    spans = group_segments_by_size(wide, 10_000, 10_000, INT32_MAX + 10)
    assert [[s.base_offset for s in g] for g in spans] == [[0], [INT32_MAX, INT32_MAX + 5]]
    empty_next = [CleanerSegment(0, 10), CleanerSegment(INT32_MAX + 1, 0)]
    assert len(group_segments_by_size(empty_next, 10_000, 10_000, INT32_MAX + 2)) == 1


def test_throttler_sleeps_to_the_desired_rate() -> None:
    clock = ManualClock(NOW)
    t = Throttler(1000.0, clock)
    t.maybe_throttle(500)
    assert t.slept_ms == 0  # not a full check interval yet
    clock.advance(400)
    t.maybe_throttle(1500)  # 2000 bytes in 400 ms: should have taken 2000 ms
    assert t.slept_ms == 1600
    unlimited = Throttler(float("inf"), clock)
    unlimited.maybe_throttle(10**12)
    assert unlimited.slept_ms == 0


# --- cleaning rounds on a real log -----------------------------------------------------------


def test_only_the_latest_record_per_key_survives_with_its_offset(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = open_log(tmp_path, clock)
    expected: dict[str, tuple[int, str]] = {}
    for i in range(200):
        key, value = f"k{i % 7}", f"v{i}"
        expected[key] = (put(log, clock, key, value), value)
    log.roll()
    before = (log.number_of_segments, log.size_in_bytes)
    cleaner = cleaner_for(log, clock)
    force_clean(cleaner)
    assert sorted((o, k, v) for o, k, v in data(log)) == sorted(
        (o, k, v) for k, (o, v) in expected.items()
    )
    assert log.size_in_bytes < before[1] / 10
    # groups are formed from the segments' sizes before cleaning (as Kafka does), so the tiny
    # cleaned segments merge on the next round
    put(log, clock, "k0", "later")
    log.roll()
    force_clean(cleaner)
    assert log.number_of_segments == 2 < before[0]
    del expected["k0"]
    expected["k0"] = (200, "later")
    assert log.log_end_offset == 201
    log.close()
    reopened = Log.open(tmp_path / "t-0", compact_config(), clock)
    assert data(reopened) == sorted((o, k, v) for k, (o, v) in expected.items())
    reopened.close()


def test_tombstones_need_two_passes_and_ignore_their_own_timestamp(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = open_log(tmp_path, clock)
    put(log, clock, "a", "1")
    log.append([Record(None, b"a", timestamp=NOW - 10**9)])  # an ancient tombstone
    put(log, clock, "b", "2")
    log.roll()
    cleaner = cleaner_for(log, clock, dedupe_buffer_size=1 << 20)
    force_clean(cleaner)
    assert [(k, v) for _, k, v in data(log)] == [("a", None), ("b", "2")]  # first pass keeps it
    horizon = [b for b in batches(log) if any(r.value is None for r in b.records())]
    assert horizon[0].delete_horizon_ms == NOW + 1000
    log.roll()  # let the next round see a dirty section again
    put(log, clock, "c", "3")
    log.roll()
    clock.advance(999)
    force_clean(cleaner)
    assert ("a", None) in [(k, v) for _, k, v in data(log)]  # before the horizon
    clock.advance(1)
    put(log, clock, "d", "4")
    log.roll()
    force_clean(cleaner)
    assert [(k, v) for _, k, v in data(log)] == [("b", "2"), ("c", "3"), ("d", "4")]


def test_the_last_batch_of_an_active_producer_survives_and_dedupe_still_works(
    tmp_path: Path,
) -> None:
    clock = ManualClock(NOW)
    log = open_log(tmp_path, clock)
    log.append([Record(b"old", b"k", timestamp=NOW)], producer=ProducerFields(42, 0, 0))
    log.append([Record(b"x", b"k2", timestamp=NOW)], producer=ProducerFields(42, 0, 1))
    put(log, clock, "k2", "newer")  # shadows the producer's last record
    log.roll()
    force_clean(cleaner_for(log, clock))
    by_pid = [b for b in batches(log) if isinstance(b, RecordBatch) and b.producer_id == 42]
    got = [(b.base_offset, len(b.records()), b.last_sequence) for b in by_pid]
    assert got == [(0, 1, 0), (1, 0, 1)]  # "k" is still latest; the last batch kept empty
    again = log.append([Record(b"x", b"k2", timestamp=NOW)], producer=ProducerFields(42, 0, 1))
    assert again.duplicate and again.first_offset == 1


def test_aborted_data_goes_first_and_markers_after_two_more_passes(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = open_log(tmp_path, clock)
    txn = ProducerFields(9, 0, 0, is_transactional=True)
    log.append([Record(b"aborted", b"k", timestamp=NOW)], producer=txn)
    log.append_end_txn_marker(9, 0, "abort", 0)
    log.append([Record(b"c", b"k", timestamp=NOW)], producer=ProducerFields(9, 0, 1, True))
    log.append_end_txn_marker(9, 0, "commit", 0)
    put(log, clock, "k", "final")
    log.roll()
    cleaner = cleaner_for(log, clock)

    def kinds() -> list[str]:
        return [
            "marker" if b.is_control else f"data:{len(b.records())}"
            for b in batches(log)
            if b.producer_id == 9  # type: ignore[union-attr]
        ]

    assert kinds() == ["data:1", "marker", "data:1", "marker"]
    force_clean(cleaner)
    # aborted data goes at once; the committed batch is shadowed by "final" but, as pid 9's last
    # data batch, stays as an empty header; the abort marker stays (its data was seen this
    # round) and is re-indexed; markers get no horizon while their transaction has data.
    assert kinds() == ["marker", "data:0", "marker"]
    assert all(b.delete_horizon_ms is None for b in batches(log) if b.is_control)
    first = log.segments.first_segment()
    assert first is not None
    assert [
        (t.producer_id, t.first_offset, t.last_offset) for t in first.txn_index.all_aborted()
    ] == [(9, 0, 1)]
    for _ in range(2):  # pass 2 stamps the abort marker's horizon, pass 3 removes it
        clock.advance(1001)
        put(log, clock, "other", "x")
        log.roll()
        force_clean(cleaner)
    assert kinds() == ["data:0", "marker"]  # the commit marker follows pid 9's empty batch
    first = log.segments.first_segment()
    assert first is not None and first.txn_index.all_aborted() == []


def test_undecided_transactions_and_the_active_segment_are_never_cleaned(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = open_log(tmp_path, clock)
    put(log, clock, "k", "1")
    put(log, clock, "k", "2")
    log.roll()
    log.append([Record(b"open", b"k", timestamp=NOW)], producer=ProducerFields(5, 0, 0, True))
    put(log, clock, "k", "3")
    log.roll()
    put(log, clock, "k", "active")
    force_clean(cleaner_for(log, clock))
    assert [v for _, k, v in data(log)] == ["2", "open", "3", "active"]
    assert log.last_stable_offset == 2


def test_min_compaction_lag_holds_back_young_segments(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = open_log(tmp_path, clock, **{"min.compaction.lag.ms": 5000})
    put(log, clock, "k", "1")
    put(log, clock, "k", "2")
    log.roll()
    force_clean(cleaner_for(log, clock))
    assert len(data(log)) == 2
    clock.advance(5001)
    log.roll()
    put(log, clock, "x", "y")
    force_clean(cleaner_for(log, clock))
    assert [v for _, _, v in data(log)] == ["2", "y"]


def test_keyless_records_are_removed_and_counted(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    plain = Log.open(tmp_path / "t-0", LogConfig(), clock)
    plain.append([Record(b"no key", timestamp=NOW), Record(b"v", b"k", timestamp=NOW)])
    plain.roll()
    plain.close()
    log = open_log(tmp_path, clock)
    cleaner = cleaner_for(log, clock)
    results = cleaner.run_once()
    assert results[0].stats is not None and results[0].stats.invalid_messages == 1
    assert [(k, v) for _, k, v in data(log)] == [("k", "v")]


def test_a_tiny_offset_map_still_makes_progress(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = open_log(tmp_path, clock)
    for i in range(60):
        put(log, clock, f"k{i % 12}", f"v{i}")
    log.roll()
    cleaner = cleaner_for(log, clock, dedupe_buffer_size=24 * 6)  # 5 keys per round
    rounds = cleaner.run_once()
    assert len(rounds) > 1
    assert all(b.end_offset > b.first_dirty_offset for b in rounds)
    assert latest(log) == {f"k{i}": f"v{48 + i}" for i in range(12)}


def test_a_batch_bigger_than_the_io_buffer_grows_it(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = open_log(tmp_path, clock, **{"internal.segment.bytes": 100_000})
    big = [Record(b"x" * 1000, f"k{i}".encode(), timestamp=NOW) for i in range(20)]
    log.append(big)
    log.append(big[:1])
    log.roll()
    force_clean(cleaner_for(log, clock, io_buffer_size=2048))
    assert len(data(log)) == 20


def test_preallocated_cleaned_segments_are_trimmed(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = open_log(tmp_path, clock, preallocate="true", **{"internal.segment.bytes": 1 << 20})
    for i in range(50):
        put(log, clock, f"k{i % 5}", f"v{i}")
    log.roll()
    force_clean(cleaner_for(log, clock))
    first = log.segments.first_segment()
    assert first is not None
    assert first.log.path.stat().st_size == first.size
    assert len(data(log)) == 5


def test_the_round_keeps_the_last_batch_before_its_upper_bound(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = open_log(tmp_path, clock)
    put(log, clock, "k", "1")
    put(log, clock, "k", "2")
    log.roll()
    put(log, clock, "k", "3")  # in the active segment: shadows offset 1 but is not mapped
    force_clean(cleaner_for(log, clock))
    assert [o for o, _, _ in data(log)] == [1, 2]


def test_the_checkpoint_records_the_next_dirty_offset(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = three_keys_log(tmp_path, clock)
    cleaner = cleaner_for(log, clock)
    force_clean(cleaner)
    assert cleaner.manager.all_cleaner_checkpoints() == {TP: 30}
    assert cleaner.run_once() == []  # nothing dirty any more


def test_abort_pauses_and_resume_releases(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = three_keys_log(tmp_path, clock)
    cleaner = cleaner_for(log, clock)
    manager = cleaner.manager
    manager.abort_and_pause_cleaning(TP)
    assert manager.state(TP) is CleaningState.PAUSED
    assert cleaner.run_once() == []  # paused partitions are skipped
    grabbed_during = []

    def abort_mid_round() -> None:
        grabbed_during.append(manager.state(TP))
        raise LogCleaningAbortedError("test abort")

    manager.resume_cleaning(TP)
    inner = Cleaner(cleaner.config, clock, cleaner.throttler)
    result = cleaner.clean_filthiest_log(inner)
    assert result is not None and result.error is None
    put(log, clock, "k0", "again")
    log.roll()
    inner.check_done = abort_mid_round
    grabbed = manager.grab_filthiest_compacted_log()
    assert grabbed is not None
    with pytest.raises(LogCleaningAbortedError):
        inner.clean(grabbed[1].cleanable, grabbed[2])
    manager.done_cleaning(TP, log.directory.parent, None)
    assert not list((tmp_path / "t-0").glob("*.cleaned"))


def test_a_failing_partition_is_marked_uncleanable(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = three_keys_log(tmp_path, clock)
    first = log.segments.first_segment()
    assert first is not None
    with open(first.log.path, "r+b") as f:  # a batch length pointing past the segment end
        f.seek(8)
        f.write((10**6).to_bytes(4, "big"))
    cleaner = cleaner_for(log, clock)
    (result,) = cleaner.run_once()
    assert result.error is not None and "CorruptRecordError" in result.error
    assert TP in cleaner.manager.uncleanable[log.directory.parent]
    assert cleaner.run_once() == []


def test_a_failed_swap_removes_the_cleaned_files_and_keeps_the_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(NOW)
    log = open_log(tmp_path, clock)
    for i in range(120):
        put(log, clock, f"k{i % 5}", f"v{i}")
    log.roll()
    assert log.number_of_segments > 4  # several groups of 1 KiB segments
    records_before = data(log)

    def failing_swap(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(CleanableLog, "replace_segments", failing_swap)
    (result,) = cleaner_for(log, clock).run_once()
    assert result.error is not None and "disk full" in result.error
    directory = tmp_path / "t-0"
    assert not list(directory.glob("*.cleaned")) and not list(directory.glob("*.swap"))
    assert data(log) == records_before
    log.close()


def test_a_segment_loaded_without_its_txnindex_still_has_its_aborted_data_removed(
    tmp_path: Path,
) -> None:
    """A .txnindex that is missing (a copied directory, a broker that never wrote one) must not
    make the cleaner take aborted data for committed: the ABORT markers decide instead."""
    clock = ManualClock(NOW)
    log = open_log(tmp_path, clock)
    txn = ProducerFields(9, 0, 0, is_transactional=True)
    log.append([Record(b"aborted", b"a", timestamp=NOW)], producer=txn)
    log.append_end_txn_marker(9, 0, "abort", 0)
    put(log, clock, "k", "kept")
    log.roll()
    log.close()
    for index in (tmp_path / "t-0").glob("*.txnindex"):
        index.unlink()
    log = open_log(tmp_path, clock)
    force_clean(cleaner_for(log, clock))
    assert b"aborted" not in [r.value for s in log.segments for b in s.batches() for r in b]
    assert [r.value for r in log.read_records(0, isolation=IsolationLevel.READ_COMMITTED)] == [
        b"kept"
    ]
    log.close()

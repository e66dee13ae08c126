"""PartitionView: a read-only view of a partition another process is writing. It serves every
complete, valid batch, stops quietly at a writer's partial tail, raises on real damage, and
agrees with the owning Log on offsets, the LSO, aborted transactions and time lookups."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kafkalog import Log, LogConfig, ManualClock, MemoryRecords, ProducerFields, Record
from kafkalog.errors import CorruptRecordError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from kafkalog.log.view import PartitionView, discover_partitions, topic_views
from kafkalog.storage import filenames as fn

NOW = 1_700_000_000_000


def _log(path: Path) -> Log:
    config = LogConfig.from_properties(
        {"internal.segment.bytes": "400", "index.interval.bytes": "1"}
    )
    return Log.open(path, config, ManualClock(NOW))


def test_bounds_and_batches_match_the_owning_log(tmp_path: Path) -> None:
    with _log(tmp_path / "t-0") as log:
        for i in range(20):
            log.append([Record(b"v%d" % i, b"k", timestamp=NOW + i)])
        view = PartitionView(tmp_path / "t-0")
        assert len(view.segments()) == log.number_of_segments > 3
        assert view.log_end_offset() == log.log_end_offset == 20
        assert [b.base_offset for b in view.batches(5, 9)] == [5, 6, 7, 8]
        assert view.offset_for_timestamp(NOW + 13) == 13
        assert view.offset_for_timestamp(NOW + 99) is None
        log.maybe_increment_log_start_offset(7)
        log.roll()
        log.delete_old_segments()
    # the view sees what retention removed, without any lock
    with pytest.raises(OffsetOutOfRangeError):
        list(view.batches(0))


def test_partial_tail_is_a_writer_mid_append_not_damage(tmp_path: Path) -> None:
    with _log(tmp_path / "t-0") as log:
        log.append([Record(b"a", timestamp=NOW)])
        log.append([Record(b"b", timestamp=NOW)])
    segment = fn.log_file(tmp_path / "t-0", 0)
    data = segment.read_bytes()
    view = PartitionView(tmp_path / "t-0")
    half = len(data) - 10
    segment.write_bytes(data[:half])
    assert view.log_end_offset() == 1
    assert [b.base_offset for b in view.batches(0)] == [0]
    flipped = bytearray(data)
    flipped[30] ^= 0xFF  # inside the first batch's CRC-covered bytes
    segment.write_bytes(bytes(flipped))
    with pytest.raises(CorruptRecordError) as err:
        list(view.batches(0))
    assert err.value.file == str(segment) and err.value.position == 0


def _half_copied_batch_in_a_preallocated_segment(path: Path) -> tuple[Path, int, bytes]:
    """Two batches in a preallocated active segment, then a third whose copy into the page
    cache a reader catches half done: its header and the first half of its body are there,
    the rest still the preallocated zeros. (segment, where it starts, its bytes)"""
    with Log.open(path, LogConfig(), ManualClock(NOW)) as log:
        for value in (b"a", b"b"):
            log.append([Record(value * 50, timestamp=NOW)])
        start = log.size_in_bytes
    third = bytes(MemoryRecords.build([Record(b"c" * 50, timestamp=NOW)], base_offset=2))
    segment = fn.log_file(path, 0)
    os.truncate(segment, 1 << 20)  # preallocated, as an active segment with preallocate=true
    with open(segment, "r+b") as f:
        os.pwrite(f.fileno(), third[: len(third) // 2], start)
    return segment, start, third


def test_a_batch_caught_half_copied_in_a_preallocated_segment_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer's pwrite into the preallocated tail lands while a lock-free reader reads it:
    the reader waits for the copy instead of calling it damage (it did, in a CI run of
    test_lock_free_readers_beside_a_writer_process)."""
    import threading
    import time

    from kafkalog.log import view as view_module

    path = tmp_path / "t-0"
    segment, start, third = _half_copied_batch_in_a_preallocated_segment(path)
    waits: list[float] = []
    reader = threading.current_thread()

    def copy_lands_meanwhile(seconds: float) -> None:  # the writer finishes its copy
        if threading.current_thread() is not reader:  # time.sleep is global: other threads
            real_sleep(seconds)  # (a background worker left by an earlier test) pass through
            return
        waits.append(seconds)
        with open(segment, "r+b") as f:
            os.pwrite(f.fileno(), third, start)
        real_sleep(seconds)

    real_sleep = time.sleep
    monkeypatch.setattr(view_module.time, "sleep", copy_lands_meanwhile)
    view = PartitionView(path)
    assert view.log_end_offset() == 3 and waits == [0.001]
    assert [b.base_offset for b in view.batches(0)] == [0, 1, 2]


def test_a_half_batch_that_never_lands_in_a_preallocated_segment_is_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kafkalog.log import view as view_module

    monkeypatch.setattr(view_module, "TORN_WRITE_PATIENCE_S", 0.05)
    path = tmp_path / "t-0"
    segment, start, _ = _half_copied_batch_in_a_preallocated_segment(path)
    with pytest.raises(CorruptRecordError) as err:
        PartitionView(path).log_end_offset()
    assert (err.value.file, err.value.position) == (str(segment), start)


def test_transactions_lso_and_aborted_ranges(tmp_path: Path) -> None:
    with _log(tmp_path / "t-0") as log:
        log.append([Record(b"x", timestamp=NOW)])
        log.append([Record(b"t", timestamp=NOW)], producer=ProducerFields(9, 0, 0, True))
        for _ in range(5):  # roll segments past the open transaction (snapshots get written)
            log.append([Record(b"y" * 100, timestamp=NOW)])
        view = PartitionView(tmp_path / "t-0")
        assert view.last_stable_offset() == log.last_stable_offset == 1
        log.append_end_txn_marker(9, 0, "abort", 0)
        assert view.last_stable_offset() == log.last_stable_offset == log.log_end_offset
        assert [(t.producer_id, t.first_offset) for t in view.aborted_transactions(0, 99)] == [
            (9, 1)
        ]
        assert view.aborted_transactions(8, 99) == []


def test_discovery_skips_deleted_and_future_dirs(tmp_path: Path) -> None:
    for name in ("a-0", "a-1", "b-0", "a-2.0123456789abcdef0123456789abcdef-delete", "junk"):
        (tmp_path / name).mkdir()
    found = discover_partitions([tmp_path])
    assert sorted(f"{tp.topic}-{tp.partition}" for tp in found) == ["a-0", "a-1", "b-0"]
    assert list(topic_views([tmp_path], "a")) == [0, 1]
    with pytest.raises(UnknownTopicOrPartitionError):
        topic_views([tmp_path], "c")

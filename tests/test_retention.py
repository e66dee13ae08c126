"""Retention: the pure rule row by row, then on a real Log (Kafka's
UnifiedLog.deleteOldSegments)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalog import Log, LogConfig, ManualClock, ProducerFields, Record
from kafkalog.errors import OffsetOutOfRangeError
from kafkalog.log.retention import (
    SegmentView,
    deletable_prefix,
    log_start_offset_breach,
    retention_ms_breach,
    retention_size_breach,
)
from kafkalog.storage import filenames as fn

NOW = 1_700_000_000_000

SEGS = [SegmentView(0, 100, NOW - 5000), SegmentView(10, 100, NOW - 3000), SegmentView(20, 50, NOW)]


def count(predicate: object, hw: int = 30, leo: int = 30, segs: list[SegmentView] = SEGS) -> int:
    assert predicate is not None
    return deletable_prefix(segs, predicate, high_watermark=hw, log_end_offset=leo)  # type: ignore[arg-type]


# --- the pure rule ---------------------------------------------------------------------------


def test_log_start_breach_needs_the_whole_segment_below() -> None:
    assert count(log_start_offset_breach(9)) == 0
    assert count(log_start_offset_breach(10)) == 1
    assert count(log_start_offset_breach(25)) == 2  # the last segment never by this rule


def test_size_breach_removes_oldest_while_the_rest_still_fits() -> None:
    assert retention_size_breach(250, 300) is None
    assert retention_size_breach(250, -1) is None
    assert count(retention_size_breach(250, 150)) == 1
    assert count(retention_size_breach(250, 50)) == 2
    assert count(retention_size_breach(250, 0)) == 3


def test_time_breach_uses_the_largest_timestamp() -> None:
    assert retention_ms_breach(NOW, -1) is None
    assert count(retention_ms_breach(NOW, 4000)) == 1
    assert count(retention_ms_breach(NOW, 2999)) == 2
    future = [SegmentView(0, 10, NOW + 10_000), *SEGS[1:]]
    assert count(retention_ms_breach(NOW, 0), segs=future) == 0  # future timestamps wait


def test_nothing_at_or_above_the_high_watermark_goes() -> None:
    always = retention_ms_breach(NOW + 10**9, 0)
    assert count(always, hw=0) == 0
    assert count(always, hw=15) == 1
    assert count(always, hw=29) == 2
    assert count(always, hw=30) == 3


def test_an_empty_last_segment_never_goes() -> None:
    segs = [SegmentView(0, 100, 0), SegmentView(10, 0, 0)]
    assert count(retention_ms_breach(NOW, 0), hw=10, leo=10, segs=segs) == 1


# --- on a real log ---------------------------------------------------------------------------


def filled_log(tmp_path: Path, clock: ManualClock, **props: object) -> Log:
    config = LogConfig.from_properties(
        {"internal.segment.bytes": 300, "file.delete.delay.ms": 1000}
        | {k: str(v) for k, v in props.items()}
    )
    log = Log.open(tmp_path / "t-0", config, clock)
    for i in range(12):
        log.append([Record(b"v" * 40, key=b"k%d" % i, timestamp=NOW + i)])
    assert log.number_of_segments >= 4
    return log


def test_time_retention_deletes_everything_but_a_fresh_segment(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = filled_log(tmp_path, clock, **{"retention.ms": 1000})
    assert log.delete_old_segments() == 0
    clock.advance(2000)
    segments_before = log.number_of_segments
    assert log.delete_old_segments() == segments_before
    assert log.number_of_segments == 1 and log.active_segment.size == 0
    assert log.log_start_offset == log.log_end_offset == 12
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)


def test_size_retention_keeps_the_newest_bytes(tmp_path: Path) -> None:
    log = filled_log(tmp_path, ManualClock(NOW), **{"retention.bytes": 400})
    deleted = log.delete_old_segments()
    assert deleted > 0
    assert log.size_in_bytes >= 400 - 300 and log.log_start_offset == log.segments.base_offsets[0]
    assert [r.offset for r in log.read_records(log.log_start_offset)][-1] <= 11


def test_retention_never_passes_the_high_watermark(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = filled_log(tmp_path, clock, **{"retention.ms": 1})
    log.auto_high_watermark = False
    log.update_high_watermark(0)
    clock.advance(10_000)
    assert log.delete_old_segments() == 0
    second = log.segments.base_offsets[1]
    log.update_high_watermark(second)
    assert log.delete_old_segments() == 1 and log.log_start_offset == second


def test_compact_only_logs_lose_only_segments_below_the_log_start(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = filled_log(tmp_path, clock, **{"retention.ms": 1, "cleanup.policy": "compact"})
    clock.advance(10_000)
    assert log.delete_old_segments() == 0
    third = log.segments.base_offsets[2]
    log.maybe_increment_log_start_offset(third + 1)
    assert log.delete_old_segments() == 2
    assert log.segments.base_offsets[0] == third and log.log_start_offset == third + 1
    props = {"retention.ms": 1, "cleanup.policy": "compact,delete"}
    both = filled_log(tmp_path / "b", clock, **props)
    clock.advance(10_000)
    assert both.delete_old_segments() > 0


def test_deleted_files_linger_until_the_delay(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = filled_log(tmp_path, clock, **{"retention.bytes": 0})
    log.append([Record(b"x", key=b"p")], producer=ProducerFields(5, 0, 0))
    log.roll()
    first = log.segments.base_offsets[0]
    assert log.delete_old_segments() > 0
    deleted = sorted(p.name for p in log.directory.iterdir() if p.name.endswith(".deleted"))
    assert fn.log_file(log.directory, first).name + ".deleted" in deleted
    assert any(name.endswith(".snapshot.deleted") for name in deleted)
    assert 5 in log.producers()  # in-memory producer state is kept
    clock.advance(1000)
    log.delete_old_segments()
    assert not [p for p in log.directory.iterdir() if p.name.endswith(".deleted")]


def test_a_read_in_progress_survives_retention(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = filled_log(tmp_path, clock, **{"retention.ms": 1})
    fetch = log.read(0, 1 << 20)
    expected = log.read(0, 1 << 20).read()
    clock.advance(10_000)
    assert log.delete_old_segments() > 0
    assert fetch.read() == expected  # the descriptor outlives the rename
    clock.advance(1000)
    log.delete_old_segments()  # files removed for good

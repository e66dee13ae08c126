"""FileRecords and LogSegment: cases from Kafka's FileRecordsTest and LogSegmentTest."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalog import ManualClock, MemoryRecords, Record
from kafkalog.errors import CorruptRecordError, InvalidArgumentError
from kafkalog.records import ScanStop
from kafkalog.storage.file_records import FileRecords
from kafkalog.storage.segment import LogSegment, LogSegmentOffsetOverflowError, SegmentParams
from storage_helpers import batch


def segment(tmp_path: Path, base: int = 40, interval: int = 10, **kw: object) -> LogSegment:
    params = SegmentParams(index_interval_bytes=interval, max_index_size=1000, **kw)  # type: ignore[arg-type]
    return LogSegment(tmp_path, base, params, ManualClock())


def append(seg: LogSegment, offset: int, n: int = 1, ts: int = 1000) -> bytes:
    data = batch(offset, n, ts)
    seg.append(offset + n - 1, ts + n - 1, offset + n - 1, data)
    return data


# --- FileRecords --------------------------------------------------------------------------------


def test_file_records_append_read_slice(tmp_path: Path) -> None:
    fr = FileRecords(tmp_path / "f.log")
    a, b = batch(0, 2), batch(2, 3)
    fr.append(a)
    fr.append(b)
    assert fr.size == len(a) + len(b)
    assert fr.read(len(a), len(b)) == b
    s = fr.slice(len(a), 10**9)
    assert s.size == len(b) and s.read() == b  # clipped to the end
    # past the end (a reader racing a truncation) is empty, not an error; negative is misuse
    assert fr.slice(fr.size + 1, 1).size == 0 and fr.read(fr.size + 1, 1) == b""
    with pytest.raises(InvalidArgumentError):
        fr.slice(-1, 1)
    found = fr.search_for_offset_with_size(3, 0)
    assert found is not None and (found.last_offset, found.position) == (4, len(a))
    assert fr.search_for_offset_with_size(5, 0) is None


def test_file_records_search_names_the_file_of_offsets_out_of_order(tmp_path: Path) -> None:
    fr = FileRecords(tmp_path / "f.log")
    first, second = batch(5, 2), batch(3, 2)  # last offsets 6, then 4: a base offset gone wrong
    fr.append(first)
    fr.append(second)
    with pytest.raises(CorruptRecordError, match="4 does not follow the offset 6") as err:
        fr.search_for_offset_with_size(0, 0)
    assert (err.value.file, err.value.position, err.value.offset) == (
        str(fr.path),
        len(first),
        4,
    )


def test_file_records_trailing_partial_bytes_are_ignored(tmp_path: Path) -> None:
    fr = FileRecords(tmp_path / "f.log")
    fr.append(batch(0))
    fr.append(batch(1)[:5])
    assert [b.base_offset for b in fr.batches()] == [0]


def test_file_records_truncate(tmp_path: Path) -> None:
    fr = FileRecords(tmp_path / "f.log")
    a = batch(0)
    fr.append(a)
    b = batch(1)
    fr.append(b)
    assert fr.truncate_to(len(a)) == len(b)
    assert fr.size == len(a) and (tmp_path / "f.log").stat().st_size == len(a)
    with pytest.raises(ValueError):
        fr.truncate_to(len(a) + 1)


def test_preallocated_file_records(tmp_path: Path) -> None:
    fr = FileRecords(tmp_path / "p.log", preallocate_size=4096)
    assert fr.size == 0 and (tmp_path / "p.log").stat().st_size == 4096
    data = batch(0)
    fr.append(data)
    assert fr.size == len(data)
    fr.close()
    assert (tmp_path / "p.log").stat().st_size == len(data)
    again = FileRecords(tmp_path / "p.log")
    assert again.size == len(data)


def test_search_for_timestamp(tmp_path: Path) -> None:
    fr = FileRecords(tmp_path / "f.log")
    fr.append(batch(0, 3, ts=100))  # 100, 101, 102
    fr.append(batch(3, 3, ts=200))
    found = fr.search_for_timestamp(101, 0, 0)
    assert found is not None and (found.timestamp, found.offset) == (101, 1)
    found = fr.search_for_timestamp(150, 0, 0)
    assert found is not None and (found.timestamp, found.offset) == (200, 3)
    assert fr.search_for_timestamp(1000, 0, 0) is None
    v0 = FileRecords(tmp_path / "v0.log")
    v0.append(bytes(MemoryRecords.build([Record(b"x")], magic=0)))
    assert v0.search_for_timestamp(0, 0, 0) is None


# --- LogSegment ---------------------------------------------------------------------------------


def test_append_outside_the_offset_range_overflows(tmp_path: Path) -> None:
    seg = segment(tmp_path)
    with pytest.raises(LogSegmentOffsetOverflowError):
        seg.append(2**31 + 40, 0, 0, batch(2**31 + 40))
    with pytest.raises(LogSegmentOffsetOverflowError):
        seg.append(39, 0, 0, batch(39))


def test_reads(tmp_path: Path) -> None:
    seg = segment(tmp_path)
    assert seg.read(40, 300) is None  # empty
    append(seg, 50, 2)
    append(seg, 60, 2)  # offsets 50-51, 60-61 (a gap)
    assert seg.read(62, 300) is None  # beyond the last offset
    first = seg.read(41, 10**6)
    assert first is not None and first.fetch_offset_metadata.relative_position_in_segment == 0
    gap = seg.read(55, 10**6)  # in a gap: the next batch
    assert gap is not None and MemoryRecords(gap.read()).first_batch().base_offset == 60  # type: ignore[union-attr]
    no_max = seg.read(60, 300, max_position=None)
    assert no_max is not None and no_max.fetch_offset_metadata.segment_base_offset == 40


def test_read_with_size_limits(tmp_path: Path) -> None:
    seg = segment(tmp_path)
    data = append(seg, 40, 3)
    assert seg.read(40, 0, min_one_message=False).records is None  # type: ignore[union-attr]
    one = seg.read(40, 1, min_one_message=False)
    assert one is not None and one.size == 1 and one.first_entry_incomplete
    whole = seg.read(40, 1, min_one_message=True)
    assert whole is not None and whole.size == len(data) and not whole.first_entry_incomplete


def test_truncate_to(tmp_path: Path) -> None:
    seg = segment(tmp_path)
    for off in (40, 42, 44, 50):
        append(seg, off, 2)
    assert seg.truncate_to(46) > 0  # in the gap 46-49: the batch after the gap goes
    assert seg.read_next_offset() == 46
    seg.truncate_to(43)  # inside a batch: the whole batch goes
    assert seg.read_next_offset() == 42
    for _ in range(3):  # repeated append/truncate cycles
        append(seg, 42, 2)
        seg.truncate_to(42)
    assert seg.read_next_offset() == 42


def test_truncate_to_empty_resets_state(tmp_path: Path) -> None:
    clock = ManualClock()
    seg = LogSegment(
        tmp_path, 40, SegmentParams(index_interval_bytes=10, max_index_size=1000), clock
    )
    append(seg, 40, 2, ts=5000)
    clock.advance(10_000)
    seg.truncate_to(40)
    assert seg.size == 0 and seg.created_ms == clock.milliseconds()
    assert not seg.offset_index_full() and not seg.time_index_full()
    assert seg.time_waited_for_roll(clock.milliseconds(), 99999) == 0


def test_largest_timestamp_recomputed_after_truncation(tmp_path: Path) -> None:
    seg = segment(tmp_path)
    append(seg, 40, 1, ts=100)
    append(seg, 41, 1, ts=300)
    assert seg.max_timestamp_so_far == 300
    seg.truncate_to(41)
    assert seg.max_timestamp_so_far == 100


def test_index_density_follows_the_interval_rule(tmp_path: Path) -> None:
    size = len(batch(0))
    seg = LogSegment(
        tmp_path,
        0,
        SegmentParams(index_interval_bytes=2 * size - 1, max_index_size=1000),
        ManualClock(),
    )
    for i in range(30):
        seg.append(i, 1000 + i, i, batch(i, ts=1000 + i))
    assert seg.offset_index.entries == 14


def test_find_offset_by_timestamp(tmp_path: Path) -> None:
    seg = segment(tmp_path, base=0, interval=0)
    for i in range(10):
        append(seg, i * 2, 2, ts=i * 10)  # offsets 2i, 2i+1 with timestamps 10i, 10i+1
    found = seg.find_offset_by_timestamp(30, 0)
    assert found is not None and (found.offset, found.timestamp) == (6, 30)
    found = seg.find_offset_by_timestamp(35, 0)
    assert found is not None and found.offset == 8
    assert seg.find_offset_by_timestamp(1000, 0) is None
    found = seg.find_offset_by_timestamp(-5, 0)
    assert found is not None and found.offset == 0


def test_read_next_offset_and_first_batch_timestamp(tmp_path: Path) -> None:
    seg = segment(tmp_path)
    assert seg.read_next_offset() == 40 and seg.first_batch_timestamp() == 2**63 - 1
    append(seg, 40, 3, ts=77)
    assert seg.read_next_offset() == 43 and seg.first_batch_timestamp() == 79


def test_recover_rebuilds_garbage_indexes(tmp_path: Path) -> None:
    seg = segment(tmp_path, base=0, interval=0)
    for i in range(20):
        append(seg, i, 1, ts=100 + i)
    seg.offset_index.close_handler()
    seg.time_index.close_handler()
    seg.offset_index_file.write_bytes(b"\x07" * 800)
    seg.time_index_file.write_bytes(b"\x09" * 960)
    fresh = segment(tmp_path, base=0, interval=0)
    result = fresh.recover()
    assert result.truncated_bytes == 0 and result.batches == 20
    for i in range(20):
        found = fresh.translate_offset(i)
        assert found is not None and found.last_offset == i
        ts = fresh.find_offset_by_timestamp(100 + i, 0)
        assert ts is not None and ts.offset == i


def test_recover_truncates_exactly_at_the_corrupt_batch(tmp_path: Path) -> None:
    seg = segment(tmp_path, base=0)
    sizes = [len(append(seg, i, 1)) for i in range(10)]
    seg.log.close_handler()
    path = seg.log.path
    raw = bytearray(path.read_bytes())
    cut = sum(sizes[:6])
    raw[cut + 30] ^= 0xFF
    path.write_bytes(bytes(raw))
    fresh = segment(tmp_path, base=0)
    result = fresh.recover()
    assert result.valid_bytes == cut and result.stop is ScanStop.BAD_CRC
    assert fresh.read_next_offset() == 6 and path.stat().st_size == cut


def test_recover_calls_back_with_each_batch(tmp_path: Path) -> None:
    seg = segment(tmp_path, base=0)
    append(seg, 0, 2)
    seen: list[int] = []
    seg.recover(on_batch=lambda b: seen.append(b.base_offset))
    assert seen == [0]


def test_has_overflow_is_false_for_normal_segments(tmp_path: Path) -> None:
    seg = segment(tmp_path, base=0)
    append(seg, 0, 3)
    assert not seg.has_overflow()

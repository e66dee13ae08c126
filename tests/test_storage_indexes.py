"""Offset, time and transaction indexes: Kafka's OffsetIndex, TimeIndex, TransactionIndex and their
tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalog.errors import CorruptIndexError, InvalidOffsetError
from kafkalog.storage.offset_index import OffsetIndex, OffsetPosition
from kafkalog.storage.time_index import TimeIndex, TimestampOffset
from kafkalog.storage.txn_index import AbortedTxn, TransactionIndex

BASE = 45


def offset_index(tmp_path: Path, max_size: int = 30 * 8) -> OffsetIndex:
    return OffsetIndex(tmp_path / "00000000000000000045.index", BASE, max_size)


def test_offset_index_is_preallocated_and_rounded_down(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "a.index", 0, 8 * 10 + 5)
    assert idx.length == 80 and idx.max_entries == 10 and idx.entries == 0


def test_offset_index_lookup(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    assert idx.lookup(BASE + 5) == OffsetPosition(BASE, 0)  # empty -> (base, 0)
    for rel, pos in [(1, 10), (3, 30), (7, 70)]:
        idx.append(BASE + rel, pos)
    assert idx.lookup(BASE) == OffsetPosition(BASE, 0)  # below the first entry
    assert idx.lookup(BASE + 1) == OffsetPosition(BASE + 1, 10)
    assert idx.lookup(BASE + 5) == OffsetPosition(BASE + 3, 30)
    assert idx.lookup(BASE + 100) == OffsetPosition(BASE + 7, 70)


def test_offset_index_entry_out_of_range(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    idx.append(BASE + 1, 1)
    assert idx.entry_at(0) == OffsetPosition(BASE + 1, 1)
    with pytest.raises(IndexError):
        idx.entry_at(1)


def test_offset_index_append_rules(tmp_path: Path) -> None:
    idx = offset_index(tmp_path, max_size=16)
    idx.append(BASE + 1, 0)
    with pytest.raises(InvalidOffsetError):
        idx.append(BASE + 1, 5)
    idx.append(BASE + 2, 5)
    assert idx.is_full()
    with pytest.raises(ValueError, match="full"):
        idx.append(BASE + 3, 9)


def test_fetch_upper_bound_offset(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    for rel, pos in [(1, 100), (2, 200), (3, 300)]:
        idx.append(BASE + rel, pos)
    assert idx.fetch_upper_bound_offset(50, 100) == BASE + 2
    assert idx.fetch_upper_bound_offset(0, 50) == BASE + 1
    assert idx.fetch_upper_bound_offset(250, 100) is None


def test_offset_index_reopen_after_close(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    for i in range(5):
        idx.append(BASE + i * 2 + 1, i * 100)
    idx.close()
    assert idx.path.stat().st_size == 5 * 8  # trimmed
    again = OffsetIndex(idx.path, BASE, 30 * 8)
    assert again.entries == 5 and again.last_offset == BASE + 9
    ro = OffsetIndex(idx.path, BASE, 30 * 8, writable=False)
    assert ro.lookup(BASE + 4).offset == BASE + 3


def test_offset_index_truncate(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    for i in range(1, 10):
        idx.append(BASE + i, i)
    idx.truncate_to(BASE + 100)
    assert idx.entries == 9
    idx.truncate_to(BASE + 9)
    assert idx.entries == 8 and idx.last_offset == BASE + 8
    idx.truncate_to(BASE + 5)
    assert idx.entries == 4 and idx.lookup(BASE + 10).offset == BASE + 4
    idx.truncate_to(BASE)
    assert idx.entries == 0
    idx.append(BASE + 1, 1)
    assert idx.entries == 1


def test_offset_index_sanity(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    idx.append(BASE, 0)
    idx.sanity_check()  # an only entry equal to the base offset is fine
    bad = OffsetIndex(tmp_path / "b.index", BASE, 30 * 8)
    bad.append(BASE, 0)
    bad.close()
    with open(bad.path, "ab") as f:
        f.write(b"\x00\x00")
    with pytest.raises(CorruptIndexError, match="multiple of 8"):
        OffsetIndex(bad.path, BASE, 30 * 8).sanity_check()
    neg = tmp_path / "c.index"
    neg.write_bytes((-5).to_bytes(4, "big", signed=True) + (0).to_bytes(4, "big"))
    with pytest.raises(CorruptIndexError, match="below the base"):
        OffsetIndex(neg, BASE, 30 * 8).sanity_check()


@pytest.mark.parametrize("kind", ["offset", "time"])
def test_a_crash_left_preallocation_is_not_read_as_entries(tmp_path: Path, kind: str) -> None:
    """A segment's index is trimmed when the segment is closed; after a kill -9 it is still
    its preallocated size, zeros after the real entries. Reopened, only the real entries
    count: 10 MiB of zero entries made every partition's reopen after a crash take 0.35 s."""
    size = 10 * 1024 * 1024
    if kind == "offset":
        idx: OffsetIndex | TimeIndex = OffsetIndex(tmp_path / "a.index", BASE, size)
        for i in range(1, 4):
            idx.append(BASE + i * 10, i * 4096)  # type: ignore[call-arg]
    else:
        idx = TimeIndex(tmp_path / "a.timeindex", BASE, size)
        for i in range(1, 4):
            idx.maybe_append(1000 + i, BASE + i * 10)  # type: ignore[union-attr]
    idx.flush()
    assert idx.path.stat().st_size >= size - 12  # as the crash left it: never trimmed
    again = type(idx)(idx.path, BASE, size)
    assert again.entries == 3 and again.entry_problem(1 << 20) is None
    assert again.max_entries == idx.max_entries  # still room for the next entries
    first = OffsetIndex(tmp_path / "b.index", BASE, size)
    first.append(BASE, 0)  # the one entry that is all zeros: the same as no entry
    first.flush()
    assert OffsetIndex(first.path, BASE, size).lookup(BASE + 5) == OffsetPosition(BASE, 0)


def time_index(tmp_path: Path, slots: int = 30) -> TimeIndex:
    return TimeIndex(tmp_path / "00000000000000000045.timeindex", BASE, slots * 12)


def test_time_index_lookup(tmp_path: Path) -> None:
    idx = time_index(tmp_path)
    assert idx.lookup(100) == TimestampOffset(-1, BASE)
    for ts, rel in [(100, 1), (200, 5), (300, 9)]:
        idx.maybe_append(ts, BASE + rel)
    assert idx.lookup(50) == TimestampOffset(-1, BASE)
    assert idx.lookup(100) == TimestampOffset(100, BASE + 1)
    assert idx.lookup(250) == TimestampOffset(200, BASE + 5)
    assert idx.lookup(10**9) == TimestampOffset(300, BASE + 9)


def test_time_index_full_one_slot_early(tmp_path: Path) -> None:
    idx = time_index(tmp_path, slots=3)
    idx.maybe_append(1, BASE + 1)
    idx.maybe_append(2, BASE + 2)
    assert idx.is_full() and idx.entries == 2
    with pytest.raises(ValueError, match="full"):
        idx.maybe_append(3, BASE + 3)
    idx.maybe_append(3, BASE + 3, skip_full_check=True)
    assert idx.entries == 3


def test_time_index_append_rules(tmp_path: Path) -> None:
    idx = time_index(tmp_path)
    idx.maybe_append(100, BASE + 5)
    idx.maybe_append(100, BASE + 6)  # equal timestamp: silently skipped
    assert idx.entries == 1
    with pytest.raises(InvalidOffsetError):
        idx.maybe_append(200, BASE + 4, skip_full_check=True)
    with pytest.raises(InvalidOffsetError):
        idx.maybe_append(50, BASE + 7)
    empty = TimeIndex(tmp_path / "e.timeindex", BASE, 120)
    empty.maybe_append(-1, BASE)  # data without timestamps never makes entries
    assert empty.entries == 0


def test_time_index_truncate_and_resize(tmp_path: Path) -> None:
    idx = time_index(tmp_path)
    for i in range(1, 6):
        idx.maybe_append(i * 10, BASE + i)
    idx.truncate_to(BASE + 3)
    assert idx.entries == 2 and idx.last_entry() == TimestampOffset(20, BASE + 2)
    idx.truncate_to(BASE)
    assert idx.last_entry() == TimestampOffset(-1, BASE)
    assert idx.resize(idx.length) is False  # unchanged


def test_time_index_sanity(tmp_path: Path) -> None:
    p = tmp_path / "t.timeindex"
    p.write_bytes(
        (500).to_bytes(8, "big")
        + (1).to_bytes(4, "big")
        + (100).to_bytes(8, "big")
        + (2).to_bytes(4, "big")
    )
    with pytest.raises(CorruptIndexError, match="timestamp"):
        TimeIndex(p, BASE, 120).sanity_check()
    p.write_bytes(b"\x00" * 13)
    with pytest.raises(CorruptIndexError, match="multiple of 12"):
        TimeIndex(p, BASE, 120).sanity_check()


def txn_index(tmp_path: Path) -> TransactionIndex:
    return TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0)


def test_txn_index_collect_aborted(tmp_path: Path) -> None:
    idx = txn_index(tmp_path)
    entries = [AbortedTxn(0, 0, 10, 11), AbortedTxn(1, 5, 15, 13), AbortedTxn(2, 18, 35, 25),
               AbortedTxn(3, 32, 50, 40)]  # fmt: skip
    for e in entries:
        idx.append(e)
    assert idx.path.stat().st_size == 4 * 34
    r = idx.collect_aborted_txns(0, 100)
    assert r.aborted == entries and not r.is_complete
    r = idx.collect_aborted_txns(0, 32)
    assert r.aborted == entries[:3] and r.is_complete
    r = idx.collect_aborted_txns(0, 35)
    assert r.aborted == entries and r.is_complete
    r = idx.collect_aborted_txns(11, 35)
    assert r.aborted == entries[1:] and r.is_complete
    r = idx.collect_aborted_txns(20, 41)
    assert r.aborted == entries[2:] and not r.is_complete


def test_txn_index_truncate_reset_reopen(tmp_path: Path) -> None:
    idx = txn_index(tmp_path)
    for e in [AbortedTxn(0, 0, 10, 11), AbortedTxn(1, 5, 15, 13), AbortedTxn(2, 18, 35, 25),
              AbortedTxn(3, 32, 50, 40)]:  # fmt: skip
        idx.append(e)
    idx.truncate_to(51)
    assert len(idx.all_aborted()) == 4
    idx.truncate_to(50)
    assert [t.last_offset for t in idx.all_aborted()] == [10, 15, 35]
    again = txn_index(tmp_path)
    again.append(AbortedTxn(9, 40, 60, 61))  # reopened index appends after existing entries
    assert [t.producer_id for t in again.all_aborted()] == [0, 1, 2, 9]
    with pytest.raises(InvalidOffsetError):
        again.append(AbortedTxn(9, 40, 60, 61))
    again.reset()
    assert again.all_aborted() == []


def test_txn_index_sanity_and_missing_files(tmp_path: Path) -> None:
    idx = TransactionIndex(tmp_path / "00000000000000000100.txnindex", 100)
    assert idx.all_aborted() == []  # a missing file means no aborted transactions
    idx.rename_to(tmp_path / "x.deleted")  # renaming a missing file is fine
    assert idx.delete() is False
    idx = TransactionIndex(tmp_path / "00000000000000000100.txnindex", 100)
    idx.append(AbortedTxn(1, 0, 50, 51))
    with pytest.raises(CorruptIndexError):
        idx.sanity_check()


def test_a_short_read_at_open_keeps_whole_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another instance may trim the file between the open's fstat and its read (a reopened
    log trimming what a reader of the old one opens): the torn entry is dropped, not unpacked
    (it failed every later check with "iterative unpacking requires a buffer of a multiple of
    12 bytes", seen under load in test_log_opfuzz)."""
    import os

    from kafkalog.storage import index_file

    path = tmp_path / "00000000000000000000.timeindex"
    path.write_bytes(b"\x01" * (12 * 10))
    real_pread = os.pread
    monkeypatch.setattr(index_file.os, "pread", lambda fd, n, pos: real_pread(fd, n, pos)[:30])
    index = TimeIndex(path, 0, 12 * 10)
    assert index.entries == 2 and index.entry_problem(0) is not None  # a problem, not a crash


def test_a_closed_segment_does_not_open_its_indexes(tmp_path: Path) -> None:
    """A lock-free reader of a log that was closed (and maybe reopened, its indexes trimmed or
    rebuilt) gets LogClosedError, which reads retry on the new segment list."""
    from kafkalog import Log, LogConfig, ManualClock, Record
    from kafkalog.errors import LogClosedError

    config = LogConfig.from_properties({"internal.segment.bytes": "200"})
    with Log.open(tmp_path / "t-0", config, ManualClock(0)) as log:
        for i in range(5):
            log.append([Record(b"x" * 100, timestamp=i)])
    with Log.open(tmp_path / "t-0", config, ManualClock(0)) as log:
        first = log.segments.values()[0]  # its indexes open lazily: not yet
    with pytest.raises(LogClosedError):
        first.time_index  # noqa: B018 - opening it is what is refused


def test_a_failed_index_write_leaves_the_entries_changeable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write of pending entries that fails (a full disk) must not leave a view of them
    alive in its traceback: truncation afterwards raised a bare BufferError ("Existing
    exports of data") instead of going on."""
    import errno
    import os

    from kafkalog.errors import KafkaStorageError

    idx = offset_index(tmp_path)
    for rel in (1, 2, 3):
        idx.append(BASE + rel, rel * 10)

    def full(*args: object) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as m:
        m.setattr(os, "pwrite", full)
        with pytest.raises(KafkaStorageError) as failed:
            idx.flush()
    assert failed.value.__traceback__ is not None  # held, as a caller's handler would
    idx.truncate_to(BASE + 2)
    idx.append(BASE + 2, 25)
    idx.flush()
    assert idx.lookup(BASE + 2) == OffsetPosition(BASE + 2, 25)

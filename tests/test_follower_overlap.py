"""Follower appends whose checksums are verified while the bytes are written.

A large follower append writes past the logical end while another thread checks the CRCs; these
tests pin down that nothing of it becomes visible before the verdict, that a failure leaves the
log and its files as they were, and that the error is the one the in-line check gives.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kafkalog import CorruptRecordError, ManualClock
from kafkalog.log import checksum_overlap, write_path
from kafkalog.log.config import LogConfig
from kafkalog.log.log import Log
from storage_helpers import batch

NOW = 1_700_000_000_000
VALUE = b"v" * 1000


def big_batch(offset: int, n: int = 300) -> bytearray:
    """About 300 KiB in one v2 batch: above OVERLAP_MIN_BYTES."""
    data = bytearray(batch(offset, n, value=VALUE))
    assert len(data) >= checksum_overlap.OVERLAP_MIN_BYTES
    return data


def corrupted(data: bytearray, at: int = -5) -> bytearray:
    out = bytearray(data)
    out[at] ^= 0x40
    return out


def open_log(path: Path, **props: object) -> Log:
    config = LogConfig.from_properties({"max.message.bytes": 4 << 20, **props})
    return Log.open(path / "t-0", config, ManualClock(NOW))


def error_of(path: Path, data: bytes | bytearray, overlap: bool) -> str:
    log = open_log(path)
    log.append_as_follower(big_batch(0))
    threshold = checksum_overlap.OVERLAP_MIN_BYTES if overlap else 1 << 40
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(write_path, "OVERLAP_MIN_BYTES", threshold)
        with pytest.raises(CorruptRecordError) as err:
            log.append_as_follower(data)
    log.close()
    return str(err.value)


@pytest.mark.parametrize("where", [-5, 70, 200_000])
def test_a_bad_checksum_fails_as_the_inline_check_does(tmp_path: Path, where: int) -> None:
    bad = corrupted(big_batch(300), where)
    overlapped = error_of(tmp_path / "a", bad, overlap=True)
    inline = error_of(tmp_path / "b", bad, overlap=False)
    assert overlapped == inline
    assert "record batch is corrupt" in overlapped


def test_a_corrupt_batch_outranks_a_later_offset_error(tmp_path: Path) -> None:
    # the second batch goes backwards: the in-line scan never reaches it, so it must not win
    bad = corrupted(big_batch(300)) + big_batch(0)
    assert error_of(tmp_path / "a", bad, True) == error_of(tmp_path / "b", bad, False)


@pytest.mark.parametrize("preallocate", [False, True])
def test_a_failed_append_leaves_log_and_files_as_they_were(
    tmp_path: Path, preallocate: bool
) -> None:
    log = open_log(tmp_path, **{"preallocate": str(preallocate).lower()})
    log.append_as_follower(big_batch(0))
    segment = log.active_segment.log
    before = (log.log_end_offset, log.high_watermark, segment.size)
    physical = segment.path.stat().st_size
    with pytest.raises(CorruptRecordError):
        log.append_as_follower(corrupted(big_batch(300)))
    assert (log.log_end_offset, log.high_watermark, segment.size) == before
    assert segment.path.stat().st_size == physical
    if preallocate:  # the undo put zeros back where the bad bytes went
        with open(segment.path, "rb") as f:
            f.seek(before[2])
            assert f.read(400_000).strip(b"\0") == b""
    good = big_batch(300)
    log.append_as_follower(good)
    assert log.log_end_offset == 600
    log.close()
    reopened = open_log(tmp_path)
    assert reopened.log_end_offset == 600
    assert reopened.read(300, 1 << 20).records.read() == bytes(good)  # type: ignore[union-attr]
    reopened.close()


def test_no_roll_happens_for_a_batch_that_turns_out_corrupt(tmp_path: Path) -> None:
    log = open_log(tmp_path, **{"internal.segment.bytes": 400_000})
    log.append_as_follower(big_batch(0))
    with pytest.raises(CorruptRecordError):
        log.append_as_follower(corrupted(big_batch(300)))  # would roll: the segment is full
    assert [s.base_offset for s in log.segments] == [0]
    log.append_as_follower(big_batch(300))
    assert [s.base_offset for s in log.segments] == [0, 300]
    log.close()


def test_readers_see_nothing_until_the_checksums_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path)
    log.append_as_follower(big_batch(0))
    size = log.active_segment.log.size
    started, release = threading.Event(), threading.Event()
    real_run = checksum_overlap.PendingChecksums.run

    def held_run(self: checksum_overlap.PendingChecksums) -> None:
        started.set()
        release.wait(10)
        real_run(self)

    monkeypatch.setattr(checksum_overlap.PendingChecksums, "run", held_run)
    appender = threading.Thread(target=log.append_as_follower, args=(big_batch(300),))
    appender.start()
    assert started.wait(10)
    # the write may be done, but until the verdict the log ends where it did
    assert (log.log_end_offset, log.active_segment.log.size) == (300, size)
    assert log.read(0, 1 << 30).records.size == size  # type: ignore[union-attr]
    release.set()
    appender.join(10)
    assert log.log_end_offset == 600
    log.close()


def test_checksums_run_off_the_appending_thread(tmp_path: Path) -> None:
    seen: list[str] = []
    real = checksum_overlap.PendingChecksums.run

    def spy(self: checksum_overlap.PendingChecksums) -> None:
        seen.append(threading.current_thread().name)
        real(self)

    log = open_log(tmp_path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(checksum_overlap.PendingChecksums, "run", spy)
        log.append_as_follower(big_batch(0))
        log.append_as_follower(batch(300, 2))  # small: checked in line
    assert seen == ["kafkalog-crc"]
    log.close()

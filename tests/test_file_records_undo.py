"""A write the disk cuts short is put back: the data file's length and bytes after a failed
append are what they were before it, whether the file was preallocated, grew past its
preallocation, or was truncated since (the appender keeps the file's length itself rather than
asking the file system on every append)."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kafkalog.errors import KafkaStorageError
from kafkalog.storage.file_records import FileRecords


@contextmanager
def _disk_fills_after(written: int) -> Iterator[None]:
    """The next append gets ``written`` bytes onto the disk, then ENOSPC; writes after that
    (the undo's zeros) succeed."""
    real = os.pwrite
    calls = 0

    def pwrite(fd: int, data: bytes | memoryview, position: int) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            return real(fd, bytes(data)[:written], position)
        if calls == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data, position)

    mp = pytest.MonkeyPatch()
    mp.setattr(os, "pwrite", pwrite)
    try:
        yield
    finally:
        mp.undo()


def _fail_append(records: FileRecords, data: bytes, written: int) -> None:
    with _disk_fills_after(written), pytest.raises(KafkaStorageError):
        records.append(data)


def test_a_short_write_to_a_plain_file_is_cut_off(tmp_path: Path) -> None:
    records = FileRecords(tmp_path / "0.log")
    records.append(b"a" * 100)
    _fail_append(records, b"b" * 50, 10)
    assert records.size == 100
    assert (tmp_path / "0.log").read_bytes() == b"a" * 100
    records.append(b"c" * 5)
    records.close()
    assert (tmp_path / "0.log").read_bytes() == b"a" * 100 + b"c" * 5


def test_a_short_write_inside_a_preallocated_file_is_zeroed(tmp_path: Path) -> None:
    records = FileRecords(tmp_path / "0.log", preallocate_size=4096)
    records.append(b"a" * 100)
    _fail_append(records, b"b" * 50, 10)
    data = (tmp_path / "0.log").read_bytes()
    assert len(data) == 4096  # the preallocation stays
    assert data[:100] == b"a" * 100 and data[100:] == bytes(3996)
    assert records.size == 100
    records.close()


def test_a_short_write_across_the_preallocated_end_goes_back_to_it(tmp_path: Path) -> None:
    records = FileRecords(tmp_path / "0.log", preallocate_size=4096)
    records.append(b"a" * 4090)
    _fail_append(records, b"b" * 50, 20)  # 6 bytes inside, 14 past the end
    data = (tmp_path / "0.log").read_bytes()
    assert len(data) == 4096
    assert data == b"a" * 4090 + bytes(6)
    records.append(b"c" * 50)  # the append that grows it for real
    _fail_append(records, b"d" * 50, 20)
    assert (tmp_path / "0.log").read_bytes() == b"a" * 4090 + b"c" * 50
    records.close()


def test_a_short_write_after_a_truncation_goes_back_to_the_truncated_length(
    tmp_path: Path,
) -> None:
    records = FileRecords(tmp_path / "0.log")
    records.append(b"a" * 100)
    records.truncate_to(40)
    _fail_append(records, b"b" * 50, 10)
    assert (tmp_path / "0.log").read_bytes() == b"a" * 40
    records.close()

"""The memory-mapped, fixed-entry index file that offset and time indexes share (spec §3.1-§3.2).

Why: both indexes are preallocated to ``segment.index.bytes`` (rounded down to whole entries),
mapped, trusted on reopen to hold ``file length / entry size`` entries, trimmed when their segment
becomes inactive and re-extended when it becomes active again. Refuses: interpreting entries
(subclasses do) and deciding when to trim or extend (the segment does).
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
from pathlib import Path

from kafkalog.errors import LogClosedError
from kafkalog.storage.atomic import delete_if_exists


class IndexFile:
    """An mmap'd array of fixed-size big-endian entries.

    Owns the file descriptor and the mapping. ``entries`` entries are valid; the rest of the
    mapping is preallocated zeros. Thread-safe: a lock guards every access to the mapping, since
    a resize replaces it.
    """

    entry: struct.Struct  # set by subclasses

    def __init__(self, path: Path, base_offset: int, max_index_size: int, writable: bool = True):
        self.path = path
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self.writable = writable
        self._lock = threading.RLock()
        size = self.entry.size
        exists = path.exists() and path.stat().st_size > 0
        flags = os.O_RDWR | os.O_CREAT if writable else os.O_RDONLY
        self._fd: int | None = os.open(path, flags, 0o644)
        if not exists and writable:
            os.ftruncate(self._fd, self._round(max_index_size))
        self._length = os.fstat(self._fd).st_size
        self._mm: mmap.mmap | None = self._map()
        self.entries = 0 if not exists else self._length // size

    def _round(self, n: int) -> int:
        return n - n % self.entry.size

    def _map(self) -> mmap.mmap | None:
        if self._length == 0:
            return None
        assert self._fd is not None
        access = mmap.ACCESS_WRITE if self.writable else mmap.ACCESS_READ
        return mmap.mmap(self._fd, self._length, access=access)

    def _check_open(self) -> None:
        if self._fd is None:
            raise LogClosedError(f"index {self.path} is closed")

    @property
    def max_entries(self) -> int:
        return self._length // self.entry.size

    @property
    def size_in_bytes(self) -> int:
        """Bytes used by valid entries."""
        return self.entries * self.entry.size

    @property
    def length(self) -> int:
        """Current file (and mapping) length."""
        return self._length

    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def _read(self, n: int) -> tuple[int, ...]:
        assert self._mm is not None
        return self.entry.unpack_from(self._mm, n * self.entry.size)

    def raw_entry(self, n: int) -> tuple[int, ...]:
        with self._lock:
            if not 0 <= n < self.entries:
                raise IndexError(f"attempt to fetch entry {n} of {self.entries} in {self.path}")
            return self._read(n)

    def _write_next(self, *values: int) -> None:
        assert self._mm is not None
        self.entry.pack_into(self._mm, self.entries * self.entry.size, *values)
        self.entries += 1

    def _largest_at_most(self, target: int, column: int) -> int:
        """Slot of the largest entry whose ``column`` is <= ``target``; -1 if none."""
        lo, hi = 0, self.entries - 1
        if hi < 0 or self._read(0)[column] > target:
            return -1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._read(mid)[column] <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _smallest_at_least(self, target: int, column: int) -> int:
        """Slot of the smallest entry whose ``column`` is >= ``target``; -1 if none."""
        lo, hi = 0, self.entries - 1
        if hi < 0 or self._read(hi)[column] < target:
            return -1
        while lo < hi:
            mid = (lo + hi) // 2
            if self._read(mid)[column] >= target:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def resize(self, new_size: int) -> bool:
        """Set the file length (rounded down to whole entries); False if unchanged."""
        with self._lock:
            self._check_open()
            rounded = self._round(new_size)
            if rounded == self._length:
                return False
            if self._mm is not None:
                self._mm.close()
            assert self._fd is not None
            os.ftruncate(self._fd, rounded)
            self._length = rounded
            self.entries = min(self.entries, rounded // self.entry.size)
            self._mm = self._map()
            return True

    def trim_to_valid_size(self) -> bool:
        return self.resize(self.size_in_bytes)

    def reset(self) -> None:
        """Remove every entry and extend the file back to the maximum size."""
        with self._lock:
            self.entries = 0
            self.resize(self.max_index_size)

    def _truncate_to_entries(self, n: int) -> None:
        with self._lock:
            self.entries = n

    def flush(self) -> None:
        with self._lock:
            if self._mm is not None:
                self._mm.flush()

    def close(self) -> None:
        with self._lock:
            if self._fd is None:
                return
            if self.writable:
                self.trim_to_valid_size()
            if self._mm is not None:
                self._mm.close()
                self._mm = None
            os.close(self._fd)
            self._fd = None

    def close_handler(self) -> None:
        """Release the mapping and descriptor without trimming (the file is being deleted)."""
        with self._lock:
            if self._mm is not None:
                self._mm.close()
                self._mm = None
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def rename_to(self, path: Path) -> None:
        with self._lock:
            if self.path.exists():
                os.replace(self.path, path)
            self.path = path

    def delete(self) -> bool:
        self.close_handler()
        return delete_if_exists(self.path)

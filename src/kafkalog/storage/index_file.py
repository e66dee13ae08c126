"""The fixed-entry index file that offset and time indexes share (Kafka's AbstractIndex).

Why: both indexes are preallocated to ``segment.index.bytes`` (rounded down to whole entries),
trusted on reopen to hold ``file length / entry size`` entries, trimmed when their segment
becomes inactive and re-extended when it becomes active again.

Kafka memory-maps the file and stores each entry into the mapping. From Python every such store
is a page write fault that the kernel throttles with the dirty data around it (measured: 0.1-0.5
ms per entry next to large appends), so here the valid entries live in process memory and are
written to the file with ``pwrite`` on flush, trim and close. No descriptor is held between
those: Kafka closes an index's descriptor once the file is mapped, and a broker with thousands
of segments must not hold two more per segment than Kafka does. The bytes on disk, their sizes and
their lifecycle are Kafka's; only *when* entries reach the page cache differs, which recovery
already covers (the active segment is rebuilt after an unclean shutdown, as in Kafka).
Refuses: interpreting entries (subclasses do) and deciding when to trim or extend (the segment).
"""

from __future__ import annotations

import bisect
import os
import struct
import threading
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kafkalog.errors import LogClosedError
from kafkalog.storage.atomic import delete_if_exists, rename_if_exists
from kafkalog.storage.faults import open_no_follow, storage_call, storage_error

_ZEROS = bytes(1 << 16)


def _written_length(fd: int, length: int) -> int:
    """Where the file's data ends, rounded up to a block: the first hole (SEEK_HOLE), or
    ``length`` where holes are not reported."""
    try:
        return min(length, os.lseek(fd, 0, os.SEEK_HOLE))
    except (OSError, AttributeError):
        return length


def _nonzero_length(data: bytes) -> int:
    """The length of ``data`` without its trailing zero bytes (64 KiB compared at a time)."""
    end = len(data)
    while end > 0:
        start = max(0, end - len(_ZEROS))
        chunk = data[start:end]
        if chunk != _ZEROS[: end - start]:
            return start + len(chunk.rstrip(b"\x00"))
        end = start
    return 0


class IndexFile:
    """An array of fixed-size big-endian entries backed by a file.

    Owns an in-memory copy of the valid entries; ``entries`` are valid, of which ``_persisted``
    have been written to the file, which is opened only for the change at hand. Thread-safe
    (one lock).
    """

    entry: struct.Struct  # set by subclasses

    def __init__(self, path: Path, base_offset: int, max_index_size: int, writable: bool = True):
        self.path = path
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self.writable = writable
        self._lock = threading.RLock()
        size = self.entry.size
        flags = os.O_RDWR | os.O_CREAT if writable else os.O_RDONLY
        fd = open_no_follow(path, flags, "index file")
        self._closed = False
        self._fd: int | None = None  # open only inside _descriptor
        try:
            exists = os.fstat(fd).st_size > 0
            if not exists and writable:
                os.ftruncate(fd, self._round(max_index_size))
            self._length = os.fstat(fd).st_size
            self.max_entries = self._length // size  # a field: every append asks
            if exists:
                # Trailing all-zero entries are the preallocation a crash left (an index is
                # trimmed only when its segment is closed): counted as entries, 10 MiB of them
                # made every reopen after a kill -9 read 1.3 M entries a segment. A real entry
                # of all zeros can only be the first, (base offset, position 0), which says
                # what an index without entries says. The unwritten tail is a hole in a sparse
                # file: it is not even read where the file system can say where it starts.
                written = _written_length(fd, self._length - self._length % size)
                data = os.pread(fd, written, 0)
                # a short read (another instance trimmed the file since the fstat) keeps whole
                # entries only: a torn one would be read as garbage, or fail every iter_unpack
                used = _nonzero_length(data[: len(data) - len(data) % size])
                self._buf = bytearray(data[: used + (-used % size)])
            else:
                self._buf = bytearray()
        except OSError as err:
            raise storage_error(err, f"opening index {path}") from err
        finally:
            os.close(fd)
        self.entries = len(self._buf) // size
        self._persisted = self.entries
        self._keys = self._key_column()

    def _key_column(self) -> array[int]:
        """Column 0 of every entry, for C-speed binary search (8 bytes an entry, as in the file)."""
        return array("q", (entry[0] for entry in self.entry.iter_unpack(self._buf)))

    def entry_problem(self, data_size: int) -> str | None:
        """What is wrong with the entries, judged against the data file's size; None if they
        are sane. Kafka checks the last entry against the base offset and the file length; a
        damaged middle entry would silently send reads to the wrong place, so every entry is
        checked (subclasses say what ordering their entries need)."""
        with self._lock:
            if self._length % self.entry.size:
                return f"file length {self._length} is not a multiple of {self.entry.size}"
            return self._entries_problem(data_size)

    def _entries_problem(self, data_size: int) -> str | None:
        raise NotImplementedError

    def _round(self, n: int) -> int:
        return n - n % self.entry.size

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"index {self.path} is closed")

    @contextmanager
    def _descriptor(self) -> Iterator[int | None]:
        """The file, opened for one change under the lock (reused by a change inside another);
        None once the file is gone with its segment (deleted or cleaned away by another path
        since), for which there is nothing left to write."""
        self._check_open()
        if self._fd is not None:
            yield self._fd
            return
        try:
            flags = os.O_RDWR if self.writable else os.O_RDONLY  # a reader's never writes
            fd = open_no_follow(self.path, flags, "index file")
        except FileNotFoundError:
            yield None
            return
        self._fd = fd
        try:
            yield fd
        finally:
            self._fd = None
            os.close(fd)

    @property
    def size_in_bytes(self) -> int:
        """Bytes used by valid entries."""
        return self.entries * self.entry.size

    @property
    def length(self) -> int:
        """Current file length."""
        return self._length

    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def _read(self, n: int) -> tuple[int, ...]:
        return self.entry.unpack_from(self._buf, n * self.entry.size)

    def raw_entry(self, n: int) -> tuple[int, ...]:
        with self._lock:
            if not 0 <= n < self.entries:
                raise IndexError(f"attempt to fetch entry {n} of {self.entries} in {self.path}")
            return self._read(n)

    def _write_next(self, *values: int) -> None:
        self._buf += self.entry.pack(*values)
        self._keys.append(values[0])
        self.entries += 1

    def _load_entries(self, packed: bytes | bytearray) -> None:
        """Replace every entry at once (recovery builds its entries in bulk)."""
        with self._lock:
            count = len(packed) // self.entry.size
            if count > self.max_entries:
                raise ValueError(f"{count} entries do not fit in {self.path}")
            self._buf = bytearray(packed[: count * self.entry.size])
            self.entries = count
            self._persisted = 0
            self._keys = self._key_column()

    def _largest_at_most(self, target: int, column: int) -> int:
        """Slot of the largest entry whose ``column`` is <= ``target``; -1 if none."""
        if column == 0:
            return bisect.bisect_right(self._keys, target) - 1
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

    def _write_pending(self) -> None:
        if self._persisted >= self.entries or not self.writable:
            return
        with self._descriptor() as fd:
            if fd is not None:
                self._write_pending_to(fd)
            self._persisted = self.entries

    def _write_pending_to(self, fd: int) -> None:
        size = self.entry.size
        start = self._persisted * size
        # a copy, not a view: a view of the entries held by a failed write's traceback would
        # make every later change of them raise BufferError ("Existing exports of data")
        pending = bytes(self._buf[start : self.entries * size])
        at, done = start, 0
        while done < len(pending):
            n = storage_call(
                os.pwrite, fd, pending[done:], at + done, what=f"writing index {self.path}"
            )
            done += n

    def resize(self, new_size: int) -> bool:
        """Set the file length (rounded down to whole entries); False if unchanged."""
        with self._lock:
            self._check_open()
            rounded = self._round(new_size)
            if rounded == self._length:
                return False
            with self._descriptor() as fd:
                self._write_pending()
                if fd is not None:
                    storage_call(os.ftruncate, fd, rounded, what=f"resizing index {self.path}")
            self._length = rounded
            self.max_entries = rounded // self.entry.size
            keep = min(self.entries, rounded // self.entry.size)
            self._truncate_to_entries(keep)
            return True

    def trim_to_valid_size(self) -> bool:
        return self.resize(self.size_in_bytes)

    def reset(self) -> None:
        """Remove every entry and extend the file back to the maximum size."""
        with self._lock:
            self._truncate_to_entries(0)
            self.resize(self.max_index_size)

    def _truncate_to_entries(self, n: int) -> None:
        with self._lock:
            self.entries = n
            del self._buf[n * self.entry.size :]
            del self._keys[n:]
            self._persisted = min(self._persisted, n)

    def flush(self) -> None:
        with self._lock:
            if self._closed or not self.writable:
                return
            with self._descriptor() as fd:
                self._write_pending()
                if fd is not None:
                    # Kafka forces the index's mapping (msync), which syncs data and the size
                    # only, not timestamps: fdatasync is that, at about 3/4 of fsync's cost
                    storage_call(os.fdatasync, fd, what=f"flushing index {self.path}")

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            try:
                if self.writable:
                    with self._descriptor():
                        self.trim_to_valid_size()
                        self._write_pending()
            finally:
                self._closed = True

    def close_handler(self) -> None:
        """Close without writing anything (as after a crash, or for deletion)."""
        with self._lock:
            self._closed = True

    def rename_to(self, path: Path) -> None:
        with self._lock:
            rename_if_exists(self.path, path)
            self.path = path

    def delete(self) -> bool:
        self.close_handler()
        return delete_if_exists(self.path)

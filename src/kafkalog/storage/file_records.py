"""A segment's data file, ``<base>.log``: append at the logical end, read slices, scan batches
(spec §4, §15 C).

Why: the one place that does I/O on batch data. Appends use ``pwrite`` at the logical end (a
preallocated file is longer than its data); reads ``pread`` byte ranges; scans map the file
read-only and hand a view to the one scanner (records.scanner), so nothing here parses batches.
Refuses: files larger than Int32.MAX, and any decision about what the bytes mean.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from kafkalog.errors import CorruptRecordError, KafkaLogError, LogClosedError
from kafkalog.records import AnyBatch, BatchScanner, MemoryRecords
from kafkalog.records.scanner import batch_extent
from kafkalog.storage import page_in as paging
from kafkalog.storage.background import BackgroundJob
from kafkalog.types import INT32_MAX

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True, slots=True)
class BatchPosition:
    """Where a batch is: its last offset, byte position and size."""

    last_offset: int
    position: int
    size: int


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    timestamp: int
    offset: int
    leader_epoch: int | None


class FileSlice:
    """A byte range of a ``.log`` file: a reference, not a copy, until read.

    Reads go through the file's descriptor, which stays valid after the file is renamed for
    deletion, so a fetch in progress survives retention.
    """

    __slots__ = ("_file", "position", "size")

    def __init__(self, file: FileRecords, position: int, size: int) -> None:
        self._file = file
        self.position = position
        self.size = size

    def __len__(self) -> int:
        return self.size

    def read(self) -> bytes:
        return self._file.read(self.position, self.size)

    def records(self) -> MemoryRecords:
        return MemoryRecords(self.read())

    def to_arrow(self, *, include_headers: bool = True, include_control: bool = False) -> pa.Table:
        """The slice's records as an Arrow table (see ``MemoryRecords.to_arrow``)."""
        return self.records().to_arrow(
            include_headers=include_headers, include_control=include_control
        )

    def __repr__(self) -> str:
        return f"FileSlice({self._file.path.name}, position={self.position}, size={self.size})"


class FileRecords:
    """The data file of one segment.

    Owns the descriptor and a cached read-only mapping. ``size`` is the logical end (data), which
    for a preallocated file is below the physical length until ``trim``. Appends are serialised by
    the caller (the log lock); reads and scans may run from any thread.
    """

    def __init__(self, path: Path, *, preallocate_size: int = 0, writable: bool = True) -> None:
        self.path = path
        existed = path.exists()
        self._fd: int | None = os.open(
            path, (os.O_RDWR | os.O_CREAT) if writable else os.O_RDONLY, 0o644
        )
        physical = os.fstat(self._fd).st_size
        if physical > INT32_MAX:
            os.close(self._fd)
            raise CorruptRecordError(
                f"file size {physical} exceeds the maximum segment size {INT32_MAX}", file=str(path)
            )
        if not existed and preallocate_size > 0:
            os.ftruncate(self._fd, preallocate_size)
            self._size = 0
        else:
            self._size = physical
        self._map_lock = threading.Lock()
        # Page-ins read the mapping off the lock; a read past a truncated end would be SIGBUS,
        # so truncation waits for the page-ins under way (at most one stretch each).
        self._paging_in = 0
        self._page_ins_done = threading.Condition(self._map_lock)
        # Readers pin the descriptor: closing a segment (retention, compaction) while another
        # thread is inside pread would let the number be reused by a newly opened file, and the
        # read would silently come from that file. A pinned descriptor closes when unpinned.
        self._pins = 0
        self._close_when_unpinned = False
        self._map: mmap.mmap | None = None
        self._map_length = 0

    @property
    def size(self) -> int:
        return self._size

    def _check_open(self) -> int:
        if self._fd is None:
            raise LogClosedError(f"{self.path} is closed")
        return self._fd

    def append(
        self,
        data: bytes | bytearray | memoryview,
        verify: Callable[[], None] | None = None,
    ) -> int:
        """Write ``data`` at the logical end and advance it.

        ``verify``, if given, runs after the write and before the end advances: readers never
        see the bytes until it returns, and if it raises, the write is undone and the error
        propagates (a follower's checksums computed while the bytes are copied).
        """
        fd = self._check_open()
        view = memoryview(data).cast("B")
        if self._size + len(view) > INT32_MAX:
            raise KafkaLogError(
                f"appending {len(view)} bytes would make {self.path} larger than {INT32_MAX} bytes"
            )
        start = self._size
        physical = os.fstat(fd).st_size if verify is not None else 0
        position = start
        try:
            while view:
                written = os.pwrite(fd, view, position)
                position += written
                view = view[written:]
            if verify is not None:
                verify()
        except BaseException:
            if verify is not None:
                self._undo_write(fd, start, position, physical)
            raise
        self._size = position
        return position - start

    def _undo_write(self, fd: int, start: int, end: int, physical: int) -> None:
        """Put back what ``[start, end)`` held: nothing past the old length, zeros inside a
        preallocated file (what recovery expects to find after the last batch)."""
        if physical <= start:
            os.ftruncate(fd, start)
            return
        zeros = bytes(min(end, physical) - start)
        if zeros:
            os.pwrite(fd, zeros, start)
        if end > physical:
            os.ftruncate(fd, physical)

    def read(self, position: int, size: int) -> bytes:
        """Bytes ``[position, position + size)``, clipped to the logical end."""
        with self._map_lock:
            fd = self._check_open()
            self._pins += 1
        try:
            return self._pread(fd, position, size)
        finally:
            with self._map_lock:
                self._pins -= 1
                if not self._pins and self._close_when_unpinned:
                    self._close_when_unpinned = False
                    os.close(fd)

    def _pread(self, fd: int, position: int, size: int) -> bytes:
        end = min(position + size, self._size)
        if position < 0 or position > self._size:
            raise ValueError(f"position {position} is outside {self.path} of size {self._size}")
        data = os.pread(fd, end - position, position)
        if len(data) == end - position:
            return data
        parts = [data]  # a short read: keep going
        at = position + len(data)
        while at < end:
            more = os.pread(fd, end - at, at)
            if not more:
                raise CorruptRecordError("file ended before its logical size", file=str(self.path))
            parts.append(more)
            at += len(more)
        return b"".join(parts)

    def slice(self, position: int, size: int) -> FileSlice:
        if position < 0 or position > self._size:
            raise ValueError(
                f"slice position {position} is outside {self.path} of size {self._size}"
            )
        if size < 0:
            raise ValueError(f"slice size {size} is negative")
        return FileSlice(self, position, min(size, self._size - position))

    # --- scanning -------------------------------------------------------------------------------

    def _mapping(self, end: int) -> mmap.mmap | None:
        with self._map_lock:
            return self._mapping_locked(end)

    def _mapping_locked(self, end: int) -> mmap.mmap | None:
        if self._map is None or self._map_length < end:
            fd = self._check_open()
            length = os.fstat(fd).st_size
            if length == 0:
                return None
            self._drop_map_locked()
            self._map = mmap.mmap(fd, length, access=mmap.ACCESS_READ)
            self._map_length = length
        return self._map

    def _drop_map_locked(self) -> None:
        if self._map is not None:
            # a caller may still hold a view; the mapping is then freed when it lets go
            with contextlib.suppress(BufferError):
                self._map.close()
            self._map = None
            self._map_length = 0

    def page_in(self, start: int, end: int) -> bool:
        """Map the pages of data ``[start, end)`` into this process's page tables now
        (kafkalog.storage.page_in), rather than at a fault every page as a walk first touches
        them; the mapping is made if there is none yet, so that a walk can be given the next
        segment's first stretch. Best effort: False where it cannot be done."""
        if not paging.available():
            return False
        with self._map_lock:
            end = min(end, self._size)
            mapping = self._mapping_locked(end) if end > start and self._fd is not None else None
            end = min(end, self._map_length)
            if mapping is None or end <= start:
                return False
            try:  # the view pins the mapping; the lock is let go, as the walk needs it meanwhile
                view = memoryview(mapping)
            except ValueError:  # closed meanwhile
                return False
            self._paging_in += 1
        try:
            return paging.populate(view, start, end)
        finally:
            view.release()
            with self._map_lock:
                self._paging_in -= 1
                self._page_ins_done.notify_all()

    def page_in_ahead(self, start: int, end: int) -> BackgroundJob | None:
        """``page_in`` on a worker thread, so a walk over the range before it does not wait;
        None where paging in is not possible. Waiting on the job is optional."""
        if not paging.available():
            return None
        return paging.WORKER.submit(BackgroundJob(lambda: self.page_in(start, end)))

    def _shrink_file(self, fd: int, size: int) -> None:
        """ftruncate once no page-in can still be reading the part cut off."""
        with self._map_lock:
            self._drop_map_locked()
            self._page_ins_done.wait_for(lambda: self._paging_in == 0)
            os.ftruncate(fd, size)  # under the lock: no new mapping of the old length meanwhile

    @contextmanager
    def scanner(
        self,
        start: int = 0,
        end: int | None = None,
        *,
        verify_crc: bool = True,
        deep: bool = False,
        max_batch_size: int | None = None,
    ) -> Iterator[BatchScanner]:
        """A BatchScanner over ``[start, end)`` of the data (end defaults to the logical size).

        Batches it yields are views of the mapping: copy what must outlive the ``with`` block.
        """
        stop = self._size if end is None else min(end, self._size)
        with self.mapped(stop if stop > start else 0) as view:
            yield BatchScanner(
                view,
                start=min(start, len(view)),
                verify_crc=verify_crc,
                deep=deep,
                max_batch_size=max_batch_size,
                file=str(self.path),
            )

    @contextmanager
    def mapped(self, end: int | None = None) -> Iterator[memoryview]:
        """The data ``[0, end)`` (end defaults to, and is clipped to, the logical size) as a view
        of the cached mapping: no copy, and pages a second pass reads are already mapped.
        Copy what must outlive the ``with`` block."""
        stop = self._size if end is None else min(end, self._size)
        mapping = self._mapping(stop) if stop > 0 else None
        view = memoryview(mapping)[:stop] if mapping is not None else memoryview(b"")
        try:
            yield view
        finally:
            view.release()

    def batches(self, start: int = 0, end: int | None = None) -> Iterator[AnyBatch]:
        """Complete batches from ``start`` without CRC checks (reads of data already validated)."""
        with self.scanner(start, end, verify_crc=False) as scan:
            yield from scan

    def search_for_offset_with_size(self, target: int, start_position: int) -> BatchPosition | None:
        """The first batch at or after ``start_position`` whose last offset is >= target."""
        stop = self._size
        if start_position >= stop:
            return None
        mapping = self._mapping(stop)
        if mapping is None:
            return None
        # struct reads the mapping directly: no view, no generator on the path of every fetch
        position = start_position
        buffer = cast("bytes", mapping)  # any buffer does; the records layer does not name mmap
        while (found := batch_extent(buffer, position, stop)) is not None:
            size, last = found
            if last >= target:
                return BatchPosition(last, position, size)
            position += size
        return None

    def search_for_timestamp(
        self, target: int, start_position: int, starting_offset: int
    ) -> TimestampAndOffset | None:
        """The first record at or after ``start_position`` with timestamp >= target and offset
        >= starting_offset (none for v0 data)."""
        with self.scanner(start_position, verify_crc=False) as scan:
            for batch in scan:
                if batch.max_timestamp >= target:
                    for rec in batch:
                        ts = rec.timestamp if rec.timestamp is not None else -1
                        if ts >= target and rec.offset >= starting_offset:
                            epoch = batch.partition_leader_epoch
                            return TimestampAndOffset(ts, rec.offset, epoch if epoch >= 0 else None)
        return None

    def largest_timestamp_after(self, start_position: int) -> tuple[int, int]:
        """(max timestamp, last offset of the first batch reaching it) from ``start_position``."""
        best = (-1, -1)
        with self.scanner(start_position, verify_crc=False) as scan:
            for batch in scan:
                if batch.max_timestamp > best[0]:
                    best = (batch.max_timestamp, batch.last_offset)
        return best

    # --- mutation ------------------------------------------------------------------------------

    def truncate_to(self, target_size: int) -> int:
        """Cut the data at ``target_size``; return the bytes removed."""
        fd = self._check_open()
        if target_size > self._size or target_size < 0:
            raise ValueError(
                f"attempt to truncate {self.path} to {target_size} bytes; it holds {self._size}"
            )
        removed = self._size - target_size
        if removed or os.fstat(fd).st_size != target_size:
            self._shrink_file(fd, target_size)
        self._size = target_size
        return removed

    def trim(self) -> None:
        """Shrink a preallocated file to its data."""
        fd = self._check_open()
        if os.fstat(fd).st_size != self._size:
            self._shrink_file(fd, self._size)

    def flush(self) -> None:
        os.fdatasync(self._check_open())

    def close(self) -> None:
        if self._fd is None:
            return
        self.trim()
        self.close_handler()

    def close_handler(self) -> None:
        with self._map_lock:
            self._drop_map_locked()
            if self._fd is not None:
                if self._pins:
                    self._close_when_unpinned = True  # the last reader closes it
                else:
                    os.close(self._fd)
                self._fd = None

    @property
    def closed(self) -> bool:
        return self._fd is None

    def rename_to(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = path

    def last_modified_ms(self) -> int:
        return int(os.stat(self.path).st_mtime * 1000)

    def set_last_modified_ms(self, ms: int) -> None:
        os.utime(self.path, (ms / 1000, ms / 1000))

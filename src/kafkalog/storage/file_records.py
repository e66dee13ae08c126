"""A segment's data file, ``<base>.log``: append at the logical end, read slices, scan batches
(Kafka's LogSegment).

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
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from kafkalog.errors import CorruptRecordError, InvalidArgumentError, KafkaLogError, LogClosedError
from kafkalog.records import AnyBatch, BatchScanner, MemoryRecords, ScanStop
from kafkalog.records.scanner import (
    CONTROL_PROBE_SIZE,
    next_batch_size,
    probe_control,
    search_offset,
)
from kafkalog.storage.faults import open_no_follow, storage_call, storage_error
from kafkalog.storage.mappings import MAPPINGS
from kafkalog.types import INT32_MAX

if TYPE_CHECKING:
    import pyarrow as pa

READ_CHUNK = 8 << 20  # how much ``batches`` copies at a time


@dataclass(frozen=True, slots=True)
class BatchPosition:
    """Where a batch is: its last offset, byte position and size."""

    last_offset: int
    position: int
    size: int


def first_record_at_or_after(
    batches: Iterable[AnyBatch], target: int, starting_offset: int
) -> TimestampAndOffset | None:
    """Kafka's search for a timestamp within a segment's batches: the first record with
    timestamp >= ``target`` and offset >= ``starting_offset`` (none for v0 data)."""
    for batch in batches:
        if batch.max_timestamp >= target:
            for rec in batch:
                ts = rec.timestamp if rec.timestamp is not None else -1
                if ts >= target and rec.offset >= starting_offset:
                    epoch = batch.partition_leader_epoch
                    return TimestampAndOffset(ts, rec.offset, epoch if epoch >= 0 else None)
    return None


class MemorySlice:
    """Whole batches held in memory: what a read of remote storage returns where a local read
    returns a FileSlice. It has no descriptor to send from, so a server copies it."""

    __slots__ = ("_data", "position", "size")

    def __init__(self, data: bytes, position: int = 0) -> None:
        self._data = data
        self.position = position  # where the bytes start in the segment they came from
        self.size = len(data)

    def __len__(self) -> int:
        return self.size

    def read(self) -> bytes:
        return self._data

    def records(self) -> MemoryRecords:
        return MemoryRecords(self._data)

    def to_arrow(self, *, include_headers: bool = True, include_control: bool = False) -> pa.Table:
        return self.records().to_arrow(
            include_headers=include_headers, include_control=include_control
        )

    def __repr__(self) -> str:
        return f"MemorySlice(position={self.position}, size={self.size})"


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
        """The slice's bytes, read from the segment now."""
        return self._file.read(self.position, self.size)

    def records(self) -> MemoryRecords:
        """The slice's bytes as MemoryRecords (complete batches, CRC-checked on iteration)."""
        return MemoryRecords(self.read())

    def dup_descriptor(self) -> int:
        """A descriptor of the caller's own (to close) for sending the range later with
        ``sendfile``: it stays valid after the segment is closed, renamed or deleted."""
        with self._file._pinned() as fd:
            return os.dup(fd)

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

    Concurrency (one discipline, after Kafka's ``AbstractIndex`` remap lock): every reader of the
    descriptor or the mapping *pins* the file for the duration of its access (``_pinned``). While
    a pin is held the descriptor stays open, the mapping it was handed stays mapped, and the data
    is not shortened: ``truncate_to`` and ``trim`` wait for the pins to go before they cut the
    file (a read past a cut end of a mapping is SIGBUS, and a pread would come back short);
    ``close_handler`` defers closing the descriptor to the last reader. A mapping is never closed
    under a reader: a remap or a close only drops the cached reference, and the old mapping goes
    when its last user lets go of it. Pins are never held across a generator's ``yield``.
    """

    def __init__(self, path: Path, *, preallocate_size: int = 0, writable: bool = True) -> None:
        self.path = path
        flags = (os.O_RDWR | os.O_CREAT) if writable else os.O_RDONLY
        # never follow a link: a planted symlink must not make us write or cut another file
        fd = open_no_follow(path, flags | os.O_NOFOLLOW, "segment file")
        existed = os.fstat(fd).st_size > 0 or not preallocate_size
        physical = os.fstat(fd).st_size
        if physical > INT32_MAX:
            os.close(fd)
            raise CorruptRecordError(
                f"file size {physical} exceeds the maximum segment size {INT32_MAX}", file=str(path)
            )
        self._fd: int | None = fd
        if not existed and preallocate_size > 0:
            storage_call(os.ftruncate, fd, preallocate_size, what=f"preallocating {path}")
            self._size = 0
            physical = preallocate_size
        else:
            self._size = physical
        # the file's length as this object last left it (appends are serialised and the
        # directory lock keeps other writers out): an append knows what to put back on a
        # failed write without an fstat per append
        self._physical = physical
        self._lock = threading.Lock()
        self._pins = 0
        self._unpinned = threading.Condition(self._lock)
        self._cutters = 0  # threads waiting in _wait_unpinned_locked
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

    # --- pins ------------------------------------------------------------------------------------

    def _pin(self) -> int:
        with self._lock:
            fd = self._check_open()
            self._pins += 1
            return fd

    def _unpin(self) -> None:
        with self._lock:
            self._pins -= 1
            if self._pins:
                return
            if self._cutters:  # a Condition's notify costs a fetch's worth of Python
                self._unpinned.notify_all()
            if self._close_when_unpinned and self._fd is not None:
                self._close_when_unpinned = False
                os.close(self._fd)
                self._fd = None

    @contextmanager
    def _pinned(self) -> Iterator[int]:
        fd = self._pin()
        try:
            yield fd
        finally:
            self._unpin()

    def _pinned_mapping(self, end: int) -> mmap.mmap | None:
        """The mapping, covering at least ``end`` bytes if the file has them; caller is pinned.
        Kept for the next read while this file is among the most recently read
        (``storage.mappings``)."""
        with self._lock:
            if self._map is None or self._map_length < end:
                fd = self._check_open()
                length = os.fstat(fd).st_size
                if length == 0:
                    return None
                # the old mapping stays mapped for whoever still holds it
                self._map = mmap.mmap(fd, length, access=mmap.ACCESS_READ)
                self._map_length = length
            mapping = self._map
        MAPPINGS.read(self)
        return mapping

    def drop_mapping(self) -> None:
        """Let go of the cached mapping: unmapped, and its duplicate descriptor closed, when
        the last reader holding it lets go."""
        with self._lock:
            self._map = None
            self._map_length = 0

    def _wait_unpinned_locked(self) -> None:
        """Under the lock: wait until no reader is inside the file (see the class docstring)."""
        self._cutters += 1
        try:
            self._unpinned.wait_for(lambda: self._pins == 0)
        finally:
            self._cutters -= 1

    # --- append and read -------------------------------------------------------------------------

    def append(
        self,
        data: bytes | bytearray | memoryview,
        verify: Callable[[], None] | None = None,
    ) -> int:
        """Write ``data`` at the logical end and advance it.

        ``verify``, if given, runs after the write and before the end advances: readers never
        see the bytes until it returns, and if it raises, the write is undone and the error
        propagates (a follower's checksums computed while the bytes are copied). A failed write
        (a full disk) is undone the same way and raised as KafkaStorageError.
        """
        fd = self._check_open()
        view = memoryview(data).cast("B")
        if self._size + len(view) > INT32_MAX:
            raise KafkaLogError(
                f"appending {len(view)} bytes would make {self.path} larger than {INT32_MAX} bytes"
            )
        start = self._size
        physical = self._physical
        position = start
        try:
            while view:
                written = os.pwrite(fd, view, position)
                position += written
                view = view[written:]
            if verify is not None:
                verify()
        except BaseException as err:
            if position > start:
                try:
                    self._undo_write(fd, start, position, physical)
                except OSError:  # the length is no longer known: ask the file
                    with contextlib.suppress(OSError):
                        self._physical = os.fstat(fd).st_size
            if isinstance(err, OSError):
                raise storage_error(err, f"appending to {self.path}") from err
            raise
        self._size = position
        if position > physical:
            self._physical = position
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
        """Bytes ``[position, position + size)``, clipped to the logical end (a range since
        truncated reads as empty)."""
        if position < 0 or size < 0:
            raise InvalidArgumentError(
                f"cannot read {size} bytes at position {position} of {self.path}"
            )
        fd = self._pin()  # a pin, not _pinned(): no generator on every fetch
        try:
            end = min(position + size, self._size)
            if end <= position:
                return b""
            data = os.pread(fd, end - position, position)
            if len(data) == end - position:
                return data
            parts = [data]  # a short read: keep going
            at = position + len(data)
            while at < end:
                more = os.pread(fd, end - at, at)
                if not more:
                    raise CorruptRecordError(
                        "file ended before its logical size", file=str(self.path)
                    )
                parts.append(more)
                at += len(more)
            return b"".join(parts)
        finally:
            self._unpin()

    def control_batches(self) -> list[bytes]:
        """The bytes of every v2 control batch, found by reading each batch's header and
        nothing else. Unverified; stops at a partial or malformed batch. Headers are read, not
        touched through the mapping: a touch faults in a window around every batch, and a
        search for a few transaction markers should not pay for paging in the whole file."""
        found: list[bytes] = []
        with self._pinned() as fd:
            position, end = 0, self._size
            while position < end:
                header = os.pread(fd, CONTROL_PROBE_SIZE, position)
                probed = probe_control(header, end - position)
                if probed is None:
                    break
                size, control = probed
                if control:
                    data = os.pread(fd, size, position)
                    if len(data) < size:  # the file was cut below its logical size
                        break
                    found.append(data)
                position += size
        return found

    def slice(self, position: int, size: int) -> FileSlice:
        """A reference to ``[position, position + size)``, clipped to the logical end."""
        if position < 0 or size < 0:
            raise InvalidArgumentError(
                f"cannot slice {size} bytes at position {position} of {self.path}"
            )
        current = self._size
        position = min(position, current)
        return FileSlice(self, position, min(size, current - position))

    # --- scanning -------------------------------------------------------------------------------

    def _shrink_file(self, fd: int, size: int) -> None:
        """ftruncate once no reader can still be inside the part cut off."""
        with self._lock:
            self._wait_unpinned_locked()
            if self._map is not None:
                with contextlib.suppress(BufferError):  # a view kept past its block: it stays
                    self._map.close()
                self._map = None
                self._map_length = 0
            # under the lock: no new pin, and so no mapping of the old length, meanwhile
            storage_call(os.ftruncate, fd, size, what=f"truncating {self.path}")
            self._physical = size

    @contextmanager
    def scanner(
        self,
        start: int = 0,
        end: int | None = None,
        *,
        verify_crc: bool = True,
        deep: bool = False,
        max_batch_size: int | None = None,
        base_offset: int | None = None,
    ) -> Iterator[BatchScanner]:
        """A BatchScanner over ``[start, end)`` of the data (end defaults to the logical size).

        Batches it yields are views of the mapping: copy what must outlive the ``with`` block.
        ``base_offset`` (the segment's) makes offsets that leave the segment's range or go
        backwards count as damage (ScanStop.BAD_OFFSET).
        """
        with self.mapped(end) as view:
            yield BatchScanner(
                view,
                start=min(max(start, 0), len(view)),
                verify_crc=verify_crc,
                deep=deep,
                max_batch_size=max_batch_size,
                file=str(self.path),
                base_offset=base_offset,
            )

    @contextmanager
    def mapped(self, end: int | None = None) -> Iterator[memoryview]:
        """The data ``[0, end)`` (end defaults to, and is clipped to, the logical size) as a view
        of the cached mapping: no copy, and pages a second pass reads are already mapped.
        The file is pinned meanwhile (see the class docstring). Copy what must outlive the
        ``with`` block."""
        with self._pinned():
            stop = self._size if end is None else max(0, min(end, self._size))
            mapping = self._pinned_mapping(stop) if stop > 0 else None
            if mapping is None:
                yield memoryview(b"")
                return
            view = memoryview(mapping)[: min(stop, len(mapping))]
            try:
                yield view
            finally:
                view.release()

    def batches(self, start: int = 0, end: int | None = None) -> Iterator[AnyBatch]:
        """Complete batches from ``start`` without CRC checks (reads of data already validated).

        The batches are copies read in chunks, so no pin is held while the caller holds the
        generator: a caller may truncate between two batches."""
        position = max(start, 0)
        chunk = READ_CHUNK
        while True:
            stop = self._size if end is None else min(end, self._size)
            if position >= stop:
                return
            try:
                data = self.read(position, min(chunk, stop - position))
            except LogClosedError:
                return
            scan = BatchScanner(data, verify_crc=False, file=str(self.path))
            yield from scan
            if scan.valid_bytes == 0:
                if scan.stop is ScanStop.TRUNCATED and len(data) < stop - position:
                    chunk = max(chunk * 2, next_batch_size(data) or chunk)
                    continue
                return
            position += scan.valid_bytes
            chunk = READ_CHUNK

    def search_for_offset_with_size(self, target: int, start_position: int) -> BatchPosition | None:
        """The first batch at or after ``start_position`` whose last offset is >= target.

        Headers only, no CRC (Kafka's ``FileRecords.searchForOffsetWithSize``), but a batch
        whose last offset is not above the one before it, or than the batch after it, is
        damage, not an answer: CorruptRecordError (a flipped bit in a base offset is outside
        the CRC)."""
        self._pin()  # a pin, not _pinned(): no generator on every fetch
        try:
            stop = self._size
            if start_position >= stop:
                return None
            mapping = self._pinned_mapping(stop)
            if mapping is None:
                return None
            stop = min(stop, len(mapping))
            buffer = cast("bytes", mapping)  # any buffer does; the records layer does not name mmap
            try:
                found = search_offset(buffer, start_position, stop, target)
            except CorruptRecordError as err:
                raise CorruptRecordError(
                    err.reason, file=str(self.path), position=err.position, offset=err.offset
                ) from None
            return None if found is None else BatchPosition(found[2], found[0], found[1])
        finally:
            self._unpin()

    def search_for_timestamp(
        self, target: int, start_position: int, starting_offset: int
    ) -> TimestampAndOffset | None:
        """The first record at or after ``start_position`` with timestamp >= target and offset
        >= starting_offset (none for v0 data)."""
        with self.scanner(start_position, verify_crc=False) as scan:
            return first_record_at_or_after(scan, target, starting_offset)

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
        """Cut the data at ``target_size``; return the bytes removed. Waits for readers inside
        the part cut off (see the class docstring)."""
        fd = self._check_open()
        if target_size > self._size or target_size < 0:
            raise InvalidArgumentError(
                f"attempt to truncate {self.path} to {target_size} bytes; it holds {self._size}"
            )
        removed = self._size - target_size
        if removed or os.fstat(fd).st_size != target_size:
            self._size = target_size  # new readers stop here while the cut waits for old ones
            self._shrink_file(fd, target_size)
        return removed

    def trim(self) -> None:
        """Shrink a preallocated file to its data."""
        fd = self._check_open()
        if os.fstat(fd).st_size != self._size:
            self._shrink_file(fd, self._size)

    def flush(self) -> None:
        storage_call(os.fdatasync, self._check_open(), what=f"flushing {self.path}")

    def close(self) -> None:
        if self._fd is None:
            return
        try:
            self.trim()
        finally:
            self.close_handler()

    def close_handler(self) -> None:
        """Release the descriptor; a reader inside the file keeps it until it is done."""
        MAPPINGS.forget(self)
        with self._lock:
            self._map = None  # unmapped when its last user lets go
            self._map_length = 0
            if self._fd is not None:
                if self._pins:
                    self._close_when_unpinned = True  # the last reader closes it
                else:
                    os.close(self._fd)
                    self._fd = None

    @property
    def closed(self) -> bool:
        return self._fd is None or self._close_when_unpinned

    def rename_to(self, path: Path) -> None:
        with self._lock:
            storage_call(os.replace, self.path, path, what=f"renaming {self.path}")
            self.path = path

    def last_modified_ms(self) -> int:
        """The data file's mtime, through the descriptor while it is open (a reader racing a
        rename to .swap or .deleted must not fail on the old name)."""
        try:
            with self._pinned() as fd:
                return int(os.fstat(fd).st_mtime * 1000)
        except LogClosedError:
            try:
                return int(os.stat(self.path).st_mtime * 1000)
            except FileNotFoundError:
                return 0

    def set_last_modified_ms(self, ms: int) -> None:
        os.utime(self.path, (ms / 1000, ms / 1000))

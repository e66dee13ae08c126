"""One log segment: ``<base>.log`` with its offset, time and transaction indexes (Kafka's
LogSegment).

Why: Kafka's unit of rolling, retention and recovery. The segment appends chunks and maintains
its indexes by the interval rule, serves byte-range reads, rebuilds its indexes from the data,
and reports the facts the roll policy needs. Refuses: policy (when to roll, what to delete),
and parsing batches itself (the one scanner does, through FileRecords).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kafkalog.clock import Clock
from kafkalog.errors import InvalidArgumentError, InvalidOffsetError, KafkaLogError, LogClosedError
from kafkalog.records import AbortedTransaction, AnyBatch, MemoryRecords, ScanStop
from kafkalog.records.committed import is_abort_marker
from kafkalog.storage import filenames
from kafkalog.storage.atomic import delete_if_exists, rename_if_exists
from kafkalog.storage.checked_range import CheckedRange
from kafkalog.storage.file_records import (
    BatchPosition,
    FileRecords,
    FileSlice,
    MemorySlice,
    TimestampAndOffset,
)
from kafkalog.storage.index_build import SegmentData, build_index_entries
from kafkalog.storage.offset_index import OffsetIndex
from kafkalog.storage.time_index import TimeIndex, TimestampOffset
from kafkalog.storage.txn_index import TransactionIndex
from kafkalog.types import INT32_MAX, INT64_MAX

logger = logging.getLogger("kafkalog.storage.segment")


class LogSegmentOffsetOverflowError(KafkaLogError):
    """An offset cannot be stored relative to the segment's base offset (legacy KAFKA-6264)."""


@dataclass(frozen=True, slots=True)
class LogOffsetMetadata:
    """An offset with, when known, the base offset and byte position of its segment."""

    message_offset: int
    segment_base_offset: int = -1
    relative_position_in_segment: int = -1

    @property
    def message_offset_only(self) -> bool:
        return self.segment_base_offset < 0


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """A read's result: where it starts, the bytes (a file slice, or in memory when read from
    remote storage, or None), and for READ_COMMITTED the aborted transactions in range."""

    fetch_offset_metadata: LogOffsetMetadata
    records: FileSlice | MemorySlice | None
    first_entry_incomplete: bool = False
    aborted_transactions: list[AbortedTransaction] | None = None

    @property
    def size(self) -> int:
        return 0 if self.records is None else self.records.size

    def read(self) -> bytes:
        """The fetched bytes (empty when nothing was read)."""
        return b"" if self.records is None else self.records.read()


@dataclass(frozen=True, slots=True)
class SegmentRecovery:
    """What ``recover`` kept and removed."""

    valid_bytes: int
    truncated_bytes: int
    batches: int
    stop: ScanStop
    reason: str | None
    next_offset: int


@dataclass(frozen=True, slots=True)
class SegmentParams:
    """The topic settings a segment needs (``index.interval.bytes``, ``segment.index.bytes``,
    ``preallocate`` / ``segment.bytes``)."""

    index_interval_bytes: int = 4096
    max_index_size: int = 10 * 1024 * 1024
    preallocate: bool = False
    segment_bytes: int = 1024 * 1024 * 1024


class LogSegment:
    """A segment of one partition. Appends are serialised by the log's lock; reads and lookups
    may run concurrently with an append (they see a prefix of it).

    The offset and time indexes open lazily (Kafka's ``LazyIndex``), exactly once, under
    ``_lazy_lock``: two threads that both find an index unopened must not both open it, or the
    second would read the first's preallocated file as a full index of zero entries. The cached
    largest timestamp is first loaded under the same lock, so a reader's load can never
    overwrite what an append has just recorded.
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        params: SegmentParams,
        clock: Clock,
        *,
        roll_jitter_ms: int = 0,
        file_suffix: str = "",
        exists: bool = False,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.params = params
        self.clock = clock
        self.roll_jitter_ms = roll_jitter_ms
        self.file_suffix = file_suffix
        preallocate = params.segment_bytes if params.preallocate and not exists else 0
        self.log = FileRecords(
            filenames.log_file(directory, base_offset, file_suffix), preallocate_size=preallocate
        )
        self._checked = CheckedRange(self.log, base_offset)  # what a zero-copy read may send
        self._lazy_lock = threading.Lock()
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self.txn_index = TransactionIndex(
            filenames.transaction_index_file(directory, base_offset, file_suffix), base_offset
        )
        # a .txnindex is trusted if this process writes it (a new or recovered segment); a loaded
        # one is checked against the ABORT markers the first time a READ_COMMITTED read needs it
        self._txn_index_trusted = not exists
        self.created_ms = clock.milliseconds()
        self.bytes_since_last_index_entry = 0
        self._rolling_based_timestamp: int | None = None
        self._max_ts_so_far: TimestampOffset | None = None

    # --- lazily opened indexes ------------------------------------------------------------------

    @property
    def offset_index(self) -> OffsetIndex:
        index = self._offset_index
        return index if index is not None else self._open_indexes()[0]

    @property
    def time_index(self) -> TimeIndex:
        index = self._time_index
        return index if index is not None else self._open_indexes()[1]

    def _open_indexes(self, *, check: bool = True) -> tuple[OffsetIndex, TimeIndex]:
        """Open both indexes once. ``check``: entries that fail their sanity check are rebuilt
        from the data (the segment's batches are the truth; an index is a hint)."""
        with self._lazy_lock:
            offset_index, time_index = self._offset_index, self._time_index
            if offset_index is not None and time_index is not None:
                return offset_index, time_index
            if self.log.closed:  # a reader of a closed log must not open, and so race, the
                # files a reopened log is trimming or rebuilding
                raise LogClosedError(f"segment {self.log.path} is closed")
            if offset_index is None:
                offset_index = OffsetIndex(
                    self.offset_index_file, self.base_offset, self.params.max_index_size
                )
            if time_index is None:
                time_index = TimeIndex(
                    self.time_index_file, self.base_offset, self.params.max_index_size
                )
            if check:
                size = self.log.size
                problem = offset_index.entry_problem(size) or time_index.entry_problem(size)
                if problem is not None:
                    logger.warning(
                        "rebuilding the indexes of %s from its data: %s", self.log.path, problem
                    )
                    self._rebuild_indexes(offset_index, time_index)
            self._offset_index, self._time_index = offset_index, time_index
            return offset_index, time_index

    def _rebuild_indexes(self, offset_index: OffsetIndex, time_index: TimeIndex) -> None:
        """Replace both indexes' entries by entries built from the valid batches; the data is
        not touched (that is recovery's job, under the log lock)."""
        offset_index.reset()
        time_index.reset()
        built = build_index_entries(self._data(), None, None, offset_index, time_index)
        self._max_ts_so_far = built.max_timestamp

    @property
    def offset_index_file(self) -> Path:
        return filenames.offset_index_file(self.directory, self.base_offset, self.file_suffix)

    @property
    def time_index_file(self) -> Path:
        return filenames.time_index_file(self.directory, self.base_offset, self.file_suffix)

    # --- facts ---------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        return self.log.size

    def _max_timestamp_so_far(self) -> TimestampOffset:
        known = self._max_ts_so_far
        if known is None:
            index = self.time_index  # outside _lazy_lock, which opening it takes
            with self._lazy_lock:
                if self._max_ts_so_far is None:
                    self._max_ts_so_far = index.last_entry()
                known = self._max_ts_so_far
        return known

    @property
    def max_timestamp_so_far(self) -> int:
        return self._max_timestamp_so_far().timestamp

    def largest_timestamp(self) -> int:
        """Largest record timestamp, or the file's mtime when the segment has none."""
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else self.log.last_modified_ms()

    def first_batch_timestamp(self) -> int:
        for batch in self.log.batches():
            return batch.max_timestamp if batch.max_timestamp >= 0 else INT64_MAX
        return INT64_MAX

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def has_overflow(self) -> bool:
        next_offset = self.read_next_offset()
        return next_offset > self.base_offset and not self.can_convert_to_relative_offset(
            next_offset - 1
        )

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        if self._rolling_based_timestamp is None:
            for batch in self.log.batches():
                self._rolling_based_timestamp = batch.max_timestamp
                break
        if self._rolling_based_timestamp is not None and self._rolling_based_timestamp >= 0:
            return message_timestamp - self._rolling_based_timestamp
        return now_ms - self.created_ms

    def offset_index_full(self) -> bool:
        return self.offset_index.is_full()

    def time_index_full(self) -> bool:
        return self.time_index.is_full()

    # --- append and read -----------------------------------------------------------------------

    def _data(self) -> SegmentData:
        return SegmentData(
            self.log,
            self.base_offset,
            self.params.index_interval_bytes,
            self.ensure_offset_in_range,
        )

    def ensure_offset_in_range(self, offset: int) -> None:
        if not self.can_convert_to_relative_offset(offset):
            raise LogSegmentOffsetOverflowError(
                f"offset {offset} cannot be stored relative to base offset {self.base_offset} of "
                f"{self.log.path}"
            )

    def append(
        self,
        largest_offset: int,
        largest_timestamp: int,
        shallow_offset_of_max_timestamp: int,
        records: bytes | bytearray | memoryview,
        verify: Callable[[], None] | None = None,
    ) -> None:
        """Append a chunk of complete batches and maintain the indexes (Kafka's LogSegment,
        OffsetIndex).

        ``verify`` is passed to ``FileRecords.append``: nothing changes here if it raises.
        """
        size = len(records)
        if size == 0:
            return
        physical_position = self.log.size
        if physical_position == 0:
            self._rolling_based_timestamp = largest_timestamp
        self.ensure_offset_in_range(largest_offset)
        self.log.append(records, verify)
        self._checked.appended(physical_position, physical_position + size, largest_offset + 1)
        if largest_timestamp > self._max_timestamp_so_far().timestamp:
            self._max_ts_so_far = TimestampOffset(
                largest_timestamp, shallow_offset_of_max_timestamp
            )
        if self.bytes_since_last_index_entry > self.params.index_interval_bytes:
            self.offset_index.append(largest_offset, physical_position)
            top = self._max_timestamp_so_far()
            self.time_index.maybe_append(top.timestamp, top.offset)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size

    def translate_offset(self, offset: int, starting_position: int = 0) -> BatchPosition | None:
        """The first batch at or after the indexed position whose last offset is >= ``offset``."""
        mapping = self.offset_index.lookup(offset)
        return self.log.search_for_offset_with_size(
            offset, max(mapping.position, starting_position)
        )

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None = None,
        min_one_message: bool = False,
    ) -> FetchDataInfo | None:
        """Bytes from the batch holding ``start_offset``; None if nothing at/after it here."""
        if max_size < 0:
            raise InvalidArgumentError(f"invalid max size {max_size} for a read of {self.log.path}")
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        metadata = LogOffsetMetadata(start_offset, self.base_offset, found.position)
        adjusted = max(max_size, found.size) if min_one_message else max_size
        limit = self.log.size if max_position is None else max_position
        if adjusted == 0:
            return FetchDataInfo(metadata, None)
        fetch_size = min(limit - found.position, adjusted)
        if fetch_size > 0:  # up to a damaged batch at most: the next read meets it
            end = self._checked.sendable(found.position, found.position + fetch_size)
            fetch_size = end - found.position
        return FetchDataInfo(
            metadata,
            self.log.slice(found.position, max(fetch_size, 0)),
            first_entry_incomplete=adjusted < found.size,
        )

    def txn_index_trusted(self) -> bool:
        """Whether the transaction index lists every aborted transaction of this segment. For a
        segment loaded from disk that is known only after a look at its ABORT markers: a
        ``.txnindex`` may be missing (Kafka creates it only for the first abort), empty (older
        brokers created one per segment) or copied from elsewhere, and none of that may let an
        aborted record through. Checked once; the answer is kept."""
        if self._txn_index_trusted:
            return True
        with self._lazy_lock:
            if not self._txn_index_trusted:
                # headers only: the cleaner asks this of every loaded segment it cleans, and
                # a walk through the mapping would fault in the whole segment first
                markers = {
                    batch.last_offset
                    for data in self.log.control_batches()
                    for batch in MemoryRecords(data).batches(verify_crc=False)
                    if is_abort_marker(batch)
                }
                listed = {txn.last_offset for txn in self.txn_index.all_aborted()}
                self._txn_index_trusted = markers <= listed
            return self._txn_index_trusted

    def tail_problem(self) -> str | None:
        """Whether the data from the last offset-index entry to the end is whole, valid batches
        in offset order; what is wrong if not (a torn or garbled tail)."""
        start = self.offset_index.lookup(INT64_MAX).position if self.offset_index.entries else 0
        with self.log.scanner(start, verify_crc=True, base_offset=self.base_offset) as scan:
            for _ in scan:
                pass
            if scan.valid_bytes != self.log.size:
                return str(scan.error) if scan.error is not None else "a partial batch at the end"
        return None

    def read_next_offset(self) -> int:
        start = self.offset_index.lookup(INT64_MAX).position if self.offset_index.entries else 0
        next_offset = self.base_offset
        for batch in self.log.batches(start):
            next_offset = batch.next_offset
        return next_offset

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int
    ) -> TimestampAndOffset | None:
        entry = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(entry.offset, starting_offset)).position
        return self.log.search_for_timestamp(timestamp, position, starting_offset)

    # --- recovery and truncation ---------------------------------------------------------------

    def recover(
        self, on_batch: object = None, max_batch_size: int | None = None
    ) -> SegmentRecovery:
        """Rebuild the indexes from the data; truncate at the first invalid byte (Kafka's
        LogSegment).

        ``on_batch``, if given, is called with each valid batch (producer state, leader epochs).
        Index entries follow the same interval rule as appends and are loaded in bulk. A batch
        whose offsets leave the segment or go backwards is invalid (KAFKA-6264's legacy
        overflow excepted: that raises LogSegmentOffsetOverflowError for a split).
        """
        offset_index, time_index = self._open_indexes(check=False)
        offset_index.reset()
        time_index.reset()
        self.txn_index.reset()
        callback = on_batch if callable(on_batch) else None
        built = build_index_entries(
            self._data(), max_batch_size, callback, offset_index, time_index
        )
        self._txn_index_trusted = True  # on_batch rebuilt it
        stop = built.stop
        truncated = self.log.size - built.valid_bytes
        if truncated > 0:
            self.log.truncate_to(built.valid_bytes)
            if stop is ScanStop.END:
                stop = ScanStop.TRUNCATED
        self._max_ts_so_far = built.max_timestamp
        self.bytes_since_last_index_entry = built.valid_bytes - built.last_index_entry
        self._checked.trust(built.valid_bytes, built.next_offset)
        return SegmentRecovery(
            built.valid_bytes, truncated, built.batches, stop, built.reason, built.next_offset
        )

    def base_offset_of_batch_holding(self, offset: int) -> int:
        """The base offset of the first batch whose last offset is >= ``offset``, or
        ``offset`` if there is none."""
        found = self.translate_offset(offset)
        if found is None:
            return offset
        for batch in self.log.batches(found.position, found.position + found.size):
            return batch.base_offset
        return offset

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset >= ``offset``; return the bytes removed."""
        found = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.offset_index.resize(self.params.max_index_size)
        self.time_index.resize(self.params.max_index_size)
        removed = 0 if found is None else self.log.truncate_to(found.position)
        if removed:
            self._checked.reset()
        if self.log.size == 0:
            self.created_ms = self.clock.milliseconds()
            self._rolling_based_timestamp = None
        self.bytes_since_last_index_entry = 0
        if self._max_ts_so_far is not None or removed:
            self._reload_largest_timestamp()
        return removed

    def _reload_largest_timestamp(self) -> None:
        last = self.time_index.last_entry()
        position = self.offset_index.lookup(last.offset).position
        ts, off = self.log.largest_timestamp_after(position)
        self._max_ts_so_far = TimestampOffset(ts, off) if ts > last.timestamp else last

    # --- lifecycle -----------------------------------------------------------------------------

    def on_become_inactive(self) -> None:
        top = self._max_timestamp_so_far()
        self.time_index.maybe_append(top.timestamp, top.offset, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.log.trim()

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    def sanity_check(self, time_index_file_existed: bool) -> None:
        """Kafka's load-time check: the offset index must exist; the txn index must be sane."""
        if not self.offset_index_file.exists():
            raise InvalidOffsetError(f"offset index {self.offset_index_file} is missing")
        if not time_index_file_existed:
            self.time_index.resize(0)
        self.txn_index.sanity_check()

    def flush(self) -> None:
        self.log.flush()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Write the last time-index entry, trim and close every file. Every file is closed
        even if one of them fails (a full disk); the first failure is raised after."""
        steps: list[Callable[[], None]] = []
        if self._max_ts_so_far is not None and not self.log.closed:
            top = self._max_ts_so_far
            steps.append(
                lambda: self.time_index.maybe_append(
                    top.timestamp, top.offset, skip_full_check=True
                )
            )
        if self._offset_index is not None:
            steps.append(self._offset_index.close)
        if self._time_index is not None:
            steps.append(self._time_index.close)
        steps += [self.log.close, self.txn_index.close]
        first: BaseException | None = None
        for step in steps:
            try:
                step()
            except BaseException as err:
                first = first or err
        if first is not None:
            self.close_handlers()
            raise first

    def close_handlers(self) -> None:
        if self._offset_index is not None:
            self._offset_index.close_handler()
        if self._time_index is not None:
            self._time_index.close_handler()
        self.log.close_handler()

    def change_file_suffixes(self, old: str, new: str) -> None:
        """Rename the segment's files from suffix ``old`` to ``new`` (e.g. to ``.deleted``)."""

        def renamed(path: Path) -> Path:
            name = path.name
            base = name[: -len(old)] if old and name.endswith(old) else name
            return path.with_name(base + new)

        self.log.rename_to(renamed(self.log.path))
        if self._offset_index is not None:
            self._offset_index.rename_to(renamed(self._offset_index.path))
        else:
            rename_if_exists(self.offset_index_file, renamed(self.offset_index_file))
        if self._time_index is not None:
            self._time_index.rename_to(renamed(self._time_index.path))
        else:
            rename_if_exists(self.time_index_file, renamed(self.time_index_file))
        self.txn_index.rename_to(renamed(self.txn_index.path))
        self.file_suffix = new

    @staticmethod
    def delete_if_exists(directory: Path, base_offset: int, file_suffix: str = "") -> None:
        """Remove whatever files a segment at ``base_offset`` left behind (Kafka's
        LogSegment.deleteIfExists): a new segment must not open a stale index."""
        for path in filenames.segment_files(directory, base_offset, file_suffix):
            delete_if_exists(path)

    def delete_files(self) -> None:
        """Close and delete every file of the segment (missing files are fine)."""
        self.close_handlers()
        for path in (
            self.log.path,
            self._offset_index.path if self._offset_index else self.offset_index_file,
            self._time_index.path if self._time_index else self.time_index_file,
            self.txn_index.path,
        ):
            delete_if_exists(path)

    def batches(self, start_position: int = 0) -> list[AnyBatch]:
        """The segment's batches, copied out of the file (tests and small tools only)."""
        data = self.log.read(start_position, self.log.size - start_position)
        return list(MemoryRecords(data).batches(verify_crc=False))

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, dir={self.directory})"

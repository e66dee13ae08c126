"""A read-only view of a partition directory that another process may be writing.

Why: readers that do not own a log — ``kafkalog consume --follow``, Spark's driver and
executors, analysis of a directory a broker is writing — must see every complete, valid batch
and nothing else, without taking the directory lock, running recovery or touching a byte.
``Log`` owns its directory and keeps its state in memory; a view reads the files every time and
so sees what another process appended. It trusts only what it can check: a batch is served
after its size and CRC check out; index entries are hints, confirmed against the log.
Refuses: writing anything, and waiting for a writer (beyond letting a batch caught half
copied in a preallocated segment land).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from kafkalog.errors import (
    CorruptCheckpointError,
    CorruptRecordError,
    InvalidArgumentError,
    KafkaLogError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from kafkalog.log.producer_state_manager import last_stable_offset_of
from kafkalog.log.view_remote import METADATA_TOPIC, RemoteSide, store_uri
from kafkalog.records.committed import AbortedTransaction, aborted_from_markers
from kafkalog.records.scanner import AnyBatch, BatchScanner, ScanStop, next_batch_size
from kafkalog.storage import filenames as fn
from kafkalog.storage import offset_index, time_index
from kafkalog.storage.checkpoints import OffsetCheckpointFile
from kafkalog.types import CLUSTER_METADATA_TOPIC, INT64_MAX, TopicPartition, check_int

_INDEX_ENTRY = offset_index.ENTRY  # the index files' own layouts, declared once in storage
_TIME_ENTRY = time_index.ENTRY
READ_CHUNK = 8 << 20
INDEX_CHUNK = 64 << 10
_ZERO_HEADER = bytes(12)  # base offset 0 and size 0: never a batch, always unwritten space
# how long a batch that fails its checks in a preallocated active segment may take to land:
# a writer descheduled mid-copy on a loaded host resumes within a few scheduler periods
TORN_WRITE_PATIENCE_S = 1.0
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class SegmentFile:
    """One segment as the directory listed it: its base offset, path and size at listing."""

    base_offset: int
    path: Path
    size: int


def _read_entries(path: Path, entry: struct.Struct) -> list[tuple[int, int]]:
    """The written entries of an index that may be preallocated and still growing: entries
    stop at the zero-filled tail (relative offset 0 after the first entry).

    Read with ``pread``, never mapped: the writer trims an index when its segment rolls, and a
    mapped read past the new end would be SIGBUS in this process. Chunks stop at the tail, so
    a 10 MiB preallocated index costs what its entries take."""
    out: list[tuple[int, int]] = []
    try:
        with open(path, "rb") as f:
            fd = f.fileno()
            position = 0
            step = INDEX_CHUNK - INDEX_CHUNK % entry.size
            while chunk := os.pread(fd, step, position):
                for a, b in entry.iter_unpack(chunk[: len(chunk) - len(chunk) % entry.size]):
                    if out and (b == 0 if entry is _TIME_ENTRY else a == 0):
                        return out
                    out.append((a, b))
                if len(chunk) < step:
                    break
                position += step
    except FileNotFoundError:
        return out
    return out


def read_index_entries(path: Path) -> list[tuple[int, int]]:
    """(relative offset, position) entries of an ``.index`` that may still be growing."""
    return _read_entries(path, _INDEX_ENTRY)


class PartitionView:
    """Offsets, transactions and batches of one ``<topic>-<partition>`` directory, read fresh.

    A ``frozen`` view lists the directory once and keeps its first answers for the log start,
    log end and last stable offset: one consistent picture for a query plan, which asks
    each of them several times and must not see the partition move between two questions.
    Batches are still read from the files, up to the sizes of that listing."""

    def __init__(self, directory: Path | str, *, frozen: bool = False) -> None:
        if not isinstance(directory, str | os.PathLike):
            raise InvalidArgumentError(
                f"a partition directory is a path, not {type(directory).__name__}"
            )
        self.directory = Path(directory)
        self.topic_partition: TopicPartition = fn.parse_partition_dir_name(self.directory.name)
        self.frozen = frozen
        self._kept: dict[str, Any] = {}
        self._remote: RemoteSide | None = None

    def __repr__(self) -> str:
        return f"PartitionView({self.directory}{', frozen' if self.frozen else ''})"

    def _once(self, name: str, compute: Callable[[], _T]) -> _T:
        if not self.frozen:
            return compute()
        if name not in self._kept:
            self._kept[name] = compute()
        value: _T = self._kept[name]
        return value

    # ---- segments and bounds -------------------------------------------------------------

    def segments(self) -> list[SegmentFile]:
        return list(self._once("listing", self._list)[0])

    def snapshots(self) -> dict[int, Path]:
        """The producer snapshots (``<offset>.snapshot``) of the same listing, by offset."""
        return dict(self._once("listing", self._list)[1])

    def _list(self) -> tuple[list[SegmentFile], dict[int, Path]]:
        segments: list[SegmentFile] = []
        snapshots: dict[int, Path] = {}
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            return segments, snapshots
        for entry in entries:
            name = entry.name
            if fn.is_snapshot_file(name):
                with contextlib.suppress(ValueError):  # not one of Kafka's names
                    snapshots[fn.offset_from_file_name(name)] = Path(entry.path)
                continue
            if not name.endswith(fn.LOG_FILE_SUFFIX):
                continue
            stem = name[: -len(fn.LOG_FILE_SUFFIX)]
            if len(stem) != 20 or not stem.isdigit():
                continue
            try:
                size = entry.stat().st_size
            except FileNotFoundError:
                continue  # deleted by retention while we listed
            segments.append(SegmentFile(int(stem), Path(entry.path), size))
        segments.sort(key=lambda s: s.base_offset)
        return segments, snapshots

    def size_in_bytes(self) -> int:
        """The bytes of its segments' data files (Kafka's UnifiedLog.size)."""
        return sum(s.size for s in self.segments())

    def log_start_offset(self) -> int:
        return self._once("log_start", self._log_start_offset)

    def _log_start_offset(self) -> int:
        segments = self.segments()
        first = segments[0].base_offset if segments else 0
        remote = self.remote_side()
        if remote is not None:  # tiered: the log starts in remote storage
            first = min(first, remote.start_offset)
        checkpoint = self.directory.parent / fn.LOG_START_OFFSET_CHECKPOINT
        if checkpoint.exists():
            try:
                offsets = OffsetCheckpointFile(checkpoint).read()
            except CorruptCheckpointError:
                offsets = {}
            first = max(first, offsets.get(self.topic_partition, first))
        return first

    def remote_side(self, *, refresh: bool = False) -> RemoteSide | None:
        """The partition's remote segments (tiered storage), read once per view (again with
        ``refresh``); None unless its log directory names a store that holds some."""
        if self.topic_partition.topic == METADATA_TOPIC or store_uri(self.directory.parent) is None:
            return None  # (the metadata topic is never tiered: it says what is)
        if self._remote is None or refresh:
            self._remote = RemoteSide.load(self.directory, lambda d: PartitionView(d).batches(0))
        return self._remote

    def log_end_offset(self) -> int:
        """The offset after the last complete, valid batch (the next offset a writer gives)."""
        return self._once("log_end", self._log_end_offset)

    def _log_end_offset(self) -> int:
        segments = self.segments()
        for seg in reversed(segments):
            last = self._last_batch_end(seg, seg is segments[-1])
            if last is not None:
                return last
        segments = self.segments()
        return segments[-1].base_offset if segments else 0

    def _last_batch_end(self, seg: SegmentFile, active: bool) -> int | None:
        entries = _read_entries(fn.offset_index_file(self.directory, seg.base_offset), _INDEX_ENTRY)
        position = entries[-1][1] if entries else 0
        last = None
        for batch in scan_segment(seg, position, tail_may_be_zeros=active):
            last = batch.next_offset
        if last is None and position:
            for batch in scan_segment(seg, 0, tail_may_be_zeros=active):
                last = batch.next_offset
        return last

    # ---- batches ---------------------------------------------------------------------------

    def position_of(self, seg: SegmentFile, offset: int) -> int:
        """A byte position in ``seg`` at or before the batch holding ``offset`` (index hint)."""
        entries = _read_entries(fn.offset_index_file(self.directory, seg.base_offset), _INDEX_ENTRY)
        relative = offset - seg.base_offset
        i = bisect.bisect_right([e[0] for e in entries], relative) - 1
        return entries[i][1] if i >= 0 else 0

    def batches(self, start: int, end: int | None = None) -> Iterator[AnyBatch]:
        """Every complete batch holding an offset in ``[start, end)`` (``end`` None: to the
        current end), in offset order; raises OffsetOutOfRangeError if ``start`` was removed."""
        check_int("start", start, -INT64_MAX - 1, INT64_MAX)
        if end is not None:
            check_int("end", end, -INT64_MAX - 1, INT64_MAX)
        segments = self.segments()
        log_start = self.log_start_offset()
        if start < log_start:
            raise OffsetOutOfRangeError(
                f"offset {start} is below the log start offset {log_start} of {self.directory}"
            )
        local_start = segments[0].base_offset if segments else self.log_end_offset()
        if start < local_start:  # below the local segments: from remote storage
            remote = self.remote_side(refresh=True)
            if remote is not None:
                upto = local_start if end is None else min(end, local_start)
                yield from remote.batches(start, upto)
                if end is not None and end <= local_start:
                    return
                start = local_start
        bases = [s.base_offset for s in segments]
        i = max(0, bisect.bisect_right(bases, start) - 1)
        for seg in segments[i:]:
            if end is not None and seg.base_offset >= end:
                return
            position = self.position_of(seg, start) if seg.base_offset <= start else 0
            for batch in scan_segment(seg, position, tail_may_be_zeros=seg is segments[-1]):
                if batch.last_offset < start:
                    continue
                if end is not None and batch.base_offset >= end:
                    return
                yield batch

    # ---- time --------------------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The first offset whose record timestamp is >= ``timestamp``, or None."""
        check_int("timestamp", timestamp, -INT64_MAX - 1, INT64_MAX)
        start = self.log_start_offset()
        segments = self.segments()
        remote = self.remote_side()
        if remote is not None:  # remote segments first, as Kafka searches them
            found = remote.tier.offset_for_timestamp(timestamp, start, remote.epoch_for)
            if found is not None:
                return found.offset
        for seg in segments:
            entries = _read_entries(
                fn.time_index_file(self.directory, seg.base_offset), _TIME_ENTRY
            )
            largest = entries[-1][0] if entries else None
            if largest is not None and largest < timestamp and seg is not segments[-1]:
                continue  # the index's largest may lag its segment only in the active one
            begin = max(start, seg.base_offset)
            position = 0
            for ts, rel in entries:
                if ts >= timestamp:
                    break
                position = self.position_of(seg, seg.base_offset + rel)
            for batch in scan_segment(seg, position, tail_may_be_zeros=seg is segments[-1]):
                if batch.last_offset < begin or batch.max_timestamp < timestamp:
                    continue
                for record in batch:
                    if record.offset >= begin and (record.timestamp or -1) >= timestamp:
                        return record.offset
        return None

    def max_timestamp(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record holding the largest timestamp in the log, as
        Kafka's ListOffsets MAX_TIMESTAMP finds it (below the log start offset too, while its
        segment is there); None for a log without timestamps. Each segment's time index gives
        its largest timestamp up to its last entry, and the batches after it the rest."""
        segments = self.segments()
        best_ts, best = -1, None
        for seg in segments:
            entries = _read_entries(
                fn.time_index_file(self.directory, seg.base_offset), _TIME_ENTRY
            )
            largest = entries[-1][0] if entries else -1
            position = self.position_of(seg, seg.base_offset + entries[-1][1]) if entries else 0
            for batch in scan_segment(seg, position, tail_may_be_zeros=seg is segments[-1]):
                largest = max(largest, batch.max_timestamp)
            if largest > best_ts:
                best_ts, best = largest, seg
        if best is None:
            return None
        for batch in scan_segment(best, 0, tail_may_be_zeros=best is segments[-1]):
            if batch.max_timestamp >= best_ts:
                for record in batch:
                    if record.timestamp is not None and record.timestamp >= best_ts:
                        return record.timestamp, record.offset
        return None

    def list_offset(self, target: int, read_committed: bool = False) -> int | None:
        """The offset ListOffsets answers for ``target`` (Kafka's specs: -2 earliest, -1 latest,
        -3 max timestamp, else a timestamp) at the isolation level, from the files: latest is
        the log end offset, or the last stable offset when ``read_committed``; a timestamp's
        offset at or past that bound is no answer (None), as Kafka filters it."""
        check_int("target", target, -3, INT64_MAX)
        if target == -2:
            return self.log_start_offset()
        fetchable = self.last_stable_offset() if read_committed else self.log_end_offset()
        if target == -1:
            return fetchable
        if target == -3:
            found = self.max_timestamp()
            offset = None if found is None else found[1]
        else:
            offset = self.offset_for_timestamp(target)
        return offset if offset is not None and offset < fetchable else None

    # ---- transactions --------------------------------------------------------------------

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTransaction]:
        """Aborted transactions with data in ``[start, end)``, decided by their ABORT markers
        (records.committed.aborted_from_markers): a view trusts only what it can check, and a
        ``.txnindex`` that is missing or was copied from elsewhere must never let aborted
        records through. The walk goes past ``end`` only until the transactions open at
        ``end`` are decided."""
        return aborted_from_markers(self.batches(start), start, end)

    def last_stable_offset(self, end: int | None = None) -> int:
        """The first offset of the earliest transaction still open at ``end`` (the LSO), or
        ``end``: the Log's own producer-state rules (log.producer_state_manager) over the
        newest snapshot at or below ``end`` and the batch headers after it."""
        if end is None:
            return self._once("lso", lambda: self.last_stable_offset(self.log_end_offset()))
        return last_stable_offset_of(
            self.directory, self.snapshots(), self.log_start_offset(), end, self.batches
        )


def discover_partitions(log_dirs: list[Path]) -> dict[TopicPartition, Path]:
    """Every live ``<topic>-<partition>`` directory under ``log_dirs`` (Kafka's ``log.dirs``);
    directories being deleted, future replicas, strays and a KRaft node's metadata log
    (``__cluster_metadata``, not a topic to its clients) are left out."""
    found: dict[TopicPartition, Path] = {}
    for root in log_dirs:
        try:
            children = sorted(os.scandir(root), key=lambda e: e.name)
        except FileNotFoundError:
            continue
        for child in children:
            name = child.name
            if not child.is_dir() or name.endswith(
                (fn.DELETE_DIR_SUFFIX, fn.FUTURE_DIR_SUFFIX, fn.STRAY_DIR_SUFFIX)
            ):
                continue
            try:
                tp = fn.parse_partition_dir_name(name)
            except KafkaLogError:
                continue
            if tp.topic != CLUSTER_METADATA_TOPIC:
                found.setdefault(tp, Path(child.path))
    return found


def topic_views(log_dirs: list[Path], topic: str) -> dict[int, PartitionView]:
    """The partitions of ``topic`` by number; UnknownTopicOrPartitionError if there are none."""
    views = {
        tp.partition: PartitionView(path)
        for tp, path in discover_partitions(log_dirs).items()
        if tp.topic == topic
    }
    if not views:
        raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
    return dict(sorted(views.items()))


def scan_segment(
    seg: SegmentFile, start: int = 0, *, tail_may_be_zeros: bool = False
) -> Iterator[AnyBatch]:
    """Complete, valid batches of ``seg`` from byte ``start``. A partial batch at the end
    of the file is a writer mid-append, and zeros where a batch should start are the
    preallocated tail of an active segment (``preallocate=true``): the scan stops there
    quietly (``tail_may_be_zeros``: only the last segment is written to). In that tail a
    batch being written lies inside the file's size, so a read can catch it half copied:
    there a batch that fails its checks is read again, for up to TORN_WRITE_PATIENCE_S,
    until the writer's copy has landed. A batch that fails its size, magic, CRC or
    offset-order check otherwise is damage and raises CorruptRecordError."""
    try:
        f = open(seg.path, "rb")  # noqa: SIM115 - closed in finally, across yields
    except FileNotFoundError:
        return
    try:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        position = start
        chunk = READ_CHUNK
        waited, failed_at = 0.0, -1
        while position < size:
            data = os.pread(fd, min(chunk, size - position), position)
            scanner = BatchScanner(
                data, verify_crc=True, file=str(seg.path), base_offset=seg.base_offset
            )
            yield from scanner
            position += scanner.valid_bytes
            if scanner.stop is ScanStop.TRUNCATED:
                if position + len(data) - scanner.valid_bytes >= size:
                    return  # the writer's tail
                # a batch larger than the chunk: read it whole next time
                chunk = max(chunk, next_batch_size(data, scanner.valid_bytes) or chunk)
            elif scanner.error is not None:
                at = scanner.valid_bytes
                if tail_may_be_zeros and data[at : at + len(_ZERO_HEADER)] == _ZERO_HEADER:
                    return  # the preallocated, zero-filled tail: the end of the data
                if position != failed_at:
                    waited, failed_at = 0.0, position
                if tail_may_be_zeros and waited < TORN_WRITE_PATIENCE_S:
                    pause = min(0.1, 0.001 + waited)  # 1 ms, then doubling, at most 0.1 s
                    time.sleep(pause)
                    waited += pause
                    continue  # read the batch again
                err = scanner.error
                raise CorruptRecordError(
                    err.reason,
                    file=str(seg.path),
                    position=position,
                    offset=err.offset,
                )
    finally:
        f.close()

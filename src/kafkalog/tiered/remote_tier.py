"""One partition's remote tier: the segments it has in remote storage and reads of them (Kafka's
RemoteLogManager.read, collectAbortedTransactions, findOffsetByTimestamp and
findHighestRemoteOffset).

Why: a Log reads below its local log start offset through this, without knowing whether the
store is a directory or a bucket. It keeps the metadata cache behind a lock (the copier writes
while readers read) and a bounded cache of the index objects it fetched, so a consumer reading a
remote segment from its start fetches each index once.

Refuses: copying and deleting (the remote log manager decides those and records them as
metadata events), and any offset no finished copy holds: a segment whose copy started and never
finished is never read.
"""

from __future__ import annotations

import dataclasses
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from kafkalog.records.remote_log_metadata import (
    RemoteLogMetadata,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from kafkalog.records.scanner import iter_positions, next_batch_size
from kafkalog.storage.file_records import (
    MemorySlice,
    TimestampAndOffset,
    first_record_at_or_after,
)
from kafkalog.storage.txn_index import AbortedTxn, collect_aborted_txns, decode_entries
from kafkalog.tiered.metadata_cache import RemoteLogMetadataCache
from kafkalog.tiered.remote_store import IndexType, RemoteLogStore

_STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
_OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
_TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
MIN_FETCH_BYTES = 64 << 10  # what one ranged request asks for at least: headers are small
INDEX_CACHE_ENTRIES = 256

EpochForOffset = Callable[[int], "int | None"]


@dataclass(frozen=True, slots=True)
class RemoteRead:
    """What a read of one remote segment found: the segment and its whole batches from the
    one holding the offset (empty when the first batch is larger than allowed)."""

    segment: RemoteLogSegmentMetadata
    records: MemorySlice


def _floor_position(index: bytes, base_offset: int, target: int) -> int:
    """The position of the offset index's largest entry <= target (0 below the first)."""
    lo, hi = 0, len(index) // _OFFSET_ENTRY.size
    while lo < hi:
        mid = (lo + hi) // 2
        rel, _ = _OFFSET_ENTRY.unpack_from(index, mid * _OFFSET_ENTRY.size)
        if base_offset + rel <= target:
            lo = mid + 1
        else:
            hi = mid
    return 0 if lo == 0 else int(_OFFSET_ENTRY.unpack_from(index, (lo - 1) * 8)[1])


def _floor_time_offset(index: bytes, base_offset: int, target: int) -> int:
    """The offset of the time index's largest entry with timestamp < target (Kafka's
    TimeIndex.lookup: the search starts there), or the segment's base offset."""
    size = _TIME_ENTRY.size
    lo, hi = 0, len(index) // size
    while lo < hi:
        mid = (lo + hi) // 2
        ts, _ = _TIME_ENTRY.unpack_from(index, mid * size)
        if ts < target:
            lo = mid + 1
        else:
            hi = mid
    if lo == 0:
        return base_offset
    return base_offset + int(_TIME_ENTRY.unpack_from(index, (lo - 1) * size)[1])


def _upper_bound_offset(index: bytes, base_offset: int, position: int) -> int | None:
    """The offset of the offset index's first entry at or after ``position`` (Kafka's
    OffsetIndex.fetchUpperBoundOffset), or None."""
    lo, hi = 0, len(index) // _OFFSET_ENTRY.size
    while lo < hi:
        mid = (lo + hi) // 2
        if _OFFSET_ENTRY.unpack_from(index, mid * _OFFSET_ENTRY.size)[1] < position:
            lo = mid + 1
        else:
            hi = mid
    if lo == len(index) // _OFFSET_ENTRY.size:
        return None
    return base_offset + int(_OFFSET_ENTRY.unpack_from(index, lo * _OFFSET_ENTRY.size)[0])


class RemoteTier:
    """A topic-partition's remote segments: metadata applied by the manager, reads by anyone.

    Thread-safety: the metadata cache is read and changed under one lock; store calls run
    outside it (a slow store delays only the caller)."""

    def __init__(
        self,
        store: RemoteLogStore,
        topic_id_partition: TopicIdPartition,
        cache: RemoteLogMetadataCache | None = None,
    ) -> None:
        self.store = store
        self.topic_id_partition = topic_id_partition
        self._cache = cache if cache is not None else RemoteLogMetadataCache()
        self._lock = threading.Lock()
        self._indexes: OrderedDict[tuple[str, IndexType], bytes] = OrderedDict()

    @classmethod
    def from_store(cls, store: RemoteLogStore, tp: TopicIdPartition) -> RemoteTier:
        """A tier made from the store alone (its per-segment manifests), for a reader with no
        metadata topic: every whole copy, folded by the cache's rules."""
        tier = cls(store, tp)
        events: list[RemoteLogMetadata] = []
        for finished in store.finished_segments(tp):
            events.append(dataclasses.replace(finished, state=_STARTED))
            events.append(
                RemoteLogSegmentMetadataUpdate(
                    finished.segment_id,
                    finished.event_timestamp_ms,
                    RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                    finished.broker_id,
                )
            )
        tier.initialize(events)
        return tier

    def leader_epochs(self) -> list[tuple[int, int]]:
        """(epoch, first offset) of every leader epoch the finished segments hold: a reader
        without the partition's own checkpoint walks the segments by these."""
        starts: dict[int, int] = {}
        for segment in self.segments():
            for epoch, start in segment.segment_leader_epochs:
                starts[epoch] = min(start, starts.get(epoch, start))
        return sorted(starts.items())

    # --- metadata -------------------------------------------------------------------------

    def apply(self, event: RemoteLogMetadata) -> None:
        """Fold one of this partition's metadata events into the cache."""
        with self._lock:
            if isinstance(event, RemoteLogSegmentMetadata):
                self._cache.add_copy_in_progress_segment(event)
            elif isinstance(event, RemoteLogSegmentMetadataUpdate):
                self._cache.update(event)
                if event.state is RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
                    for key in [k for k in self._indexes if k[0] == event.segment_id.id]:
                        del self._indexes[key]

    def mark_initialized(self) -> None:
        with self._lock:
            self._cache.mark_initialized()

    def initialize(self, events: Iterable[RemoteLogMetadata]) -> None:
        """Replay the partition's events from the metadata topic (an update whose segment's
        first event was cleaned away is dropped, as Kafka drops it), then mark the cache read
        to its end."""
        with self._lock:
            self._cache.initialized = False
        for event in events:
            self.apply(event)
        self.mark_initialized()

    def segments(
        self, state: RemoteLogSegmentState | None = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    ) -> list[RemoteLogSegmentMetadata]:
        """The segments in ``state`` (every one when None), by start offset."""
        with self._lock:
            found = [m for m in self._cache if state is None or m.state is state]
        return sorted(found, key=lambda m: (m.start_offset, m.end_offset))

    def segment_for(self, leader_epoch: int, offset: int) -> RemoteLogSegmentMetadata | None:
        with self._lock:
            return self._cache.segment_for(leader_epoch, offset)

    def highest_offset(self, epochs: list[tuple[int, int]]) -> int:
        """Kafka's findHighestRemoteOffset: the highest offset a finished copy holds, from the
        latest leader epoch down; -1 when none."""
        with self._lock:
            for epoch, _start in reversed(epochs):
                found = self._cache.highest_offset_for_epoch(epoch)
                if found is not None:
                    return found
        return -1

    def _chain(self, offset: int, epoch_for: EpochForOffset) -> Iterator[RemoteLogSegmentMetadata]:
        """The finished segments holding ``offset`` and the offsets after it, in order, along
        the leader epochs of the log (a segment of another lineage is never followed)."""
        while (epoch := epoch_for(offset)) is not None:
            segment = self.segment_for(epoch, offset)
            if segment is None:
                return
            yield segment
            offset = segment.end_offset + 1

    # --- reads ----------------------------------------------------------------------------

    def segment_bytes_from(
        self, segment: RemoteLogSegmentMetadata, offset: int
    ) -> tuple[bytes, int]:
        """The segment's bytes from the batch holding ``offset`` (by the offset index) to its
        end, and the position they start at."""
        index = self._index(segment, IndexType.OFFSET)
        position = _floor_position(index, segment.start_offset, offset)
        return self.store.fetch_log_segment(segment, position), position

    def _index(self, segment: RemoteLogSegmentMetadata, index: IndexType) -> bytes:
        key = (segment.segment_id.id, index)
        with self._lock:
            cached = self._indexes.get(key)
            if cached is not None:
                self._indexes.move_to_end(key)
                return cached
        data = self.store.fetch_index(segment, index)
        with self._lock:
            self._indexes[key] = data
            while len(self._indexes) > INDEX_CACHE_ENTRIES:
                self._indexes.popitem(last=False)
        return data

    def read(
        self,
        offset: int,
        leader_epoch: int,
        max_bytes: int,
        min_one_message: bool,
    ) -> RemoteRead | None:
        """Whole batches from the one holding ``offset``, up to ``max_bytes`` (the first whole
        when ``min_one_message``), from the one remote segment that holds it; None when no
        finished copy does. Like Kafka's, a read never crosses into the next segment."""
        segment = self.segment_for(leader_epoch, offset)
        if segment is None:
            return None
        index = self._index(segment, IndexType.OFFSET)
        start = _floor_position(index, segment.start_offset, offset)
        chunk = max(max_bytes, MIN_FETCH_BYTES)
        data = self.store.fetch_log_segment(segment, start, start + chunk - 1)
        pos = 0
        while True:  # to the first batch whose last offset reaches ``offset``
            found = None
            for found in iter_positions(data, pos):
                if found[2] >= offset:
                    break
                pos = found[0] + found[1]
            else:
                found = None
            if found is not None:
                break
            if len(data) < chunk and next_batch_size(data, pos) is None:
                return RemoteRead(segment, MemorySlice(b"", start + pos))  # past its data
            start += pos
            want = next_batch_size(data, pos) or 0
            chunk = max(chunk, want)
            data = self.store.fetch_log_segment(segment, start, start + chunk - 1)
            pos = 0
        first_pos, first_size, _ = found
        if first_size > max_bytes and not min_one_message:
            return RemoteRead(segment, MemorySlice(b"", start + first_pos))
        budget = max(max_bytes, first_size)
        if first_pos + budget > len(data) and len(data) == chunk:
            start += first_pos
            data = self.store.fetch_log_segment(segment, start, start + budget - 1)
            first_pos = 0
        end = first_pos
        for pos, size, _last in iter_positions(data, first_pos):
            if pos + size - first_pos > budget:
                break
            end = pos + size
        return RemoteRead(segment, MemorySlice(bytes(data[first_pos:end]), start + first_pos))

    def fetch_upper_bound(self, found: RemoteRead) -> int:
        """Where the aborted transactions of a read are looked up to (Kafka's
        RemoteLogManager.addAbortedTransactions): the first indexed offset past the bytes read,
        or the segment's end."""
        segment, records = found.segment, found.records
        index = self._index(segment, IndexType.OFFSET)
        upper = _upper_bound_offset(index, segment.start_offset, records.position + records.size)
        return segment.end_offset + 1 if upper is None else upper

    def aborted_transactions(
        self, start: int, upper: int, epoch_for: EpochForOffset
    ) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions overlapping [start, upper) that remote transaction indexes
        hold, from the segment holding ``start`` on, and whether that settles it (when not, the
        local segments are searched next, as Kafka does)."""
        found: list[AbortedTxn] = []
        for segment in self._chain(start, epoch_for):
            if segment.txn_index_empty:
                continue
            entries = decode_entries(
                self._index(segment, IndexType.TRANSACTION),
                self.store.object_name(segment, IndexType.TRANSACTION.value),
            )
            result = collect_aborted_txns(entries, start, upper)
            found += result.aborted
            if result.is_complete:
                return found, True
        return found, False

    def offset_for_timestamp(
        self, timestamp: int, start_offset: int, epoch_for: EpochForOffset
    ) -> TimestampAndOffset | None:
        """The first record at or after ``start_offset`` in remote segments with a timestamp
        >= ``timestamp`` (Kafka's RemoteLogManager.findOffsetByTimestamp), or None."""
        for segment in self._chain(start_offset, epoch_for):
            if segment.max_timestamp_ms < timestamp:
                continue
            from_offset = max(
                start_offset,
                _floor_time_offset(
                    self._index(segment, IndexType.TIMESTAMP), segment.start_offset, timestamp
                ),
            )
            position = _floor_position(
                self._index(segment, IndexType.OFFSET), segment.start_offset, from_offset
            )
            data = self.store.fetch_log_segment(segment, position)
            batches = MemorySlice(data).records().batches(verify_crc=False)
            found = first_record_at_or_after(batches, timestamp, start_offset)
            if found is not None:
                return found
        return None

"""Index entries built from a segment's data: recovery's rebuild, and the repair of an index
that fails its sanity check.

Why: an index is a hint; the batches are the truth. One walk over the valid batches (CRC and
offset order checked by the one scanner) yields the offset- and time-index entries by Kafka's
``index.interval.bytes`` rule, loaded in bulk. Refuses: truncating the data (recovery decides
that from what the walk reports) and the transaction index (recovery's producer state does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kafkalog.records import AnyBatch, ScanStop
from kafkalog.storage.file_records import FileRecords
from kafkalog.storage.offset_index import ENTRY as OFFSET_ENTRY
from kafkalog.storage.offset_index import OffsetIndex
from kafkalog.storage.time_index import ENTRY as TIME_ENTRY
from kafkalog.storage.time_index import TimeIndex, TimestampOffset
from kafkalog.types import INT32_MAX, NO_TIMESTAMP


@dataclass(frozen=True, slots=True)
class IndexBuild:
    """What a walk over a segment's valid batches found and indexed."""

    valid_bytes: int
    last_index_entry: int
    batches: int
    stop: ScanStop
    reason: str | None
    next_offset: int
    max_timestamp: TimestampOffset


@dataclass(frozen=True, slots=True)
class SegmentData:
    """What the walk needs of a segment: its data, base offset and ``index.interval.bytes``,
    and what to do with an offset its indexes cannot store relative to the base (raise the
    overflow that makes recovery split the segment, KAFKA-6264)."""

    records: FileRecords
    base_offset: int
    index_interval_bytes: int
    check_offset_in_range: Callable[[int], None]


def build_index_entries(
    segment: SegmentData,
    max_batch_size: int | None,
    callback: Callable[[AnyBatch], object] | None,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
) -> IndexBuild:
    """Walk the valid batches (CRC and offsets checked) and load index entries for them by
    the interval rule."""
    base = segment.base_offset
    max_ts, max_ts_offset = NO_TIMESTAMP, base
    indexed_ts = NO_TIMESTAMP
    offset_entries = bytearray()
    time_entries = bytearray()
    pack_offset, pack_time = OFFSET_ENTRY.pack, TIME_ENTRY.pack
    valid_bytes = 0
    last_index_entry = 0
    batches = 0
    interval = segment.index_interval_bytes
    next_offset = base
    with segment.records.scanner(
        verify_crc=True, max_batch_size=max_batch_size, base_offset=base
    ) as scan:
        for batch in scan:
            last = batch.last_offset
            if not 0 <= last - base <= INT32_MAX:  # legacy data only (KAFKA-6264): split
                segment.check_offset_in_range(last)
            if batch.max_timestamp > max_ts:
                max_ts, max_ts_offset = batch.max_timestamp, last
            if valid_bytes - last_index_entry > interval:
                offset_entries += pack_offset(last - base, valid_bytes)
                if max_ts > indexed_ts:
                    time_entries += pack_time(max_ts, max_ts_offset - base)
                    indexed_ts = max_ts
                last_index_entry = valid_bytes
            valid_bytes += batch.size_in_bytes
            batches += 1
            next_offset = last + 1
            if callback is not None:
                callback(batch)
        stop = scan.stop or ScanStop.END
        reason = str(scan.error) if scan.error is not None else None
    offset_index._load_entries(offset_entries)
    time_index._load_entries(time_entries)
    offset_index.trim_to_valid_size()
    top = TimestampOffset(max_ts, max_ts_offset)
    time_index.maybe_append(max_ts, max_ts_offset, skip_full_check=True)
    time_index.trim_to_valid_size()
    return IndexBuild(valid_bytes, last_index_entry, batches, stop, reason, next_offset, top)

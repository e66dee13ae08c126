"""One cleaning round of one log (Kafka's Cleaner.buildOffsetMap and Cleaner.cleanSegments): map the
dirty keys, recopy, swap.

Why: this is where compaction touches data. It reads only inactive segments below the round's
upper bound, without the log lock, from each segment's mapping: runs of plain batches in the
compiled walks (the key scan's next stretch paged in on the second core meanwhile), every other
batch through the one scanner, a read buffer at a time; it writes new ``.cleaned`` segments
with the same offsets; and it hands them to the Log's crash-safe swap. Anything that goes wrong
before the swap leaves only ``.cleaned`` files, which it removes (and which recovery discards).
Refuses: choosing the log or the range (the cleaner manager does) and holding the log lock
while copying.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from itertools import groupby

from kafkalog.cleaner.config import CleanerConfig
from kafkalog.cleaner.keymap import FilteredRegion, map_batch, map_region
from kafkalog.cleaner.offset_map import ExactOffsetMap, new_offset_map
from kafkalog.cleaner.page_in import page_in_ahead
from kafkalog.cleaner.policy import (
    CleanedTransactionMetadata,
    CleanerCounters,
    LogCleanerFilter,
    map_record,
)
from kafkalog.cleaner.selection import CleanerSegment, LogToClean, group_segments_by_size
from kafkalog.cleaner.throttler import Throttler
from kafkalog.clock import Clock
from kafkalog.errors import CorruptRecordError
from kafkalog.log.cleanable import CleanableLog, LastRecord
from kafkalog.records.batch import RecordBatch
from kafkalog.records.filter import FilterResult, RetainedBatch, filter_batches
from kafkalog.records.scanner import BatchScanner, next_batch_size
from kafkalog.storage.segment import LogSegment

logger = logging.getLogger("kafkalog.cleaner")

# How far one compiled walk goes before the loop looks at aborts and the throttle again, and
# how far ahead of the key scan a worker maps pages in.
WALK_BYTES = 4 << 20


@dataclass
class CleanerStats:
    """What a round did (Kafka's CleanerStats)."""

    map_bytes_read: int = 0
    map_messages_read: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    messages_read: int = 0
    messages_written: int = 0
    segments_cleaned: int = 0
    segments_written: int = 0
    buffer_utilization: float = 0.0
    first_dirty_offset: int = 0
    end_offset: int = 0
    elapsed_ns: int = 0
    map_elapsed_ns: int = 0  # of elapsed_ns, building the offset map (Kafka's elapsedIndexSecs)
    counters: CleanerCounters = field(default_factory=CleanerCounters)

    @property
    def invalid_messages(self) -> int:
        """Keyless records dropped (Kafka counts them as invalid)."""
        return self.counters.invalid_messages


def segment_facts(
    seg: LogSegment, *, timestamps: bool = True, index_sizes: bool = True
) -> CleanerSegment:
    """What selection or grouping needs; choosing a log skips what its config does not use, as
    timestamps may read the file and index sizes open the indexes of every segment."""
    return CleanerSegment(
        seg.base_offset,
        seg.size,
        seg.largest_timestamp() if timestamps else -1,
        seg.first_batch_timestamp() if timestamps else -1,
        seg.offset_index.size_in_bytes if index_sizes else 0,
        seg.time_index.size_in_bytes if index_sizes else 0,
    )


class Cleaner:
    """Cleans one log at a time; one per cleaner thread (its map and buffers are its own)."""

    def __init__(
        self,
        config: CleanerConfig,
        clock: Clock,
        throttler: Throttler,
        check_done: Callable[[], None] = lambda: None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.throttler = throttler
        self.check_done = check_done  # raises LogCleaningAbortedError if the round must stop
        self.offset_map = new_offset_map(
            config.dedupe_buffer_per_thread, config.dedupe_buffer_load_factor
        )
        self._buffer_size = config.io_buffer_per_thread

    def clean(self, log: CleanableLog, to_clean: LogToClean) -> tuple[int, CleanerStats]:
        """Run one round; return the next first dirty offset and the round's stats."""
        stats = CleanerStats(first_dirty_offset=to_clean.first_dirty_offset)
        start_ns = self.clock.nanoseconds()
        now = self.clock.milliseconds()
        generation = log.segments_generation
        upper = to_clean.first_uncleanable_offset
        max_message = max(log.config.max_message_bytes, self.config.max_message_size)
        self.offset_map.clear()
        self._build_offset_map(log, to_clean.first_dirty_offset, upper, max_message, stats)
        stats.map_elapsed_ns = self.clock.nanoseconds() - start_ns
        end_offset = self.offset_map.latest_offset + 1
        stats.end_offset = end_offset
        stats.buffer_utilization = self.offset_map.utilization
        below_dirty = log.segments.values(0, to_clean.first_dirty_offset)
        delete_retention = log.config.delete_retention_ms
        legacy_horizon = (
            below_dirty[-1].log.last_modified_ms() - delete_retention if below_dirty else 0
        )
        segments = [s for s in log.segments.values(0, end_offset) if s.base_offset < upper]
        facts = {s.base_offset: s for s in segments}
        groups = group_segments_by_size(
            [segment_facts(s, timestamps=False) for s in segments],
            log.config.segment_size,
            log.config.segment_index_bytes,
            upper,
        )
        last_records = log.last_records_of_active_producers()
        for group in groups:
            sources = [facts[g.base_offset] for g in group]
            generation = self._clean_segments(
                log, sources, now, legacy_horizon, upper, last_records, max_message, stats,
                generation,
            )  # fmt: skip
        stats.elapsed_ns = self.clock.nanoseconds() - start_ns
        return end_offset, stats

    # --- the offset map --------------------------------------------------------------------------

    def _build_offset_map(
        self, log: CleanableLog, start: int, end: int, max_message: int, stats: CleanerStats
    ) -> None:
        dirty = [s for s in log.segments.values(start, end) if s.base_offset < end]
        txns = CleanedTransactionMetadata()
        txns.add_aborted_transactions_when_needed(
            lambda: log.collect_aborted_transactions(start, end)
        )
        for i, seg in enumerate(dirty):
            self.check_done()
            following = dirty[i + 1] if i + 1 < len(dirty) else None
            next_base = following.base_offset if following is not None else end
            if self._map_segment(seg, following, start, next_base, txns, max_message, stats):
                return  # full: the round ends at the last key mapped

    def _map_segment(
        self,
        seg: LogSegment,
        following: LogSegment | None,
        start: int,
        next_base: int,
        txns: CleanedTransactionMetadata,
        max_message: int,
        stats: CleanerStats,
    ) -> bool:
        offset_map = self.offset_map
        compiled = offset_map.keys if isinstance(offset_map, ExactOffsetMap) else None
        position = seg.offset_index.lookup(start).position
        size = seg.size
        with seg.log.mapped(size) as view:
            if compiled is not None:  # usually asked for by the walk before: then quick
                page_in_ahead(seg.log, position, min(size, position + WALK_BYTES))
            while position < size:
                self.check_done()
                until = min(size, position + WALK_BYTES)
                if compiled is not None:  # the next stretch gets mapped while this one is parsed
                    if until < size:
                        page_in_ahead(seg.log, until, min(size, until + WALK_BYTES))
                    elif following is not None:
                        page_in_ahead(following.log, 0, WALK_BYTES)
                    walked = map_region(
                        compiled, view, seg.base_offset, position, until, start=start,
                        max_batch_size=self._buffer_size,
                    )  # fmt: skip
                    self.throttler.maybe_throttle(walked.position - position)
                    stats.map_messages_read += walked.read
                    stats.map_bytes_read += walked.position - position
                    position = walked.position
                    if walked.full:
                        return True
                    if position >= until:
                        continue
                # the reference path, one read buffer on from a batch the compiled walk left
                chunk = view[position : position + min(self._buffer_size, size - position)]
                self.throttler.maybe_throttle(len(chunk))
                scanner = BatchScanner(chunk, verify_crc=False, file=str(seg.log.path))
                if self._map_batches(scanner, start, txns, stats):
                    return True
                self._check_scan(scanner, seg, position, max_message)
                stats.map_bytes_read += scanner.valid_bytes
                position += scanner.valid_bytes
        offset_map.update_latest_offset(next_base - 1)  # skip any offset gap
        self._buffer_size = self.config.io_buffer_per_thread
        return False

    def _map_batches(
        self,
        scanner: BatchScanner,
        start: int,
        txns: CleanedTransactionMetadata,
        stats: CleanerStats,
    ) -> bool:
        """Map the keys of every batch ``scanner`` yields; True if the map filled up."""
        offset_map = self.offset_map
        compiled = offset_map.keys if isinstance(offset_map, ExactOffsetMap) else None
        capacity = offset_map.usable_capacity
        for batch in scanner:
            if batch.is_control:
                txns.on_control_batch_read(batch)
            elif txns.on_batch_read(batch):
                pass  # aborted data: its keys must not shadow committed ones
            elif compiled is not None and isinstance(batch, RecordBatch):
                read, full = map_batch(compiled, batch, start)
                stats.map_messages_read += read
                if full:
                    return True
            else:
                for record in batch.records():
                    if not map_record(
                        offset_map, record.key, record.offset, start=start, capacity=capacity
                    ):
                        return True
                    stats.map_messages_read += 1
            if batch.last_offset >= start:
                offset_map.update_latest_offset(batch.last_offset)
        return False

    def _check_scan(
        self, scanner: BatchScanner, seg: LogSegment, position: int, max_message: int
    ) -> None:
        """Grow the read buffer when not even one batch fit it (Kafka's
        Cleaner.growBuffersOrFail)."""
        if scanner.stop is not None and scanner.stop.is_corruption:
            assert scanner.error is not None
            raise CorruptRecordError(
                f"cannot clean {seg.log.path}: {scanner.error}",
                file=str(seg.log.path),
                position=position + scanner.valid_bytes,
            )
        if scanner.valid_bytes > 0:
            return
        if self._buffer_size < max_message:
            self._buffer_size = min(self._buffer_size * 2, max_message)
            return
        head = seg.log.read(position, min(17, seg.size - position))
        batch_size = next_batch_size(head) or 0
        left = seg.size - position
        if batch_size > left or batch_size <= self._buffer_size:
            raise CorruptRecordError(
                f"log segment may be corrupt: batch size {batch_size} > {left} bytes left",
                file=str(seg.log.path),
                position=position,
            )
        self._buffer_size = batch_size

    # --- recopying -------------------------------------------------------------------------------

    def _clean_segments(
        self,
        log: CleanableLog,
        sources: list[LogSegment],
        now: int,
        legacy_horizon: int,
        upper: int,
        last_records: Mapping[int, LastRecord],
        max_message: int,
        stats: CleanerStats,
        generation: int,
    ) -> int:
        cleaned = log.create_cleaned_segment(sources[0].base_offset)
        txns = CleanedTransactionMetadata()
        txns.cleaned_index = cleaned.txn_index
        try:
            for i, seg in enumerate(sources):
                nxt = sources[i + 1].base_offset if i + 1 < len(sources) else seg.read_next_offset()
                txns.add_aborted_transactions_when_needed(
                    partial(log.collect_aborted_transactions, seg.base_offset, nxt)
                )
                record_filter = LogCleanerFilter(
                    offset_map=self.offset_map,
                    txn_metadata=txns,
                    last_records=last_records,
                    upper_bound_offset=upper,
                    retain_legacy_deletes=seg.log.last_modified_ms() > legacy_horizon,
                    current_time=now,
                    delete_retention_ms=log.config.delete_retention_ms,
                    counters=stats.counters,
                )
                self._clean_into(seg, cleaned, record_filter, max_message, stats)
            cleaned.on_become_inactive()
            cleaned.flush()
            cleaned.log.set_last_modified_ms(sources[-1].log.last_modified_ms())
            log.replace_segments([cleaned], sources, generation)
        except BaseException:
            cleaned.delete_files()
            raise
        stats.segments_cleaned += len(sources)
        stats.segments_written += 1
        return log.segments_generation

    def _clean_into(
        self,
        source: LogSegment,
        dest: LogSegment,
        record_filter: LogCleanerFilter,
        max_message: int,
        stats: CleanerStats,
    ) -> None:
        position = 0
        size = source.size
        with source.log.mapped(size) as view:
            while position < size:
                self.check_done()
                until = min(size, position + WALK_BYTES)
                walked = record_filter.filter_region(
                    view, source.base_offset, position, until, self._buffer_size
                )
                if walked is not None:
                    self._copy_kept(dest, view, position, walked, stats)
                    position = walked.position
                    if position >= until:
                        continue
                # the reference path, one read buffer on from a batch the compiled walk left
                chunk = view[position : position + min(self._buffer_size, size - position)]
                scanner = BatchScanner(chunk, verify_crc=False, file=str(source.log.path))
                result = filter_batches(scanner, record_filter)
                self._check_scan(scanner, source, position, max_message)
                position += result.bytes_read
                self._write(dest, result, stats)
        self._buffer_size = self.config.io_buffer_per_thread

    def _write(self, dest: LogSegment, result: FilterResult, stats: CleanerStats) -> None:
        self._count(result.bytes_read, result.messages_read, result.messages_retained, stats)
        written = self._append_runs(dest, memoryview(result.output), result.retained)
        stats.bytes_written += written
        self.throttler.maybe_throttle(written)

    def _copy_kept(
        self,
        dest: LogSegment,
        view: memoryview,
        start: int,
        walked: FilteredRegion,
        stats: CleanerStats,
    ) -> None:
        """What the compiled walk kept, in order: batches kept whole straight from the source
        mapping (no copy to make first), the ones it rebuilt from its own buffer."""
        self._count(walked.position - start, walked.read, walked.kept, stats)
        rebuilt = memoryview(walked.rebuilt)
        written = 0
        for from_rebuilt, run in groupby(walked.batches, key=lambda entry: entry[4]):
            retained = [
                RetainedBatch(position, size, last_offset, max_timestamp, last_offset)
                for position, size, last_offset, max_timestamp, _ in run
            ]
            written += self._append_runs(dest, rebuilt if from_rebuilt else view, retained)
        stats.bytes_written += written
        self.throttler.maybe_throttle(written)

    def _count(self, read_bytes: int, read: int, retained: int, stats: CleanerStats) -> None:
        self.throttler.maybe_throttle(read_bytes)
        stats.bytes_read += read_bytes
        stats.messages_read += read
        stats.messages_written += retained

    @staticmethod
    def _append_runs(dest: LogSegment, data: memoryview, retained: list[RetainedBatch]) -> int:
        """Append the ``retained`` batches of ``data`` in runs of adjacent batches of about
        ``index.interval.bytes``, so the cleaned segment's indexes are as fine as those a
        leader writes (one append per read chunk would leave one entry); return the bytes."""
        interval = dest.params.index_interval_bytes
        written = first = 0
        for j, rb in enumerate(retained):
            end = rb.position + rb.size
            start = retained[first].position
            adjacent = j + 1 < len(retained) and retained[j + 1].position == end
            if end - start < interval and adjacent:
                continue
            top = max(retained[first : j + 1], key=lambda r: r.max_timestamp)
            dest.append(
                rb.last_offset,
                top.max_timestamp,
                top.shallow_offset_of_max_timestamp,
                data[start:end],
            )
            written += end - start
            first = j + 1
        return written

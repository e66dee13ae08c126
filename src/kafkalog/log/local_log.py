"""The segments of one partition directory and the offsets they alone decide (Kafka's LocalLog).

Why: Kafka splits a partition's log in two. LocalLog is the files: the segment list, the log end
offset, the recovery point, roll, flush, truncation, segment deletion, the crash-safe swap of
cleaned segments and the walk a read makes over segments. UnifiedLog (our ``Log``) is what the
records mean: log start offset, high watermark, last stable offset, producer state, leader
epochs. Keeping the file mechanics here lets the Log, its appender, its reader and the cleaner
each hold exactly the part they use.
Refuses: locking (the owning Log serialises every mutation; lock-free readers use only the
segment list's snapshots and the published log end), and any rule about what records mean.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from pathlib import Path

from kafkalog.clock import Clock
from kafkalog.errors import InvalidOffsetError
from kafkalog.log.config import LogConfig
from kafkalog.log.deleter import SegmentDeleter
from kafkalog.log.loader import LoadResult
from kafkalog.log.roll import roll_reason
from kafkalog.records import AnyBatch
from kafkalog.records.committed import aborts_decided_by_markers
from kafkalog.storage import filenames as fn
from kafkalog.storage.atomic import fsync_dir
from kafkalog.storage.segment import FetchDataInfo, LogOffsetMetadata, LogSegment
from kafkalog.storage.segments import LogSegments
from kafkalog.storage.txn_index import AbortedTxn
from kafkalog.types import INT64_MAX

logger = logging.getLogger("kafkalog.log")


class LocalLog:
    """Segments, log end offset and recovery point of one partition directory.

    Not thread-safe for writers: the owning Log holds its lock around every mutating call.
    ``segments`` publishes immutable snapshots and ``log_end_offset_metadata`` is replaced, never
    changed, so readers may use both without a lock.
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clock: Clock,
        loaded: LoadResult,
        rng: random.Random,
    ) -> None:
        self.directory = directory
        self.config = config
        self.clock = clock
        self.segments: LogSegments = loaded.segments
        self._rng = rng
        self._recovery_point = loaded.recovery_point
        self._last_flush_ms = clock.milliseconds()
        self._deleter = SegmentDeleter(clock, config.file_delete_delay_ms)
        active = self.active_segment
        self._leo = LogOffsetMetadata(loaded.next_offset, active.base_offset, active.size)
        self.segments_generation = 0  # bumped whenever segments are dropped, cut or replaced

    # --- offsets ---------------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._leo.message_offset

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        return self._leo

    def update_log_end_offset(self, offset: int, segment: LogSegment) -> None:
        """Publish ``offset`` as the next offset, at the end of ``segment`` (after a write)."""
        self._leo = LogOffsetMetadata(offset, segment.base_offset, segment.size)

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    def raise_recovery_point(self, offset: int) -> None:
        """Everything below ``offset`` is gone or flushed (the log start moved past it)."""
        self._recovery_point = max(self._recovery_point, offset)

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    def flush_due(self) -> bool:
        """After an append: whether ``flush.messages`` or ``flush.ms`` asks for a flush now."""
        config = self.config
        return self.log_end_offset - self._recovery_point >= config.flush_messages or (
            config.flush_ms != INT64_MAX  # no clock read when flush.ms is unset
            and self.clock.milliseconds() - self._last_flush_ms >= config.flush_ms
        )

    def roll_due(self, size: int, max_timestamp: int, last_offset: int) -> bool:
        """Whether an append of ``size`` bytes up to ``last_offset`` must go to a new segment
        (Kafka's LogSegment.shouldRoll on the active segment)."""
        seg = self.active_segment
        config = self.config
        reason = roll_reason(
            seg.base_offset,
            seg.size,
            seg.time_waited_for_roll(self.clock.milliseconds(), max_timestamp),
            seg.roll_jitter_ms,
            seg.offset_index_full(),
            seg.time_index_full(),
            config.segment_size,
            config.max_segment_ms,
            size,
            last_offset,
        )
        return reason is not None

    @property
    def active_segment(self) -> LogSegment:
        seg = self.segments.last_segment()
        assert seg is not None, "a loaded log always has an active segment"
        return seg

    def offset_metadata(self, offset: int) -> LogOffsetMetadata:
        """Resolve an offset to (offset, segment base, position of the batch holding it)."""
        leo = self._leo
        if offset >= leo.message_offset:
            return leo
        seg = self.segments.floor_segment(offset)
        if seg is None:
            return LogOffsetMetadata(offset)
        found = seg.translate_offset(offset)
        return LogOffsetMetadata(
            offset, seg.base_offset, seg.size if found is None else found.position
        )

    def lowest_offset_recovery_may_need(self) -> int:
        """The lower of the second-to-last segment's base and the base of the segment before
        the recovery point: no recovery starts below it."""
        active = self.active_segment.base_offset
        below_active = self.segments.floor_segment(active - 1) if active > 0 else None
        two_segments = below_active.base_offset if below_active else active
        point = self._recovery_point
        below_point = self.segments.floor_segment(point - 1) if point > 0 else None
        return min(below_point.base_offset if below_point else point, two_segments)

    # --- segments ----------------------------------------------------------------------------

    def new_segment(self, base_offset: int, file_suffix: str = "") -> LogSegment:
        """A fresh segment at ``base_offset``; stale files a crash left under its names go."""
        LogSegment.delete_if_exists(self.directory, base_offset, file_suffix)
        return LogSegment(
            self.directory,
            base_offset,
            self.config.segment_params(),
            self.clock,
            file_suffix=file_suffix,
            roll_jitter_ms=0 if file_suffix else self.config.random_segment_jitter(self._rng),
        )

    def roll(self, new_base: int) -> tuple[LogSegment, int]:
        """Make a new active segment at ``new_base`` (>= the log end); returns it and the old log
        end. An empty active segment at the same base is replaced (KAFKA-6388)."""
        active = self.active_segment
        existing = self.segments.get(new_base)
        if existing is not None:
            if existing is active and active.size == 0:
                self.segments.remove(new_base)
                active.delete_files()
            else:
                raise InvalidOffsetError(f"segment {new_base} already exists in {self.directory}")
        elif new_base < active.base_offset:
            raise InvalidOffsetError(
                f"cannot roll to {new_base}, below the active segment base {active.base_offset}"
            )
        else:
            active.on_become_inactive()
        seg = self.new_segment(new_base)
        self.segments.add(seg)
        old_end = self.log_end_offset
        # a roll past the log end leaves a gap: the next offset given is the new base, so no
        # offset can ever be below its segment's base
        self._leo = LogOffsetMetadata(new_base, new_base, 0)
        return seg, old_end

    def remove_and_delete_segment(self, seg: LogSegment) -> None:
        """Take a segment out of the list now; its files go after ``file.delete.delay.ms``."""
        self.segments.remove(seg.base_offset)
        self.segments_generation += 1
        self._deleter.schedule(seg)

    def update_config(self, config: LogConfig) -> None:
        """Swap the config (Kafka's LocalLog.updateConfig). Every path reads ``self.config``
        when it acts, so the next append, roll, retention pass or cleaning round uses it;
        segment and index sizes apply from the next roll, as in Kafka."""
        self.config = config
        self._deleter.set_delay(config.file_delete_delay_ms)

    def schedule_file_deletion(self, path: Path) -> None:
        self._deleter.schedule_file(path)

    def delete_due_files(self, force: bool = False) -> int:
        return self._deleter.run(force=force)

    # --- flush -------------------------------------------------------------------------------

    def flush(self, offset: int) -> None:
        """fsync every segment overlapping [recovery point, offset) and advance the recovery
        point to ``offset`` (at most the log end)."""
        offset = min(offset, self.log_end_offset)
        if offset <= self._recovery_point:
            return
        old = self._recovery_point
        touched_new = False
        for seg in self.segments.values(from_offset=old, to_offset=offset):
            seg.flush()
            touched_new |= seg.base_offset >= old
        if touched_new:
            fsync_dir(self.directory)
        self._recovery_point = offset
        self._last_flush_ms = self.clock.milliseconds()

    # --- truncation --------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every offset >= ``offset``; a batch holding it goes whole. ``offset`` must be
        at or above the first segment's base. Returns the new log end offset."""
        self.segments_generation += 1  # a cleaning round must not swap in what we cut
        for seg in self.segments.higher_segments(offset):
            self.remove_and_delete_segment(seg)
        active = self.active_segment
        offset = min(offset, active.base_offset_of_batch_holding(offset))
        active.truncate_to(offset)
        active.resize_indexes(self.config.segment_index_bytes)
        self.update_log_end_offset(offset, active)
        self._recovery_point = min(self._recovery_point, offset)
        return offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start one, empty, at ``offset``."""
        for seg in list(self.segments):
            self.remove_and_delete_segment(seg)
        self.segments.add(self.new_segment(offset))
        self._leo = LogOffsetMetadata(offset, offset, 0)
        self._recovery_point = offset

    # --- reads -------------------------------------------------------------------------------

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        upper: LogOffsetMetadata,
        min_one_message: bool,
    ) -> tuple[LogSegment, FetchDataInfo] | None:
        """Whole batches from ``start_offset`` (< ``upper``) as a file slice of the segment
        holding it or a later one, never past ``upper`` (Kafka's LocalLog.read)."""
        seg = self.segments.floor_segment(start_offset)
        while seg is not None:
            if seg.base_offset < upper.segment_base_offset:
                max_position = seg.size
            elif seg.base_offset == upper.segment_base_offset:
                max_position = upper.relative_position_in_segment
            else:
                break
            info = seg.read(start_offset, max_bytes, max_position, min_one_message)
            if info is not None:
                return seg, info
            seg = self.segments.higher_segment(seg.base_offset)
        return None

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound: int, first: LogSegment | None = None
    ) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, upper bound) (Kafka's
        LocalLog.collectAbortedTransactions): the ``.txnindex`` of the segment holding
        ``start`` (or ``first``) onwards, stopping once an index proves the rest irrelevant.

        A range whose index cannot be trusted (a segment loaded without its ``.txnindex``) is
        decided by the ABORT markers themselves; such entries carry the transaction's first
        offset in range as their last stable offset, which only ever makes a later search
        look further."""
        first = first or self.segments.floor_segment(start_offset)
        chain = self.segments.values(from_offset=first.base_offset if first else start_offset)
        found: list[AbortedTxn] = []
        for seg in chain:
            if not seg.txn_index_trusted():
                return self._aborted_from_markers(start_offset, upper_bound, chain)
            result = seg.txn_index.collect_aborted_txns(start_offset, upper_bound)
            found.extend(result.aborted)
            if result.is_complete:
                break
        return found

    @staticmethod
    def _aborted_from_markers(start: int, upper: int, chain: list[LogSegment]) -> list[AbortedTxn]:
        def batches() -> Iterator[AnyBatch]:
            for s in chain:
                position = s.offset_index.lookup(start).position if s is chain[0] else 0
                yield from s.log.batches(position)

        return [
            AbortedTxn(a.producer_id, a.first_offset, a.marker_offset, a.first_offset)
            for a in aborts_decided_by_markers(batches(), start, upper)
        ]

    # --- cleaning ----------------------------------------------------------------------------

    def create_cleaned_segment(self, base_offset: int) -> LogSegment:
        """A new, empty ``<base>.log.cleaned`` segment (leftovers of an aborted round removed)."""
        return self.new_segment(base_offset, fn.CLEANED_FILE_SUFFIX)

    def replace_segments(
        self, new_segments: list[LogSegment], old_segments: list[LogSegment]
    ) -> list[LogSegment]:
        """Swap cleaned segments in for ``old_segments`` so a crash at any point reloads to either
        the old or the new data (Kafka's LocalLog.replaceSegments): ``.cleaned`` -> ``.swap``
        (descending), retire the old segments to ``.deleted``, ``.swap`` -> live (ascending),
        fsync the directory. Returns the old segments whose base no new segment took."""
        fresh = sorted(new_segments, key=lambda s: s.base_offset)
        old = sorted(old_segments, key=lambda s: s.base_offset)
        for seg in reversed(fresh):
            seg.change_file_suffixes(fn.CLEANED_FILE_SUFFIX, fn.SWAP_FILE_SUFFIX)
        fsync_dir(self.directory)
        for seg in reversed(fresh):
            self.segments.add(seg)
        fresh_bases = {s.base_offset for s in fresh}
        for seg in old:
            if seg.base_offset != fresh[0].base_offset:
                self.segments.remove(seg.base_offset)
            self._deleter.schedule(seg)
        for seg in fresh:
            seg.change_file_suffixes(fn.SWAP_FILE_SUFFIX, "")
        fsync_dir(self.directory)
        self.segments_generation += 1
        logger.info(
            "replaced %d segment(s) of %s with %d cleaned segment(s)",
            len(old),
            self.directory.name,
            len(fresh),
        )
        return [s for s in old if s.base_offset not in fresh_bases]

    # --- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Flush the active segment (creating its indexes, as Kafka's shutdown does), close every
        file, and remove files already renamed for deletion. Closes every segment even if one
        fails, then raises the first failure."""
        self.active_segment.flush()
        failed: BaseException | None = None
        for seg in self.segments:
            try:
                seg.close()
            except BaseException as err:
                failed = failed or err
        if failed is not None:
            raise failed
        self._deleter.run(force=True)

    def close_handlers(self) -> None:
        for seg in self.segments:
            seg.close_handlers()

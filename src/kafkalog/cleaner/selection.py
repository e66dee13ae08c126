"""Which part of a log may be cleaned, how dirty it is, and how segments group (Kafka's
LogCleanerManager, Cleaner.groupSegmentsBySize).

Why: these rules decide what data the cleaner may touch — never anything at or above the LSO,
the active segment or the min-compaction-lag boundary — and which log goes first. As pure
functions of segment facts, offsets, config and ``now`` each rule is one test.
Refuses: reading files, taking locks, or deciding anything about records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kafkalog.types import INT32_MAX, INT64_MAX


@dataclass(frozen=True, slots=True)
class CleanerSegment:
    """What selection and grouping need of one segment. ``first_batch_timestamp`` is -1 when
    unknown or empty; index sizes are the bytes of live entries, not the preallocated size."""

    base_offset: int
    size: int
    largest_timestamp: int = -1
    first_batch_timestamp: int = -1
    offset_index_size: int = 0
    time_index_size: int = 0


@dataclass(frozen=True, slots=True)
class CompactionSettings:
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = INT64_MAX


@dataclass(frozen=True, slots=True)
class OffsetsToClean:
    first_dirty_offset: int
    first_uncleanable_dirty_offset: int
    force_update_checkpoint: bool = False


@dataclass(frozen=True, slots=True)
class LogToClean:
    """One candidate: Kafka's LogToClean with its byte counts and ratio."""

    first_dirty_offset: int
    first_uncleanable_offset: int  # rounded down to a segment base
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    def is_eligible(self, min_cleanable_dirty_ratio: float) -> bool:
        if self.total_bytes == 0:
            return False
        if self.need_compaction_now and self.cleanable_bytes > 0:
            return True
        return self.cleanable_ratio > min_cleanable_dirty_ratio


def _non_active_from(segments: Sequence[CleanerSegment], offset: int) -> list[CleanerSegment]:
    """Segments overlapping [offset, active base): the floor segment of ``offset`` onwards."""
    inactive = segments[:-1]
    if not inactive or offset >= segments[-1].base_offset:
        return []
    start = 0
    for i, seg in enumerate(inactive):
        if seg.base_offset <= offset:
            start = i
    return list(inactive[start:])


def cleanable_offsets(
    segments: Sequence[CleanerSegment],
    checkpoint_dirty_offset: int | None,
    *,
    log_start_offset: int,
    log_end_offset: int,
    last_stable_offset: int,
    settings: CompactionSettings,
    now: int,
) -> OffsetsToClean:
    """The dirty section [first dirty, first uncleanable) of a log (Kafka's
    LogCleanerManager.cleanableOffsets). ``segments`` is in base-offset order; the last one is the
    active segment."""
    dirty = log_start_offset if checkpoint_dirty_offset is None else checkpoint_dirty_offset
    force = False
    if dirty < log_start_offset or dirty > log_end_offset:
        dirty, force = log_start_offset, True
    candidates = [last_stable_offset, segments[-1].base_offset]
    if settings.min_compaction_lag_ms > 0:
        for seg in _non_active_from(segments, dirty):
            if seg.largest_timestamp > now - settings.min_compaction_lag_ms:
                candidates.append(seg.base_offset)
                break
    return OffsetsToClean(dirty, max(dirty, min(candidates)), force)


def max_compaction_delay(
    segments: Sequence[CleanerSegment], first_dirty_offset: int, max_lag_ms: int, now: int
) -> int:
    """How long the oldest dirty data has waited past ``max.compaction.lag.ms`` (0 if not)."""
    stamps = [
        s.first_batch_timestamp
        for s in _non_active_from(segments, first_dirty_offset)
        if s.first_batch_timestamp > 0
    ]
    earliest = min(stamps, default=INT64_MAX)
    clean_until = now - max(max_lag_ms, 0)
    return clean_until - earliest if earliest < clean_until else 0


def log_to_clean(
    segments: Sequence[CleanerSegment],
    offsets: OffsetsToClean,
    *,
    need_compaction_now: bool,
) -> LogToClean:
    """Byte counts and the rounded-down uncleanable offset (Kafka's
    LogCleanerManager.calculateCleanableBytes)."""
    dirty, uncleanable = offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset
    inactive = _non_active_from(segments, uncleanable)
    first_uncleanable = inactive[0].base_offset if inactive else segments[-1].base_offset
    clean = sum(s.size for s in segments if s.base_offset < dirty)
    low = min(dirty, first_uncleanable)
    floor = max((s.base_offset for s in segments if s.base_offset <= low), default=low)
    cleanable = sum(s.size for s in segments if floor <= s.base_offset < first_uncleanable)
    return LogToClean(dirty, first_uncleanable, clean, cleanable, need_compaction_now)


def group_segments_by_size(
    segments: Sequence[CleanerSegment],
    max_size: int,
    max_index_size: int,
    first_uncleanable_offset: int,
) -> list[list[CleanerSegment]]:
    """Runs of consecutive segments that fit one cleaned segment: log bytes within
    ``segment.bytes``, each index within ``segment.index.bytes``, and offsets within Int32 of the
    group's base (an empty next segment skips that check) (Kafka's Cleaner.groupSegmentsBySize)."""
    groups: list[list[CleanerSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        log_size = segments[i].size
        index_size = segments[i].offset_index_size
        time_size = segments[i].time_index_size
        i += 1
        while i < len(segments):
            nxt = segments[i]
            last = (
                segments[i + 1].base_offset - 1
                if i + 1 < len(segments)
                else first_uncleanable_offset - 1
            )
            if not (
                log_size + nxt.size <= max_size
                and index_size + nxt.offset_index_size <= max_index_size
                and time_size + nxt.time_index_size <= max_index_size
                and (nxt.size == 0 or last - group[0].base_offset <= INT32_MAX)
            ):
                break
            group.append(nxt)
            log_size += nxt.size
            index_size += nxt.offset_index_size
            time_size += nxt.time_index_size
            i += 1
        groups.append(group)
    return groups

"""Retention as pure functions: which leading segments may go, and why (Kafka's
UnifiedLog.deleteOldSegments, LocalLog.deleteSegmentFiles).

Why: the rule has three breaches (log start offset, size, time) and guards that are easy to get
wrong (never at or above the high watermark, never an empty active segment, stop at the first
segment that stays). Written as plain data in, a count out, each row of the rule is one test.
Refuses: deleting anything (the Log does, asynchronously) and reading the clock (``now`` is given).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass


class RetentionReason(enum.Enum):
    LOG_START_OFFSET_BREACH = "log start offset breach"
    RETENTION_SIZE_BREACH = "retention size in bytes breach"
    RETENTION_MS_BREACH = "retention time in ms breach"


@dataclass(frozen=True, slots=True)
class SegmentView:
    """The facts of one segment retention looks at. ``largest_timestamp`` is the largest record
    timestamp, or the ``.log`` file's mtime when the segment has none."""

    base_offset: int
    size: int
    largest_timestamp: int


# (segment, next segment or None) -> deletable?
Predicate = Callable[[SegmentView, SegmentView | None], bool]


def deletable_prefix(
    segments: Sequence[SegmentView],
    predicate: Predicate,
    *,
    high_watermark: int,
    log_end_offset: int,
) -> int:
    """How many segments, from the oldest, may be deleted: each must lie wholly below the high
    watermark and satisfy ``predicate``; an empty last segment never goes; the walk stops at the
    first segment that stays."""
    count = 0
    for i, seg in enumerate(segments):
        following = segments[i + 1] if i + 1 < len(segments) else None
        upper = following.base_offset if following is not None else log_end_offset
        if high_watermark < upper or not predicate(seg, following):
            break
        if following is None and seg.size == 0:
            break
        count += 1
    return count


def log_start_offset_breach(log_start_offset: int) -> Predicate:
    """The whole segment lies below the log start offset (the last segment never does)."""
    return lambda seg, following: (
        following is not None and following.base_offset <= log_start_offset
    )


def retention_size_breach(total_size: int, retention_bytes: int) -> Predicate | None:
    """Oldest segments go while the log stays at or above ``retention.bytes`` without them."""
    if retention_bytes < 0 or total_size < retention_bytes:
        return None
    diff = total_size - retention_bytes

    def predicate(seg: SegmentView, following: SegmentView | None) -> bool:
        nonlocal diff
        if diff - seg.size >= 0:
            diff -= seg.size
            return True
        return False

    return predicate


def retention_ms_breach(now: int, retention_ms: int) -> Predicate | None:
    """The segment's newest record is older than ``retention.ms`` (future timestamps wait)."""
    if retention_ms < 0:
        return None
    return lambda seg, following: now - seg.largest_timestamp > retention_ms


def breach_predicate(
    reason: RetentionReason,
    views: Sequence[SegmentView],
    *,
    log_start_offset: int,
    retention_bytes: int,
    retention_ms: int,
    now: int,
) -> Predicate | None:
    """The predicate of one breach, or None when that breach cannot delete anything."""
    if reason is RetentionReason.LOG_START_OFFSET_BREACH:
        return log_start_offset_breach(log_start_offset)
    if reason is RetentionReason.RETENTION_SIZE_BREACH:
        return retention_size_breach(sum(v.size for v in views), retention_bytes)
    return retention_ms_breach(now, retention_ms)

"""When to roll the active segment (Kafka's LogSegment.shouldRoll, UnifiedLog.maybeRoll): a pure
function of segment facts and the append.

Why: the rule has five clauses and one subtle exception (empty segments never roll for time);
as a pure function each clause gets its own test row. Refuses: I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kafkalog.types import INT32_MAX


class RollReason(enum.Enum):
    SIZE = "segment.bytes"
    TIME = "segment.ms"
    OFFSET_INDEX_FULL = "offset index full"
    TIME_INDEX_FULL = "time index full"
    OFFSET_OVERFLOW = "relative offset overflow"


@dataclass(frozen=True, slots=True)
class SegmentFacts:
    base_offset: int
    size: int
    time_waited_for_roll: int
    roll_jitter_ms: int
    offset_index_full: bool
    time_index_full: bool


@dataclass(frozen=True, slots=True)
class RollParams:
    """The incoming append, as the roll rule sees it."""

    max_segment_bytes: int
    max_segment_ms: int
    messages_size: int
    max_offset_in_messages: int


def should_roll(segment: SegmentFacts, params: RollParams) -> RollReason | None:
    return roll_reason(
        segment.base_offset,
        segment.size,
        segment.time_waited_for_roll,
        segment.roll_jitter_ms,
        segment.offset_index_full,
        segment.time_index_full,
        params.max_segment_bytes,
        params.max_segment_ms,
        params.messages_size,
        params.max_offset_in_messages,
    )


def roll_reason(
    base_offset: int,
    size: int,
    time_waited_for_roll: int,
    roll_jitter_ms: int,
    offset_index_full: bool,
    time_index_full: bool,
    max_segment_bytes: int,
    max_segment_ms: int,
    messages_size: int,
    max_offset_in_messages: int,
) -> RollReason | None:
    """``should_roll`` on plain values: what every append asks, without building the facts."""
    if size > max_segment_bytes - messages_size:
        return RollReason.SIZE
    if size > 0 and time_waited_for_roll > max_segment_ms - roll_jitter_ms:
        return RollReason.TIME
    if offset_index_full:
        return RollReason.OFFSET_INDEX_FULL
    if time_index_full:
        return RollReason.TIME_INDEX_FULL
    relative = max_offset_in_messages - base_offset
    if not 0 <= relative <= INT32_MAX:
        return RollReason.OFFSET_OVERFLOW
    return None


def new_segment_base(roll_offset: int | None, log_end_offset: int) -> int:
    """A new segment starts at max(first offset of the append, LEO) (Kafka's LogSegment.shouldRoll,
    UnifiedLog.maybeRoll)."""
    return log_end_offset if roll_offset is None else max(roll_offset, log_end_offset)

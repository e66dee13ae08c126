"""When to roll the active segment (Kafka's LogSegment.shouldRoll, UnifiedLog.maybeRoll): a pure
function of segment facts and the append.

Why: the rule has five clauses and one subtle exception (empty segments never roll for time);
as a pure function each clause gets its own test row. Refuses: I/O.
"""

from __future__ import annotations

import enum

from kafkalog.types import INT32_MAX


class RollReason(enum.Enum):
    SIZE = "segment.bytes"
    TIME = "segment.ms"
    OFFSET_INDEX_FULL = "offset index full"
    TIME_INDEX_FULL = "time index full"
    OFFSET_OVERFLOW = "relative offset overflow"


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
    """Why the active segment must roll before this append, or None. Plain values, not a
    facts object: every append asks."""
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

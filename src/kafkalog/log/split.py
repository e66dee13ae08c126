"""Splitting a segment whose offsets overflow its base (Kafka's LocalLog.splitOverflowedSegment,
KAFKA-6264).

Why: brokers before Kafka 0.11 could write a legacy segment holding offsets more than Int32.MAX
above its base, which no index can address. Recovery meets them when it rebuilds the indexes;
Kafka then copies the batches into new segments that each fit, and swaps them in with the same
``.cleaned`` -> ``.swap`` -> live procedure as the cleaner, so a crash midway reloads to either
the old segment or the new ones. Refuses: changing any byte of the data (the batches are copied
verbatim, and the sizes must add up to the original's).
"""

from __future__ import annotations

from kafkalog.clock import Clock
from kafkalog.errors import CorruptionError
from kafkalog.storage import filenames as fn
from kafkalog.storage.atomic import fsync_dir
from kafkalog.storage.segment import LogSegment, SegmentParams


def split_overflowed_segment(
    segment: LogSegment, params: SegmentParams, clock: Clock
) -> list[LogSegment]:
    """Replace ``segment`` on disk by segments whose offsets fit; return them (live names)."""
    directory = segment.directory
    mtime = segment.log.last_modified_ms()
    fresh: list[LogSegment] = []
    current: LogSegment | None = None
    copied = 0
    try:
        for batch in segment.log.batches():
            if current is None or not current.can_convert_to_relative_offset(batch.last_offset):
                current = LogSegment(
                    directory, batch.base_offset, params, clock, file_suffix=fn.CLEANED_FILE_SUFFIX
                )
                fresh.append(current)
            data = bytes(batch.buffer)
            current.append(batch.last_offset, batch.max_timestamp, batch.last_offset, data)
            copied += len(data)
        if current is None:
            raise CorruptionError(f"{segment.log.path} overflows but holds no complete batch")
        tail = segment.size - copied
        if tail:  # an invalid tail goes along; recovery of the last new segment truncates it
            current.log.append(segment.log.read(copied, tail))
        for seg in fresh:
            seg.on_become_inactive()
            seg.flush()
            seg.log.set_last_modified_ms(mtime)
        if sum(s.size for s in fresh) != segment.size:
            raise CorruptionError(f"split of {segment.log.path} lost bytes")
    except BaseException:
        for seg in fresh:
            seg.delete_files()
        raise
    for seg in reversed(fresh):
        seg.change_file_suffixes(fn.CLEANED_FILE_SUFFIX, fn.SWAP_FILE_SUFFIX)
    fsync_dir(directory)
    segment.change_file_suffixes("", fn.DELETED_FILE_SUFFIX)
    for seg in fresh:
        seg.change_file_suffixes(fn.SWAP_FILE_SUFFIX, "")
    fsync_dir(directory)
    segment.delete_files()
    return fresh

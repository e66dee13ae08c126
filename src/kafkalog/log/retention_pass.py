"""One retention pass over a partition (Kafka's UnifiedLog.deleteOldSegments).

Why: which segments retention may take is a pure rule (``retention``); carrying it out is a
change of the log under its lock -- a roll when every segment goes, the segments and their
producer snapshots scheduled for deletion, the log start offset moved up -- that the Log
delegates here rather than carry beside appends and reads. With tiered storage (KIP-405) the
pass keeps ``local.retention.*`` instead, never deletes a segment remote storage does not hold
whole, and moves only the local log start offset: the records stay readable from the remote
copy, and the remote log manager applies ``retention.*`` to the whole log.
Refuses: deciding policy (the rule's functions do) and compaction (the cleaner's).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kafkalog.log.local_log import LocalLog
from kafkalog.log.producer_state_manager import ProducerStateManager
from kafkalog.log.retention import RetentionReason, SegmentView, breach_predicate, deletable_prefix
from kafkalog.log.watermarks import Watermarks
from kafkalog.storage.segment import LogSegment

logger = logging.getLogger("kafkalog.log")


class RetentionPass:
    """Deletes what retention allows. Thread-safety: every step runs under the log lock."""

    def __init__(
        self,
        local: LocalLog,
        marks: Watermarks,
        producer_state: ProducerStateManager,
        lock: threading.RLock,
        check_open: Callable[[], None],
        roll: Callable[[], LogSegment],
        increment_start_offset: Callable[[int], bool],
        highest_remote_offset: Callable[[], int | None] = lambda: None,
    ) -> None:
        self._local = local
        self._marks = marks
        self._producer_state = producer_state
        self._lock = lock
        self._check_open = check_open
        self._roll = roll
        self._increment_start_offset = increment_start_offset
        # the highest offset remote storage holds when local retention applies, else None
        self._highest_remote_offset = highest_remote_offset

    def run(self, delete_policy: bool) -> int:
        """Segments wholly below the log start offset always go; with ``cleanup.policy``
        delete, so do those breaching ``retention.bytes`` and then ``retention.ms``."""
        deleted = self._delete_breached(RetentionReason.LOG_START_OFFSET_BREACH)
        if delete_policy:
            deleted += self._delete_breached(RetentionReason.RETENTION_SIZE_BREACH)
            deleted += self._delete_breached(RetentionReason.RETENTION_MS_BREACH)
        self._local.delete_due_files()
        return deleted

    def _delete_breached(self, reason: RetentionReason) -> int:
        with self._lock:
            self._check_open()
            local, marks = self._local, self._marks
            segments = list(local.segments)
            views = [SegmentView(s.base_offset, s.size, s.largest_timestamp()) for s in segments]
            remote = self._highest_remote_offset()
            config = local.config
            predicate = breach_predicate(
                reason,
                views,
                log_start_offset=marks.log_start_offset,
                retention_bytes=local_retention(
                    config.retention_bytes, config.local_retention_bytes, remote
                ),
                retention_ms=local_retention(
                    config.retention_ms, config.local_retention_ms, remote
                ),
                now=local.clock.milliseconds(),
            )
            if predicate is None:
                return 0
            count = deletable_prefix(
                views,
                predicate,
                high_watermark=marks.high_watermark,
                log_end_offset=local.log_end_offset,
            )
            if remote is not None:  # only what remote storage holds whole (Kafka's
                # isSegmentTieredToRemoteStorage: the segment's last offset is copied)
                uppers = [v.base_offset for v in views[1:]] + [local.log_end_offset]
                count = next((i for i in range(count) if uppers[i] - 1 > remote), count)
            if count == 0:
                return 0
            doomed = segments[:count]
            if count == len(segments):  # a log always keeps one segment: roll a new one first
                fresh = self._roll()
                if doomed[-1].base_offset == fresh.base_offset:
                    doomed = doomed[:-1]
            for seg in doomed:
                local.remove_and_delete_segment(seg)
                snapshot = self._producer_state.mark_snapshot_for_deletion(seg.base_offset)
                if snapshot is not None:
                    local.schedule_file_deletion(snapshot)
            first = local.segments.first_segment()
            assert first is not None
            if remote is None:
                self._increment_start_offset(first.base_offset)
            else:  # the records stay readable remotely: the log start offset stays
                local.raise_recovery_point(first.base_offset)
            logger.info(
                "deleted %d segment(s) of %s (%s); log start offset %d, local from %d",
                count,
                local.directory.name,
                reason.value,
                marks.log_start_offset,
                first.base_offset,
            )
            return count


def local_retention(total: int, local: int, highest_remote_offset: int | None) -> int:
    """Kafka's UnifiedLog.localRetentionMs/Size: with a remote copy, ``local.retention.*``
    (-2 means the total's value); without, the total."""
    if highest_remote_offset is None or local == -2:
        return total
    return local

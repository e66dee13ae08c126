"""One retention pass over a partition (Kafka's UnifiedLog.deleteOldSegments).

Why: which segments retention may take is a pure rule (``retention``); carrying it out is a
change of the log under its lock -- a roll when every segment goes, the segments and their
producer snapshots scheduled for deletion, the log start offset moved up -- that the Log
delegates here rather than carry beside appends and reads. Refuses: deciding policy (the
rule's functions do) and compaction (the cleaner's).
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
    ) -> None:
        self._local = local
        self._marks = marks
        self._producer_state = producer_state
        self._lock = lock
        self._check_open = check_open
        self._roll = roll
        self._increment_start_offset = increment_start_offset

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
            predicate = breach_predicate(
                reason,
                views,
                log_start_offset=marks.log_start_offset,
                retention_bytes=local.config.retention_bytes,
                retention_ms=local.config.retention_ms,
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
            self._increment_start_offset(first.base_offset)
            logger.info(
                "deleted %d segment(s) of %s (%s); log start offset %d",
                count,
                local.directory.name,
                reason.value,
                marks.log_start_offset,
            )
            return count

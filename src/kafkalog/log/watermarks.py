"""A partition's log start offset, high watermark and last stable offset (Kafka's UnifiedLog
logStartOffset, highWatermarkMetadata and firstUnstableOffsetMetadata).

Why: the appender moves them after every write, the reader bounds every fetch by them, and the
Log moves them on truncation, retention and DeleteRecords. One object holding them, given to
each of the three, keeps the rule "log start <= LSO <= HW <= log end" in one place.
Refuses: locking (the Log's lock is held by every caller that moves them) and choosing when
they move.
"""

from __future__ import annotations

import threading

from kafkalog.log.local_log import LocalLog
from kafkalog.log.producer_state_manager import ProducerStateManager
from kafkalog.storage.segment import LogOffsetMetadata


class Watermarks:
    """Offsets a reader may be given: each is replaced whole, never changed in place."""

    def __init__(
        self,
        local: LocalLog,
        producer_state: ProducerStateManager,
        log_start_offset: int,
        lock: threading.RLock,
    ) -> None:
        self._local = local
        self._producer_state = producer_state
        self._lock = lock
        self.log_start_offset = log_start_offset
        self.high_watermark_metadata = local.log_end_offset_metadata
        self._first_unstable: LogOffsetMetadata | None = None
        # no replication: everything written is committed at once (a follower's owner turns
        # this off and moves the high watermark itself)
        self.auto_high_watermark = True
        self.update_first_unstable_offset()

    @property
    def high_watermark(self) -> int:
        return self.high_watermark_metadata.message_offset

    @property
    def last_stable_offset(self) -> int:
        """The offset below which every transaction is decided (and replicated)."""
        first = self._first_unstable
        hw = self.high_watermark
        return first.message_offset if first is not None and first.message_offset < hw else hw

    def last_stable_offset_metadata(self) -> LogOffsetMetadata:
        """The last stable offset with its segment position (resolved, once, under the lock)."""
        first, hw = self._first_unstable, self.high_watermark_metadata
        if first is None or first.message_offset >= hw.message_offset:
            return hw
        if first.message_offset_only:
            with self._lock:
                resolved = self._local.offset_metadata(first.message_offset)
                if self._first_unstable == first:
                    self._first_unstable = resolved
                return resolved
        return first

    def update_first_unstable_offset(self) -> None:
        first = self._producer_state.first_unstable_offset()
        start = self.log_start_offset
        if first is not None and (first.message_offset_only or first.message_offset < start):
            first = self._local.offset_metadata(max(first.message_offset, start))
        self._first_unstable = first

    def set_high_watermark(self, metadata: LogOffsetMetadata) -> None:
        self.high_watermark_metadata = metadata
        self._producer_state.on_high_watermark_updated(metadata.message_offset)
        self.update_first_unstable_offset()

    def on_append(self, next_offset: int) -> None:
        """After a write up to ``next_offset``: the high watermark follows the log end when
        nothing replicates, and the first unstable offset follows the producer state."""
        if self.auto_high_watermark or self.high_watermark >= next_offset:
            self.set_high_watermark(self._local.log_end_offset_metadata)
        else:
            self.update_first_unstable_offset()

    def follow_log_end_from(self, offset: int) -> None:
        """After a roll or truncation: a high watermark at or above ``offset`` (the old end of
        a roll, the new end of a truncation) moves to the log end."""
        if self.high_watermark >= offset:
            self.set_high_watermark(self._local.log_end_offset_metadata)

    def increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset up to ``offset`` (the high watermark with it if below)."""
        if offset <= self.log_start_offset:
            return False
        self.log_start_offset = offset
        if self.high_watermark < offset:
            self.high_watermark_metadata = self._local.offset_metadata(offset)
        self._producer_state.on_log_start_offset_incremented(offset)
        self.update_first_unstable_offset()
        return True

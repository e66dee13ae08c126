"""What the cleaner may ask of a Log: its segments, its aborted transactions, its producers' last
batches, a fresh ``.cleaned`` segment, and the crash-safe swap of cleaned segments for old ones.

Why: the cleaner works outside the log lock on immutable inactive segments and needs the lock
only for the swap. Handing it this narrow object instead of the Log users hold makes plain which
Log state the cleaner touches, and keeps ``create_cleaned_segment`` and ``replace_segments`` off
the user-facing class. A swap refuses to happen if the segments changed under the cleaner
(truncation, retention): the caller's round is then aborted, nothing is lost.
Refuses: choosing what to clean or how (the ``kafkalog.cleaner`` package does).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kafkalog.errors import LogCleaningAbortedError
from kafkalog.log.config import LogConfig
from kafkalog.log.local_log import LocalLog
from kafkalog.log.producer_state_manager import ProducerStateManager
from kafkalog.storage.segment import LogSegment
from kafkalog.storage.segments import LogSegments
from kafkalog.storage.txn_index import AbortedTxn


@dataclass(frozen=True, slots=True)
class LastRecord:
    """An active producer's last data offset (None if it has only markers) and current epoch."""

    last_data_offset: int | None
    producer_epoch: int


class CleanableLog:
    """One Log as its cleaner sees it (Kafka's cleaner uses these parts of UnifiedLog)."""

    def __init__(
        self,
        local: LocalLog,
        producer_state: ProducerStateManager,
        lock: threading.RLock,
        check_open: Callable[[], None],
    ) -> None:
        self._local = local
        self._producer_state = producer_state
        self._lock = lock
        self._check_open = check_open

    @property
    def directory(self) -> Path:
        return self._local.directory

    @property
    def config(self) -> LogConfig:
        return self._local.config

    @property
    def segments(self) -> LogSegments:
        return self._local.segments

    @property
    def segments_generation(self) -> int:
        """Bumped whenever segments are dropped, truncated or replaced: a round records it as it
        begins and its swap is refused if it moved."""
        return self._local.segments_generation

    def collect_aborted_transactions(self, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
        return self._local.collect_aborted_transactions(start_offset, upper_bound)

    def last_records_of_active_producers(self) -> dict[int, LastRecord]:
        with self._lock:
            return {
                pid: LastRecord(
                    entry.last_data_offset if entry.last_data_offset >= 0 else None,
                    entry.producer_epoch,
                )
                for pid, entry in self._producer_state.producers.items()
            }

    def create_cleaned_segment(self, base_offset: int) -> LogSegment:
        """A new, empty ``<base>.log.cleaned`` segment (leftovers of an aborted round removed)."""
        return self._local.create_cleaned_segment(base_offset)

    def replace_segments(
        self, new_segments: list[LogSegment], old_segments: list[LogSegment], generation: int
    ) -> None:
        """Swap cleaned segments in for ``old_segments`` (LocalLog.replace_segments) unless the
        segments changed since ``generation``; the producer snapshots of segments that went go
        too (Kafka's UnifiedLog.replaceSegments)."""
        with self._lock:
            self._check_open()
            local = self._local
            stale = generation != local.segments_generation or any(
                local.segments.get(s.base_offset) is not s for s in old_segments
            )
            if stale:
                raise LogCleaningAbortedError(
                    f"segments of {local.directory.name} changed during cleaning; round aborted"
                )
            for seg in local.replace_segments(new_segments, old_segments):
                snapshot = self._producer_state.mark_snapshot_for_deletion(seg.base_offset)
                if snapshot is not None:
                    local.schedule_file_deletion(snapshot)

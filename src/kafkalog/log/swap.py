"""What the cleaner may ask of a Log: its aborted transactions, its producers' last batches, a fresh
``.cleaned`` segment, and the crash-safe swap of cleaned segments for old ones (Kafka's
LocalLog.replaceSegments).

Why: the cleaner works outside the log lock on immutable inactive segments and only needs the
lock for the swap; keeping that contract in one mixin keeps ``log.py`` small and makes plain
which Log state the cleaner touches. A swap refuses to happen if the segments changed under the
cleaner (truncation, retention): the caller's round is then aborted, nothing is lost.
Refuses: choosing what to clean or how (the ``kafkalog.cleaner`` package does).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kafkalog.errors import LogCleaningAbortedError
from kafkalog.log.config import LogConfig
from kafkalog.log.deleter import SegmentDeleter
from kafkalog.log.producer_state_manager import ProducerStateManager
from kafkalog.storage import filenames as fn
from kafkalog.storage.atomic import delete_if_exists, fsync_dir
from kafkalog.storage.segment import LogSegment
from kafkalog.storage.segments import LogSegments
from kafkalog.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from kafkalog.clock import Clock

logger = logging.getLogger("kafkalog.log")


@dataclass(frozen=True, slots=True)
class LastRecord:
    """An active producer's last data offset (None if it has only markers) and current epoch."""

    last_data_offset: int | None
    producer_epoch: int


class SegmentReplacement:
    """Mixed into Log."""

    directory: Path
    config: LogConfig
    clock: Clock
    segments: LogSegments
    producer_state: ProducerStateManager
    _lock: threading.RLock
    _deleter: SegmentDeleter
    segments_generation: int  # bumped whenever segments are dropped, truncated or replaced

    if TYPE_CHECKING:

        def _check_open(self) -> None: ...

    def collect_aborted_transactions(self, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, upper bound), from the txn index of the
        segment holding ``start`` onwards, stopping once an index proves the rest irrelevant."""
        found: list[AbortedTxn] = []
        first = self.segments.floor_segment(start_offset)
        segments = self.segments.values(from_offset=first.base_offset if first else start_offset)
        for seg in segments:
            result = seg.txn_index.collect_aborted_txns(start_offset, upper_bound)
            found.extend(result.aborted)
            if result.is_complete:
                break
        return found

    def last_records_of_active_producers(self) -> dict[int, LastRecord]:
        with self._lock:
            return {
                pid: LastRecord(
                    entry.last_data_offset if entry.last_data_offset >= 0 else None,
                    entry.producer_epoch,
                )
                for pid, entry in self.producer_state.producers.items()
            }

    def create_cleaned_segment(self, base_offset: int) -> LogSegment:
        """A new, empty ``<base>.log.cleaned`` segment (leftovers of an aborted round removed)."""
        for path in (
            fn.log_file(self.directory, base_offset, fn.CLEANED_FILE_SUFFIX),
            fn.offset_index_file(self.directory, base_offset, fn.CLEANED_FILE_SUFFIX),
            fn.time_index_file(self.directory, base_offset, fn.CLEANED_FILE_SUFFIX),
            fn.transaction_index_file(self.directory, base_offset, fn.CLEANED_FILE_SUFFIX),
        ):
            delete_if_exists(path)
        return LogSegment(
            self.directory,
            base_offset,
            self.config.segment_params(),
            self.clock,
            file_suffix=fn.CLEANED_FILE_SUFFIX,
        )

    def replace_segments(
        self, new_segments: list[LogSegment], old_segments: list[LogSegment], generation: int
    ) -> None:
        """Swap cleaned segments in for ``old_segments`` so a crash at any point reloads to either
        the old or the new data (Kafka's LocalLog.replaceSegments): ``.cleaned`` -> ``.swap``
        (descending), retire the old segments to ``.deleted``, ``.swap`` -> live (ascending), fsync
        the directory. ``generation`` is ``segments_generation`` as the round began."""
        with self._lock:
            self._check_open()
            stale = generation != self.segments_generation or any(
                self.segments.get(s.base_offset) is not s for s in old_segments
            )
            if stale:
                raise LogCleaningAbortedError(
                    f"segments of {self.directory.name} changed during cleaning; round aborted"
                )
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
                if seg.base_offset not in fresh_bases:
                    snapshot = self.producer_state.mark_snapshot_for_deletion(seg.base_offset)
                    if snapshot is not None:
                        self._deleter.schedule_file(snapshot)
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

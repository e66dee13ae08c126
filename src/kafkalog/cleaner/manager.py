"""Cleaning state, the cleaner checkpoint and the cleaner threads (Kafka's LogCleanerManager,
LogCleaner.CleanerThread).

Why: many partitions share a few cleaner threads. Someone must pick the filthiest log, remember
per log dir how far each partition is cleaned (``cleaner-offset-checkpoint``), keep a partition
from being cleaned twice at once, let truncation or deletion abort and pause a round, and set
aside a partition whose cleaning fails (uncleanable) instead of retrying it forever. That is
Kafka's LogCleanerManager and LogCleaner; this is their port.
Refuses: the cleaning itself (``cleaner.Cleaner``) and owning logs (the LogManager does).
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kafkalog.cleaner.cleaner import Cleaner, CleanerStats, segment_facts
from kafkalog.cleaner.config import CleanerConfig
from kafkalog.cleaner.selection import (
    CompactionSettings,
    LogToClean,
    cleanable_offsets,
    log_to_clean,
    max_compaction_delay,
)
from kafkalog.cleaner.throttler import Throttler
from kafkalog.clock import Clock
from kafkalog.errors import CorruptCheckpointError, LogCleaningAbortedError
from kafkalog.log.log import Log
from kafkalog.storage import filenames as fn
from kafkalog.storage.checkpoints import OffsetCheckpointFile
from kafkalog.types import INT64_MAX, TopicPartition

logger = logging.getLogger("kafkalog.cleaner")


class CleaningState(enum.Enum):
    IN_PROGRESS = "in progress"
    ABORTED = "aborted"
    PAUSED = "paused"


@dataclass(frozen=True)
class CleaningResult:
    """One round: the partition, the dirty range it started from, where the next starts."""

    topic_partition: TopicPartition
    first_dirty_offset: int
    end_offset: int
    stats: CleanerStats | None
    error: str | None = None


class LogCleanerManager:
    """Which partitions may be cleaned, and how far each has been. Thread-safe."""

    def __init__(self, logs: Callable[[], Mapping[TopicPartition, Log]], clock: Clock) -> None:
        self._logs = logs
        self.clock = clock
        self._lock = threading.Condition()
        self._states: dict[TopicPartition, tuple[CleaningState, int]] = {}
        self.uncleanable: dict[Path, set[TopicPartition]] = {}

    # --- checkpoints -----------------------------------------------------------------------------

    @staticmethod
    def _checkpoint(log_dir: Path) -> OffsetCheckpointFile:
        return OffsetCheckpointFile(log_dir / fn.CLEANER_OFFSET_CHECKPOINT)

    def all_cleaner_checkpoints(self) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        for log_dir in {log.directory.parent for log in self._logs().values()}:
            out.update(self._read(log_dir))
        return out

    def _read(self, log_dir: Path) -> dict[TopicPartition, int]:
        try:
            return self._checkpoint(log_dir).read()
        except CorruptCheckpointError as err:  # costs a re-clean, never data
            logger.warning("ignoring a damaged cleaner checkpoint: %s", err)
            return {}

    def update_checkpoints(
        self,
        log_dir: Path,
        update: tuple[TopicPartition, int] | None = None,
        remove: TopicPartition | None = None,
    ) -> None:
        """Rewrite ``log_dir``'s checkpoint: entries of partitions no longer there dropped. "There"
        is the directory, not the loaded logs: a manager that opened some partitions only (the
        Spark sink's commit) keeps the others' entries."""
        with self._lock:
            current = {
                tp: o
                for tp, o in self._read(log_dir).items()
                if (log_dir / fn.partition_dir_name(tp)).is_dir()
            }
            if update is not None:
                current[update[0]] = update[1]
            if remove is not None:
                current.pop(remove, None)
            if current or self._checkpoint(log_dir).path.exists():
                self._checkpoint(log_dir).write(current)

    def maybe_truncate_checkpoint(self, log_dir: Path, tp: TopicPartition, offset: int) -> None:
        """After truncation: a dirty offset above the new end is pulled down to it."""
        with self._lock:
            current = self._read(log_dir).get(tp)
            if current is not None and current > offset:
                self.update_checkpoints(log_dir, update=(tp, offset))

    # --- choosing --------------------------------------------------------------------------------

    def _is_uncleanable(self, log: Log, tp: TopicPartition) -> bool:
        return tp in self.uncleanable.get(log.directory.parent, set())

    def mark_uncleanable(self, log_dir: Path, tp: TopicPartition) -> None:
        with self._lock:
            self.uncleanable.setdefault(log_dir, set()).add(tp)

    def log_to_clean(self, tp: TopicPartition, log: Log, checkpoint: int | None) -> LogToClean:
        now = self.clock.milliseconds()
        c = log.config
        lags = c.min_compaction_lag_ms > 0 or c.max_compaction_lag_ms < INT64_MAX
        facts = [segment_facts(s, timestamps=lags, index_sizes=False) for s in log.segments]
        offsets = cleanable_offsets(
            facts,
            checkpoint,
            log_start_offset=log.log_start_offset,
            log_end_offset=log.log_end_offset,
            last_stable_offset=log.last_stable_offset,
            settings=CompactionSettings(c.min_compaction_lag_ms, c.max_compaction_lag_ms),
            now=now,
        )
        if offsets.force_update_checkpoint:
            self.update_checkpoints(log.directory.parent, update=(tp, offsets.first_dirty_offset))
        delay = max_compaction_delay(
            facts, offsets.first_dirty_offset, c.max_compaction_lag_ms, now
        )
        return log_to_clean(facts, offsets, need_compaction_now=delay > 0)

    def grab_filthiest_compacted_log(self) -> tuple[TopicPartition, Log, LogToClean] | None:
        """The eligible log with the highest dirty ratio, now marked in progress."""
        with self._lock:
            checkpoints = self.all_cleaner_checkpoints()
            best: tuple[TopicPartition, Log, LogToClean] | None = None
            for tp, log in self._logs().items():
                if not log.config.compact or tp in self._states or log.closed:
                    continue
                if self._is_uncleanable(log, tp):
                    continue
                candidate = self.log_to_clean(tp, log, checkpoints.get(tp))
                if not candidate.is_eligible(log.config.min_cleanable_dirty_ratio):
                    continue
                if best is None or candidate.cleanable_ratio > best[2].cleanable_ratio:
                    best = (tp, log, candidate)
            if best is not None:
                self._states[best[0]] = (CleaningState.IN_PROGRESS, 0)
            return best

    def deletable_logs(self) -> list[tuple[TopicPartition, Log]]:
        """Compacted logs free for retention, now marked in progress (``done_deleting``)."""
        with self._lock:
            out = [
                (tp, log)
                for tp, log in self._logs().items()
                if log.config.compact
                and tp not in self._states
                and not self._is_uncleanable(log, tp)
                and not log.closed
            ]
            for tp, _ in out:
                self._states[tp] = (CleaningState.IN_PROGRESS, 0)
            return out

    # --- state machine ---------------------------------------------------------------------------

    def state(self, tp: TopicPartition) -> CleaningState | None:
        with self._lock:
            entry = self._states.get(tp)
            return entry[0] if entry else None

    def check_cleaning_aborted(self, tp: TopicPartition) -> None:
        with self._lock:
            entry = self._states.get(tp)
            if entry is not None and entry[0] is CleaningState.ABORTED:
                raise LogCleaningAbortedError(f"cleaning of {tp} was aborted")

    def done_cleaning(self, tp: TopicPartition, log_dir: Path, end_offset: int | None) -> None:
        with self._lock:
            entry = self._states.get(tp)
            if entry is None:
                raise RuntimeError(f"{tp} finished cleaning without being in progress")
            if entry[0] is CleaningState.IN_PROGRESS:
                if end_offset is not None:
                    self.update_checkpoints(log_dir, update=(tp, end_offset))
                del self._states[tp]
            elif entry[0] is CleaningState.ABORTED:
                self._states[tp] = (CleaningState.PAUSED, 1)
                self._lock.notify_all()

    done_deleting = done_cleaning

    def abort_and_pause_cleaning(self, tp: TopicPartition, timeout_s: float = 60.0) -> None:
        """Stop any round on ``tp`` and keep it paused until ``resume_cleaning``; waits for a
        running round to notice (at its next chunk)."""
        with self._lock:
            entry = self._states.get(tp)
            if entry is None:
                self._states[tp] = (CleaningState.PAUSED, 1)
            elif entry[0] is CleaningState.IN_PROGRESS:
                self._states[tp] = (CleaningState.ABORTED, 0)
            elif entry[0] is CleaningState.PAUSED:
                self._states[tp] = (CleaningState.PAUSED, entry[1] + 1)
            done = self._lock.wait_for(
                lambda: self._states.get(tp, (None, 0))[0] is CleaningState.PAUSED, timeout_s
            )
            if not done:
                raise LogCleaningAbortedError(f"cleaning of {tp} did not stop in {timeout_s} s")

    def resume_cleaning(self, tp: TopicPartition) -> None:
        with self._lock:
            entry = self._states.get(tp)
            if entry is None or entry[0] is not CleaningState.PAUSED:
                raise RuntimeError(f"cleaning of {tp} is not paused")
            if entry[1] <= 1:
                del self._states[tp]
            else:
                self._states[tp] = (CleaningState.PAUSED, entry[1] - 1)

    def remove_partition(self, tp: TopicPartition, log_dir: Path) -> None:
        """A deleted partition: forget its state and checkpoint entry."""
        with self._lock:
            self._states.pop(tp, None)
            self.uncleanable.get(log_dir, set()).discard(tp)
            self.update_checkpoints(log_dir, remove=tp)


class LogCleaner:
    """Cleans compacted logs: on demand (``run_once``) or in ``log.cleaner.threads`` threads."""

    def __init__(
        self,
        config: CleanerConfig,
        logs: Callable[[], Mapping[TopicPartition, Log]],
        clock: Clock,
    ) -> None:
        config.validate()
        self.config = config
        self.clock = clock
        self.manager = LogCleanerManager(logs, clock)
        self.throttler = Throttler(config.max_io_bytes_per_second, clock)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._on_demand = Cleaner(config, clock, self.throttler)
        self.results: list[CleaningResult] = []  # the most recent rounds, newest last

    def clean_filthiest_log(self, cleaner: Cleaner) -> CleaningResult | None:
        grabbed = self.manager.grab_filthiest_compacted_log()
        if grabbed is None:
            return None
        tp, log, to_clean = grabbed
        cleaner.check_done = lambda: self.manager.check_cleaning_aborted(tp)
        end: int | None = None
        stats: CleanerStats | None = None
        error: str | None = None
        try:
            end, stats = cleaner.clean(log.cleanable, to_clean)
        except LogCleaningAbortedError as err:
            error = str(err)
        except Exception as err:  # a bad partition must not stop the cleaner thread
            logger.exception("cleaning %s failed; marking it uncleanable", tp)
            self.manager.mark_uncleanable(log.directory.parent, tp)
            error = f"{type(err).__name__}: {err}"
        finally:
            self.manager.done_cleaning(tp, log.directory.parent, end)
        result = CleaningResult(tp, to_clean.first_dirty_offset, end or -1, stats, error)
        self.results = [*self.results[-99:], result]
        if stats is not None:
            logger.info(
                "cleaned %s: offsets [%d, %d), %d -> %d bytes, %d -> %d records in %.1f ms "
                "(%.1f ms building the offset map)",
                tp,
                to_clean.first_dirty_offset,
                stats.end_offset,
                stats.bytes_read,
                stats.bytes_written,
                stats.messages_read,
                stats.messages_written,
                stats.elapsed_ns / 1e6,
                stats.map_elapsed_ns / 1e6,
            )
        return result

    def delete_old_segments(self) -> int:
        """Retention for compacted logs, which the cleaner owns (Kafka's LogCleanerManager)."""
        deleted = 0
        for tp, log in self.manager.deletable_logs():
            try:
                deleted += log.delete_old_segments()
            finally:
                self.manager.done_deleting(tp, log.directory.parent, None)
        return deleted

    def run_once(self, max_rounds: int = 1000) -> list[CleaningResult]:
        """Clean until no log is eligible, then apply retention to compacted logs."""
        out = []
        for _ in range(max_rounds):
            result = self.clean_filthiest_log(self._on_demand)
            if result is None:
                break
            out.append(result)
            if result.stats is None:
                break  # aborted or failed: let the next call retry the others
        self.delete_old_segments()
        return out

    # --- threads ---------------------------------------------------------------------------------

    def start(self) -> None:
        if self._threads or not self.config.enable:
            return
        self._stop.clear()
        for i in range(self.config.num_threads):
            cleaner = Cleaner(self.config, self.clock, self.throttler)
            thread = threading.Thread(
                target=self._loop,
                args=(cleaner,),
                name=f"kafka-log-cleaner-thread-{i}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)

    def _loop(self, cleaner: Cleaner) -> None:
        while not self._stop.is_set():
            try:
                cleaned = self.clean_filthiest_log(cleaner) is not None
                self.delete_old_segments()
            except Exception:  # pragma: no cover - logged, the thread lives on
                logger.exception("log cleaner thread error")
                cleaned = False
            if not cleaned:
                self._stop.wait(self.config.backoff_ms / 1000)

    @property
    def running(self) -> bool:
        return bool(self._threads)

    def shutdown(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()
        self._threads = []

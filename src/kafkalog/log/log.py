"""The partition Log: offsets, roll, flush, truncation and lifecycle (Kafka's UnifiedLog and
LocalLog).

Why: the object users hold. It owns the segment list and the offsets (log start, log end, high
watermark, last stable offset, recovery point), serialises writers on one lock, and lets readers
run without it over immutable snapshots. Appends live in ``write_path``, reads in ``read_path``,
recovery in the loader, producer state in its manager: this class wires them together. Refuses:
retention and compaction (LogManager and the cleaner decide those), and serving anything outside
[log start, log end].
"""

from __future__ import annotations

import logging
import random
import threading
from pathlib import Path

from kafkalog.clock import SYSTEM_CLOCK, Clock
from kafkalog.errors import (
    InvalidOffsetError,
    LogClosedError,
    OffsetOutOfRangeError,
)
from kafkalog.log.config import LogConfig
from kafkalog.log.deleter import SegmentDeleter
from kafkalog.log.leader_epoch import LeaderEpochCache
from kafkalog.log.loader import LoadResult, load
from kafkalog.log.producer_state_manager import (
    ProducerStateConfig,
    ProducerStateManager,
    rebuild_producer_state,
)
from kafkalog.log.read_path import ReadPath
from kafkalog.log.retention import (
    Predicate,
    RetentionReason,
    SegmentView,
    deletable_prefix,
    log_start_offset_breach,
    retention_ms_breach,
    retention_size_breach,
)
from kafkalog.log.standalone import StandaloneState
from kafkalog.log.swap import SegmentReplacement
from kafkalog.log.txn_timeout import timed_out_transactions
from kafkalog.log.write_path import WritePath
from kafkalog.storage import filenames as fn
from kafkalog.storage.atomic import delete_if_exists, fsync_dir
from kafkalog.storage.dir_lock import DirectoryLock
from kafkalog.storage.faults import storage_call
from kafkalog.storage.producer_snapshot import fsync_snapshot
from kafkalog.storage.segment import LogOffsetMetadata, LogSegment
from kafkalog.storage.segments import LogSegments
from kafkalog.types import INT64_MAX, check_int, check_offset

logger = logging.getLogger("kafkalog.log")


class Log(ReadPath, WritePath, SegmentReplacement):
    """One partition's log.

    Invariants: log_start_offset <= last_stable_offset <= high_watermark <= log_end_offset;
    recovery_point <= log_end_offset; segment base offsets strictly increase and the last segment
    is active. Thread-safety: appends, rolls, flushes and truncations take the log lock; reads
    do not.
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clock: Clock,
        loaded: LoadResult,
        epochs: LeaderEpochCache,
        standalone: StandaloneState | None,
        rng: random.Random,
        locks: tuple[DirectoryLock, ...] = (),
    ) -> None:
        self.directory = directory
        self._locks = locks
        self.config = config
        self.clock = clock
        self.leader_epoch_cache = epochs
        self.producer_state: ProducerStateManager = loaded.producer_state
        self.load_result = loaded
        self.segments: LogSegments = loaded.segments
        self._standalone = standalone
        self._rng = rng
        self._lock = threading.RLock()
        self._closed = False
        self._log_start_offset = loaded.log_start_offset
        self._recovery_point = loaded.recovery_point
        active = self._active()
        self._leo = LogOffsetMetadata(loaded.next_offset, active.base_offset, active.size)
        self._high_watermark = self._leo
        self._first_unstable_offset: LogOffsetMetadata | None = None
        self._update_first_unstable_offset()
        self._last_flush_ms = clock.milliseconds()
        self._deleter = SegmentDeleter(clock, config.file_delete_delay_ms)
        self.segments_generation = 0
        self.auto_high_watermark = True  # no replication: everything written is committed

    @classmethod
    def open(
        cls,
        directory: str | Path,
        config: LogConfig | None = None,
        clock: Clock | None = None,
        *,
        recovery_point: int | None = None,
        log_start_offset: int | None = None,
        had_clean_shutdown: bool | None = None,
        rng: random.Random | None = None,
        producer_state_config: ProducerStateConfig | None = None,
        log_dir_locked: bool = False,
    ) -> Log:
        """Create the partition directory, or load and (after a crash) recover it.

        A LogManager passes the recovery point, log start offset and clean-shutdown flag from its
        log directory; on its own a Log keeps them in its partition directory.

        The Log locks its partition directory until it is closed, and, unless the caller holds
        it already (``log_dir_locked``, a LogManager), takes the enclosing log directory's lock
        shared: a second writer, in this process or another, gets LogDirectoryLockedError.
        """
        directory = Path(directory)
        for name, value in (
            ("recovery_point", recovery_point),
            ("log_start_offset", log_start_offset),
        ):
            if value is not None:
                check_offset(name, value)
        storage_call(directory.mkdir, 0o777, True, True, what=f"creating {directory}")
        locks = DirectoryLock.for_partition(directory, log_dir_locked=log_dir_locked)
        try:
            config = config or LogConfig()
            clock = clock or SYSTEM_CLOCK
            standalone = None
            if had_clean_shutdown is None:
                standalone = StandaloneState(directory)
                state = standalone.read()
                had_clean_shutdown = state.had_clean_shutdown
                if recovery_point is None:
                    recovery_point = state.recovery_point
                if log_start_offset is None:
                    log_start_offset = state.log_start_offset
            epochs = LeaderEpochCache(directory)
            rng = rng or random.Random()
            loaded = load(
                directory,
                config,
                clock,
                epochs,
                had_clean_shutdown=had_clean_shutdown,
                recovery_point=recovery_point or 0,
                log_start_offset=log_start_offset or 0,
                rng=rng,
                producer_state_config=producer_state_config,
            )
            log = cls(directory, config, clock, loaded, epochs, standalone, rng, locks)
            if standalone is not None:
                standalone.save(log.recovery_point, log.log_start_offset)
            return log
        except BaseException:
            DirectoryLock.release_all(locks)
            raise

    # --- offsets -------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._leo.message_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark.message_offset

    @property
    def last_stable_offset(self) -> int:
        """The offset below which every transaction is decided (and replicated): READ_COMMITTED
        readers stop here."""
        first = self._first_unstable_offset
        hw = self.high_watermark
        return first.message_offset if first is not None and first.message_offset < hw else hw

    def _last_stable_offset_metadata(self) -> LogOffsetMetadata:
        first, hw = self._first_unstable_offset, self._high_watermark
        if first is None or first.message_offset >= hw.message_offset:
            return hw
        if first.message_offset_only:
            with self._lock:
                resolved = self._offset_metadata(first.message_offset)
                if self._first_unstable_offset == first:
                    self._first_unstable_offset = resolved
                return resolved
        return first

    def _update_first_unstable_offset(self) -> None:
        first = self.producer_state.first_unstable_offset()
        if first is not None and (
            first.message_offset_only or first.message_offset < self._log_start_offset
        ):
            first = self._offset_metadata(max(first.message_offset, self._log_start_offset))
        self._first_unstable_offset = first

    def _set_high_watermark(self, metadata: LogOffsetMetadata) -> None:
        self._high_watermark = metadata
        self.producer_state.on_high_watermark_updated(metadata.message_offset)
        self._update_first_unstable_offset()

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_in_bytes(self) -> int:
        return self.segments.size_in_bytes()

    @property
    def number_of_segments(self) -> int:
        return len(self.segments)

    def _active(self) -> LogSegment:
        seg = self.segments.last_segment()
        assert seg is not None, "a loaded log always has an active segment"
        return seg

    @property
    def active_segment(self) -> LogSegment:
        return self._active()

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped to [log start, log end] (a follower's update)."""
        check_int("high watermark", offset, -INT64_MAX - 1, INT64_MAX)
        with self._lock:
            offset = min(max(offset, self._log_start_offset), self.log_end_offset)
            self._set_high_watermark(self._offset_metadata(offset))
            return offset

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.directory} is closed")

    def flush_if_due(self) -> bool:
        """Apply ``flush.ms`` now (the LogManager's flusher calls this periodically)."""
        with self._lock:
            if (
                self._closed
                or self.clock.milliseconds() - self._last_flush_ms < self.config.flush_ms
            ):
                return False
            self.flush()
            return True

    # --- roll ----------------------------------------------------------------------------------

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected_next_offset, log end offset)."""
        if expected_next_offset is not None:
            check_offset("expected_next_offset", expected_next_offset)
        with self._lock:
            self._check_open()
            new_base = max(expected_next_offset or 0, self.log_end_offset)
            active = self._active()
            existing = self.segments.get(new_base)
            if existing is not None:
                if existing is active and active.size == 0:
                    self.segments.remove(new_base)
                    active.delete_files()  # KAFKA-6388: replace an empty active segment
                else:
                    raise InvalidOffsetError(
                        f"segment {new_base} already exists in {self.directory}"
                    )
            elif new_base < active.base_offset:
                raise InvalidOffsetError(
                    f"cannot roll to {new_base}, below the active segment base {active.base_offset}"
                )
            else:
                active.on_become_inactive()
            for path in (
                fn.log_file(self.directory, new_base),
                fn.offset_index_file(self.directory, new_base),
                fn.time_index_file(self.directory, new_base),
                fn.transaction_index_file(self.directory, new_base),
            ):
                delete_if_exists(path)
            seg = self._new_segment(new_base)
            self.segments.add(seg)
            old_end = self.log_end_offset
            # a roll past the log end leaves a gap: the next offset given is the new base, so
            # no offset can ever be below its segment's base
            self._leo = LogOffsetMetadata(new_base, new_base, 0)
            # a snapshot at the new base lets recovery of this segment start from it
            self.producer_state.update_map_end_offset(new_base)
            snapshot = self.producer_state.take_snapshot(sync=False)
            if self._high_watermark.message_offset == old_end:
                self._set_high_watermark(self._leo)
            if snapshot is not None:
                fsync_snapshot(snapshot)
            self.flush(new_base)
            if self._standalone is not None:  # a LogManager prunes after its checkpoint
                self._save_standalone_state()
                self.delete_snapshots_after_recovery_point_checkpoint()
            return seg

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment(
            self.directory,
            base_offset,
            self.config.segment_params(),
            self.clock,
            roll_jitter_ms=self.config.random_segment_jitter(self._rng),
        )

    def _drop_segment(self, seg: LogSegment) -> None:
        """Take a segment out of the list now; its files go after ``file.delete.delay.ms``."""
        self.segments.remove(seg.base_offset)
        self.segments_generation += 1
        self._deleter.schedule(seg)

    def _save_standalone_state(self) -> None:
        if self._standalone is not None:
            self._standalone.save(self._recovery_point, self._log_start_offset)

    # --- flush ---------------------------------------------------------------------------------

    def flush(self, offset: int | None = None) -> None:
        """fsync every segment overlapping [recovery point, offset) and advance the recovery point
        (default: everything, up to the log end offset)."""
        if offset is not None:
            check_offset("flush offset", offset)
        with self._lock:
            self._check_open()
            offset = self.log_end_offset if offset is None else min(offset, self.log_end_offset)
            if offset <= self._recovery_point:
                return
            old = self._recovery_point
            touched_new = False
            for seg in self.segments.values(from_offset=old, to_offset=offset):
                seg.flush()
                touched_new |= seg.base_offset >= old
            if touched_new:
                fsync_dir(self.directory)
            self._recovery_point = offset
            self._last_flush_ms = self.clock.milliseconds()

    # --- truncation and log start ----------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove every offset >= ``offset`` (False if none); a batch holding it goes whole."""
        check_offset("truncation offset", offset)
        with self._lock:
            self._check_open()
            if offset >= self.log_end_offset:
                self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
                return False
            first = self.segments.first_segment()
            if first is None or offset < first.base_offset:
                self.truncate_fully_and_start_at(offset)
                return True
            self.segments_generation += 1  # a cleaning round must not swap in what we cut
            for seg in self.segments.higher_segments(offset):
                self._drop_segment(seg)
            active = self._active()
            offset = min(offset, active.base_offset_of_batch_holding(offset))  # a batch goes whole
            active.truncate_to(offset)
            active.resize_indexes(self.config.segment_index_bytes)
            self._leo = LogOffsetMetadata(offset, active.base_offset, active.size)
            self.leader_epoch_cache.truncate_from_end(offset)
            self._log_start_offset = min(offset, self._log_start_offset)
            self._rebuild_producer_state(offset)
            if self._high_watermark.message_offset >= offset:
                self._set_high_watermark(self._leo)
            self._recovery_point = min(self._recovery_point, offset)
            self._save_standalone_state()
            return True

    def _rebuild_producer_state(self, last_offset: int) -> None:
        rebuild_producer_state(
            self.producer_state,
            self.segments,
            log_start_offset=self._log_start_offset,
            last_offset=last_offset,
            now=self.clock.milliseconds(),
            reload_from_clean_shutdown=False,
        )
        self._update_first_unstable_offset()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start empty at ``offset``."""
        check_offset("new log start offset", offset)
        with self._lock:
            self._check_open()
            for seg in list(self.segments):
                self._drop_segment(seg)
            seg = self._new_segment(offset)
            self.segments.add(seg)
            self.leader_epoch_cache.clear()
            self._log_start_offset = offset
            self._leo = LogOffsetMetadata(offset, offset, 0)
            self.producer_state.truncate_fully_and_start_at(offset)
            self._rebuild_producer_state(offset)
            self._set_high_watermark(self._leo)
            self._recovery_point = offset
            self._save_standalone_state()

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """DeleteRecords: move the log start offset up to ``offset`` (<= high watermark)."""
        check_offset("log start offset", offset)
        with self._lock:
            self._check_open()
            if offset > self.high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot move the log start offset to {offset}, above the high watermark "
                    f"{self.high_watermark}"
                )
            return self._increment_start_offset(offset)

    def _increment_start_offset(self, offset: int) -> bool:
        if offset <= self._log_start_offset:
            return False
        self._log_start_offset = offset
        if self._high_watermark.message_offset < offset:
            self._high_watermark = self._offset_metadata(offset)
        self._recovery_point = max(self._recovery_point, offset)
        self.leader_epoch_cache.truncate_from_start(offset)
        self.producer_state.on_log_start_offset_incremented(offset)
        self._update_first_unstable_offset()
        self._save_standalone_state()  # Kafka waits for its 60 s checkpoint; we need not
        return True

    # --- retention -----------------------------------------------------------------------------

    def delete_old_segments(self) -> int:
        """Apply retention (Kafka's UnifiedLog.deleteOldSegments): segments wholly below the log
        start offset always go; with ``cleanup.policy`` delete, so do those breaching
        ``retention.bytes`` and then ``retention.ms``. Files are renamed ``.deleted`` and removed
        after ``file.delete.delay.ms``, so reads in progress finish. Returns how many segments
        went."""
        deleted = self._delete_breached(RetentionReason.LOG_START_OFFSET_BREACH)
        if self.config.delete:
            deleted += self._delete_breached(RetentionReason.RETENTION_SIZE_BREACH)
            deleted += self._delete_breached(RetentionReason.RETENTION_MS_BREACH)
        self._deleter.run()
        return deleted

    def _delete_breached(self, reason: RetentionReason) -> int:
        with self._lock:
            self._check_open()
            segments = list(self.segments)
            views = [SegmentView(s.base_offset, s.size, s.largest_timestamp()) for s in segments]
            predicate: Predicate | None
            if reason is RetentionReason.LOG_START_OFFSET_BREACH:
                predicate = log_start_offset_breach(self._log_start_offset)
            elif reason is RetentionReason.RETENTION_SIZE_BREACH:
                total = sum(v.size for v in views)
                predicate = retention_size_breach(total, self.config.retention_bytes)
            else:
                now = self.clock.milliseconds()
                predicate = retention_ms_breach(now, self.config.retention_ms)
            if predicate is None:
                return 0
            count = deletable_prefix(
                views,
                predicate,
                high_watermark=self.high_watermark,
                log_end_offset=self.log_end_offset,
            )
            if count == 0:
                return 0
            doomed = segments[:count]
            if count == len(segments):  # a log always keeps one segment: roll a new one first
                fresh = self.roll()
                if doomed[-1].base_offset == fresh.base_offset:
                    doomed = doomed[:-1]
            for seg in doomed:
                self._drop_segment(seg)
                snapshot = self.producer_state.mark_snapshot_for_deletion(seg.base_offset)
                if snapshot is not None:
                    self._deleter.schedule_file(snapshot)
            first = self.segments.first_segment()
            assert first is not None
            self._increment_start_offset(first.base_offset)
            logger.info(
                "deleted %d segment(s) of %s (%s); log start offset %d",
                count,
                self.directory.name,
                reason.value,
                self._log_start_offset,
            )
            return count

    def delete_snapshots_after_recovery_point_checkpoint(self) -> int:
        """Drop producer snapshots no recovery can need: those below both the second-to-last
        segment's base and the base of the segment before the recovery point (Kafka prunes after
        each recovery-point checkpoint, so a snapshot per roll does not pile up). Returns the
        lowest offset kept."""
        with self._lock:
            active = self._active().base_offset
            below_active = self.segments.floor_segment(active - 1) if active > 0 else None
            two_segments = below_active.base_offset if below_active else active
            point = self._recovery_point
            below_point = self.segments.floor_segment(point - 1) if point > 0 else None
            keep = min(below_point.base_offset if below_point else point, two_segments)
            self.producer_state.delete_snapshots_before(keep)
            return keep

    def remove_expired_producers(self) -> list[int]:
        """Drop producers idle for ``producer.id.expiration.ms`` with no open transaction (the
        LogManager runs this every ``producer.id.expiration.check.interval.ms``)."""
        with self._lock:
            self._check_open()
            return self.producer_state.remove_expired_producers(self.clock.milliseconds())

    def abort_timed_out_transactions(self, timeout_ms: int) -> list[int]:
        """Write an ABORT marker for every transaction idle for ``timeout_ms`` (Kafka's
        ``transaction.timeout.ms``; log.txn_timeout); returns the producers aborted."""
        check_int("timeout_ms", timeout_ms, 0, INT64_MAX)
        with self._lock:
            self._check_open()
            doomed = timed_out_transactions(
                self.producer_state, self.segments, self.clock.milliseconds(), timeout_ms
            )
            for txn in doomed:
                self.append_end_txn_marker(
                    txn.producer_id, txn.producer_epoch, "abort", txn.coordinator_epoch
                )
                msg = "aborted the idle transaction of producer %d in %s"
                logger.warning(msg, txn.producer_id, self.directory.name)
        return [txn.producer_id for txn in doomed]

    # --- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Flush everything, trim the files, and leave the clean-shutdown marker.

        If the disk fails meanwhile (KafkaStorageError), every file is still closed and the
        directory unlocked, and no marker is left: the next open recovers, as after a crash."""
        with self._lock:
            if self._closed:
                return
            try:
                # a snapshot at the log end spares the next open a scan of the log
                self.producer_state.take_snapshot()
                self.flush()
                self._active().flush()  # as Kafka's shutdown: this creates the active indexes
                failed: BaseException | None = None
                for seg in self.segments:
                    try:
                        seg.close()
                    except BaseException as err:
                        failed = failed or err
                if failed is not None:
                    raise failed
                self._deleter.run(force=True)
                if self._standalone is not None:
                    self._standalone.mark_clean_shutdown(
                        self._recovery_point, self._log_start_offset
                    )
            except BaseException:
                for seg in self.segments:
                    seg.close_handlers()
                raise
            finally:
                self._closed = True
                self._release_locks()

    def close_without_flush(self) -> None:
        """Release file handles as after a crash: no flush, no trim, no marker (tests, tools)."""
        with self._lock:
            for seg in self.segments:
                seg.close_handlers()
            self._closed = True
            self._release_locks()

    def _release_locks(self) -> None:
        DirectoryLock.release_all(self._locks)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Log({self.directory}, start={self.log_start_offset}, end={self.log_end_offset}, "
            f"segments={len(self.segments)})"
        )

"""The partition Log: what the records mean, over the files LocalLog keeps (Kafka's UnifiedLog).

Why: the object users hold. It owns the log start offset, high watermark and last stable offset
(Watermarks), producer state and leader epochs, and composes the parts that do the work: the
LocalLog (segments, log end, recovery point, roll, flush, truncation), a LogAppender (every
append, under the log lock), a LogReader (every read, without it) and a CleanableLog (what the
cleaner may touch), and with tiered storage (KIP-405) its Tiering. Refuses: retention and
compaction policy (LogManager and the cleaner decide those), copying to remote storage, and
serving anything outside [log start, log end].
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Iterable
from pathlib import Path

from kafkalog.clock import SYSTEM_CLOCK, Clock
from kafkalog.errors import LogClosedError, OffsetOutOfRangeError
from kafkalog.log.append_info import LogAppendInfo
from kafkalog.log.cleanable import CleanableLog
from kafkalog.log.config import LogConfig
from kafkalog.log.leader_epoch import LeaderEpochCache
from kafkalog.log.loader import LoadResult, load
from kafkalog.log.local_log import LocalLog
from kafkalog.log.producer_batches import ProducerFields
from kafkalog.log.producer_state import ProducerPosition, ProducerStateEntry, TxnMetadata
from kafkalog.log.producer_state_manager import (
    ProducerStateConfig,
    rebuild_producer_state,
)
from kafkalog.log.read_path import LogReader
from kafkalog.log.retention_pass import RetentionPass
from kafkalog.log.standalone import StandaloneState
from kafkalog.log.tiering import Tiering
from kafkalog.log.watermarks import Watermarks
from kafkalog.log.write_path import Buffer, LogAppender
from kafkalog.records import MemoryRecords, Record
from kafkalog.storage.dir_lock import DirectoryLock
from kafkalog.storage.faults import storage_call
from kafkalog.storage.file_records import TimestampAndOffset
from kafkalog.storage.producer_snapshot import fsync_snapshot
from kafkalog.storage.segment import FetchDataInfo, LogSegment
from kafkalog.storage.segments import LogSegments
from kafkalog.types import (
    INT64_MAX,
    CompressionType,
    ControlRecordType,
    IsolationLevel,
    check_int,
    check_offset,
)

logger = logging.getLogger("kafkalog.log")


class Log:
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
        remote: bool = False,
    ) -> None:
        self._locks = locks
        self._tiering = Tiering(directory.name, remote, lambda: self.config, lambda: epochs.entries)
        self._epochs = epochs
        self._producer_state = loaded.producer_state
        self._load_result = loaded
        self._standalone = standalone
        self._lock = threading.RLock()
        self._closed = False
        self._local = LocalLog(directory, config, clock, loaded, rng)
        self._marks = Watermarks(
            self._local, self._producer_state, loaded.log_start_offset, self._lock
        )
        self._appender = LogAppender(
            self._local,
            self._marks,
            self._producer_state,
            epochs,
            self._lock,
            self._check_open,
            self.roll,
            self.flush,
        )
        self._reader = LogReader(
            self._local, self._marks, epochs, lambda: self._closed, self._tiering.state
        )
        self._cleanable = CleanableLog(
            self._local, self._producer_state, self._lock, self._check_open
        )
        self._retention = RetentionPass(
            self._local,
            self._marks,
            self._producer_state,
            self._lock,
            self._check_open,
            self.roll,
            self._increment_start_offset,
            self._tiering.copied_offset_bounding_retention,
        )

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
        remote_storage_system_enable: bool = False,
    ) -> Log:
        """Create the partition directory, or load and (after a crash) recover it.

        A LogManager passes the recovery point, log start offset and clean-shutdown flag from its
        log directory; on its own a Log keeps them in its partition directory.

        The Log locks its partition directory until it is closed, and, unless the caller holds
        it already (``log_dir_locked``, a LogManager), takes the enclosing log directory's lock
        shared: a second writer, in this process or another, gets LogDirectoryLockedError.

        ``remote_storage_system_enable``: the broker's ``remote.log.storage.system.enable``
        (False for an internal topic); see ``Tiering.enabled``.
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
                remote_log_enabled=remote_storage_system_enable and config.remote_storage_enable,
            )
            remote = remote_storage_system_enable
            log = cls(directory, config, clock, loaded, epochs, standalone, rng, locks, remote)
            if standalone is not None:
                standalone.save(log.recovery_point, log.log_start_offset)
            return log
        except BaseException:
            DirectoryLock.release_all(locks)
            raise

    # --- what the Log is made of (read-only) ------------------------------------------------------

    @property
    def directory(self) -> Path:
        return self._local.directory

    @property
    def config(self) -> LogConfig:
        return self._local.config

    def update_config(self, config: LogConfig) -> None:
        """Apply a topic's new config to the open log (an altered topic config, as Kafka's
        UnifiedLog.updateConfig): taken under the log lock, so no append sees half of each."""
        with self._lock:
            self._local.update_config(config)

    @property
    def segments(self) -> LogSegments:
        return self._local.segments

    # --- producers and leader epochs: copies, taken while appends go on -------------------------

    def producers(self) -> dict[int, ProducerStateEntry]:
        """The active idempotent and transactional producers by id."""
        return dict(self._producer_state.producers)  # one C call: never half an append

    def producer_entry(self, producer_id: int) -> ProducerStateEntry | None:
        """The producer's latest state (epoch, sequences, open transaction), or None."""
        return self._producer_state.last_entry(producer_id)

    def ongoing_transactions(self) -> list[TxnMetadata]:
        """The transactions open in this partition, oldest first."""
        return self._producer_state.ongoing_transactions()

    def producer_snapshot_offsets(self) -> list[int]:
        """The offsets of the producer-state snapshots on disk, ascending."""
        return self._producer_state.snapshot_offsets()

    def leader_epochs(self) -> list[tuple[int, int]]:
        """(epoch, start offset) of every leader epoch the log holds, oldest first."""
        return list(self._epochs.entries)

    def latest_leader_epoch(self) -> int:
        """The partition's current leader epoch (0 for a log that never had one)."""
        return self._epochs.leader_epoch()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (the largest epoch <= ``epoch``, the offset it ends at)."""
        return self._epochs.end_offset_for(epoch, self.log_end_offset)

    @property
    def load_result(self) -> LoadResult:
        """What opening the log found and repaired."""
        return self._load_result

    @property
    def cleanable(self) -> CleanableLog:
        """The narrow view the cleaner works through."""
        return self._cleanable

    # --- offsets -------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._marks.log_start_offset

    @property
    def local_log_start_offset(self) -> int:
        """Kafka's localLogStartOffset: below it, records are read from remote storage."""
        return self._reader.local_log_start_offset()

    @property
    def tiering(self) -> Tiering:
        """The log's remote side (KIP-405), which the remote log manager sets."""
        return self._tiering

    @property
    def log_end_offset(self) -> int:
        return self._local.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._marks.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """The offset below which every transaction is decided (and replicated): READ_COMMITTED
        readers stop here."""
        return self._marks.last_stable_offset

    @property
    def recovery_point(self) -> int:
        return self._local.recovery_point

    @property
    def size_in_bytes(self) -> int:
        return self._local.segments.size_in_bytes()

    @property
    def number_of_segments(self) -> int:
        return len(self._local.segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._local.active_segment

    @property
    def auto_high_watermark(self) -> bool:
        """True (the default): the high watermark follows every append, as nothing replicates.
        Set False to move it only with ``update_high_watermark``, as a leader waiting for
        followers would."""
        return self._marks.auto_high_watermark

    @auto_high_watermark.setter
    def auto_high_watermark(self, value: bool) -> None:
        self._marks.auto_high_watermark = bool(value)

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped to [log start, log end] (a follower's update)."""
        check_int("high watermark", offset, -INT64_MAX - 1, INT64_MAX)
        with self._lock:
            offset = min(max(offset, self.log_start_offset), self.log_end_offset)
            self._marks.set_high_watermark(self._local.offset_metadata(offset))
            return offset

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.directory} is closed")

    # --- appends (LogAppender) -------------------------------------------------------------------

    def append(
        self,
        records: Iterable[Record],
        *,
        compression: CompressionType | str | None = None,
        leader_epoch: int | None = None,
        producer: ProducerFields | None = None,
    ) -> LogAppendInfo:
        """Append Python records as the leader (LogAppender.append): ``None`` timestamps become
        the clock's time; ``producer`` makes the append idempotent (and transactional). The
        batches carry ``leader_epoch``, by default the partition's latest (0 in a new log)."""
        return self._appender.append(
            records, compression=compression, leader_epoch=leader_epoch, producer=producer
        )

    def append_records(
        self, records: MemoryRecords | Buffer, *, leader_epoch: int | None = None
    ) -> LogAppendInfo:
        """Append batches a producer built, as the leader: validate, assign offsets, write."""
        return self._appender.append_records(records, leader_epoch=leader_epoch)

    def append_as_follower(self, records: MemoryRecords | Buffer) -> LogAppendInfo:
        """Append replicated batches verbatim: offsets, epochs and timestamps are kept."""
        return self._appender.append_as_follower(records)

    def append_end_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        marker: ControlRecordType | str,
        coordinator_epoch: int = 0,
        *,
        leader_epoch: int | None = None,
        timestamp: int | None = None,
    ) -> LogAppendInfo:
        """Write a COMMIT or ABORT marker for the producer's transaction (the transaction
        coordinator's WriteTxnMarkers). An ABORT closing data adds a ``.txnindex`` entry."""
        return self._appender.append_end_txn_marker(
            producer_id,
            producer_epoch,
            marker,
            coordinator_epoch,
            leader_epoch=leader_epoch,
            timestamp=timestamp,
        )

    def producer_position(self, producer_id: int) -> ProducerPosition | None:
        """Where ``producer_id`` stands in this partition (its epoch, next sequence, open
        transaction, last marker's coordinator epoch); None if the log has no state for it."""
        check_int("producer_id", producer_id, 0, INT64_MAX)
        with self._lock:
            entry = self._producer_state.last_entry(producer_id)
            return None if entry is None else entry.position

    # --- reads (LogReader) -----------------------------------------------------------------------

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        max_offset: int | None = None,
        min_one_message: bool = True,
        isolation: IsolationLevel | None = None,
    ) -> FetchDataInfo:
        """Whole batches from ``start_offset`` as a file slice, up to ``max_bytes``, never past
        the high watermark (READ_COMMITTED: the last stable offset) or ``max_offset``."""
        return self._reader.read(start_offset, max_bytes, max_offset, min_one_message, isolation)

    def read_records(
        self,
        start_offset: int,
        max_bytes: int = 1 << 20,
        isolation: IsolationLevel | None = None,
    ) -> list[Record]:
        """The records at or after ``start_offset`` in one read (no control records; with
        READ_COMMITTED, no aborted ones)."""
        return self._reader.read_records(start_offset, max_bytes, isolation)

    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """The first record with timestamp >= ``timestamp`` (Kafka's
        UnifiedLog.fetchOffsetByTimestamp), or None."""
        return self._reader.offset_for_timestamp(timestamp)

    def list_offsets(
        self, target: int, isolation: IsolationLevel | None = None
    ) -> TimestampAndOffset | None:
        """ListOffsets: -2 earliest, -1 latest (per isolation level), -3 max timestamp, or a
        timestamp >= 0."""
        return self._reader.list_offsets(target, isolation)

    # --- roll and flush --------------------------------------------------------------------------

    def flush_if_due(self) -> bool:
        """Apply ``flush.ms`` now (the LogManager's flusher calls this periodically)."""
        with self._lock:
            due = (
                self._local.clock.milliseconds() - self._local.last_flush_ms >= self.config.flush_ms
            )
            if self._closed or not due:
                return False
            self.flush()
            return True

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected_next_offset, log end offset)."""
        if expected_next_offset is not None:
            check_offset("expected_next_offset", expected_next_offset)
        with self._lock:
            self._check_open()
            new_base = max(expected_next_offset or 0, self.log_end_offset)
            seg, old_end = self._local.roll(new_base)
            # a snapshot at the new base lets recovery of this segment start from it
            self._producer_state.update_map_end_offset(new_base)
            snapshot = self._producer_state.take_snapshot(sync=False)
            self._marks.follow_log_end_from(old_end)
            if snapshot is not None:
                fsync_snapshot(snapshot)
            self.flush(new_base)
            if self._standalone is not None:  # a LogManager prunes after its checkpoint
                self._save_standalone_state()
                self.delete_snapshots_after_recovery_point_checkpoint()
            return seg

    def flush(self, offset: int | None = None) -> None:
        """fsync every segment overlapping [recovery point, offset) and advance the recovery point
        (default: everything, up to the log end offset)."""
        if offset is not None:
            check_offset("flush offset", offset)
        with self._lock:
            self._check_open()
            self._local.flush(self.log_end_offset if offset is None else offset)

    def _save_standalone_state(self) -> None:
        if self._standalone is not None:
            self._standalone.save(self.recovery_point, self.log_start_offset)

    # --- truncation and log start ----------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove every offset >= ``offset`` (False if none); a batch holding it goes whole."""
        check_offset("truncation offset", offset)
        with self._lock:
            self._check_open()
            if offset >= self.log_end_offset:
                self._epochs.truncate_from_end(self.log_end_offset)
                return False
            first = self.segments.first_segment()
            if first is None or offset < first.base_offset:
                self.truncate_fully_and_start_at(offset)
                return True
            offset = self._local.truncate_to(offset)
            self._epochs.truncate_from_end(offset)
            self._marks.log_start_offset = min(offset, self.log_start_offset)
            self._rebuild_producer_state(offset)
            self._marks.follow_log_end_from(offset)
            self._save_standalone_state()
            return True

    def _rebuild_producer_state(self, last_offset: int) -> None:
        rebuild_producer_state(
            self._producer_state,
            self.segments,
            log_start_offset=self.log_start_offset,
            last_offset=last_offset,
            now=self._local.clock.milliseconds(),
            reload_from_clean_shutdown=False,
        )
        self._marks.update_first_unstable_offset()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start empty at ``offset``."""
        check_offset("new log start offset", offset)
        with self._lock:
            self._check_open()
            self._local.truncate_fully_and_start_at(offset)
            self._epochs.clear()
            self._marks.log_start_offset = offset
            self._producer_state.truncate_fully_and_start_at(offset)
            self._rebuild_producer_state(offset)
            self._marks.set_high_watermark(self._local.log_end_offset_metadata)
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
        if not self._marks.increment_log_start_offset(offset):
            return False
        self._local.raise_recovery_point(offset)
        self._epochs.truncate_from_start(offset)
        self._save_standalone_state()  # Kafka waits for its 60 s checkpoint; we need not
        return True

    # --- retention -----------------------------------------------------------------------------

    def delete_old_segments(self) -> int:
        """Apply retention (Kafka's UnifiedLog.deleteOldSegments): segments wholly below the log
        start offset always go; with ``cleanup.policy`` delete, so do those breaching
        ``retention.bytes`` and then ``retention.ms``. Files are renamed ``.deleted`` and removed
        after ``file.delete.delay.ms``, so reads in progress finish. Returns how many segments
        went."""
        return self._retention.run(self.config.delete)

    def delete_snapshots_after_recovery_point_checkpoint(self) -> int:
        """Drop producer snapshots no recovery can need: those below both the second-to-last
        segment's base and the base of the segment before the recovery point (Kafka prunes after
        each recovery-point checkpoint, so a snapshot per roll does not pile up). Returns the
        lowest offset kept."""
        with self._lock:
            keep = self._tiering.snapshots_kept_from(self._local.lowest_offset_recovery_may_need())
            self._producer_state.delete_snapshots_before(keep)
            return keep

    def remove_expired_producers(self) -> list[int]:
        """Drop producers idle for ``producer.id.expiration.ms`` with no open transaction (the
        LogManager runs this every ``producer.id.expiration.check.interval.ms``)."""
        with self._lock:
            self._check_open()
            return self._producer_state.remove_expired_producers(self._local.clock.milliseconds())

    def abort_timed_out_transactions(self, timeout_ms: int) -> list[int]:
        """Write an ABORT marker for every transaction idle for ``timeout_ms`` (Kafka's
        ``transaction.timeout.ms``); returns the producers aborted."""
        return self._appender.abort_timed_out_transactions(timeout_ms)

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
                self._producer_state.take_snapshot()
                self.flush()
                self._local.close()
                if self._standalone is not None:
                    self._standalone.mark_clean_shutdown(self.recovery_point, self.log_start_offset)
            except BaseException:
                self._local.close_handlers()
                raise
            finally:
                self._closed = True
                DirectoryLock.release_all(self._locks)

    def close_without_flush(self) -> None:
        """Release file handles as after a crash: no flush, no trim, no marker (tests, tools)."""
        with self._lock:
            self._local.close_handlers()
            self._closed = True
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

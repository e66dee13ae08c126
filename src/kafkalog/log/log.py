"""The partition Log: append, read, roll, flush, truncate and offsets (spec §5-§8, §10.3, §11).

Why: the object users hold. It owns the segment list and the offsets (log start, log end, high
watermark, recovery point), serialises writers on one lock, and lets readers run without it
over immutable snapshots. Recovery is the loader's job, validation the validator's, the roll
decision a pure function: this class wires them together. Refuses: retention and compaction
(LogManager and the cleaner decide those), and serving anything outside [log start, log end].
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterable
from pathlib import Path

from kafkalog.clock import SYSTEM_CLOCK, Clock
from kafkalog.errors import (
    InvalidArgumentError,
    InvalidOffsetError,
    InvalidRecordError,
    LogClosedError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    UnexpectedAppendOffsetError,
)
from kafkalog.log.append_info import LogAppendInfo
from kafkalog.log.config import LogConfig
from kafkalog.log.deleter import SegmentDeleter
from kafkalog.log.leader_epoch import LeaderEpochCache
from kafkalog.log.loader import LoadResult, load
from kafkalog.log.producer_batches import build_batches, shallow_offset_of
from kafkalog.log.read_path import ReadPath
from kafkalog.log.roll import RollParams, SegmentFacts, new_segment_base, should_roll
from kafkalog.log.standalone import StandaloneState
from kafkalog.log.validator import AppendOrigin, analyze, assign_offsets, check_record_values
from kafkalog.records import MemoryRecords, Record
from kafkalog.storage import filenames as fn
from kafkalog.storage.atomic import delete_if_exists, fsync_dir
from kafkalog.storage.segment import LogOffsetMetadata, LogSegment
from kafkalog.storage.segments import LogSegments
from kafkalog.types import NO_TIMESTAMP, CompressionType, TimestampType


class Log(ReadPath):
    """One partition's log.

    Invariants: log_start_offset <= high_watermark <= log_end_offset; recovery_point <=
    log_end_offset; segment base offsets strictly increase and the last segment is active.
    Thread-safety: appends, rolls, flushes and truncations take the log lock; reads do not.
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
    ) -> None:
        self.directory = directory
        self.config = config
        self.clock = clock
        self.leader_epoch_cache = epochs
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
        self._last_flush_ms = clock.milliseconds()
        self._deleter = SegmentDeleter(clock, config.file_delete_delay_ms)
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
    ) -> Log:
        """Create the partition directory, or load and (after a crash) recover it.

        A LogManager passes the recovery point, log start offset and clean-shutdown flag from its
        log directory; on its own a Log keeps them in its partition directory.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        config = config or LogConfig()
        clock = clock or SYSTEM_CLOCK
        standalone = None
        if had_clean_shutdown is None:
            standalone = StandaloneState(directory)
            state = standalone.read()
            had_clean_shutdown = state.had_clean_shutdown
            recovery_point = state.recovery_point if recovery_point is None else recovery_point
            log_start_offset = (
                state.log_start_offset if log_start_offset is None else log_start_offset
            )
        epochs = LeaderEpochCache(directory)
        loaded = load(
            directory,
            config,
            clock,
            epochs,
            had_clean_shutdown=had_clean_shutdown,
            recovery_point=recovery_point or 0,
            log_start_offset=log_start_offset or 0,
            rng=rng or random.Random(),
        )
        log = cls(directory, config, clock, loaded, epochs, standalone, rng or random.Random())
        if standalone is not None:
            standalone.save(log.recovery_point, log.log_start_offset)
        return log

    # --- offsets -------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._leo.message_offset

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._high_watermark.message_offset

    @property
    def last_stable_offset(self) -> int:
        return self.high_watermark

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
        with self._lock:
            offset = min(max(offset, self._log_start_offset), self.log_end_offset)
            self._high_watermark = self._offset_metadata(offset)
            return offset

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.directory} is closed")

    # --- appends -------------------------------------------------------------------------------

    def append(
        self,
        records: Iterable[Record],
        *,
        compression: CompressionType | str | None = None,
        leader_epoch: int = 0,
    ) -> LogAppendInfo:
        """Append Python records as the leader: check them, give them offsets, write them.

        ``None`` timestamps become the clock's time (as a Java producer does). Records that do not
        fit in one batch of ``max.message.bytes`` are split over several batches.
        """
        recs = list(records)
        if not recs:
            raise InvalidRecordError("append needs at least one record")
        codec = self.config.target_compression
        if codec is None:
            codec = CompressionType.parse(compression)
        with self._lock:
            self._check_open()
            now = self.clock.milliseconds()
            check_record_values(self.config, recs, now)
            log_append = self.config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
            first = self.log_end_offset
            chunks = build_batches(self.config, recs, first, now, codec, leader_epoch)
            last = first + len(recs) - 1
            for chunk in chunks:  # check all before writing any: all or nothing
                if len(chunk) > self.config.segment_bytes:
                    raise RecordBatchTooLargeError(
                        f"a batch of {len(chunk)} bytes is larger than segment.bytes "
                        f"{self.config.segment_bytes}"
                    )
            # each batch is its own segment append, so a long list may span segments
            for chunk in chunks:
                head = MemoryRecords(chunk).first_batch()
                assert head is not None
                self._write(
                    chunk,
                    head.base_offset,
                    head.last_offset,
                    head.max_timestamp,
                    head.last_offset,
                    [(leader_epoch, head.base_offset)],
                )
            data_size = sum(len(c) for c in chunks)
            if log_append:
                max_ts, shallow = now, last
            else:
                ts = [r.timestamp if r.timestamp is not None else now for r in recs]
                max_ts = max(ts)
                shallow = last if len(chunks) == 1 else shallow_offset_of(chunks, max_ts)
            return LogAppendInfo(
                first,
                last,
                max_ts,
                shallow,
                now if log_append else NO_TIMESTAMP,
                self._log_start_offset,
                len(recs),
                len(chunks),
                data_size,
                codec,
                codec,
                leader_epoch,
            )

    def append_records(
        self, records: MemoryRecords | bytes, *, leader_epoch: int = 0
    ) -> LogAppendInfo:
        """Append batches a producer built, as the leader: validate, assign offsets, write."""
        data = records.buffer if isinstance(records, MemoryRecords) else memoryview(records)
        analysis = analyze(data, self.config, AppendOrigin.CLIENT)
        if not analysis.batches:
            raise InvalidRecordError("the append holds no complete record batch")
        with self._lock:
            self._check_open()
            now = self.clock.milliseconds()
            v = assign_offsets(
                analysis,
                data,
                next_offset=self.log_end_offset,
                config=self.config,
                now=now,
                leader_epoch=leader_epoch,
            )
            self._write(
                v.data,
                v.first_offset,
                v.last_offset,
                v.max_timestamp,
                v.shallow_offset_of_max_timestamp,
                [(leader_epoch, v.first_offset)],
            )
            return LogAppendInfo(
                v.first_offset,
                v.last_offset,
                v.max_timestamp,
                v.shallow_offset_of_max_timestamp,
                v.log_append_time,
                self._log_start_offset,
                v.record_count,
                1,
                len(v.data),
                analysis.source_compression,
                v.target_compression,
                leader_epoch,
            )

    def append_as_follower(self, records: MemoryRecords | bytes) -> LogAppendInfo:
        """Append replicated batches verbatim: offsets, epochs and timestamps are kept."""
        data = records.buffer if isinstance(records, MemoryRecords) else memoryview(records)
        analysis = analyze(data, self.config, AppendOrigin.REPLICATION, check_sizes=False)
        if not analysis.batches:
            raise InvalidRecordError("the append holds no complete record batch")
        with self._lock:
            self._check_open()
            first = analysis.first_offset
            if first < 0:
                first = analysis.last_offset_of_first_batch
            if first < self.log_end_offset:
                raise UnexpectedAppendOffsetError(
                    f"unexpected offset in append: first offset {first} is below the log end "
                    f"offset {self.log_end_offset}",
                    first,
                    analysis.last_offset,
                )
            epochs = [
                (b.partition_leader_epoch, b.base_offset)
                for b in analysis.batches
                if b.magic >= 2 and b.partition_leader_epoch >= 0
            ]
            if any(b.magic < 2 for b in analysis.batches) and self.leader_epoch_cache.entries:
                self.leader_epoch_cache.clear()
            roll_offset = analysis.first_offset if analysis.first_offset >= 0 else None
            self._write(
                data[: analysis.valid_bytes],
                roll_offset,
                analysis.last_offset,
                analysis.max_timestamp,
                analysis.shallow_offset_of_max_timestamp,
                epochs,
            )
            return LogAppendInfo(
                analysis.first_offset,
                analysis.last_offset,
                analysis.max_timestamp,
                analysis.shallow_offset_of_max_timestamp,
                NO_TIMESTAMP,
                self._log_start_offset,
                analysis.record_count,
                len(analysis.batches),
                analysis.valid_bytes,
                analysis.source_compression,
                analysis.source_compression,
                analysis.last_leader_epoch,
            )

    def _write(
        self,
        data: bytes | bytearray | memoryview,
        first_offset: int | None,
        last_offset: int,
        max_ts: int,
        shallow: int,
        epochs: list[tuple[int, int]],
    ) -> None:
        """Under the lock: roll if needed, write, advance the offsets, apply the flush policy."""
        if len(data) > self.config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"an append of {len(data)} bytes is larger than segment.bytes "
                f"{self.config.segment_bytes}"
            )
        segment = self._maybe_roll(len(data), max_ts, last_offset, first_offset)
        segment.append(last_offset, max_ts, shallow, data)
        for epoch, start in epochs:
            if epoch >= 0:
                self.leader_epoch_cache.assign(epoch, start)
        self._leo = LogOffsetMetadata(last_offset + 1, segment.base_offset, segment.size)
        if (
            self.auto_high_watermark
            or self._high_watermark.message_offset >= self._leo.message_offset
        ):
            self._high_watermark = self._leo
        self._deleter.run()
        if (
            self.log_end_offset - self._recovery_point >= self.config.flush_messages
            or self.clock.milliseconds() - self._last_flush_ms >= self.config.flush_ms
        ):
            self.flush()

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

    def _maybe_roll(
        self, size: int, max_ts: int, last_offset: int, roll_offset: int | None
    ) -> LogSegment:
        seg = self._active()
        now = self.clock.milliseconds()
        facts = SegmentFacts(
            seg.base_offset,
            seg.size,
            seg.time_waited_for_roll(now, max_ts),
            seg.roll_jitter_ms,
            seg.offset_index_full(),
            seg.time_index_full(),
        )
        params = RollParams(
            self.config.segment_bytes, self.config.max_segment_ms, size, last_offset
        )
        if should_roll(facts, params) is None:
            return seg
        if roll_offset is None:
            roll_offset = last_offset - 2**31 + 1
        return self.roll(new_segment_base(roll_offset, self.log_end_offset))

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected_next_offset, log end offset)."""
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
            seg = LogSegment(
                self.directory,
                new_base,
                self.config.segment_params(),
                self.clock,
                roll_jitter_ms=self.config.random_segment_jitter(self._rng),
            )
            self.segments.add(seg)
            self._leo = LogOffsetMetadata(self.log_end_offset, new_base, 0)
            if self._high_watermark.message_offset == self.log_end_offset:
                self._high_watermark = self._leo
            self.flush(new_base)
            self._save_standalone_state()
            return seg

    def _drop_segment(self, seg: LogSegment) -> None:
        """Take a segment out of the list now; its files go after ``file.delete.delay.ms``."""
        self.segments.remove(seg.base_offset)
        self._deleter.schedule(seg)

    def _save_standalone_state(self) -> None:
        if self._standalone is not None:
            self._standalone.save(self._recovery_point, self._log_start_offset)

    # --- flush ---------------------------------------------------------------------------------

    def flush(self, offset: int | None = None) -> None:
        """fsync every segment overlapping [recovery point, offset) and advance the recovery point
        (default: everything, up to the log end offset)."""
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
        """Remove every offset >= ``offset`` (batch-granular); False if nothing to do."""
        if offset < 0:
            raise InvalidArgumentError(f"cannot truncate to a negative offset {offset}")
        with self._lock:
            self._check_open()
            if offset >= self.log_end_offset:
                self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
                return False
            first = self.segments.first_segment()
            if first is None or offset < first.base_offset:
                self.truncate_fully_and_start_at(offset)
                return True
            for seg in self.segments.higher_segments(offset):
                self._drop_segment(seg)
            active = self._active()
            active.truncate_to(offset)
            active.resize_indexes(self.config.segment_index_bytes)
            self._leo = LogOffsetMetadata(offset, active.base_offset, active.size)
            self.leader_epoch_cache.truncate_from_end(offset)
            self._log_start_offset = min(offset, self._log_start_offset)
            if self._high_watermark.message_offset >= offset:
                self._high_watermark = self._leo
            self._recovery_point = min(self._recovery_point, offset)
            self._save_standalone_state()
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start empty at ``offset``."""
        if offset < 0:
            raise InvalidArgumentError(f"cannot start a log at a negative offset {offset}")
        with self._lock:
            self._check_open()
            for seg in list(self.segments):
                self._drop_segment(seg)
            seg = LogSegment(
                self.directory,
                offset,
                self.config.segment_params(),
                self.clock,
                roll_jitter_ms=self.config.random_segment_jitter(self._rng),
            )
            self.segments.add(seg)
            self.leader_epoch_cache.clear()
            self._log_start_offset = offset
            self._leo = LogOffsetMetadata(offset, offset, 0)
            self._high_watermark = self._leo
            self._recovery_point = offset
            self._save_standalone_state()

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """DeleteRecords: move the log start offset up to ``offset`` (<= high watermark)."""
        with self._lock:
            self._check_open()
            if offset > self.high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot move the log start offset to {offset}, above the high watermark "
                    f"{self.high_watermark}"
                )
            if offset <= self._log_start_offset:
                return False
            self._log_start_offset = offset
            self._recovery_point = max(self._recovery_point, offset)
            self.leader_epoch_cache.truncate_from_start(offset)
            self._save_standalone_state()  # Kafka waits for its 60 s checkpoint; we need not
            return True

    # --- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Flush everything, trim the files, and leave the clean-shutdown marker."""
        with self._lock:
            if self._closed:
                return
            self.flush()
            self._active().flush()  # as Kafka's shutdown: this creates the active indexes
            for seg in self.segments:
                seg.close()
            self._deleter.run(force=True)
            self._closed = True
            if self._standalone is not None:
                self._standalone.mark_clean_shutdown(self._recovery_point, self._log_start_offset)

    def close_without_flush(self) -> None:
        """Release file handles as after a crash: no flush, no trim, no marker (tests, tools)."""
        with self._lock:
            for seg in self.segments:
                seg.close_handlers()
            self._closed = True

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

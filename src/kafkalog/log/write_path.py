"""The Log's appender: leader, follower and coordinator appends (Kafka's UnifiedLog.append).

Why: every append runs the same sequence under the log lock: size checks, maybe roll, producer
state (duplicates, epochs, sequences, transactions), write, advance the log end, apply producer
updates and ABORT entries to the transaction index, move the last stable offset, flush by policy.
Keeping that sequence in one function keeps the four entry points honest. The appender holds
exactly what it changes (LocalLog, Watermarks, producer state, leader epochs) and is handed the
Log's lock, roll and flush. Refuses: roll, flush and truncation mechanics, and reads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence

from kafkalog.errors import (
    InvalidArgumentError,
    InvalidRecordError,
    KafkaLogError,
    RecordBatchTooLargeError,
    UnexpectedAppendOffsetError,
)
from kafkalog.log.append_info import LogAppendInfo
from kafkalog.log.checksum_overlap import OVERLAP_MIN_BYTES, PendingChecksums
from kafkalog.log.leader_append import append_in_one_pass
from kafkalog.log.leader_epoch import LeaderEpochCache
from kafkalog.log.local_log import LocalLog
from kafkalog.log.producer_batches import (
    NO_PRODUCER,
    ProducerFields,
    build_batches,
    joined,
)
from kafkalog.log.producer_state import (
    BatchMetadata,
    CompletedTxn,
    ProducerAppendInfo,
)
from kafkalog.log.producer_state_manager import ProducerStateManager
from kafkalog.log.roll import new_segment_base
from kafkalog.log.txn_timeout import timed_out_transactions
from kafkalog.log.validator import (
    Analysis,
    AppendOrigin,
    ProducerBatchCheck,
    ValidatedRecords,
    analyze,
    assign_in_place,
    assign_offsets,
    check_producer_batch,
    check_record_values,
)
from kafkalog.log.watermarks import Watermarks
from kafkalog.records import AnyBatch, MemoryRecords, Record, RecordBatch, build_end_txn_marker
from kafkalog.records.codec import record_codec
from kafkalog.records.record import RecordFacts
from kafkalog.storage.segment import LogSegment
from kafkalog.types import (
    INT16_MAX,
    INT32_MAX,
    INT64_MAX,
    NO_TIMESTAMP,
    CompressionType,
    ControlRecordType,
    TimestampType,
    check_buffer,
    check_int,
)

Buffer = bytes | bytearray | memoryview
logger = logging.getLogger("kafkalog.log")


def _as_buffer(records: MemoryRecords | Buffer) -> memoryview:
    if isinstance(records, MemoryRecords):
        return records.buffer
    return check_buffer("records", records)


def _records_argument(records: Iterable[Record]) -> tuple[list[Record], RecordFacts | None]:
    """The records as a list, each checked to be a Record, and the compiled loop's facts about
    them (None when it does not run or left the check to the loop here)."""
    try:
        recs = list(records)
    except TypeError:
        raise InvalidArgumentError(
            f"records must be an iterable of Record, not {type(records).__name__}"
        ) from None
    if not recs:
        raise InvalidRecordError("append needs at least one record")
    facts = record_codec().record_facts(recs)
    if facts is None:  # else every item is an exact Record: the compiled loop checked each type
        for rec in recs:
            if not isinstance(rec, Record):
                kind = type(rec).__name__
                raise InvalidArgumentError(f"records must be Record objects, not {kind}")
    return recs, facts


def _batches_of(data: Buffer) -> list[AnyBatch]:
    return list(MemoryRecords(data).batches(verify_crc=False))


def _check_epoch(leader_epoch: int | None) -> None:
    if leader_epoch is not None:
        check_int("leader_epoch", leader_epoch, -1, INT32_MAX)


class LogAppender:
    """Appends to one partition's Log; every entry point holds the Log's lock throughout."""

    # True sends every idempotent append through ProducerAppendInfo, the reference the
    # next-in-sequence shortcut is checked against
    stage_every_update = False
    # False sends every checked producer batch through the general sequence, the reference
    # the one pass (leader_append) is checked against
    one_pass_appends = True

    def __init__(
        self,
        local: LocalLog,
        watermarks: Watermarks,
        producer_state: ProducerStateManager,
        epochs: LeaderEpochCache,
        lock: threading.RLock,
        check_open: Callable[[], None],
        roll: Callable[[int], LogSegment],
        flush: Callable[[], None],
    ) -> None:
        self._local = local
        self._watermarks = watermarks
        self._producer_state = producer_state
        self._epochs = epochs
        self._lock = lock
        self._check_open = check_open
        self._roll = roll
        self._flush = flush

    def _leader_epoch(self, given: int | None) -> int:
        """The epoch to stamp: the caller's, else the partition's own."""
        return self._epochs.leader_epoch() if given is None else given

    # --- entry points --------------------------------------------------------------------------

    def append(
        self,
        records: Iterable[Record],
        *,
        compression: CompressionType | str | None = None,
        leader_epoch: int | None = None,
        producer: ProducerFields | None = None,
    ) -> LogAppendInfo:
        """Append Python records as the leader: check them, give them offsets, write them.

        ``None`` timestamps become the clock's time (as a Java producer does). Records that do not
        fit in one batch of ``max.message.bytes`` are split over several batches. ``producer``
        makes the append idempotent (and transactional): a retry of the same sequence range
        returns the original offsets with ``duplicate=True`` and writes nothing.
        """
        recs, facts = _records_argument(records)
        _check_epoch(leader_epoch)
        if producer is not None and not isinstance(producer, ProducerFields):
            raise InvalidArgumentError(
                f"producer must be ProducerFields, not {type(producer).__name__}"
            )
        producer = producer or NO_PRODUCER
        codec = self._local.config.target_compression
        if codec is None:
            codec = CompressionType.parse(compression)
        with self._lock:
            self._check_open()
            epoch = self._leader_epoch(leader_epoch)
            now = self._local.clock.milliseconds()
            check_record_values(self._local.config, recs, now, facts)
            log_append = self._local.config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
            first = self._local.log_end_offset
            built = build_batches(self._local.config, recs, first, now, codec, epoch, producer)
            last = first + len(recs) - 1
            for chunk in built:  # check all before writing any: all or nothing
                self._check_segment_size(len(chunk.data))
            idempotent = producer.producer_id >= 0
            # an idempotent append is one write, so a retry is recognised (or not) as a whole
            writes = [joined(built)] if idempotent and len(built) > 1 else built
            for w in writes:
                duplicate = self._append_batches(
                    w.data,
                    _batches_of(w.data) if idempotent else [],
                    AppendOrigin.CLIENT,
                    w.base_offset,
                    w.last_offset,
                    w.max_timestamp,
                    w.shallow_offset,
                    [(epoch, w.base_offset)],
                )
                if duplicate is not None:
                    return self._duplicate_info(duplicate, len(recs), len(built), codec)
            top = max(built, key=lambda b: b.max_timestamp)  # the first of the greatest
            max_ts, shallow = top.max_timestamp, top.shallow_offset
            if log_append:
                max_ts, shallow = now, last
            return LogAppendInfo(
                first_offset=first,
                last_offset=last,
                max_timestamp=max_ts,
                shallow_offset_of_max_timestamp=shallow,
                log_append_time=now if log_append else NO_TIMESTAMP,
                log_start_offset=self._watermarks.log_start_offset,
                record_count=len(recs),
                batch_count=len(built),
                valid_bytes=sum(len(c.data) for c in built),
                source_compression=codec,
                target_compression=codec,
                last_leader_epoch=epoch,
            )

    def append_records(
        self, records: MemoryRecords | Buffer, *, leader_epoch: int | None = None
    ) -> LogAppendInfo:
        """Append batches a producer built, as the leader: validate, assign offsets, write."""
        data = _as_buffer(records)
        _check_epoch(leader_epoch)
        # the common case in one compiled walk, outside the lock (it releases the GIL)
        check = check_producer_batch(data, self._local.config, self._local.clock.milliseconds())
        if check is not None:
            return self._append_checked(check, leader_epoch)
        analysis = analyze(data, self._local.config, AppendOrigin.CLIENT)
        if not analysis.batches:
            raise InvalidRecordError("the append holds no complete record batch")
        with self._lock:
            self._check_open()
            epoch = self._leader_epoch(leader_epoch)
            v = assign_offsets(
                analysis,
                data,
                next_offset=self._local.log_end_offset,
                config=self._local.config,
                now=self._local.clock.milliseconds(),
                leader_epoch=epoch,
            )
            idempotent = any(b.producer_id >= 0 for b in analysis.batches)
            written = _batches_of(v.data) if idempotent else []
            return self._write_validated(v, written, epoch, analysis.source_compression)

    def _append_checked(self, check: ProducerBatchCheck, leader_epoch: int | None) -> LogAppendInfo:
        with self._lock:
            self._check_open()
            epoch = self._leader_epoch(leader_epoch)
            if self.one_pass_appends and not self.stage_every_update:
                info = append_in_one_pass(
                    check,
                    epoch,
                    self._local,
                    self._watermarks,
                    self._producer_state,
                    self._epochs,
                    self._flush,
                )
                if info is not None:
                    return info
            config = self._local.config
            # the clock matters only to stamp LogAppendTime, read under the lock so that the
            # stamps of one partition never go back
            now = (
                self._local.clock.milliseconds()
                if config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
                else NO_TIMESTAMP
            )
            v = assign_in_place(check, self._local.log_end_offset, config, now, epoch)
            written = [RecordBatch(v.data)] if check.batch.producer_id >= 0 else []
            return self._write_validated(v, written, epoch, check.compression)

    def _write_validated(
        self,
        v: ValidatedRecords,
        written: Sequence[AnyBatch],
        epoch: int,
        source: CompressionType,
    ) -> LogAppendInfo:
        """Under the lock: a leader's validated append written (``written``: its batches with
        a producer id), or the original offsets of a duplicate."""
        duplicate = self._append_batches(
            v.data,
            written,
            AppendOrigin.CLIENT,
            v.first_offset,
            v.last_offset,
            v.max_timestamp,
            v.shallow_offset_of_max_timestamp,
            [(epoch, v.first_offset)],
        )
        if duplicate is not None:
            return self._duplicate_info(duplicate, v.record_count, 1, v.target_compression, source)
        return LogAppendInfo(
            first_offset=v.first_offset,
            last_offset=v.last_offset,
            max_timestamp=v.max_timestamp,
            shallow_offset_of_max_timestamp=v.shallow_offset_of_max_timestamp,
            log_append_time=v.log_append_time,
            log_start_offset=self._watermarks.log_start_offset,
            record_count=v.record_count,
            batch_count=1,
            valid_bytes=len(v.data),
            source_compression=source,
            target_compression=v.target_compression,
            last_leader_epoch=epoch,
        )

    def append_as_follower(self, records: MemoryRecords | Buffer) -> LogAppendInfo:
        """Append replicated batches verbatim: offsets, epochs and timestamps are kept."""
        data = _as_buffer(records)
        checks: PendingChecksums | None = None
        if len(data) >= OVERLAP_MIN_BYTES:
            try:
                analysis = analyze(
                    data,
                    self._local.config,
                    AppendOrigin.REPLICATION,
                    check_sizes=False,
                    verify_crc=False,
                )
                checks = PendingChecksums(analysis.batches)
            except KafkaLogError:
                checks = None  # the in-line pass below words the error the CRC check would
        if checks is None:
            analysis = analyze(
                data, self._local.config, AppendOrigin.REPLICATION, check_sizes=False
            )
        if not analysis.batches:
            raise InvalidRecordError("the append holds no complete record batch")
        try:
            return self._append_replicated(data, analysis, checks)
        except BaseException:
            if checks is not None:
                checks.wait()  # a corrupt batch outranks whatever failed after it
            raise

    def _append_replicated(
        self, data: Buffer, analysis: Analysis, checks: PendingChecksums | None
    ) -> LogAppendInfo:
        with self._lock:
            self._check_open()
            first = analysis.first_offset
            if first < 0:
                first = analysis.last_offset_of_first_batch
            if first < self._local.log_end_offset:
                raise UnexpectedAppendOffsetError(
                    f"unexpected offset in append: first offset {first} is below the log end "
                    f"offset {self._local.log_end_offset}",
                    first,
                    analysis.last_offset,
                )
            epochs = [
                (b.partition_leader_epoch, b.base_offset)
                for b in analysis.batches
                if b.magic >= 2 and b.partition_leader_epoch >= 0
            ]
            if any(b.magic < 2 for b in analysis.batches) and self._epochs.entries:
                self._epochs.clear()
            self._append_batches(
                data[: analysis.valid_bytes],
                analysis.batches,
                AppendOrigin.REPLICATION,
                analysis.first_offset if analysis.first_offset >= 0 else None,
                analysis.last_offset,
                analysis.max_timestamp,
                analysis.shallow_offset_of_max_timestamp,
                epochs,
                None if checks is None else checks.wait,
            )
            return LogAppendInfo(
                first_offset=analysis.first_offset,
                last_offset=analysis.last_offset,
                max_timestamp=analysis.max_timestamp,
                shallow_offset_of_max_timestamp=analysis.shallow_offset_of_max_timestamp,
                log_append_time=NO_TIMESTAMP,
                log_start_offset=self._watermarks.log_start_offset,
                record_count=analysis.record_count,
                batch_count=len(analysis.batches),
                valid_bytes=analysis.valid_bytes,
                source_compression=analysis.source_compression,
                target_compression=analysis.source_compression,
                last_leader_epoch=analysis.last_leader_epoch,
            )

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
        check_int("producer_id", producer_id, 0, INT64_MAX)
        check_int("producer_epoch", producer_epoch, 0, INT16_MAX)
        check_int("coordinator_epoch", coordinator_epoch, -1, INT32_MAX)
        _check_epoch(leader_epoch)
        if timestamp is not None:
            check_int("timestamp", timestamp, -1, INT64_MAX)
        if not isinstance(marker, ControlRecordType | str):
            raise InvalidRecordError(f"marker must be commit or abort, not {marker!r}")
        if isinstance(marker, str):
            try:
                marker = ControlRecordType[marker.strip().upper()]
            except KeyError:
                raise InvalidRecordError(
                    f"marker must be commit or abort, not {marker!r}"
                ) from None
        if marker not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
            raise InvalidRecordError(f"marker must be COMMIT or ABORT, not {marker.name}")
        with self._lock:
            self._check_open()
            epoch = self._leader_epoch(leader_epoch)
            offset = self._local.log_end_offset
            ts = self._local.clock.milliseconds() if timestamp is None else timestamp
            data = build_end_txn_marker(
                offset=offset,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                marker=marker,
                coordinator_epoch=coordinator_epoch,
                timestamp=ts,
                partition_leader_epoch=epoch,
            )
            self._append_batches(
                data,
                _batches_of(data),
                AppendOrigin.COORDINATOR,
                offset,
                offset,
                ts,
                offset,
                [(epoch, offset)],
            )
            return LogAppendInfo(
                first_offset=offset,
                last_offset=offset,
                max_timestamp=ts,
                shallow_offset_of_max_timestamp=offset,
                log_append_time=NO_TIMESTAMP,
                log_start_offset=self._watermarks.log_start_offset,
                record_count=1,
                batch_count=1,
                valid_bytes=len(data),
                source_compression=CompressionType.NONE,
                target_compression=CompressionType.NONE,
                last_leader_epoch=epoch,
            )

    def abort_timed_out_transactions(self, timeout_ms: int) -> list[int]:
        """Write an ABORT marker for every transaction idle for ``timeout_ms`` (Kafka's
        ``transaction.timeout.ms``; log.txn_timeout); returns the producers aborted."""
        check_int("timeout_ms", timeout_ms, 0, INT64_MAX)
        with self._lock:
            self._check_open()
            doomed = timed_out_transactions(
                self._producer_state,
                self._local.segments,
                self._local.clock.milliseconds(),
                timeout_ms,
            )
            for txn in doomed:
                self.append_end_txn_marker(
                    txn.producer_id, txn.producer_epoch, "abort", txn.coordinator_epoch
                )
                msg = "aborted the idle transaction of producer %d in %s"
                logger.warning(msg, txn.producer_id, self._local.directory.name)
        return [txn.producer_id for txn in doomed]

    # --- the shared sequence -------------------------------------------------------------------

    def _check_segment_size(self, size: int) -> None:
        if size > self._local.config.segment_size:
            raise RecordBatchTooLargeError(
                f"an append of {size} bytes is larger than segment.bytes "
                f"{self._local.config.segment_size}"
            )

    def _append_batches(
        self,
        data: Buffer,
        batches: Sequence[AnyBatch],
        origin: AppendOrigin,
        first_offset: int | None,
        last_offset: int,
        max_ts: int,
        shallow: int,
        epochs: list[tuple[int, int]],
        verify: Callable[[], None] | None = None,
    ) -> BatchMetadata | None:
        """Under the lock: roll if needed, check producer state, write, advance the offsets,
        apply producer updates, flush by policy. ``batches`` are the written batches with
        producer ids (others may be left out). Returns the original batch of a duplicate.

        ``verify`` (checksums still being computed) must pass before anything changes: it is
        awaited before a roll, and otherwise runs while the bytes are written.
        """
        self._check_segment_size(len(data))
        segment = self._maybe_roll(len(data), max_ts, last_offset, first_offset, verify)
        state = self._producer_state
        # a producer's next batch, the common case, needs no staged update (see next_in_sequence)
        following = (
            state.next_in_sequence(batches[0])
            if not self.stage_every_update and len(batches) == 1 and origin is AppendOrigin.CLIENT
            else None
        )
        updates: Sequence[ProducerAppendInfo] = ()
        completed: Sequence[CompletedTxn] = ()
        if following is None:
            updates, completed, duplicate = state.stage_updates(batches, segment, origin)
            if duplicate is not None:
                return duplicate
        segment.append(last_offset, max_ts, shallow, data, verify)
        for epoch, start in epochs:
            if epoch >= 0:
                self._epochs.assign(epoch, start)
        self._local.update_log_end_offset(last_offset + 1, segment)
        if following is not None:
            b = batches[0]
            following.add_batch(
                b.producer_epoch,
                b.last_sequence,
                b.last_offset,
                b.last_offset - b.base_offset,
                b.max_timestamp,
            )
        for info in updates:
            state.update(info)
        for txn in completed:
            state.complete_txn_into(txn, segment.txn_index)
        state.update_map_end_offset(last_offset + 1)
        self._watermarks.on_append(last_offset + 1)
        local = self._local
        local.delete_due_files()
        if local.flush_due():
            self._flush()
        return None

    def _duplicate_info(
        self,
        duplicate: BatchMetadata,
        records: int,
        batches: int,
        codec: CompressionType,
        source: CompressionType | None = None,
    ) -> LogAppendInfo:
        return LogAppendInfo(
            first_offset=duplicate.first_offset,
            last_offset=duplicate.last_offset,
            max_timestamp=duplicate.timestamp,
            shallow_offset_of_max_timestamp=duplicate.last_offset,
            log_append_time=duplicate.timestamp,
            log_start_offset=self._watermarks.log_start_offset,
            record_count=records,
            batch_count=batches,
            valid_bytes=0,
            source_compression=source or codec,
            target_compression=codec,
            duplicate=True,
        )

    def _maybe_roll(
        self,
        size: int,
        max_ts: int,
        last_offset: int,
        roll_offset: int | None,
        before_roll: Callable[[], None] | None = None,
    ) -> LogSegment:
        if not self._local.roll_due(size, max_ts, last_offset):
            return self._local.active_segment
        if before_roll is not None:
            before_roll()
        if roll_offset is None:
            roll_offset = last_offset - 2**31 + 1
        return self._roll(new_segment_base(roll_offset, self._local.log_end_offset))

"""Append validation: the analysis every append runs, and the leader's offset assignment
(Kafka's UnifiedLog.analyzeAndValidateRecords, LogValidator).

Why: a leader must check producer batches (sizes, counts, keys on compacted topics, timestamp
bounds), give them offsets from the log end, set the leader epoch and max timestamp, and convert
or recompress to the topic's codec, exactly as Kafka's LogValidator does; followers need only the
batch-level analysis. Refuses: I/O, and writing anything (the Log writes what this returns).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from kafkalog.errors import (
    InvalidRecordError,
    InvalidTimestampError,
    OffsetsOutOfOrderError,
    RecordTooLargeError,
)
from kafkalog.log.config import LogConfig
from kafkalog.records import AnyBatch, BatchScanner, RecordBatch, RecordBatchBuilder
from kafkalog.records.batch import (
    RecordBatchHeader,
    set_last_offset,
    set_max_timestamp,
    set_partition_leader_epoch,
)
from kafkalog.records.codec import RecordStats, record_codec
from kafkalog.records.record import Record, RecordFacts
from kafkalog.records.v2_layout import COMPRESSION_MASK
from kafkalog.types import NO_TIMESTAMP, CompressionType, TimestampType


class AppendOrigin(enum.Enum):
    CLIENT = "client"  # a producer: offsets assigned, everything checked
    COORDINATOR = "coordinator"  # transaction markers and internal writes
    REPLICATION = "replication"  # a follower: offsets kept, batch-level checks only


@dataclass(slots=True)
class Analysis:
    """The batch-level facts of an append (Kafka's analyzeAndValidateRecords)."""

    batches: list[AnyBatch]
    valid_bytes: int
    first_offset: int  # -1 when unknown (legacy data)
    last_offset: int
    last_offset_of_first_batch: int
    max_timestamp: int
    shallow_offset_of_max_timestamp: int
    source_compression: CompressionType
    last_leader_epoch: int
    record_count: int
    monotonic: bool


def analyze(
    data: bytes | bytearray | memoryview,
    config: LogConfig,
    origin: AppendOrigin,
    *,
    check_sizes: bool = True,
    verify_crc: bool = True,
) -> Analysis:
    """Walk the batches once: CRC and size checks, offsets, max timestamp, codec.

    ``verify_crc=False`` leaves the checksums to the caller (``checksum_overlap``).
    """
    scanner = BatchScanner(data, verify_crc=verify_crc)
    batches: list[AnyBatch] = []
    first_offset = -1
    last_offset = -1
    last_of_first = -1
    max_ts = NO_TIMESTAMP
    shallow = -1
    source = CompressionType.NONE
    epoch = -1
    count = 0
    monotonic = True
    for batch in scanner:
        if isinstance(batch, RecordBatch):  # read the v2 header directly: this is the hot path
            h = batch.header
            if origin is AppendOrigin.CLIENT and h.base_offset != 0:
                raise InvalidRecordError(
                    f"a producer batch must have base offset 0, not {h.base_offset}"
                )
            last = h.base_offset + h.last_offset_delta
            size = h.batch_length + 12
            if not batches:
                first_offset, last_of_first = h.base_offset, last
            if last <= last_offset:
                monotonic = False
            last_offset = last
            if check_sizes and size > config.max_message_bytes:
                raise RecordTooLargeError(
                    f"batch of {size} bytes is larger than max.message.bytes "
                    f"{config.max_message_bytes}"
                )
            if h.max_timestamp > max_ts:
                max_ts, shallow = h.max_timestamp, last
            if h.attributes & 0x07:
                source = h.compression
            epoch = h.partition_leader_epoch
            count += h.records_count
            batches.append(batch)
            continue
        if origin is AppendOrigin.CLIENT and batch.magic >= 2 and batch.base_offset != 0:
            raise InvalidRecordError(
                f"a producer batch must have base offset 0, not {batch.base_offset}"
            )
        if not batches:
            first_offset = batch.base_offset if batch.magic >= 2 else -1
            last_of_first = batch.last_offset
        if batch.last_offset <= last_offset:
            monotonic = False
        last_offset = batch.last_offset
        if check_sizes and batch.size_in_bytes > config.max_message_bytes:
            raise RecordTooLargeError(
                f"batch of {batch.size_in_bytes} bytes is larger than max.message.bytes "
                f"{config.max_message_bytes}"
            )
        if batch.max_timestamp > max_ts:
            max_ts = batch.max_timestamp
            shallow = batch.last_offset
        if batch.compression is not CompressionType.NONE:
            source = batch.compression
        if isinstance(batch, RecordBatch):
            epoch = batch.partition_leader_epoch
            count += batch.records_count
        else:
            count += 1 if batch.compression is CompressionType.NONE else 0
        batches.append(batch)
    if scanner.error is not None:
        raise scanner.error
    if origin is AppendOrigin.REPLICATION and not monotonic:
        raise OffsetsOutOfOrderError(
            f"out of order offsets in the appended batches (last offset {last_offset})"
        )
    return Analysis(
        batches,
        scanner.valid_bytes,
        first_offset,
        last_offset,
        last_of_first,
        max_ts,
        shallow,
        source,
        epoch,
        count,
        monotonic,
    )


@dataclass(slots=True)
class ValidatedRecords:
    """What the leader writes: bytes with offsets assigned, and their facts."""

    data: bytes | bytearray
    first_offset: int
    last_offset: int
    max_timestamp: int
    shallow_offset_of_max_timestamp: int
    log_append_time: int
    record_count: int
    target_compression: CompressionType
    converted: bool
    batches: list[AnyBatch] = field(default_factory=list)


def _check_batch(batch: AnyBatch, origin: AppendOrigin) -> None:
    if origin is not AppendOrigin.CLIENT:
        return
    if isinstance(batch, RecordBatch):
        count = batch.records_count
        span = batch.last_offset - batch.base_offset + 1
        if span <= 0 or count <= 0 or span != count:
            raise InvalidRecordError(
                f"inconsistent batch offset range [{batch.base_offset}, {batch.last_offset}] and "
                f"record count {count}"
            )
        if batch.is_control:
            raise InvalidRecordError("clients are not allowed to write control records")
        if batch.producer_id >= 0 and batch.base_sequence < 0:
            raise InvalidRecordError(
                f"invalid sequence {batch.base_sequence} for producer {batch.producer_id}"
            )


def _check_records(
    records: Sequence[Record], batch: AnyBatch, config: LogConfig, now: int, origin: AppendOrigin
) -> None:
    if origin is not AppendOrigin.CLIENT:
        return
    if (
        config.message_timestamp_type is TimestampType.CREATE_TIME
        and batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    ):
        raise InvalidTimestampError("a producer cannot send LogAppendTime to a CreateTime topic")
    check_record_values(config, records, now)


def check_record_values(
    config: LogConfig, records: Sequence[Record], now: int, facts: RecordFacts | None = None
) -> None:
    """Kafka's per-record checks: a key on compacted topics, and the CreateTime timestamp bounds
    (a ``None`` or -1 timestamp passes). Errors are collected; up to three are reported, as
    InvalidTimestampError if any is about a timestamp, else InvalidRecordError. ``facts``: the
    compiled loop's summary of ``records``, if the caller has it."""
    before, after = config.timestamp_before_max_ms, config.timestamp_after_max_ms
    check_ts = config.message_timestamp_type is TimestampType.CREATE_TIME
    compact = config.compact
    if facts is None:
        facts = record_codec().record_facts(records)
    if facts is not None:  # the codec's summary says whether any record fails
        null_keys, low, high = facts
        late = check_ts and low is not None and now - low > before
        early = check_ts and high is not None and high - now > after
        if not (compact and null_keys) and not late and not early:
            return
    errors: list[tuple[int, str]] = []  # the loop below finds each one and words it
    timestamp_error = False
    for i, rec in enumerate(records):
        if compact and rec.key is None:
            errors.append((i, "compacted topic cannot accept message without key"))
        ts = rec.timestamp if rec.timestamp is not None else NO_TIMESTAMP
        if check_ts and ts != NO_TIMESTAMP and (now - ts > before or ts - now > after):
            errors.append((i, f"timestamp {ts} is out of range (now {now})"))
            timestamp_error = True
    if errors:
        detail = "; ".join(f"record {i}: {msg}" for i, msg in errors[:3])
        if timestamp_error:
            raise InvalidTimestampError(detail, record_errors=tuple(errors))
        raise InvalidRecordError(detail, record_errors=tuple(errors))


def assign_offsets(
    analysis: Analysis,
    data: bytes | bytearray | memoryview,
    *,
    next_offset: int,
    config: LogConfig,
    now: int,
    leader_epoch: int,
    origin: AppendOrigin = AppendOrigin.CLIENT,
) -> ValidatedRecords:
    """Leader validation and offset assignment: in place, convert, or recompress (Kafka's
    LogValidator)."""
    batches = analysis.batches
    if not batches:
        return ValidatedRecords(
            b"",
            next_offset,
            next_offset - 1,
            NO_TIMESTAMP,
            -1,
            NO_TIMESTAMP,
            0,
            CompressionType.NONE,
            False,
        )
    magic = batches[0].magic
    for b in batches:
        if b.magic != magic:
            raise InvalidRecordError("all batches of an append must have the same magic")
    source = analysis.source_compression
    target = config.target_compression
    target = source if target is None else target
    log_append = config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
    append_time = now if log_append else NO_TIMESTAMP
    if magic >= 2 and len(batches) > 1:
        raise InvalidRecordError("a producer append must hold exactly one record batch")
    for b in batches:
        _check_batch(b, origin)
        if magic < 2 and (b.producer_id >= 0 or b.is_transactional):
            raise InvalidRecordError("idempotent or transactional data needs magic 2")
    first = batches[0]
    records: list[Record] = []
    for b in batches:
        batch_records = b.records()  # decoded once and cached by the batch
        _check_records(batch_records, b, config, now, origin)
        records.extend(batch_records)
    in_place = (
        magic == 2
        and source is target
        and isinstance(first, RecordBatch)
        and (source is CompressionType.NONE or _relative_offsets_ok(records, first))
    )
    if in_place:
        assert isinstance(first, RecordBatch)
        max_ts = max(
            (NO_TIMESTAMP if r.timestamp is None else r.timestamp for r in records),
            default=NO_TIMESTAMP,
        )
        return _in_place(first, next_offset, leader_epoch, now, max_ts, log_append, target)
    # convert (legacy input) or recompress: one new batch at the log end
    producer = first if isinstance(first, RecordBatch) else None
    builder = RecordBatchBuilder(
        compression=target,
        compression_level=config.compression_level(target),
        timestamp_type=config.message_timestamp_type,
        base_offset=next_offset,
        producer_id=producer.producer_id if producer else -1,
        producer_epoch=producer.producer_epoch if producer else -1,
        base_sequence=producer.base_sequence if producer else -1,
        is_transactional=producer.is_transactional if producer else False,
        partition_leader_epoch=leader_epoch,
        log_append_time=now if log_append else None,
    )
    for rec in records:
        builder.append(rec.value, rec.key, rec.headers, rec.timestamp)
    out = builder.build()
    last = next_offset + len(records) - 1
    if len(out) > config.max_message_bytes:
        raise RecordTooLargeError(
            f"converted batch of {len(out)} bytes is larger than max.message.bytes "
            f"{config.max_message_bytes}"
        )
    if log_append:
        max_ts = now
    else:
        max_ts = max(
            (r.timestamp if r.timestamp is not None else NO_TIMESTAMP for r in records),
            default=NO_TIMESTAMP,
        )
    return ValidatedRecords(
        out, next_offset, last, max_ts, last, append_time, len(records), target, True
    )


@dataclass(frozen=True, slots=True)
class ProducerBatchCheck:
    """A producer batch the compiled check took whole and the config lets through as it is:
    the leader only assigns its offsets in place (``assign_in_place``)."""

    batch: RecordBatch
    max_timestamp: int  # over every record, -1 included
    compression: CompressionType


def check_producer_batch(
    data: bytes | bytearray | memoryview, config: LogConfig, now: int
) -> ProducerBatchCheck | None:
    """The leader's validation of a producer's append in one walk (the codec's
    ``producer_batch``, which the compiled codec runs without the GIL), then the config's checks
    on its facts. None for anything else: ``analyze`` and ``assign_offsets`` judge that append
    and word its errors, so this path decides only what they would accept unchanged."""
    if len(data) > config.max_message_bytes:
        return None  # refused before any record is walked or inflated (a client's zip bomb)
    found = record_codec().producer_batch(data, RecordBatchHeader)
    if found is None:
        return None
    header, stats = found
    source = CompressionType(header.attributes & COMPRESSION_MASK)
    target = config.target_compression
    if target is not None and target is not source:
        return None
    batch = RecordBatch(data, header)
    if not _stats_pass(stats, batch, config, now, AppendOrigin.CLIENT):
        return None
    if source is not CompressionType.NONE and not stats.sequential:
        return None
    max_ts = NO_TIMESTAMP if stats.max_timestamp_all is None else stats.max_timestamp_all
    return ProducerBatchCheck(batch, max_ts, source)


def assign_in_place(
    check: ProducerBatchCheck, next_offset: int, config: LogConfig, now: int, leader_epoch: int
) -> ValidatedRecords:
    """``assign_offsets`` for a batch ``check_producer_batch`` took."""
    log_append = config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
    return _in_place(
        check.batch,
        next_offset,
        leader_epoch,
        now,
        check.max_timestamp,
        log_append,
        check.compression,
    )


def _stats_pass(
    stats: RecordStats, batch: RecordBatch, config: LogConfig, now: int, origin: AppendOrigin
) -> bool:
    """True when the per-record checks pass; False sends the batch down the reference path,
    which raises the exact error (the fast path only decides, it never words an error)."""
    if origin is not AppendOrigin.CLIENT:
        return True
    if (
        config.message_timestamp_type is TimestampType.CREATE_TIME
        and batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    ):
        return False
    if config.compact and stats.null_keys:
        return False
    create_time = config.message_timestamp_type is TimestampType.CREATE_TIME
    if create_time and stats.min_timestamp is not None and stats.max_timestamp is not None:
        before, after = config.timestamp_before_max_ms, config.timestamp_after_max_ms
        if now - stats.min_timestamp > before or stats.max_timestamp - now > after:
            return False
    return True


def _in_place(
    first: RecordBatch,
    next_offset: int,
    leader_epoch: int,
    now: int,
    max_ts: int,
    log_append: bool,
    target: CompressionType,
) -> ValidatedRecords:
    """Kafka's in-place assignment: offsets, leader epoch and max timestamp set in a copy of
    the producer's batch (CRC rewritten only when a covered field changed)."""
    buf = bytearray(first.buffer)
    last = next_offset + first.records_count - 1
    set_last_offset(buf, 0, last)
    set_partition_leader_epoch(buf, 0, leader_epoch)
    append_time = now if log_append else NO_TIMESTAMP
    if log_append:
        set_max_timestamp(buf, 0, TimestampType.LOG_APPEND_TIME, now)
        max_ts = now
    else:
        set_max_timestamp(buf, 0, TimestampType.CREATE_TIME, max_ts)
    return ValidatedRecords(
        buf, next_offset, last, max_ts, last, append_time, first.records_count, target, False
    )


def _relative_offsets_ok(records: list[Record], batch: RecordBatch) -> bool:
    base = batch.base_offset
    return all(r.offset == base + i for i, r in enumerate(records))

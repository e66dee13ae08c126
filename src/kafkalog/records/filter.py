"""Filtering batches into a new buffer: the cleaner's primitive (Kafka's MemoryRecords.filterTo).

Why: compaction decides per batch and per record what survives, and the bytes it writes must be what
Kafka's cleaner writes: untouched batches copied verbatim, partly kept batches rebuilt with their
producer fields, flags, codec and offset range, kept-but-empty batches reduced to the 61-byte
header, and tombstones or discardable markers stamped with a delete horizon (Kafka's
MemoryRecords.filterTo, KIP-534). The decisions themselves belong to the caller (a
``RecordFilter``). Refuses: I/O and any policy of its own.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from kafkalog.errors import InvalidRecordError
from kafkalog.records.batch import RecordBatch
from kafkalog.records.builder import RecordBatchBuilder, build_empty_batch
from kafkalog.records.legacy import build_legacy
from kafkalog.records.record import Record
from kafkalog.records.scanner import AnyBatch, BatchScanner, Buffer
from kafkalog.types import TimestampType


class RetainedRecords(NamedTuple):
    """What survived of one v2 batch's records (see ``filter_records``)."""

    read: int
    kept: int
    invalid: int  # keyless records dropped
    region: bytes | None  # re-encoded kept records; None: all kept as they are, or none kept
    base_timestamp: int
    max_timestamp: int
    delete_horizon: int | None
    last_kept_delta: int


class BatchRetention(enum.Enum):
    DELETE = "delete"  # drop the batch without looking at its records
    DELETE_EMPTY = "delete empty"  # keep the surviving records; drop the batch if none survive
    RETAIN_EMPTY = "retain empty"  # keep the batch even if no record survives (header only)


@dataclass(frozen=True, slots=True)
class BatchRetentionResult:
    retention: BatchRetention
    contains_marker_for_empty_txn: bool = False


class RecordFilter(Protocol):
    """What survives: asked once per batch, then once per record of a batch not deleted.

    A filter may also offer ``retain_records_in_bulk(batch) -> RetainedRecords | None``: the
    records of a v2 batch decided and re-encoded at once (the compiled cleaner); None means
    "ask me per record".
    """

    current_time: int
    delete_retention_ms: int

    def check_batch_retention(self, batch: AnyBatch) -> BatchRetentionResult: ...

    def should_retain_record(self, batch: AnyBatch, record: Record) -> bool: ...


@dataclass(frozen=True, slots=True)
class RetainedBatch:
    """Where one written batch sits in the output, and what the segment indexes need of it."""

    position: int
    size: int
    last_offset: int
    max_timestamp: int
    shallow_offset_of_max_timestamp: int


@dataclass
class FilterResult:
    output: bytearray = field(default_factory=bytearray)
    retained: list[RetainedBatch] = field(default_factory=list)
    bytes_read: int = 0
    messages_read: int = 0
    messages_retained: int = 0
    batches_rewritten: int = 0


def filter_batches(scanner: BatchScanner, record_filter: RecordFilter) -> FilterResult:
    """Run every batch the scanner yields through ``record_filter`` (see the module comment)."""
    result = FilterResult()
    for batch in scanner:
        filter_batch(batch, record_filter, result)
    return result


def filter_buffer(buffer: Buffer, record_filter: RecordFilter) -> FilterResult:
    return filter_batches(BatchScanner(buffer, verify_crc=False), record_filter)


def filter_batch(batch: AnyBatch, record_filter: RecordFilter, result: FilterResult) -> None:
    verdict = record_filter.check_batch_retention(batch)
    result.bytes_read += batch.size_in_bytes
    if verdict.retention is BatchRetention.DELETE:
        return
    bulk = getattr(record_filter, "retain_records_in_bulk", None)
    if bulk is not None and isinstance(batch, RecordBatch):
        try:
            retained = bulk(batch)
        except InvalidRecordError:
            _v2_builder(batch, None)  # the reference builds first: its complaint comes first
            raise
        if retained is not None:
            _emit_retained(batch, verdict, retained, result)
            return
    records = batch.records()
    result.messages_read += len(records)
    kept = [r for r in records if record_filter.should_retain_record(batch, r)]
    result.messages_retained += len(kept)
    is_v2 = isinstance(batch, RecordBatch)
    if kept:
        has_tombstone = any(r.value is None for r in kept)
        horizon = batch.delete_horizon_ms if is_v2 else None
        set_horizon = (
            is_v2 and (has_tombstone or verdict.contains_marker_for_empty_txn) and horizon is None
        )
        if len(kept) == len(records) and not set_horizon:
            _emit(result, bytes(batch.buffer), batch)
            return
        if set_horizon:
            horizon = record_filter.current_time + record_filter.delete_retention_ms
        data = (
            _rebuild_v2(batch, kept, horizon)  # type: ignore[arg-type]
            if is_v2
            else _rebuild_legacy(batch, kept)
        )
        result.batches_rewritten += 1
        _emit(result, data, None)
    elif verdict.retention is BatchRetention.RETAIN_EMPTY:
        _emit_empty(batch, result)


def _emit_retained(
    batch: RecordBatch,
    verdict: BatchRetentionResult,
    retained: RetainedRecords,
    result: FilterResult,
) -> None:
    """``filter_batch``'s ending for records decided in bulk: the same bytes, without Records."""
    result.messages_read += retained.read
    result.messages_retained += retained.kept
    if not retained.kept:
        if verdict.retention is BatchRetention.RETAIN_EMPTY:
            _emit_empty(batch, result)
        return
    if retained.region is None:
        _emit(result, bytes(batch.buffer), batch)
        return
    builder = _v2_builder(batch, retained.delete_horizon)
    builder.add_encoded(
        retained.region,
        retained.kept,
        retained.base_timestamp,
        retained.max_timestamp,
        retained.last_kept_delta,
    )
    builder.override_last_offset(batch.header.last_offset)
    result.batches_rewritten += 1
    _emit(result, builder.build(), None, (batch.header.last_offset, builder.max_timestamp))


def _emit_empty(batch: AnyBatch, result: FilterResult) -> None:
    if not isinstance(batch, RecordBatch):
        raise InvalidRecordError("only v2 batches can be kept empty")
    h = batch.header
    data = build_empty_batch(
        base_offset=h.base_offset,
        last_offset_delta=h.last_offset_delta,
        max_timestamp=h.max_timestamp,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        timestamp_type=h.timestamp_type,
        is_transactional=h.is_transactional,
        is_control=h.is_control,
        partition_leader_epoch=h.partition_leader_epoch,
    )
    result.batches_rewritten += 1
    _emit(result, data, None)


def _emit(
    result: FilterResult,
    data: bytes,
    original: AnyBatch | None,
    known: tuple[int, int] | None = None,
) -> None:
    """Append one output batch: ``original`` if kept as it was, else its last offset and max
    timestamp as ``known`` (from its builder), else read back from ``data``."""
    # every written batch is one batch of the output, so its shallow offset is its last offset
    if known is None:
        batch = original or next(iter(BatchScanner(data, verify_crc=False)))
        known = (batch.last_offset, batch.max_timestamp)
    last, max_timestamp = known
    result.retained.append(RetainedBatch(len(result.output), len(data), last, max_timestamp, last))
    result.output += data


def _v2_builder(batch: RecordBatch, horizon: int | None) -> RecordBatchBuilder:
    """An empty builder with ``batch``'s header fields, as Kafka's cleaner rebuilds a batch."""
    h = batch.header
    log_append = h.timestamp_type is TimestampType.LOG_APPEND_TIME
    return RecordBatchBuilder(
        compression=h.compression,
        timestamp_type=h.timestamp_type,
        base_offset=h.base_offset,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        is_transactional=h.is_transactional,
        is_control=h.is_control,
        partition_leader_epoch=h.partition_leader_epoch,
        log_append_time=h.max_timestamp if log_append else None,
        delete_horizon_ms=horizon,
    )


def _rebuild_v2(batch: RecordBatch, kept: list[Record], horizon: int | None) -> bytes:
    builder = _v2_builder(batch, horizon)
    for record in kept:
        builder.append_record(record, record.offset)
    builder.override_last_offset(batch.header.last_offset)
    return builder.build()


def _rebuild_legacy(batch: AnyBatch, kept: list[Record]) -> bytes:
    log_append = batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    return build_legacy(
        kept,
        magic=batch.magic,
        compression_type=batch.compression,
        timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
        log_append_time=batch.max_timestamp if log_append else None,
        offsets=[r.offset for r in kept],
    )

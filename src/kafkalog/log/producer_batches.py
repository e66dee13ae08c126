"""Turning Python ``Record`` objects into leader-ready batches (the ``Log.append`` path).

Why: records built in-process need what a Java producer plus the leader's validator would do
(timestamps filled in, keys required on compacted topics, timestamp bounds, offsets from the log
end, one batch per ``max.message.bytes``), without encoding and then decoding them again.
Refuses: I/O; the Log writes what this returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from kafkalog.errors import InvalidArgumentError, RecordTooLargeError
from kafkalog.log.config import LogConfig
from kafkalog.records import Record, RecordBatchBuilder
from kafkalog.records.batch import increment_sequence
from kafkalog.types import (
    INT16_MAX,
    INT32_MAX,
    INT64_MAX,
    CompressionType,
    TimestampType,
    check_int,
)


@dataclass(frozen=True, slots=True)
class ProducerFields:
    """The idempotent / transactional identity a producer stamps on its batches."""

    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    is_transactional: bool = False

    def __post_init__(self) -> None:
        check_int("producer id", self.producer_id, -1, INT64_MAX)
        check_int("producer epoch", self.producer_epoch, -1, INT16_MAX)
        check_int("base sequence", self.base_sequence, -1, INT32_MAX)
        if not isinstance(self.is_transactional, bool):
            raise InvalidArgumentError("is_transactional must be a bool")

    def at(self, records_before: int) -> ProducerFields:
        """The fields of a batch that starts ``records_before`` records later."""
        if self.base_sequence < 0 or records_before == 0:
            return self
        return ProducerFields(
            self.producer_id,
            self.producer_epoch,
            increment_sequence(self.base_sequence, records_before),
            self.is_transactional,
        )


NO_PRODUCER = ProducerFields()


class BuiltBatches(NamedTuple):
    """Encoded batches and what their headers say, known from building them (the leader path
    need not parse what it just wrote): offsets ``base_offset``..``last_offset``, the greatest
    ``max_timestamp``, and ``shallow_offset`` (Kafka's shallowOffsetOfMaxTimestamp), the last
    offset of the first batch holding that timestamp."""

    data: bytes
    base_offset: int
    last_offset: int
    max_timestamp: int
    shallow_offset: int


def joined(parts: list[BuiltBatches]) -> BuiltBatches:
    """Consecutive built batches as one write."""
    top = max(parts, key=lambda p: p.max_timestamp)  # the first of the greatest
    return BuiltBatches(
        b"".join(p.data for p in parts),
        parts[0].base_offset,
        parts[-1].last_offset,
        top.max_timestamp,
        top.shallow_offset,
    )


def build_batches(
    config: LogConfig,
    recs: list[Record],
    first: int,
    now: int,
    codec: CompressionType,
    epoch: int,
    producer: ProducerFields = NO_PRODUCER,
) -> list[BuiltBatches]:
    """One batch at offset ``first``, or, if it would exceed max.message.bytes, the records split
    in halves (recursively). A single record too large for a batch is RecordTooLargeError."""
    log_append = config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
    b = RecordBatchBuilder(
        compression=codec,
        compression_level=config.compression_level(codec),
        timestamp_type=config.message_timestamp_type,
        base_offset=first,
        partition_leader_epoch=epoch,
        log_append_time=now if log_append else None,
        producer_id=producer.producer_id,
        producer_epoch=producer.producer_epoch,
        base_sequence=producer.base_sequence,
        is_transactional=producer.is_transactional,
    )
    b.append_records(recs, null_timestamp=now, keep_offsets=False)
    out = b.build()
    limit = config.max_message_bytes
    if len(out) <= limit:
        last = first + len(recs) - 1
        return [BuiltBatches(out, first, last, b.max_timestamp, last)]
    if len(recs) == 1:
        raise RecordTooLargeError(
            f"a record batch of {len(out)} bytes is larger than max.message.bytes {limit}"
        )
    half = len(recs) // 2
    return build_batches(config, recs[:half], first, now, codec, epoch, producer) + build_batches(
        config, recs[half:], first + half, now, codec, epoch, producer.at(half)
    )

"""Building v2 record batches (Kafka's MemoryRecordsBuilder, DefaultRecordBatch,
EndTransactionMarker).

Why: producers, the leader append path, the cleaner and the tests all need batches that are
byte-identical to what a Java producer or broker writes (uncompressed), or that a broker reads
(compressed). Refuses: batches Kafka's MemoryRecordsBuilder refuses and any I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from kafkalog.errors import InvalidArgumentError, InvalidRecordError
from kafkalog.records import compression as codecs
from kafkalog.records.batch import make_attributes
from kafkalog.records.codec import record_codec
from kafkalog.records.control import encode_control_key, encode_end_txn_value
from kafkalog.records.crc import crc32c
from kafkalog.records.record import Header, Record, encode_record
from kafkalog.records.v2_layout import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    CRC_START,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC,
    RECORD_BATCH_OVERHEAD,
)
from kafkalog.types import (
    INT32_MAX,
    NO_TIMESTAMP,
    CompressionType,
    ControlRecordType,
    TimestampType,
)

_UINT32 = struct.Struct(">I")


class RecordBatchBuilder:
    """Accumulates records and encodes one v2 batch.

    Offsets are ``base_offset`` + position unless given explicitly (strictly increasing, as after
    compaction). Not thread-safe: one builder per producer thread.
    """

    def __init__(
        self,
        *,
        compression: CompressionType | str | int | None = CompressionType.NONE,
        compression_level: int | None = None,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        base_offset: int = 0,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        is_control: bool = False,
        partition_leader_epoch: int = -1,
        log_append_time: int | None = None,
        delete_horizon_ms: int | None = None,
    ) -> None:
        self.compression = CompressionType.parse(compression)
        self.compression_level = codecs.check_level(self.compression, compression_level)
        self.timestamp_type = TimestampType.parse(timestamp_type)
        if self.timestamp_type is TimestampType.NO_TIMESTAMP_TYPE:
            raise InvalidRecordError("a v2 batch needs CreateTime or LogAppendTime")
        if self.timestamp_type is TimestampType.LOG_APPEND_TIME and log_append_time is None:
            raise InvalidRecordError("LogAppendTime batches need log_append_time")
        if base_offset < 0:
            raise InvalidRecordError(f"base offset must be >= 0, not {base_offset}")
        if is_transactional and producer_id < 0:
            raise InvalidRecordError("cannot write transactional records without a producer id")
        if producer_id >= 0 and producer_epoch < 0:
            raise InvalidRecordError(f"producer {producer_id} needs an epoch >= 0")
        if producer_id >= 0 and base_sequence < 0 and not is_control:
            raise InvalidRecordError(f"producer {producer_id} needs a base sequence >= 0")
        self.base_offset = base_offset
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.partition_leader_epoch = partition_leader_epoch
        self.log_append_time = log_append_time
        self.delete_horizon_ms = delete_horizon_ms
        self._parts: list[bytes] = []
        self._count = 0
        self._base_timestamp: int | None = delete_horizon_ms
        self._max_timestamp = NO_TIMESTAMP
        self._last_offset_delta = -1
        self._size = 0

    def __len__(self) -> int:
        return self._count

    def append(
        self,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[Header] = (),
        timestamp: int | None = None,
        offset: int | None = None,
    ) -> int:
        """Add one record; return its offset."""
        delta = self._last_offset_delta + 1 if offset is None else offset - self.base_offset
        if delta <= self._last_offset_delta:
            raise InvalidRecordError(
                f"offset {self.base_offset + delta} is not above the last offset "
                f"{self.base_offset + self._last_offset_delta}"
            )
        if delta > INT32_MAX:
            raise InvalidRecordError(f"offset delta {delta} does not fit in 32 bits")
        ts = NO_TIMESTAMP if timestamp is None else timestamp
        base = ts if self._base_timestamp is None else self._base_timestamp
        try:
            if ts < 0 and ts != NO_TIMESTAMP:
                raise InvalidRecordError(f"invalid negative timestamp {ts}")
            encoded = encode_record(delta, ts - base, key, value, headers)
        except (TypeError, AttributeError, ValueError) as err:  # ValueError: bad header shape
            # checked only on failure: up-front isinstance checks cost 15% of encode time
            raise InvalidArgumentError(describe_bad_record(value, key, timestamp, headers)) from err
        self._base_timestamp = base
        self._max_timestamp = max(self._max_timestamp, ts)
        self._parts.append(encoded)
        self._count += 1
        self._size += len(encoded)
        self._last_offset_delta = delta
        return self.base_offset + delta

    def add_encoded(
        self, records: bytes, count: int, base_timestamp: int, max_timestamp: int, last_delta: int
    ) -> None:
        """Take ``count`` records already encoded against this builder's base offset and
        ``base_timestamp`` (the compiled cleaner's rebuild), into an empty builder."""
        if self._count:
            raise InvalidRecordError("encoded records go into an empty builder only")
        self._parts = [records]
        self._count = count
        self._size = len(records)
        self._base_timestamp = base_timestamp
        self._max_timestamp = max_timestamp
        self._last_offset_delta = last_delta

    def append_records(
        self,
        records: Sequence[Record],
        *,
        null_timestamp: int = NO_TIMESTAMP,
        keep_offsets: bool = True,
    ) -> None:
        """Append each record as ``append`` would: at its own offset when ``keep_offsets`` and it
        has one (>= 0), else the next; a ``None`` timestamp written as ``null_timestamp``. A list
        or tuple of plain records goes to the codec in one call, when it encodes them so."""
        if type(records) in (list, tuple):
            done = record_codec().encode_records(
                records,
                self.base_offset,
                self._last_offset_delta,
                self._base_timestamp,
                self._max_timestamp,
                null_timestamp,
                keep_offsets,
            )
            if done is not None:
                region, count, base_timestamp, max_timestamp, last_delta = done
                if count:
                    self._parts.append(region)
                    self._count += count
                    self._size += len(region)
                    self._base_timestamp = base_timestamp
                    self._max_timestamp = max_timestamp
                    self._last_offset_delta = last_delta
                return
        append = self.append  # the reference: also the words of every error
        try:
            records = list(records)
        except TypeError:
            kind = type(records).__name__
            raise InvalidArgumentError(
                f"records must be a sequence of Record, not {kind}"
            ) from None
        for r in records:
            if not isinstance(r, Record):
                kind = type(r).__name__
                raise InvalidArgumentError(f"records must be Record objects, not {kind}")
            offset = r.offset if keep_offsets and r.offset >= 0 else None
            ts = null_timestamp if r.timestamp is None else r.timestamp
            append(r.value, r.key, r.headers, ts, offset)

    def append_record(self, record: Record, offset: int | None = None) -> int:
        """Append a Record at the next offset (or ``offset``); returns the batch's size so far."""
        return self.append(record.value, record.key, record.headers, record.timestamp, offset)

    def override_last_offset(self, last_offset: int) -> None:
        """Make the batch claim ``last_offset`` as its last offset even if its last record sits
        lower: the cleaner keeps a batch's offset range (and so the producer's last sequence)
        after dropping its tail records."""
        delta = last_offset - self.base_offset
        if delta < self._last_offset_delta or delta > INT32_MAX:
            low = self.base_offset + self._last_offset_delta
            raise InvalidRecordError(
                f"last offset {last_offset} must lie in [{low}, {self.base_offset + INT32_MAX}]"
            )
        self._last_offset_delta = delta

    def append_end_txn_marker(
        self, marker: ControlRecordType, coordinator_epoch: int, timestamp: int
    ) -> int:
        """Append a COMMIT or ABORT marker to a transactional control batch."""
        if not (self.is_control and self.is_transactional):
            raise InvalidRecordError("end transaction markers need a transactional control batch")
        if marker not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
            raise InvalidRecordError(f"{marker.name} is not an end transaction marker")
        return self.append(
            encode_end_txn_value(coordinator_epoch),
            key=encode_control_key(marker),
            timestamp=timestamp,
        )

    @property
    def max_timestamp(self) -> int:
        """The batch header's max timestamp: the log append time, or the records' greatest."""
        if (
            self.timestamp_type is TimestampType.LOG_APPEND_TIME
            and self.log_append_time is not None
        ):
            return self.log_append_time
        return self._max_timestamp

    def build(self) -> bytes:
        """Encode the batch; an empty builder gives empty bytes (no batch)."""
        if not self._parts:
            return b""
        payload = b"".join(self._parts)
        if self.compression is not CompressionType.NONE:
            payload = codecs.compress(
                self.compression, payload, magic=MAGIC, level=self.compression_level
            )
        base_ts = self._base_timestamp if self._base_timestamp is not None else NO_TIMESTAMP
        max_ts = self.max_timestamp
        attributes = make_attributes(
            self.compression,
            self.timestamp_type,
            self.is_transactional,
            self.is_control,
            self.delete_horizon_ms is not None,
        )
        return frame_batch(
            self.base_offset,
            len(payload),
            self.partition_leader_epoch,
            attributes,
            self._last_offset_delta,
            base_ts,
            max_ts,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self._count,
            payload,
        )


def describe_bad_record(value: object, key: object, timestamp: object, headers: object) -> str:
    """Say which argument of a record has the wrong type."""
    byte_types = (bytes, bytearray, memoryview)
    if not (value is None or isinstance(value, byte_types)):
        return f"a record value must be bytes or None, not {type(value).__name__}"
    if not (key is None or isinstance(key, byte_types)):
        return f"a record key must be bytes or None, not {type(key).__name__}"
    if not (timestamp is None or type(timestamp) is int):
        return f"a timestamp must be an int (ms) or None, not {type(timestamp).__name__}"
    for header in headers if isinstance(headers, list | tuple) else ():
        if not (isinstance(header, tuple) and len(header) == 2 and isinstance(header[0], str)):
            return f"a header must be a (str, bytes | None) pair, not {header!r}"
        if not header[0].isascii():
            try:
                header[0].encode("utf-8")
            except UnicodeEncodeError:
                return f"header key {header[0]!r} cannot be written as UTF-8"
        if not (header[1] is None or isinstance(header[1], byte_types)):
            kind = type(header[1]).__name__
            return f"header {header[0]!r} must have a bytes or None value, not {kind}"
    return "headers must be a sequence of (str, bytes | None) pairs"


def frame_batch(
    base_offset: int,
    payload_size: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    records_count: int,
    payload: bytes,
) -> bytes:
    """A v2 batch around an (already compressed) records region, its CRC computed."""
    head = bytearray(RECORD_BATCH_OVERHEAD)
    HEADER_STRUCT.pack_into(
        head,
        0,
        base_offset,
        RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + payload_size,
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        records_count,
    )
    assert ATTRIBUTES_OFFSET == CRC_START
    # the CRC runs on from the header's tail into the payload: the payload is copied once
    crc = crc32c(payload, crc32c(memoryview(head)[CRC_START:]))
    _UINT32.pack_into(head, CRC_OFFSET, crc)
    return b"".join((head, payload))


def build_empty_batch(
    *,
    base_offset: int,
    last_offset_delta: int,
    max_timestamp: int,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = -1,
) -> bytes:
    """The 61-byte header the cleaner keeps to preserve producer state (Kafka's
    DefaultRecordBatch)."""
    attributes = make_attributes(
        CompressionType.NONE, timestamp_type, is_transactional, is_control, False
    )
    return frame_batch(
        base_offset,
        0,
        partition_leader_epoch,
        attributes,
        last_offset_delta,
        NO_TIMESTAMP,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        0,
        b"",
    )


def build_end_txn_marker(
    *,
    offset: int,
    producer_id: int,
    producer_epoch: int,
    marker: ControlRecordType,
    coordinator_epoch: int,
    timestamp: int,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A broker-written COMMIT/ABORT marker batch (78 bytes, Kafka's EndTransactionMarker and vector
    E)."""
    builder = RecordBatchBuilder(
        base_offset=offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )
    builder.append_end_txn_marker(marker, coordinator_epoch, timestamp)
    return builder.build()

"""Record batch format v2 (magic 2): the 61-byte header, validation, records, in-place mutations.

Why: the v2 batch is Kafka's unit of storage, replication and compression (Kafka's
DefaultRecordBatch). The wire schema is declared once, below, and every byte offset is derived from
it. Refuses: reading a header field by tuple index or a hand-typed offset; I/O; decompressing before
it is asked to.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import NamedTuple

from kafkalog.errors import CorruptRecordError, InvalidRecordError
from kafkalog.records import compression
from kafkalog.records.codec import record_codec
from kafkalog.records.crc import crc32c
from kafkalog.records.record import Record
from kafkalog.records.v2_layout import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    BATCH_LENGTH_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_OFFSET,
    CRC_START,
    DELETE_HORIZON_MASK,
    HEADER_STRUCT,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    MAGIC,
    MAX_TIMESTAMP_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    V2_HEADER_FIELDS,
)
from kafkalog.types import INT32_MAX, CompressionType, TimestampType

Buffer = bytes | bytearray | memoryview

_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")


def make_attributes(
    compression_type: CompressionType,
    timestamp_type: TimestampType,
    is_transactional: bool,
    is_control: bool,
    has_delete_horizon: bool = False,
) -> int:
    attrs = int(compression_type)
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attrs |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attrs |= TRANSACTIONAL_MASK
    if is_control:
        attrs |= CONTROL_MASK
    if has_delete_horizon:
        attrs |= DELETE_HORIZON_MASK
    return attrs


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's sequence arithmetic: wraps from Int32.MAX to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


class RecordBatchHeader(NamedTuple):
    """The decoded 61-byte v2 header. Field order is the wire order (``V2_HEADER_FIELDS``)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> CompressionType:
        return CompressionType.from_id(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.attributes & DELETE_HORIZON_MASK else None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > -1

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        return increment_sequence(self.base_sequence, self.last_offset_delta)


# the scanner builds headers with tuple.__new__, which checks no length: one field per code
assert RecordBatchHeader._fields == tuple(name for name, _ in V2_HEADER_FIELDS)


def decode_header(buf: Buffer, position: int = 0) -> RecordBatchHeader:
    """Decode the 61-byte header at ``position`` (the caller guarantees 61 bytes are there)."""
    return RecordBatchHeader._make(HEADER_STRUCT.unpack_from(buf, position))


class RecordBatch:
    """A v2 batch over a buffer slice holding exactly its bytes (not copied).

    Owns nothing but a view; records are decoded (and decompressed) on first iteration and
    cached. Not thread-safe for mutation; reads of an unchanged buffer are safe from any thread.
    """

    __slots__ = ("_buffer", "_records", "header", "position")

    magic = MAGIC

    def __init__(self, buffer: Buffer, header: RecordBatchHeader | None = None, position: int = -1):
        self._buffer = buffer if type(buffer) is memoryview else memoryview(buffer)
        self.position = position
        self._records: list[Record] | None = None
        if header is not None:  # the scanner has already framed and decoded it
            self.header = header
            return
        if len(self._buffer) < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"v2 batch needs {RECORD_BATCH_OVERHEAD} bytes, has {len(self._buffer)}",
                position=position if position >= 0 else None,
            )
        self.header = decode_header(self._buffer)

    # header fields, in Kafka's vocabulary
    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def last_offset(self) -> int:
        return self.header.base_offset + self.header.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def size_in_bytes(self) -> int:
        return self.header.batch_length + LOG_OVERHEAD

    @property
    def compression(self) -> CompressionType:
        return self.header.compression

    @property
    def timestamp_type(self) -> TimestampType:
        return self.header.timestamp_type

    @property
    def max_timestamp(self) -> int:
        return self.header.max_timestamp

    @property
    def base_timestamp(self) -> int:
        return self.header.base_timestamp

    @property
    def producer_id(self) -> int:
        return self.header.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.header.producer_epoch

    @property
    def base_sequence(self) -> int:
        return self.header.base_sequence

    @property
    def last_sequence(self) -> int:
        return self.header.last_sequence

    @property
    def is_transactional(self) -> bool:
        return self.header.is_transactional

    @property
    def is_control(self) -> bool:
        return self.header.is_control

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.header.delete_horizon_ms

    @property
    def partition_leader_epoch(self) -> int:
        return self.header.partition_leader_epoch

    @property
    def records_count(self) -> int:
        return self.header.records_count

    @property
    def crc(self) -> int:
        return self.header.crc

    @property
    def buffer(self) -> memoryview:
        """The batch's bytes (a view, not a copy)."""
        return self._buffer

    def __bytes__(self) -> bytes:
        return bytes(self._buffer)

    def compute_checksum(self) -> int:
        """The CRC-32C of the bytes the header's CRC covers (from the attributes on)."""
        return crc32c(self._buffer[CRC_START : self.size_in_bytes])

    def is_valid(self) -> bool:
        """Kafka's ``isValid``: at least 61 bytes and the stored CRC-32C matches."""
        return (
            len(self._buffer) >= self.size_in_bytes >= RECORD_BATCH_OVERHEAD
            and self.compute_checksum() == self.header.crc
        )

    def ensure_valid(self) -> None:
        """CorruptRecordError naming position and offset unless the size and CRC check out."""
        if self.size_in_bytes < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"v2 batch size {self.size_in_bytes} is below the "
                f"{RECORD_BATCH_OVERHEAD}-byte header",
                position=self._where(),
                offset=self.base_offset,
            )
        computed = self.compute_checksum()
        if computed != self.header.crc:
            raise CorruptRecordError(
                f"record batch is corrupt (stored crc = {self.header.crc}, "
                f"computed crc = {computed})",
                position=self._where(),
                offset=self.base_offset,
            )

    def _where(self) -> int | None:
        return self.position if self.position >= 0 else None

    def records_error(self, reason: str) -> CorruptRecordError:
        """Damage inside the records region, said with this batch's position and offset."""
        return CorruptRecordError(
            f"batch records are invalid: {reason}",
            position=self._where(),
            offset=self.header.base_offset,
        )

    def records_data(self) -> bytes | memoryview:
        """The records region, decompressed (a view when the batch is not compressed)."""
        payload = self._buffer[RECORD_BATCH_OVERHEAD : self.size_in_bytes]
        codec = self.header.compression
        try:
            return compression.decompress(codec, payload) if codec else payload
        except CorruptRecordError as err:
            raise self.records_error(err.reason) from err

    def records_view(self) -> AbstractContextManager[bytes | bytearray | memoryview]:
        """The records region decompressed, like ``records_data``, for use inside the ``with``
        block only (see ``compression.decompressed``): for compiled loops that copy out what
        they keep. An uncompressed batch's is a view of its bytes, at no cost per batch."""
        header = self.header
        payload = self._buffer[RECORD_BATCH_OVERHEAD : header.batch_length + LOG_OVERHEAD]
        if not header.attributes & COMPRESSION_MASK:
            return nullcontext(payload)
        codec = header.compression
        if compression.reads_in_scratch(codec, payload):
            return self._decompressed_view(codec, payload)
        try:  # bytes of its own: no view to release, no generator a batch
            return nullcontext(compression.decompress(codec, payload))
        except CorruptRecordError as err:
            raise self.records_error(err.reason) from err

    @contextmanager
    def _decompressed_view(
        self, codec: CompressionType, payload: memoryview
    ) -> Iterator[bytes | bytearray | memoryview]:
        entered = False
        try:
            with compression.decompressed(codec, payload) as data:
                entered = True
                yield data
        except CorruptRecordError as err:
            if entered:  # the caller's own, framed as it chose
                raise
            raise self.records_error(err.reason) from err

    def records(self) -> list[Record]:
        """All records of the batch (decompressed and decoded once, then cached)."""
        if self._records is None:
            header = self.header
            payload = self._buffer[RECORD_BATCH_OVERHEAD : header.batch_length + LOG_OVERHEAD]
            try:
                lat = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
                fields = (header.records_count, header.base_offset, header.base_timestamp, lat)
                codec = record_codec()
                if not header.attributes & COMPRESSION_MASK:
                    self._records = codec.decode_records(payload, *fields)
                    return self._records
                with compression.decompressed(header.compression, payload) as data:
                    self._records = codec.decode_records(data, *fields)
            except CorruptRecordError as err:
                raise self.records_error(err.reason) from err
        return self._records

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def __len__(self) -> int:
        return self.header.records_count

    def __repr__(self) -> str:
        h = self.header
        return (
            f"RecordBatch(magic=2, base_offset={h.base_offset}, last_offset={self.last_offset}, "
            f"count={h.records_count}, compression={self.compression.kafka_name}, "
            f"size={self.size_in_bytes}, producer_id={h.producer_id}, "
            f"transactional={h.is_transactional}, control={h.is_control})"
        )

    # --- in-place mutations, as the broker performs them -----------------------------------------

    def _writable(self) -> memoryview:
        if self._buffer.readonly:
            raise InvalidRecordError("this batch's buffer is read-only; copy it to mutate")
        return self._buffer

    def set_last_offset(self, last_offset: int) -> None:
        """Rewrite the base offset so the last offset is ``last_offset`` (outside the CRC)."""
        set_last_offset(self._writable(), 0, last_offset)
        self.header = decode_header(self._buffer)
        self._records = None

    def set_partition_leader_epoch(self, epoch: int) -> None:
        """Stamp the leader epoch in place (outside the CRC, as a leader does)."""
        set_partition_leader_epoch(self._writable(), 0, epoch)
        self.header = decode_header(self._buffer)

    def set_max_timestamp(self, timestamp_type: TimestampType, max_timestamp: int) -> None:
        """Set the timestamp type and max timestamp in place, CRC recomputed (LogAppendTime)."""
        set_max_timestamp(self._writable(), 0, timestamp_type, max_timestamp)
        self.header = decode_header(self._buffer)
        self._records = None


def set_last_offset(buf: memoryview | bytearray, position: int, last_offset: int) -> None:
    (delta,) = _INT32.unpack_from(buf, position + LAST_OFFSET_DELTA_OFFSET)
    _INT64.pack_into(buf, position + BASE_OFFSET_OFFSET, last_offset - delta)


def set_partition_leader_epoch(buf: memoryview | bytearray, position: int, epoch: int) -> None:
    _INT32.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_max_timestamp(
    buf: memoryview | bytearray, position: int, timestamp_type: TimestampType, max_timestamp: int
) -> None:
    """Set the timestamp type and max timestamp; recompute the CRC only if something changed."""
    if timestamp_type is TimestampType.NO_TIMESTAMP_TYPE:
        raise InvalidRecordError("a v2 batch cannot be given NoTimestampType")
    (attrs,) = _INT16.unpack_from(buf, position + ATTRIBUTES_OFFSET)
    (current,) = _INT64.unpack_from(buf, position + MAX_TIMESTAMP_OFFSET)
    current_type = (
        TimestampType.LOG_APPEND_TIME if attrs & TIMESTAMP_TYPE_MASK else TimestampType.CREATE_TIME
    )
    if current_type is timestamp_type and current == max_timestamp:
        return
    attrs &= ~TIMESTAMP_TYPE_MASK
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attrs |= TIMESTAMP_TYPE_MASK
    _INT16.pack_into(buf, position + ATTRIBUTES_OFFSET, attrs)
    _INT64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, max_timestamp)
    rewrite_crc(buf, position)


def set_producer(
    buf: memoryview | bytearray,
    position: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    is_transactional: bool,
) -> None:
    """Stamp a batch built without a producer with one (what an idempotent or transactional
    producer writes at send time) and recompute the CRC, which covers these fields."""
    (attrs,) = _INT16.unpack_from(buf, position + ATTRIBUTES_OFFSET)
    attrs = attrs | TRANSACTIONAL_MASK if is_transactional else attrs & ~TRANSACTIONAL_MASK
    _INT16.pack_into(buf, position + ATTRIBUTES_OFFSET, attrs)
    struct.pack_into(
        ">qhi", buf, position + PRODUCER_ID_OFFSET, producer_id, producer_epoch, base_sequence
    )
    rewrite_crc(buf, position)


def rewrite_crc(buf: memoryview | bytearray, position: int) -> None:
    """Recompute the CRC of the v2 batch at ``position`` after a CRC-covered field changed."""
    (length,) = _INT32.unpack_from(buf, position + BATCH_LENGTH_OFFSET)
    view = memoryview(buf)
    end = position + length + LOG_OVERHEAD
    _UINT32.pack_into(buf, position + CRC_OFFSET, crc32c(view[position + CRC_START : end]))

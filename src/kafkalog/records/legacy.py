"""Legacy message formats v0 and v1 (Kafka's LegacyRecord, AbstractLegacyRecordBatch): decode
shallow and deep, and build.

Why: brokers since 3.0 only write v2, but old segments still hold v0/v1 entries, including
compressed wrappers whose inner offsets are absolute (v0) or relative (v1). Refuses: zstd for
magic < 2, compressed inner messages, and any I/O.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator, Sequence

from kafkalog.errors import CorruptRecordError, InvalidRecordError
from kafkalog.records import compression
from kafkalog.records.crc import crc32
from kafkalog.records.record import Record
from kafkalog.types import NO_TIMESTAMP, CompressionType, TimestampType

Buffer = bytes | bytearray | memoryview

# wire schema, after the common 12-byte log overhead (offset int64, size int32)
LOG_OVERHEAD_STRUCT = struct.Struct(">qi")
LOG_OVERHEAD = LOG_OVERHEAD_STRUCT.size
V0_HEADER = struct.Struct(">Ibb")  # crc, magic, attributes
V1_HEADER = struct.Struct(">Ibbq")  # crc, magic, attributes, timestamp
CRC_SIZE = 4  # the CRC covers magic .. end of message
_LENGTH = struct.Struct(">i")
MIN_MESSAGE_SIZE = {0: V0_HEADER.size + 8, 1: V1_HEADER.size + 8}  # 14 and 22
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08


class LegacyRecord(Record):
    """A v0/v1 message's record, with the message CRC and whether it checks out."""

    __slots__ = ("crc", "valid")

    def __init__(
        self,
        value: bytes | None,
        key: bytes | None,
        timestamp: int | None,
        offset: int,
        crc: int,
        valid: bool,
    ) -> None:
        super().__init__(value, key, (), timestamp, offset)
        self.crc = crc
        self.valid = valid


class _Message:
    """One decoded legacy message (the part after the log overhead)."""

    __slots__ = ("attributes", "crc", "key", "magic", "timestamp", "valid", "value")
    attributes: int
    crc: int
    key: bytes | None
    magic: int
    timestamp: int
    valid: bool
    value: bytes | None

    def __init__(self, view: memoryview, position: int) -> None:
        size = len(view)
        if size < 5:
            raise CorruptRecordError(
                f"legacy message of {size} bytes is too small", position=position
            )
        magic = view[4]
        if magic not in (0, 1):
            raise CorruptRecordError(f"legacy message has magic {magic}", position=position)
        if size < MIN_MESSAGE_SIZE[magic]:
            raise CorruptRecordError(
                f"v{magic} message of {size} bytes is below the minimum {MIN_MESSAGE_SIZE[magic]}",
                position=position,
            )
        if magic == 0:
            self.crc, _, self.attributes = V0_HEADER.unpack_from(view)
            self.timestamp = NO_TIMESTAMP
            pos = V0_HEADER.size
        else:
            self.crc, _, self.attributes, self.timestamp = V1_HEADER.unpack_from(view)
            pos = V1_HEADER.size
        self.magic = magic
        self.valid = crc32(view[CRC_SIZE:]) == self.crc
        self.key, pos = _read_bytes(view, pos, position, "key")
        self.value, pos = _read_bytes(view, pos, position, "value")
        if pos != size:
            raise CorruptRecordError(
                f"legacy message declares {size} bytes but its fields take {pos}", position=position
            )

    @property
    def compression(self) -> CompressionType:
        return CompressionType.from_id(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP_TYPE
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME


def _read_bytes(view: memoryview, pos: int, position: int, what: str) -> tuple[bytes | None, int]:
    if pos + 4 > len(view):
        raise CorruptRecordError(f"legacy message {what} length is truncated", position=position)
    (n,) = _LENGTH.unpack_from(view, pos)
    pos += 4
    if n == -1:
        return None, pos
    if n < 0 or pos + n > len(view):
        raise CorruptRecordError(f"legacy message {what} length {n} is invalid", position=position)
    return bytes(view[pos : pos + n]), pos + n


class LegacyRecordBatch:
    """One shallow v0/v1 log entry: a single message, or a compressed wrapper of many.

    A view over exactly the entry's bytes. ``last_offset`` is the entry offset; ``base_offset``
    needs decompression for a wrapper. Producer fields are sentinels, never transactional/control.
    """

    __slots__ = ("_message", "_records", "_view", "offset", "position")
    offset: int
    position: int

    producer_id = -1
    producer_epoch = -1
    base_sequence = -1
    last_sequence = -1
    partition_leader_epoch = -1
    is_transactional = False
    is_control = False
    delete_horizon_ms = None

    def __init__(self, buffer: Buffer, position: int = -1) -> None:
        self._view = buffer if isinstance(buffer, memoryview) else memoryview(buffer)
        if len(self._view) < LOG_OVERHEAD:
            raise CorruptRecordError("legacy entry is shorter than its log overhead")
        self.offset, size = LOG_OVERHEAD_STRUCT.unpack_from(self._view)
        self.position = position
        where = position if position >= 0 else None
        if LOG_OVERHEAD + size > len(self._view):
            raise CorruptRecordError(
                f"legacy entry size {size} runs past the buffer", position=where
            )
        self._message = _Message(self._view[LOG_OVERHEAD : LOG_OVERHEAD + size], where or 0)
        self._records: list[LegacyRecord] | None = None

    @property
    def magic(self) -> int:
        return self._message.magic

    @property
    def last_offset(self) -> int:
        return self.offset

    @property
    def next_offset(self) -> int:
        return self.offset + 1

    @property
    def base_offset(self) -> int:
        if self._message.compression is CompressionType.NONE:
            return self.offset
        return self.records()[0].offset

    @property
    def size_in_bytes(self) -> int:
        return len(self._view)

    @property
    def compression(self) -> CompressionType:
        return self._message.compression

    @property
    def timestamp_type(self) -> TimestampType:
        return self._message.timestamp_type

    @property
    def max_timestamp(self) -> int:
        return self._message.timestamp

    @property
    def crc(self) -> int:
        return self._message.crc

    @property
    def key(self) -> bytes | None:
        return self._message.key

    @property
    def value(self) -> bytes | None:
        return self._message.value

    @property
    def buffer(self) -> memoryview:
        return self._view

    def __bytes__(self) -> bytes:
        return bytes(self._view)

    def is_valid(self) -> bool:
        """Whether the wrapper message's stored CRC-32 matches its bytes."""
        return self._message.valid

    def ensure_valid(self) -> None:
        """CorruptRecordError naming both CRCs unless the message is valid."""
        if not self._message.valid:
            computed = crc32(self._view[LOG_OVERHEAD + CRC_SIZE :])
            raise CorruptRecordError(
                f"message is corrupt (stored crc = {self._message.crc}, computed crc = {computed})",
                position=self.position if self.position >= 0 else None,
                offset=self.offset,
            )

    def records(self) -> list[LegacyRecord]:
        """The message itself, or a compressed wrapper's inner messages (decoded once)."""
        if self._records is None:
            self._records = self._decode()
        return self._records

    def __iter__(self) -> Iterator[LegacyRecord]:
        return iter(self.records())

    def __len__(self) -> int:
        return len(self.records())

    def _decode(self) -> list[LegacyRecord]:
        msg = self._message
        codec = msg.compression
        where = self.position if self.position >= 0 else None
        if codec is CompressionType.NONE:
            ts = msg.timestamp  # -1 for v0: Kafka reports NoTimestampType as -1
            return [LegacyRecord(msg.value, msg.key, ts, self.offset, msg.crc, msg.valid)]
        if msg.value is None:
            raise CorruptRecordError("compressed wrapper message has a null value", position=where)
        data = memoryview(compression.decompress(codec, msg.value, magic=msg.magic))
        inner: list[tuple[int, _Message]] = []
        pos = 0
        while pos < len(data):
            if pos + LOG_OVERHEAD > len(data):
                raise CorruptRecordError("inner message header is truncated", position=where)
            inner_offset, size = LOG_OVERHEAD_STRUCT.unpack_from(data, pos)
            end = pos + LOG_OVERHEAD + size
            if size < 0 or end > len(data):
                raise CorruptRecordError(f"inner message size {size} is invalid", position=where)
            m = _Message(data[pos + LOG_OVERHEAD : end], where or 0)
            if m.compression is not CompressionType.NONE:
                raise CorruptRecordError(
                    "compressed wrapper holds a compressed message", position=where
                )
            inner.append((inner_offset, m))
            pos = end
        if not inner:
            raise CorruptRecordError("compressed wrapper message holds no records", position=where)
        if msg.magic == 0:
            absolute = [o for o, _ in inner]
        else:
            last_relative = inner[-1][0]
            if self.offset == 0:
                base = 0  # some old librdkafka producers left the wrapper offset at 0
            elif self.offset < last_relative:
                raise CorruptRecordError(
                    f"wrapper offset {self.offset} is below the last inner relative offset "
                    f"{last_relative}",
                    position=where,
                )
            else:
                base = self.offset - last_relative
            absolute = [base + o for o, _ in inner]
        log_append = msg.magic == 1 and bool(msg.attributes & TIMESTAMP_TYPE_MASK)
        out = []
        for off, (_, m) in zip(absolute, inner, strict=True):
            ts = msg.timestamp if log_append else m.timestamp  # v0 inner messages carry -1
            out.append(LegacyRecord(m.value, m.key, ts, off, m.crc, m.valid))
        return out

    def __repr__(self) -> str:
        return (
            f"LegacyRecordBatch(magic={self.magic}, offset={self.offset}, "
            f"compression={self.compression.kafka_name}, size={self.size_in_bytes})"
        )


def encode_message(
    magic: int,
    offset: int,
    attributes: int,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
) -> bytes:
    """One log entry (offset, size, crc, magic, attributes, [timestamp], key, value)."""
    body = bytearray()
    if magic == 1:
        body += struct.pack(">bbq", magic, attributes, timestamp)
    else:
        body += struct.pack(">bb", magic, attributes)
    for part in (key, value):
        if part is None:
            body += _LENGTH.pack(-1)
        else:
            body += _LENGTH.pack(len(part))
            body += part
    crc = crc32(body)
    return LOG_OVERHEAD_STRUCT.pack(offset, len(body) + CRC_SIZE) + struct.pack(">I", crc) + body


def build_legacy(
    records: Sequence[Record],
    *,
    magic: int,
    compression_type: CompressionType,
    base_offset: int = 0,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
    compression_level: int | None = None,
    offsets: Sequence[int] | None = None,
) -> bytes:
    """Encode records as v0/v1 entries: one per record, or one compressed wrapper.

    ``offsets`` (strictly increasing, one per record) keeps sparse offsets, as after compaction;
    by default the records take ``base_offset``, ``base_offset + 1``, ...
    """
    if magic not in (0, 1):
        raise InvalidRecordError(f"legacy magic must be 0 or 1, not {magic}")
    compression.check_codec_for_magic(compression_type, magic)
    if base_offset < 0:
        raise InvalidRecordError(f"base offset must be >= 0, not {base_offset}")
    if not records:
        return b""
    if offsets is None:
        offsets = range(base_offset, base_offset + len(records))
    elif len(offsets) != len(records) or any(b <= a for a, b in itertools.pairwise(offsets)):
        raise InvalidRecordError("offsets must be strictly increasing, one per record")
    ts_bit = 0
    if magic == 1 and timestamp_type is TimestampType.LOG_APPEND_TIME:
        if log_append_time is None:
            raise InvalidRecordError("LogAppendTime messages need log_append_time")
        ts_bit = TIMESTAMP_TYPE_MASK
    timestamps = []
    for r in records:
        if r.headers:
            raise InvalidRecordError(f"magic {magic} messages cannot carry headers")
        ts = NO_TIMESTAMP if r.timestamp is None else r.timestamp
        if magic == 0 and ts != NO_TIMESTAMP:
            raise InvalidRecordError("magic 0 messages cannot carry timestamps")
        if ts < NO_TIMESTAMP:
            raise InvalidRecordError(f"invalid negative timestamp {ts}")
        timestamps.append(ts)
    if compression_type is CompressionType.NONE:
        return b"".join(
            encode_message(magic, off, ts_bit, ts, r.key, r.value)
            for off, r, ts in zip(offsets, records, timestamps, strict=True)
        )
    first = offsets[0]
    inner = b"".join(
        encode_message(magic, off if magic == 0 else off - first, ts_bit, ts, r.key, r.value)
        for off, r, ts in zip(offsets, records, timestamps, strict=True)
    )
    payload = compression.compress(compression_type, inner, magic=magic, level=compression_level)
    wrapper_ts = NO_TIMESTAMP
    if magic == 1:
        wrapper_ts = log_append_time if ts_bit else max(timestamps)  # type: ignore[assignment]
    last_offset = offsets[-1]
    return encode_message(
        magic, last_offset, ts_bit | int(compression_type), wrapper_ts, None, payload
    )

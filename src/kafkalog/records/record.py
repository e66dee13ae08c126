"""The record value and the v2 record codec (Kafka's DefaultRecord).

Why: a record inside a v2 batch is seven zig-zag varints around a key, a value and headers; this
is the per-record hot loop of every read and every build, so the one-byte varint case is inlined
here rather than called. The ``Record`` class defined here is the reference; when ``_fastcodec``
is built, ``Record`` names its C type instead (same fields, these methods), and
``kafkalog.records.codec`` runs its compiled loops between bytes and Records. Refuses:
batch framing (see ``batch``), any I/O, and silent acceptance of a record whose declared length
disagrees with its content.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kafkalog.errors import CorruptRecordError
from kafkalog.records.varint import (
    UNSIGNED_VARINT_TABLE,
    encode_unsigned,
    read_unsigned,
)

if TYPE_CHECKING:
    pass

Header = tuple[str, bytes | None]

_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF
_TABLE_LIMIT = len(UNSIGNED_VARINT_TABLE)


class Record:
    """One record: value, key, headers, timestamp and (once in a log) its offset.

    ``key`` and ``value`` are ``bytes`` or ``None`` (a null value is a tombstone); ``headers`` is a
    sequence of ``(str, bytes | None)``; ``timestamp`` is ms since the epoch or ``None`` (written as
    -1, "no timestamp"); ``offset`` is -1 until the record is read from, or placed in, a log.
    Immutable by convention; cheap to create (slots, no validation on the read path).
    """

    __slots__ = ("headers", "key", "offset", "timestamp", "value")

    def __init__(
        self,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[Header] = (),
        timestamp: int | None = None,
        offset: int = -1,
    ) -> None:
        self.value = value
        self.key = key
        self.headers = headers
        self.timestamp = timestamp
        self.offset = offset

    def __repr__(self) -> str:
        return (
            f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
            f"value={_short(self.value)}, headers={list(self.headers)!r})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _RECORD_TYPES):
            return NotImplemented
        return (
            self.offset == other.offset
            and self.timestamp == other.timestamp
            and self.key == other.key
            and self.value == other.value
            and list(self.headers) == list(other.headers)
        )

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[object, ...]:
        extra = {  # a subclass's own slots (LegacyRecord's crc and valid)
            name: getattr(self, name)
            for cls in type(self).__mro__[:-1]
            if cls is not Record
            for name in cls.__dict__.get("__slots__", ())
            if hasattr(self, name)
        }
        fields = (self.value, self.key, self.headers, self.timestamp, self.offset)
        return (_rebuild, (type(self), fields, extra))


def _rebuild(cls: type[Record], fields: tuple[object, ...], extra: dict[str, object]) -> Record:
    record = cls.__new__(cls)
    base = next(c for c in cls.__mro__ if c in (ReferenceRecord, _COMPILED_RECORD))
    base.__init__(record, *fields)  # type: ignore[arg-type]
    for name, value in extra.items():
        setattr(record, name, value)
    return record


ReferenceRecord = Record  # the pure-Python definition, kept for the tests that compare the two


def _compiled_record() -> type[Record] | None:
    """The Record type made in C by ``_fastcodec`` (when built), with this class's behaviour.

    Decoding makes a record per record read, so its allocation, attribute reads and deallocation
    are the read path's cost: a C type with a tailored dealloc halves it against a Python class
    with ``__slots__``. The methods below stay Python, written once, shared by both types.
    """
    try:
        module = importlib.import_module("kafkalog.records._fastcodec")
    except ImportError:  # kafkalog.records.codec says so, once
        return None
    compiled: type[Record] = module.Record
    for name in ("__repr__", "__eq__", "__reduce__"):
        setattr(compiled, name, Record.__dict__[name])
    compiled.__hash__ = None  # type: ignore[assignment]
    return compiled


# (records region, count, base timestamp, max timestamp, last offset delta)
EncodedRecords = tuple[bytes, int, int | None, int, int]
# (records with a null key, least and greatest timestamp given: not None, not -1)
RecordFacts = tuple[int, int | None, int | None]
_COMPILED_RECORD = _compiled_record()
_RECORD_TYPES: tuple[type[Record], ...] = (Record,)
if _COMPILED_RECORD is not None:
    Record = _COMPILED_RECORD  # type: ignore[misc]
    ReferenceRecord.__qualname__ = ReferenceRecord.__name__ = "ReferenceRecord"  # for pickle
    _RECORD_TYPES = (Record, ReferenceRecord)


def _short(value: bytes | None) -> str:
    if value is None or len(value) <= 32:
        return repr(value)
    return repr(value[:32]) + f"...({len(value)} bytes)"


def _uvarint(u: int) -> bytes:
    return UNSIGNED_VARINT_TABLE[u] if u < _TABLE_LIMIT else encode_unsigned(u)


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header],
) -> bytes:
    """Encode one v2 record (length prefix included)."""
    ts = (timestamp_delta << 1) ^ (timestamp_delta >> 63)
    od = (offset_delta << 1) ^ (offset_delta >> 31)
    parts = [
        b"\x00",
        UNSIGNED_VARINT_TABLE[ts] if 0 <= ts < _TABLE_LIMIT else encode_unsigned(ts & _MASK64),
        UNSIGNED_VARINT_TABLE[od] if od < _TABLE_LIMIT else encode_unsigned(od & _MASK32),
    ]
    if key is None:
        parts.append(b"\x01")
    else:
        parts.append(_uvarint(len(key) << 1))
        parts.append(key)
    if value is None:
        parts.append(b"\x01")
    else:
        parts.append(_uvarint(len(value) << 1))
        parts.append(value)
    if headers:
        parts.append(_uvarint(len(headers) << 1))
        for hkey, hvalue in headers:
            hk = hkey.encode("utf-8")
            parts.append(_uvarint(len(hk) << 1))
            parts.append(hk)
            if hvalue is None:
                parts.append(b"\x01")
            else:
                parts.append(_uvarint(len(hvalue) << 1))
                parts.append(hvalue)
    else:
        parts.append(b"\x00")
    body = b"".join(parts)
    return _uvarint(len(body) << 1) + body


def _slow(data: bytes, pos: int, max_bytes: int, mask: int) -> tuple[int, int]:
    u, pos = read_unsigned(data, pos, max_bytes)
    u &= mask
    return (u >> 1) ^ -(u & 1), pos


def decode_records(
    data: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
) -> list[Record]:
    """Decode exactly ``count`` records that fill ``data`` exactly.

    ``log_append_time`` is the batch's max timestamp when its type is LogAppendTime: every record
    then reports it (Kafka's DefaultRecordBatch). Any disagreement between declared and actual
    lengths, counts or bytes raises CorruptRecordError with the position inside the records region.
    """
    if count < 0:
        raise CorruptRecordError(f"negative record count {count}")
    out: list[Record] = []
    append = out.append
    end = len(data)
    pos = 0
    i = 0
    try:
        for i in range(count):  # i is reported on error
            start = pos
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                length = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                length, pos = _slow(data, pos, 5, _MASK32)
            rec_end = pos + length
            if length < 6 or rec_end > end:
                raise CorruptRecordError(
                    f"record {i} declares an invalid length {length}", position=start
                )
            pos += 1  # attributes: unused
            b = data[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                ts_delta, pos = _slow(data, pos, 10, _MASK64)
            b = data[pos]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                offset_delta, pos = _slow(data, pos, 5, _MASK32)
            b = data[pos]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                n = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                n, pos = _slow(data, pos, 5, _MASK32)
            if n >= 0:
                key: bytes | None = data[pos : pos + n]
                pos += n
            elif n == -1:
                key = None
            else:
                raise CorruptRecordError(f"record {i} has key length {n}", position=start)
            b = data[pos]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                n = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                n, pos = _slow(data, pos, 5, _MASK32)
            if n >= 0:
                value: bytes | None = data[pos : pos + n]
                pos += n
            elif n == -1:
                value = None
            else:
                raise CorruptRecordError(f"record {i} has value length {n}", position=start)
            b = data[pos]
            if b == 0:
                headers: Sequence[Header] = ()
                pos += 1
            else:
                headers, pos = _decode_headers(data, pos, rec_end, i, start)
            if pos != rec_end:
                raise CorruptRecordError(
                    f"record {i} declares {length} bytes but its fields take "
                    f"{pos - (rec_end - length)}",
                    position=start,
                )
            append(
                Record(
                    value,
                    key,
                    headers,
                    log_append_time if log_append_time is not None else base_timestamp + ts_delta,
                    base_offset + offset_delta,
                )
            )
    except IndexError as err:
        raise CorruptRecordError(
            f"record {i} runs past the end of the batch", position=pos
        ) from err
    if pos != end:
        raise CorruptRecordError(
            f"incorrect declared batch size: {end - pos} bytes remain after {count} records",
            position=pos,
        )
    return out


def _decode_headers(
    data: bytes, pos: int, rec_end: int, index: int, start: int
) -> tuple[list[Header], int]:
    count, pos = _slow(data, pos, 5, _MASK32)
    if count < 0 or count > rec_end - pos:
        raise CorruptRecordError(f"record {index} has header count {count}", position=start)
    headers: list[Header] = []
    for _ in range(count):
        n, pos = _slow(data, pos, 5, _MASK32)
        if n < 0 or pos + n > rec_end:
            raise CorruptRecordError(f"record {index} has header key length {n}", position=start)
        try:
            hkey = data[pos : pos + n].decode("utf-8")
        except UnicodeDecodeError as err:
            raise CorruptRecordError(
                f"record {index} has a header key that is not UTF-8", position=start
            ) from err
        pos += n
        n, pos = _slow(data, pos, 5, _MASK32)
        if n == -1:
            headers.append((hkey, None))
        elif n < 0 or pos + n > rec_end:
            raise CorruptRecordError(f"record {index} has header value length {n}", position=start)
        else:
            headers.append((hkey, data[pos : pos + n]))
            pos += n
    return headers, pos

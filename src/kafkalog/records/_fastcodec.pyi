# The compiled record codec in _fastcodec.c (see kafkalog.records.codec, which chooses it,
# and kafkalog.records.columnar / columnar_encode, which turn its tuples into Arrow arrays).
from collections.abc import Callable, Sequence
from typing import TypeVar

from typing_extensions import Buffer

class CorruptRecords(Exception):
    """args: (message, position of the damage in the records region)."""

class InvalidRecords(Exception):
    """args: (message,): a value the record format cannot hold."""

# (validity bitmap | None, offset of the first row, int32 offsets, data)
BinarySpec = tuple[Buffer | None, Buffer, Buffer, int]
# (validity bitmap | None, null count, int32 offsets, data)
BinaryParts = tuple[bytes | None, int, bytes, bytes]

class ColumnBuilder:
    rows: int  # rows since the last finish() (read-only)
    def __init__(
        self,
        with_headers: bool = ...,
        timestamp_scale: int = ...,
        light: bool = ...,
        values: bool = ...,
    ) -> None: ...
    def add(
        self,
        data: Buffer,
        count: int,
        base_offset: int,
        base_timestamp: int,
        has_log_append_time: bool,
        max_timestamp: int,
        timestamp_type: int,
        lo: int,
        hi: int,
        /,
    ) -> int: ...
    # (rows, offsets, timestamps, timestamp types, key, value, headers); headers is None or
    # (validity | None, null count, list offsets, header count, header key, header value)
    def finish(
        self,
    ) -> tuple[
        int,
        bytes,
        bytes,
        bytes,
        BinaryParts,
        BinaryParts,
        tuple[bytes | None, int, bytes, int, BinaryParts, BinaryParts] | None,
    ]: ...

def encode(
    row_start: int,
    row_end: int,
    max_bytes: int,
    keys: BinarySpec | None,
    values: BinarySpec | None,
    timestamps: tuple[Buffer | None, Buffer, int] | None,
    headers: tuple[Buffer | None, Buffer, int, BinarySpec | None, BinarySpec | None] | None,
    /,
) -> tuple[bytes, int, int, int]: ...
def partitions_for_keys(keys: BinarySpec | None, rows: int, partitions: int, /) -> bytes: ...

class Record:
    """kafkalog.records.record.Record made in C (its methods are the Python class's)."""

    value: bytes | None
    key: bytes | None
    headers: Sequence[tuple[str, bytes | None]]
    timestamp: int | None
    offset: int
    def __init__(
        self,
        value: bytes | None,
        key: bytes | None = ...,
        headers: Sequence[tuple[str, bytes | None]] = ...,
        timestamp: int | None = ...,
        offset: int = ...,
    ) -> None: ...

# Exactly `count` records filling `data`, as kafkalog.records.record.decode_records; damage
# raises CorruptRecords(message, position).
def decode_records(
    data: Buffer, count: int, base_offset: int, base_timestamp: int, lat: int | None, /
) -> list[Record]: ...

# Continue a RecordBatchBuilder in the given state with `records` (exact Record instances; a
# None timestamp written as null_timestamp, a record's own offset kept if keep_offsets and >= 0):
# (records region, count, base timestamp, max timestamp, last offset delta), or None when any
# record needs the reference (which then writes the same bytes or raises its own error).
def encode_records(
    records: Sequence[Record],
    base_offset: int,
    last_offset_delta: int,
    base_timestamp: int | None,
    max_timestamp: int,
    null_timestamp: int,
    keep_offsets: bool,
    /,
) -> tuple[bytes, int, int | None, int, int] | None: ...

# (records with a null key, least and greatest timestamp given: not None, not -1), or None when
# any item is not an exact Record or has a timestamp that is not a plain int.
def record_facts(records: Sequence[Record], /) -> tuple[int, int | None, int | None] | None: ...

# The offset search of a fetch from `position` (kafkalog.records.scanner.search_offset): None
# where the walk stops first; (0, position, size, last offset) of the first whole batch whose
# last offset is >= target; (1, position, last offset, previous) at a last offset that does not
# rise; (2, 0, 0, 0) when an offset is beyond int64 and the reference must answer.
def search_offset(
    buffer: Buffer, position: int, stop: int, target: int, /
) -> tuple[int, int, int, int] | None: ...

_H = TypeVar("_H", bound=tuple[int, ...])

# The headers (as header_type, a tuple of the 13 fields) of the whole, sound v2 batches from
# `position` (kafkalog.records.scanner.BatchScanner): each within `stop` and `max_size` (-1:
# none), its CRC matched when crc is given, and with a segment_base its offsets rising from
# next_offset within an index entry's reach; it stops at anything else, and after `limit`
# bytes, when `more` is True.
def frame_v2(
    buffer: Buffer,
    position: int,
    stop: int,
    limit: int,
    max_size: int,
    segment_base: int | None,
    next_offset: int,
    header_type: type[_H],
    crc: Callable[[memoryview], int] | None,
    /,
) -> tuple[list[_H], bool]: ...

# A producer's one v2 batch checked without the GIL: base offset 0, CRC, count, control flag,
# sequence, and its records walked (after inflate(codec id, payload) when compressed): the
# header as header_type and (records, null keys, min ts, max ts, max ts of all, sequential), or
# None for anything else, which the caller's full validation judges.
def producer_batch(
    data: Buffer,
    header_type: type[_H],
    inflate: Callable[[int, memoryview], bytes],
    /,
) -> tuple[_H, tuple[int, int, int | None, int | None, int | None, bool]] | None: ...

"""The one scanner: walks batches of any magic laid back to back in a buffer (Kafka's
ByteBufferLogInputStream).

Why: recovery, index rebuilds, reads, the dump tool, the cleaner and the Spark reader all need to
walk batches and know where the valid prefix ends. They all use this code, so a second
"read length, read magic" loop anywhere else is a bug. The scanner never
raises mid-stream: it stops and reports the length of the valid prefix and why it stopped.
Refuses: I/O (callers pass a buffer or an mmap view) and deciding what to do about damage.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator

from kafkalog.errors import CorruptRecordError, InvalidArgumentError, KafkaLogError
from kafkalog.records.batch import RecordBatch, RecordBatchHeader
from kafkalog.records.codec import (
    BATCH_PREFIX,
    HEADER_SIZE_UP_TO_MAGIC,
    MIN_ENTRY_SIZE,
    batch_extent,
    record_codec,
)
from kafkalog.records.crc import crc32c
from kafkalog.records.legacy import LegacyRecordBatch
from kafkalog.records.v2_layout import (
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    CRC_START,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    RECORD_BATCH_OVERHEAD,
)

Buffer = bytes | bytearray | memoryview
AnyBatch = RecordBatch | LegacyRecordBatch

_ATTRIBUTES = struct.Struct(">h")

assert MAGIC_OFFSET + 1 == HEADER_SIZE_UP_TO_MAGIC

# The compiled walk frames this many bytes of batches at first, twice that next time, up to
# the most: a caller taking one batch pays for about one, a long read for few calls.
_FIRST_RUN_BYTES = 16 << 10
_MOST_RUN_BYTES = 1 << 20


class ScanStop(enum.Enum):
    """Why a scan ended. Only ``END`` and ``TRUNCATED`` are not damage."""

    END = "end"  # every byte belonged to a complete batch
    TRUNCATED = "truncated"  # a partial batch at the end (normal for a live tail or a slice)
    BAD_SIZE = "bad size"
    BAD_MAGIC = "bad magic"
    BAD_CRC = "bad crc"
    BAD_RECORDS = "bad records"  # deep scans only: the records inside a batch are malformed
    BAD_OFFSET = "bad offset"  # segment scans only: offsets leave the segment or go backwards

    @property
    def is_corruption(self) -> bool:
        return self not in (ScanStop.END, ScanStop.TRUNCATED)


def next_batch_size(buffer: Buffer, position: int = 0) -> int | None:
    """Kafka's probe: the size of the next batch, or None if not enough bytes to tell."""
    remaining = len(buffer) - position
    if remaining < LOG_OVERHEAD:
        return None
    (size,) = struct.unpack_from(">i", buffer, position + 8)
    if size < MIN_ENTRY_SIZE:
        raise CorruptRecordError(f"record size {size} is below the minimum {MIN_ENTRY_SIZE}")
    if remaining < HEADER_SIZE_UP_TO_MAGIC:
        return None
    magic = buffer[position + MAGIC_OFFSET]
    if magic not in (0, 1, 2):
        raise CorruptRecordError(f"invalid magic {magic}")
    return int(size) + LOG_OVERHEAD


class BatchScanner:
    """Iterate the complete, valid batches of ``buffer[start:end]``.

    After iteration: ``valid_bytes`` is the end position (absolute in ``buffer``) of the valid
    prefix, ``stop`` says why the scan ended and ``error`` describes damage (never raised).
    ``verify_crc`` checks each batch's checksum; ``deep`` also decodes each batch's records;
    ``max_batch_size`` rejects larger batches as BAD_SIZE. ``base_offset`` (a segment's) makes
    a batch whose offsets go below it or below the batch before, or (v2) past what an index
    entry can hold relative to it, BAD_OFFSET: the base offset is outside the CRC, so a flipped
    bit there is found only this way. Single use; not thread-safe.
    """

    def __init__(
        self,
        buffer: Buffer,
        *,
        start: int = 0,
        end: int | None = None,
        verify_crc: bool = True,
        deep: bool = False,
        max_batch_size: int | None = None,
        file: str | None = None,
        base_offset: int | None = None,
    ) -> None:
        if not isinstance(start, int) or start < 0:
            raise InvalidArgumentError(f"a scan cannot start at position {start!r}")
        try:
            self._view = buffer if isinstance(buffer, memoryview) else memoryview(buffer)
        except TypeError:
            raise InvalidArgumentError(
                f"a scan needs a bytes-like buffer, not {type(buffer).__name__}"
            ) from None
        if self._view.ndim != 1 or self._view.itemsize != 1:
            self._view = self._view.cast("B")
        self._start = min(start, len(self._view))
        self._end = len(self._view) if end is None else min(end, len(self._view))
        self.verify_crc = verify_crc
        self.deep = deep
        self.max_batch_size = max_batch_size
        self.file = file
        self.base_offset = base_offset
        self.valid_bytes = start
        self.batches_read = 0
        self.stop: ScanStop | None = None
        self.error: CorruptRecordError | None = None

    def _fail(self, stop: ScanStop, message: str, position: int, offset: int | None) -> None:
        self.stop = stop
        self.error = CorruptRecordError(message, file=self.file, position=position, offset=offset)

    def __iter__(self) -> Iterator[AnyBatch]:
        view = self._view
        end = self._end
        pos = self._start
        prefix = BATCH_PREFIX.unpack_from
        header_unpack = HEADER_STRUCT.unpack_from
        new_tuple = tuple.__new__  # the header's fields, as _make builds them less its checks
        crc = crc32c
        verify = self.verify_crc
        max_size = self.max_batch_size
        segment_base = self.base_offset
        next_offset = -1 if segment_base is None else segment_base
        codec = record_codec()
        frame = codec.frame_v2 if codec.frames_runs and not self.deep else None
        run_bytes = _FIRST_RUN_BYTES
        while True:
            # runs of sound v2 batches are framed by the codec in one call, which stops short of
            # anything else (legacy magic, damage, a partial tail) for the steps below to judge
            if (
                frame is not None
                and end - pos >= RECORD_BATCH_OVERHEAD
                and view[pos + MAGIC_OFFSET] == 2
            ):
                headers, more = frame(
                    view,
                    pos,
                    end,
                    run_bytes,
                    -1 if max_size is None else max_size,
                    segment_base,
                    next_offset,
                    RecordBatchHeader,
                    crc if verify else None,
                )
                for header in headers:
                    total = header.batch_length + LOG_OVERHEAD
                    batch: AnyBatch = RecordBatch(view[pos : pos + total], header, pos)
                    pos += total
                    self.valid_bytes = pos
                    self.batches_read += 1
                    yield batch
                if headers and segment_base is not None:
                    next_offset = headers[-1].base_offset + headers[-1].last_offset_delta + 1
                if more:  # a walk is bounded so a caller who stops early did not CRC it all
                    run_bytes = min(2 * run_bytes, _MOST_RUN_BYTES)
                    continue
            if end - pos < HEADER_SIZE_UP_TO_MAGIC:
                self.stop = ScanStop.END if pos == end else ScanStop.TRUNCATED
                return
            offset, size, _, magic = prefix(view, pos)
            if size < MIN_ENTRY_SIZE:
                self._fail(
                    ScanStop.BAD_SIZE,
                    f"batch size {size} is below the minimum {MIN_ENTRY_SIZE}",
                    pos,
                    offset,
                )
                return
            total = size + LOG_OVERHEAD
            if max_size is not None and total > max_size:
                self._fail(
                    ScanStop.BAD_SIZE,
                    f"batch size {total} exceeds the maximum {max_size}",
                    pos,
                    offset,
                )
                return
            if magic == 2:
                if total < RECORD_BATCH_OVERHEAD:
                    self._fail(
                        ScanStop.BAD_SIZE,
                        f"v2 batch size {total} is below the {RECORD_BATCH_OVERHEAD}-byte header",
                        pos,
                        offset,
                    )
                    return
                if pos + total > end:
                    self.stop = ScanStop.TRUNCATED
                    return
                header = new_tuple(RecordBatchHeader, header_unpack(view, pos))
                if verify and crc(view[pos + CRC_START : pos + total]) != header.crc:
                    computed = crc(view[pos + CRC_START : pos + total])
                    self._fail(
                        ScanStop.BAD_CRC,
                        f"record batch is corrupt (stored crc = {header.crc}, "
                        f"computed crc = {computed})",
                        pos,
                        offset,
                    )
                    return
                batch = RecordBatch(view[pos : pos + total], header, pos)
            elif magic in (0, 1):
                if pos + total > end:
                    self.stop = ScanStop.TRUNCATED
                    return
                try:
                    batch = LegacyRecordBatch(view[pos : pos + total], pos)
                except CorruptRecordError as err:
                    self._fail(ScanStop.BAD_SIZE, err.reason, pos, offset)
                    return
            else:
                self._fail(ScanStop.BAD_MAGIC, f"invalid magic {magic}", pos, offset)
                return
            if verify and magic != 2 and not batch.is_valid():
                try:
                    batch.ensure_valid()
                except CorruptRecordError as err:
                    self._fail(ScanStop.BAD_CRC, err.reason, pos, offset)
                    return
            if segment_base is not None:
                if magic == 2:
                    first, last = offset, offset + header.last_offset_delta
                    in_range = first >= next_offset and 0 <= last - segment_base <= 0x7FFFFFFF
                else:
                    first = last = offset  # a legacy wrapper carries its last inner offset
                    in_range = last >= next_offset
                if not in_range or last < first:
                    self._fail(
                        ScanStop.BAD_OFFSET,
                        f"batch offsets [{first}, {last}] do not follow offset {next_offset - 1}"
                        f" in the segment based at {segment_base}",
                        pos,
                        offset,
                    )
                    return
                next_offset = last + 1
            if self.deep:
                try:
                    batch.records()
                except KafkaLogError as err:
                    reason = err.reason if isinstance(err, CorruptRecordError) else str(err)
                    self._fail(ScanStop.BAD_RECORDS, reason, pos, offset)
                    return
            pos += total
            self.valid_bytes = pos
            self.batches_read += 1
            yield batch


def search_offset(
    buffer: Buffer, position: int, stop: int, target: int
) -> tuple[int, int, int] | None:
    """(position, size, last offset) of the first whole batch from ``position`` whose last
    offset is >= ``target``, or None: the search of every fetch, by the codec in use
    (``RecordCodec.search_offset`` says what it checks)."""
    return record_codec().search_offset(buffer, position, stop, target)


# enough of a batch's start to tell its size and, for v2, its attributes
CONTROL_PROBE_SIZE = ATTRIBUTES_OFFSET + 2


def probe_control(header: Buffer, remaining: int) -> tuple[int, bool] | None:
    """(size, whether a v2 control batch) of the batch whose first ``CONTROL_PROBE_SIZE``
    bytes are ``header``, with ``remaining`` bytes of data from its start; None at a partial
    or malformed batch, where Kafka's file iterator stops. For walks that read headers only
    (the ``.txnindex`` check), which must not fault in a whole file to find a few markers."""
    if len(header) < HEADER_SIZE_UP_TO_MAGIC:
        return None
    _, size, _, magic = BATCH_PREFIX.unpack_from(header, 0)
    total = size + LOG_OVERHEAD
    if size < MIN_ENTRY_SIZE or total > remaining or magic > 2 or magic < 0:
        return None
    if magic != 2:
        return total, False
    if total < RECORD_BATCH_OVERHEAD or len(header) < CONTROL_PROBE_SIZE:
        return None
    (attributes,) = _ATTRIBUTES.unpack_from(header, ATTRIBUTES_OFFSET)
    return total, bool(attributes & CONTROL_MASK)


def iter_positions(
    buffer: Buffer, start: int = 0, end: int | None = None
) -> Iterator[tuple[int, int, int]]:
    """(position, size, last offset) of each complete batch, headers only and unverified.

    For reads of data already validated (offset searches): no batch objects, no CRC. Stops
    silently at a partial or malformed batch, like Kafka's file iterator.
    """
    view = buffer if isinstance(buffer, memoryview) else memoryview(buffer)
    stop = len(view) if end is None else min(end, len(view))
    pos = start
    while (found := batch_extent(view, pos, stop)) is not None:
        yield pos, found[0], found[1]
        pos += found[0]


def scan(buffer: Buffer, **options: object) -> BatchScanner:
    """Shorthand for ``BatchScanner(buffer, **options)``."""
    return BatchScanner(buffer, **options)  # type: ignore[arg-type]


def decode_batch(buffer: Buffer, *, verify_crc: bool = True) -> AnyBatch:
    """Decode a buffer that must hold exactly one complete, valid batch (a producer's request,
    a staged file). Unlike a scan of a live tail, a size that disagrees with the buffer is an
    error here, not a partial batch."""
    scanner = BatchScanner(buffer, verify_crc=verify_crc)
    found = list(scanner)
    if scanner.error is not None:
        raise scanner.error
    if len(found) == 1 and scanner.stop is ScanStop.END:
        return found[0]
    view = memoryview(buffer)
    if len(view) >= LOG_OVERHEAD:
        (size,) = struct.unpack_from(">i", view, 8)
        declared = f"declares {size + LOG_OVERHEAD} bytes"
    else:
        declared = "has no complete size field"
    raise CorruptRecordError(
        f"buffer of {len(view)} bytes does not hold exactly one batch: "
        f"{len(found)} complete batch(es), the first {declared}",
        position=0,
    )

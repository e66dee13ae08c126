"""The record codec: every loop over the records inside v2 batches, behind one interface, chosen
once.

Why: decoding records, encoding them, the append's per-record facts and stats, the offset search
every fetch makes and the framing of runs of batches each have two implementations, the
pure-Python reference (the specification) and the compiled ``_fastcodec`` extension that
``pip install .`` builds when a C compiler is there. ``RecordCodec`` is the interface and the
reference; ``CompiledRecordCodec`` overrides each operation with the extension's loop. One is
chosen at import, as pyiceberg's ``new_decoder()`` picks its decoder, and ``record_codec()``
answers it: callers ask it for an operation and never ask which one they got. Operations that
only shorten a path (a summary of records, a run of framed batches) may answer None, and the
caller then takes the per-record path, which is the reference's own and which words every error.
The Arrow column loops (``columnar``, ``columnar_encode``) and the cleaner's key map take the
extension's types from the codec's ``module`` once per object; their reference halves
live beside them. A build that lost the extension says so with a warning at import.
Refuses: reading the environment (this layer does no I/O); ``kafkalog/__init__.py`` applies
``KAFKALOG_PURE_PYTHON=1``, and the tests switch per test with ``use_fast_path``.
"""

from __future__ import annotations

import importlib
import struct
import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeVar

from kafkalog.errors import CorruptRecordError, KafkaLogError
from kafkalog.records import compression
from kafkalog.records.crc import crc32c
from kafkalog.records.legacy import MIN_MESSAGE_SIZE
from kafkalog.records.record import EncodedRecords, Record, RecordFacts, decode_records
from kafkalog.records.v2_layout import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_START,
    HEADER_STRUCT,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    MAGIC,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
)
from kafkalog.types import CompressionType

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from kafkalog.records import _fastcodec as _fc

_H = TypeVar("_H", bound=tuple[int, ...])

# offset int64, size int32, (crc | partition leader epoch) int32, magic int8
BATCH_PREFIX = struct.Struct(">qiib")
_LAST_OFFSET_DELTA = struct.Struct(">i")
HEADER_SIZE_UP_TO_MAGIC = BATCH_PREFIX.size  # 17
MIN_ENTRY_SIZE = MIN_MESSAGE_SIZE[0]  # 14: the smallest legal v0 message


class V2Header(Protocol):
    """The fields of a v2 batch header the codec reads (``batch.RecordBatchHeader``'s)."""

    @property
    def records_count(self) -> int: ...
    @property
    def base_offset(self) -> int: ...
    @property
    def base_timestamp(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def attributes(self) -> int: ...


class V2Batch(Protocol):
    """What the codec asks of a v2 batch (``batch.RecordBatch``, which calls the codec, so
    named here by shape rather than imported)."""

    @property
    def header(self) -> V2Header: ...
    def records_view(self) -> AbstractContextManager[Buffer]: ...
    def records_error(self, reason: str) -> CorruptRecordError: ...


class RecordStats(NamedTuple):
    """What the leader's validation needs from a batch's records, without decoding them."""

    records: int
    null_keys: int
    min_timestamp: int | None  # over timestamps other than -1
    max_timestamp: int | None  # likewise
    max_timestamp_all: int | None  # over every record, -1 included
    sequential: bool  # offset deltas are 0, 1, 2, ...


class RecordCodec:
    """The record codec's operations, as the pure-Python reference runs them."""

    name = "reference"
    frames_runs = False  # whether frame_v2 frames anything: callers skip the call when not
    # the extension behind the codec, for the Arrow column loops and the cleaner's key map,
    # whose reference halves live beside them; None for the reference
    module: CompiledCodec | None = None

    def decode_records(
        self, data: Buffer, count: int, base_offset: int, base_timestamp: int, lat: int | None
    ) -> list[Record]:
        """The ``count`` records of a batch's (decompressed) records region; damage raises
        CorruptRecordError with the reference's words."""
        return decode_records(bytes(data), count, base_offset, base_timestamp, lat)

    def encode_records(
        self,
        records: Sequence[Record],
        base_offset: int,
        last_offset_delta: int,
        base_timestamp: int | None,
        max_timestamp: int,
        null_timestamp: int,
        keep_offsets: bool,
    ) -> EncodedRecords | None:
        """``records`` appended to a batch under construction in one call, or None when the
        builder is to append them one by one (the reference always does)."""
        return None

    def record_facts(self, records: Sequence[Record]) -> RecordFacts | None:
        """A summary of ``records`` for the append's checks, when the codec makes one in the
        same pass that checks each is a plain Record; None leaves both to the caller."""
        return None

    def producer_batch(self, data: Buffer, header_type: type[_H]) -> tuple[_H, RecordStats] | None:
        """The header and record facts of ``data`` when it is exactly one sound v2 batch as a
        producer sends it: base offset 0, its CRC right, a record count equal to its offset
        span, no control flag, a sequence wherever there is a producer id, and records that
        parse and fill it (decompressed first). Anything else answers None, and the caller's
        full validation judges it in its own words. Checks no config: the caller does."""
        view = memoryview(data).cast("B")
        size = len(view)
        if size < RECORD_BATCH_OVERHEAD or view[16] != MAGIC:
            return None
        header = tuple.__new__(header_type, HEADER_STRUCT.unpack_from(view))  # as the C builds it
        (base, length, _, _, crc, attrs, delta, base_ts, max_ts, pid, _, seq, count) = header
        if base != 0 or length + LOG_OVERHEAD != size or count <= 0 or delta != count - 1:
            return None
        codec = attrs & COMPRESSION_MASK
        if attrs & CONTROL_MASK or codec > 4 or (pid >= 0 and seq < 0):
            return None
        if crc32c(view[CRC_START:]) != crc:
            return None
        try:
            payload = view[RECORD_BATCH_OVERHEAD:]
            region = _inflate(codec, payload) if codec else payload
            lat = max_ts if attrs & TIMESTAMP_TYPE_MASK else None
            records = self.decode_records(region, count, 0, base_ts, lat)
        except (KafkaLogError, ValueError, OverflowError):
            return None
        return header, _stats_of(records)

    def frame_v2(
        self,
        buffer: Buffer,
        position: int,
        stop: int,
        limit: int,
        max_size: int,
        segment_base: int | None,
        next_offset: int,
        header_type: type[_H],
        crc: Callable[[memoryview], int] | None,
    ) -> tuple[list[_H], bool]:
        """The headers of a run of sound v2 batches from ``position`` (about ``limit`` bytes of
        them) and whether the run stopped at its limit rather than at something to judge. The
        reference frames no run: the scanner's own step judges every batch."""
        return [], False

    def search_offset(
        self, buffer: Buffer, position: int, stop: int, target: int
    ) -> tuple[int, int, int] | None:
        """(position, size, last offset) of the first whole batch from ``position`` whose last
        offset is >= ``target``, or None where the walk stops first (Kafka's
        ``FileRecords.searchForOffsetWithSize``): headers only, no CRC. A last offset that does
        not rise above the one before it, or above the found batch's in the batch after it, is
        damage (a flipped bit in a base offset is outside the CRC): CorruptRecordError."""
        position = max(position, 0)
        previous = -1
        while (found := batch_extent(buffer, position, stop)) is not None:
            size, last = found
            if last <= previous:
                raise offsets_out_of_order(position, last, previous)
            if last >= target:
                after = batch_extent(buffer, position + size, stop)
                if after is not None and after[1] <= last:
                    raise offsets_out_of_order(position + size, after[1], last)
                return position, size, last
            previous = last
            position += size
        return None


class CompiledRecordCodec(RecordCodec):
    """The operations as the compiled ``_fastcodec`` runs them: same answers, same errors."""

    name = "compiled"
    frames_runs = True

    module: CompiledCodec

    def __init__(self, module: CompiledCodec) -> None:
        self.module = module
        self._decode = module.decode_records
        self._corrupt = module.CorruptRecords
        self.encode_records = module.encode_records  # type: ignore[method-assign, assignment]
        self.record_facts = module.record_facts  # type: ignore[method-assign, assignment]
        self.frame_v2 = module.frame_v2  # type: ignore[method-assign, assignment]

    def decode_records(
        self, data: Buffer, count: int, base_offset: int, base_timestamp: int, lat: int | None
    ) -> list[Record]:
        try:  # reads the view as it is; copies what it keeps
            return self._decode(data, count, base_offset, base_timestamp, lat)
        except self._corrupt as err:  # the loop's words, as the reference's error
            raise CorruptRecordError(err.args[0]) from None

    def producer_batch(self, data: Buffer, header_type: type[_H]) -> tuple[_H, RecordStats] | None:
        found = self.module.producer_batch(data, header_type, _inflate)
        return None if found is None else (found[0], RecordStats(*found[1]))

    def search_offset(
        self, buffer: Buffer, position: int, stop: int, target: int
    ) -> tuple[int, int, int] | None:
        found = self.module.search_offset(buffer, position, stop, target)
        if found is None:
            return None
        kind, at, first, second = found
        if kind == 0:
            return at, first, second
        if kind == 1:
            raise offsets_out_of_order(at, first, second)
        return super().search_offset(buffer, position, stop, target)  # an offset beyond int64


class CompiledCodec(Protocol):
    """What ``kafkalog.records._fastcodec`` provides (``_fastcodec.pyi`` documents each)."""

    @property
    def ColumnBuilder(self) -> type[_fc.ColumnBuilder]: ...  # noqa: N802 - the C type's name
    @property
    def CorruptRecords(self) -> type[_fc.CorruptRecords]: ...  # noqa: N802
    @property
    def InvalidRecords(self) -> type[_fc.InvalidRecords]: ...  # noqa: N802
    def decode_records(
        self, data: Buffer, count: int, base_offset: int, base_timestamp: int, lat: int | None, /
    ) -> list[Record]: ...
    def producer_batch(
        self, data: Buffer, header_type: type[_H], inflate: Callable[[int, memoryview], bytes], /
    ) -> tuple[_H, tuple[int, int, int | None, int | None, int | None, bool]] | None: ...
    def encode_records(
        self,
        records: Sequence[Record],
        base_offset: int,
        last_offset_delta: int,
        base_timestamp: int | None,
        max_timestamp: int,
        null_timestamp: int,
        keep_offsets: bool,
        /,
    ) -> EncodedRecords | None: ...
    def record_facts(self, records: Sequence[Record], /) -> RecordFacts | None: ...
    def encode(
        self,
        row_start: int,
        row_end: int,
        max_bytes: int,
        keys: _fc.BinarySpec | None,
        values: _fc.BinarySpec | None,
        timestamps: tuple[Buffer | None, Buffer, int] | None,
        headers: tuple[Buffer | None, Buffer, int, _fc.BinarySpec | None, _fc.BinarySpec | None]
        | None,
        /,
    ) -> tuple[bytes, int, int, int]: ...
    def partitions_for_keys(
        self, keys: _fc.BinarySpec | None, rows: int, partitions: int, /
    ) -> bytes: ...
    def search_offset(
        self, buffer: Buffer, position: int, stop: int, target: int, /
    ) -> tuple[int, int, int, int] | None: ...
    def frame_v2(
        self,
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


def batch_extent(buffer: Buffer, pos: int, stop: int) -> tuple[int, int] | None:
    """(size, last offset) of the complete batch at ``pos``, headers only and unverified; None
    at a partial or malformed batch, where Kafka's file iterator stops."""
    if stop - pos < HEADER_SIZE_UP_TO_MAGIC:
        return None
    offset, size, _, magic = BATCH_PREFIX.unpack_from(buffer, pos)
    total = size + LOG_OVERHEAD
    if size < MIN_ENTRY_SIZE or pos + total > stop or magic > 2 or magic < 0:
        return None
    if magic != 2:
        return total, offset
    if total < RECORD_BATCH_OVERHEAD:
        return None
    return total, offset + _LAST_OFFSET_DELTA.unpack_from(buffer, pos + LAST_OFFSET_DELTA_OFFSET)[0]


def offsets_out_of_order(position: int, last: int, previous: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"batch last offset {last} does not follow the offset {previous} before it",
        position=position,
        offset=last,
    )


def _stats_of(records: Sequence[Record]) -> RecordStats:
    """The reference's RecordStats, from decoded records (their offsets start at 0)."""
    stamps = [-1 if r.timestamp is None else r.timestamp for r in records]
    real = [t for t in stamps if t != -1]
    return RecordStats(
        records=len(records),
        null_keys=sum(1 for r in records if r.key is None),
        min_timestamp=min(real, default=None),
        max_timestamp=max(real, default=None),
        max_timestamp_all=max(stamps, default=None),
        sequential=all(r.offset == i for i, r in enumerate(records)),
    )


def _inflate(codec: int, payload: memoryview) -> bytes:
    """A compressed producer batch's records, for the compiled check (which calls it)."""
    return compression.decompress(CompressionType(codec), payload)


def add_batch(
    fast: CompiledCodec, builder: _fc.ColumnBuilder, batch: V2Batch, lo: int, hi: int
) -> int:
    """Run ``batch``'s records through a compiled ColumnBuilder (those with ``lo <= offset <
    hi`` kept); damage raises CorruptRecordError as ``batch.records()`` would."""
    h = batch.header
    try:
        with batch.records_view() as data:
            return builder.add(
                data,
                h.records_count,
                h.base_offset,
                h.base_timestamp,
                bool(h.attributes & TIMESTAMP_TYPE_MASK),
                h.max_timestamp,
                1 if h.attributes & TIMESTAMP_TYPE_MASK else 0,  # TimestampType's ids
                lo,
                hi,
            )
    except fast.CorruptRecords as err:
        raise batch_error(batch, err) from None


def batch_error(batch: V2Batch, err: Exception) -> CorruptRecordError:
    """The compiled loop's complaint as the reference words it for a batch."""
    message, _ = err.args
    return batch.records_error(message)


_load_error: list[str] = []  # why the extension did not load, for the Spark executors' warning


def _load() -> CompiledCodec | None:
    try:
        module: CompiledCodec = importlib.import_module("kafkalog.records._fastcodec")
    except ImportError as err:  # not built, or built for another Python: the reference serves
        _load_error.append(str(err))
        warnings.warn(
            f"kafkalog's compiled record codec did not load ({err}); the pure-Python reference "
            "codec runs instead, several times slower (install kafkalog with a C compiler "
            "present to build it)",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    return module


_COMPILED = _load()
_REFERENCE = RecordCodec()
_COMPILED_CODEC = None if _COMPILED is None else CompiledRecordCodec(_COMPILED)
_chosen: list[RecordCodec] = [_COMPILED_CODEC or _REFERENCE]


def record_codec() -> RecordCodec:
    """The record codec in use: the compiled one when it was built, unless switched off."""
    return _chosen[0]


def compiled_codec() -> CompiledCodec | None:
    """The compiled extension if it was built, whether or not it is in use."""
    return _COMPILED


def compiled_codec_error() -> str | None:
    """Why the compiled extension did not load (the ImportError's text); None if it did."""
    return _load_error[0] if _COMPILED is None and _load_error else None


def use_fast_path(enabled: bool) -> bool:
    """Choose the compiled codec (when built) or the reference; returns whether the compiled one
    is now in use."""
    _chosen[0] = (_COMPILED_CODEC if enabled else None) or _REFERENCE
    return _chosen[0] is not _REFERENCE

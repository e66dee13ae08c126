"""Which record codec runs the per-record loops: the compiled ``_fastcodec`` or the reference.

Why: the compiled extension is optional (built by ``pip install .`` when a C compiler is
there), so it is loaded here, once, behind the ``CompiledCodec`` protocol its ``.pyi`` stub
types (``record.py`` takes only its Record type); every user asks ``fast_codec()``, or reads
``record.record_loops``, which this module switches, and otherwise runs the pure-Python
reference, which stays the specification. A build that lost the extension says so with a
warning at import.
Refuses: reading the environment (this layer does no I/O); ``kafkalog/__init__.py`` applies
``KAFKALOG_PURE_PYTHON=1``, and the tests switch per test with ``use_fast_path``.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeVar

from kafkalog.errors import CorruptRecordError
from kafkalog.records.batch import TIMESTAMP_TYPE_MASK, RecordBatch
from kafkalog.records.record import CompiledRecordLoops, record_loops
from kafkalog.types import INT64_MAX, INT64_MIN

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from kafkalog.records import _fastcodec as _fc

_H = TypeVar("_H", bound=tuple[int, ...])


class CompiledCodec(CompiledRecordLoops, Protocol):
    """What ``kafkalog.records._fastcodec`` provides (``_fastcodec.pyi`` documents each), the
    Record-object loops included."""

    @property
    def ColumnBuilder(self) -> type[_fc.ColumnBuilder]: ...  # noqa: N802 - the C type's name
    @property
    def CorruptRecords(self) -> type[_fc.CorruptRecords]: ...  # noqa: N802
    @property
    def InvalidRecords(self) -> type[_fc.InvalidRecords]: ...  # noqa: N802
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
_state = {"enabled": True}


record_loops.use(_COMPILED)


def compiled_codec() -> CompiledCodec | None:
    """The compiled extension if it was built, whether or not it is in use."""
    return _COMPILED


def compiled_codec_error() -> str | None:
    """Why the compiled extension did not load (the ImportError's text); None if it did."""
    return _load_error[0] if _COMPILED is None and _load_error else None


def fast_codec() -> CompiledCodec | None:
    """The compiled extension, or None when the reference is in use."""
    return _COMPILED if _state["enabled"] else None


def use_fast_path(enabled: bool) -> bool:
    """Choose the compiled codec (when built) or the reference; returns whether the compiled one
    is now in use."""
    _state["enabled"] = enabled
    record_loops.use(_COMPILED if enabled else None)
    return fast_codec() is not None


class RecordStats(NamedTuple):
    """What the leader's validation needs from a batch's records, without decoding them."""

    records: int
    null_keys: int
    min_timestamp: int | None  # over timestamps other than -1
    max_timestamp: int | None  # likewise
    max_timestamp_all: int | None  # over every record, -1 included
    sequential: bool  # offset deltas are 0, 1, 2, ...


def record_stats(batch: RecordBatch) -> RecordStats | None:
    """The batch's RecordStats from the compiled loop, or None when it is not in use. Damage
    raises CorruptRecordError as ``batch.records()`` would."""
    fast = fast_codec()
    if fast is None:
        return None
    builder = fast.ColumnBuilder(False, 1, True)
    add_batch(fast, builder, batch, INT64_MIN, INT64_MAX)
    return RecordStats(*builder.stats())


def add_batch(
    fast: CompiledCodec, builder: _fc.ColumnBuilder, batch: RecordBatch, lo: int, hi: int
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


def batch_error(batch: RecordBatch, err: Exception) -> CorruptRecordError:
    """The compiled loop's complaint as the reference words it for a batch."""
    message, _ = err.args
    return batch.records_error(message)

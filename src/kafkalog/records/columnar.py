"""Records as Arrow columns: decode batches into columns and encode columns into v2 batches.

Why: Arrow consumers (Spark, ``to_arrow``) and column producers (the Spark sink,
``MemoryRecords.from_arrow``) must not pay a Python object per record. The per-record loop runs
in the compiled ``_fastcodec`` extension when it was built; otherwise in the pure-Python
reference codec, with identical results and errors (``KAFKALOG_PURE_PYTHON=1`` forces the
reference, which is how the test suite runs against both). Batch framing, CRCs and compression
stay in Python, once per batch. Refuses: legacy v0/v1 encoding (those read through the
reference decoder), and rows Kafka's builder refuses (negative timestamps, null header keys).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from kafkalog.errors import CorruptRecordError, InvalidArgumentError
from kafkalog.records.batch import RecordBatch
from kafkalog.records.codec import add_batch, record_codec
from kafkalog.records.scanner import AnyBatch
from kafkalog.types import INT64_MAX, INT64_MIN, NO_TIMESTAMP

ARROW_HEADERS_TYPE = pa.list_(
    pa.field(
        "element",
        pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]),
    )
)


def timestamp_type(unit: str) -> pa.DataType:
    return pa.timestamp(unit, tz="UTC")


class RecordColumns:
    """Accumulates the records of batches as columns: offset, timestamp, timestampType, key,
    value and (optionally) headers. A record with no headers has null headers, as in Spark's
    Kafka source. Not thread-safe; ``finish`` returns the arrays and starts over."""

    def __init__(
        self, *, with_headers: bool = True, timestamp_unit: str = "ms", values: bool = True
    ) -> None:
        if timestamp_unit not in ("ms", "us"):
            raise InvalidArgumentError(
                f"timestamp_unit must be 'ms' or 'us', not {timestamp_unit!r}"
            )
        self.with_headers = with_headers
        self.unit = timestamp_unit
        self._scale = 1000 if timestamp_unit == "us" else 1
        self._chunks: list[list[pa.Array]] = []
        fast = record_codec().module
        self._fast_module = fast
        self._fast = (
            fast.ColumnBuilder(with_headers, self._scale, False, values)
            if fast is not None
            else None
        )
        self._py: dict[str, list[Any]] = {k: [] for k in _PY_COLUMNS}

    @property
    def rows(self) -> int:
        n = len(self._py["offset"]) + sum(len(c[0]) for c in self._chunks)
        return n + (self._fast.rows if self._fast is not None else 0)

    def add_batch(self, batch: AnyBatch, lo: int = 0, hi: int = INT64_MAX) -> int:
        """Add the records of ``batch`` with ``lo <= offset < hi``; returns how many. Damage
        raises CorruptRecordError and adds nothing."""
        fast, builder = self._fast_module, self._fast
        if fast is None or builder is None or not isinstance(batch, RecordBatch):
            if self._fast is not None and self._fast.rows:
                self._chunks.append(self._finish_fast())
            return self._add_py(batch, lo, hi)
        if self._py["offset"]:
            self._chunks.append(self._finish_py())  # keep offset order across kinds of batch
        return add_batch(fast, builder, batch, lo, hi)

    def _add_py(self, batch: AnyBatch, lo: int, hi: int) -> int:
        records = batch.records()  # the whole batch decodes (and fails) before any row lands
        ts_type = int(batch.timestamp_type)
        kept = [r for r in records if lo <= r.offset < hi]
        scale = self._scale
        stamps = []
        for r in kept:
            ts = (NO_TIMESTAMP if r.timestamp is None else r.timestamp) * scale
            if not INT64_MIN <= ts <= INT64_MAX:
                raise CorruptRecordError(
                    f"batch records are invalid: record timestamp {r.timestamp} does not fit "
                    "in 64 bits",
                    offset=batch.base_offset,
                )
            stamps.append(ts)
        py = self._py
        py["offset"].extend(r.offset for r in kept)
        py["timestamp"].extend(stamps)
        py["timestampType"].extend(ts_type for _ in kept)
        py["key"].extend(r.key for r in kept)
        py["value"].extend(r.value for r in kept)
        if self.with_headers:
            py["headers"].extend(
                [{"key": k, "value": v} for k, v in r.headers] if r.headers else None for r in kept
            )
        return len(kept)

    def _finish_py(self) -> list[pa.Array]:
        py = self._py
        out = [
            pa.array(py["offset"], pa.int64()),
            pa.array(py["timestamp"], pa.int64()).view(timestamp_type(self.unit)),
            pa.array(py["timestampType"], pa.int32()),
            pa.array(py["key"], pa.binary()),
            pa.array(py["value"], pa.binary()),
        ]
        if self.with_headers:
            out.append(pa.array(py["headers"], ARROW_HEADERS_TYPE))
        for column in py.values():
            column.clear()
        return out

    def _finish_fast(self) -> list[pa.Array]:
        assert self._fast is not None
        n, offsets, stamps, types, key, value, headers = self._fast.finish()
        out = [
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(offsets)]),
            pa.Array.from_buffers(timestamp_type(self.unit), n, [None, pa.py_buffer(stamps)]),
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(types)]),
            _binary(pa.binary(), n, key),
            _binary(pa.binary(), n, value),
        ]
        if headers is not None:
            bits, nulls, list_offsets, count, hkey, hvalue = headers
            struct = pa.StructArray.from_arrays(
                [_binary(pa.string(), count, hkey), _binary(pa.binary(), count, hvalue)],
                fields=list(ARROW_HEADERS_TYPE.value_type),
            )
            out.append(
                pa.Array.from_buffers(
                    ARROW_HEADERS_TYPE,
                    n,
                    [_buffer(bits), pa.py_buffer(list_offsets)],
                    null_count=nulls,
                    children=[struct],
                )
            )
        return out

    def finish(self) -> list[pa.Array]:
        """offset, timestamp, timestampType, key, value[, headers] -- and start over."""
        chunks = self._chunks
        self._chunks = []
        if self._fast is not None and (self._fast.rows or not chunks):
            chunks.append(self._finish_fast())
        if self._py["offset"] or not chunks:
            chunks.append(self._finish_py())
        if len(chunks) == 1:
            return chunks[0]
        return [pa.concat_arrays(list(parts)) for parts in zip(*chunks, strict=True)]

    def to_table(self) -> pa.Table:
        names = ["offset", "timestamp", "timestampType", "key", "value"]
        return pa.Table.from_arrays(self.finish(), names + ["headers"] * self.with_headers)


_PY_COLUMNS = ("offset", "timestamp", "timestampType", "key", "value", "headers")


def _buffer(data: bytes | None) -> pa.Buffer | None:
    return None if data is None else pa.py_buffer(data)


def _binary(kind: pa.DataType, n: int, parts: tuple[Any, ...]) -> pa.Array:
    bits, nulls, offsets, data = parts
    return pa.Array.from_buffers(
        kind, n, [_buffer(bits), pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls
    )


def batches_to_table(
    batches: Iterable[AnyBatch], *, include_headers: bool = True, include_control: bool = False
) -> pa.Table:
    """The records of ``batches`` as a table (control records only when asked)."""
    columns = RecordColumns(with_headers=include_headers)
    for batch in batches:
        if include_control or not batch.is_control:
            columns.add_batch(batch)
    return columns.to_table()

"""Arrow columns -> v2 record batches (``MemoryRecords.from_arrow``, the Spark sink).

Why: producing from columns must not build a ``Record`` per row. Rows are cut into batches of
at most ``batch_size`` bytes of records (always at least one row), each framed as Kafka's
builder frames it: offset deltas 0..n-1, the first row's timestamp as the base timestamp, the
topic's codec, and a CRC-32C. The compiled extension encodes the records region when built;
the reference path encodes the same bytes record by record. Refuses: a missing ``value``
column, columns of the wrong type, negative timestamps other than -1, null header keys.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kafkalog.errors import InvalidArgumentError, InvalidRecordError
from kafkalog.records import compression as codecs
from kafkalog.records.batch import make_attributes
from kafkalog.records.builder import frame_batch
from kafkalog.records.codec import CompiledCodec, record_codec
from kafkalog.records.columnar import ARROW_HEADERS_TYPE
from kafkalog.records.partitioner import partition_for_key
from kafkalog.records.record import encode_record
from kafkalog.records.v2_layout import MAGIC
from kafkalog.types import NO_TIMESTAMP, CompressionType, TimestampType

DEFAULT_BATCH_SIZE = 1 << 20


def record_columns(data: pa.Table | pa.RecordBatch) -> dict[str, pa.Array]:
    """The ``value`` (required), ``key``, ``timestamp`` (ms) and ``headers`` columns of
    ``data`` (names matched case-insensitively), as single arrays of the codec's types."""
    names = {n.lower(): n for n in data.schema.names}
    if "value" not in names:
        raise InvalidArgumentError("records need a 'value' column (binary or string)")
    out: dict[str, pa.Array] = {}
    for name, kind in (
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("timestamp", pa.int64()),
        ("headers", ARROW_HEADERS_TYPE),
    ):
        if name not in names:
            continue
        column = data.column(names[name])
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        try:
            if name == "timestamp" and pa.types.is_timestamp(column.type):
                # Spark's timestamps are microseconds; Kafka keeps milliseconds (truncated)
                ms = pa.timestamp("ms", tz=column.type.tz)
                column = column.cast(ms, safe=False).view(pa.int64())
            out[name] = column.cast(kind)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as err:
            raise InvalidArgumentError(
                f"column '{names[name]}' of type {column.type} cannot be record {name}s: {err}"
            ) from err
    headers = out.get("headers")
    if headers is not None and headers.values.null_count:
        raise InvalidRecordError("a header must be a (key, value) struct, not null")
    return out


def encode_batches(
    columns: dict[str, pa.Array],
    *,
    compression: CompressionType = CompressionType.NONE,
    compression_level: int | None = None,
    base_offset: int = 0,
    batch_size: int = DEFAULT_BATCH_SIZE,
    as_producer: bool = False,
) -> list[bytes]:
    """Frame the rows of ``columns`` as v2 batches with consecutive offsets from
    ``base_offset`` -- or, ``as_producer``, each batch from offset 0 as a producer sends it."""
    if batch_size < 1:
        raise InvalidArgumentError(f"batch_size must be >= 1, not {batch_size}")
    n = len(columns["value"])
    fast = record_codec().module
    if fast is not None:
        regions = _regions_fast(fast, columns, n, batch_size)
    else:
        regions = _regions_py(columns, n, batch_size)
    attributes = make_attributes(compression, TimestampType.CREATE_TIME, False, False, False)
    level = codecs.check_level(compression, compression_level)
    out = []
    offset = base_offset
    for region, rows, base_ts, max_ts in regions:
        payload = (
            codecs.compress(compression, region, magic=MAGIC, level=level)
            if compression is not CompressionType.NONE
            else region
        )
        out.append(
            frame_batch(
                offset,
                len(payload),
                -1,
                attributes,
                rows - 1,
                base_ts,
                max_ts,
                -1,
                -1,
                -1,
                rows,
                payload,
            )
        )
        offset += 0 if as_producer else rows
    return out


Region = tuple[bytes, int, int, int]  # records region, rows, base timestamp, max timestamp


def _spec(array: pa.Array | None) -> tuple[Any, ...] | None:
    if array is None:
        return None
    validity, offsets, data = array.buffers()[:3]
    return (validity if array.null_count else None, offsets, data or b"", array.offset)


def _regions_fast(
    fast: CompiledCodec, columns: dict[str, pa.Array], n: int, batch_size: int
) -> list[Region]:
    stamps = columns.get("timestamp")
    ts_spec = None
    if stamps is not None:
        validity, values = stamps.buffers()[:2]
        ts_spec = (validity if stamps.null_count else None, values, stamps.offset)
    headers = columns.get("headers")
    h_spec = None
    if headers is not None:
        validity, list_offsets = headers.buffers()[:2]
        hkey, hvalue = headers.values.flatten()
        h_spec = (
            validity if headers.null_count else None,
            list_offsets,
            headers.offset,
            _spec(hkey),
            _spec(hvalue),
        )
    k_spec, v_spec = _spec(columns.get("key")), _spec(columns["value"])
    out = []
    row = 0
    while row < n:
        try:
            region, rows, base_ts, max_ts = fast.encode(
                row, n, batch_size, k_spec, v_spec, ts_spec, h_spec
            )
        except fast.InvalidRecords as err:
            raise InvalidRecordError(str(err)) from None
        out.append((region, rows, base_ts, max_ts))
        row += rows
    return out


def _regions_py(columns: dict[str, pa.Array], n: int, batch_size: int) -> list[Region]:
    def values(name: str) -> list[Any]:
        column = columns.get(name)
        return column.to_pylist() if column is not None else [None] * n

    keys, vals, stamps, headers = (values(c) for c in ("key", "value", "timestamp", "headers"))
    out: list[Region] = []
    parts: list[bytes] = []
    size = 0
    base_ts = max_ts = NO_TIMESTAMP
    for i in range(n):
        ts = NO_TIMESTAMP if stamps[i] is None else stamps[i]
        if ts < 0 and ts != NO_TIMESTAMP:
            raise InvalidRecordError(f"invalid negative timestamp {ts} (row {i})")
        hs = headers[i] or ()
        for j, h in enumerate(hs):
            if h["key"] is None:
                raise InvalidRecordError(f"header {j} of row {i} has a null key")
        pairs = [(h["key"], h["value"]) for h in hs]
        first = not parts
        record = encode_record(len(parts), ts - (ts if first else base_ts), keys[i], vals[i], pairs)
        if not first and size + len(record) > batch_size:
            out.append((b"".join(parts), len(parts), base_ts, max_ts))
            parts, size, first = [], 0, True
            record = encode_record(0, 0, keys[i], vals[i], pairs)
        if first:
            base_ts, max_ts = ts, NO_TIMESTAMP
        parts.append(record)
        size += len(record)
        max_ts = max(max_ts, ts)
    if parts:
        out.append((b"".join(parts), len(parts), base_ts, max_ts))
    return out


def partitions_for_keys(keys: pa.Array, partitions: int) -> pa.Array:
    """Kafka's default partitioner over a key column: int32 partition per row, null where the
    key is null (the caller's sticky placement decides those)."""
    if partitions < 1:
        raise InvalidArgumentError(f"a topic needs at least one partition, not {partitions}")
    keys = keys.cast(pa.binary())
    fast = record_codec().module
    if fast is None:
        return pa.array(
            [None if k is None else partition_for_key(k, partitions) for k in keys.to_pylist()],
            pa.int32(),
        )
    raw = fast.partitions_for_keys(_spec(keys), len(keys), partitions)
    placed = pa.Array.from_buffers(pa.int32(), len(keys), [None, pa.py_buffer(raw)])
    return pc.if_else(keys.is_null(), pa.scalar(None, pa.int32()), placed)

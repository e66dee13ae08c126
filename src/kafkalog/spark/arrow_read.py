"""Executor side of a read: one OffsetRange of a partition directory -> Arrow record batches.

Why: Spark takes Arrow in at millions of rows/s but Python tuples at ~0.2 M, so rows reach Spark
only as ``pyarrow.RecordBatch`` in exactly the Kafka source's schema (nullable fields, int32
partition, ``timestamp[us, UTC]``, ``headers`` null rather than empty). The range is read
through a PartitionView, so a writer in another process may be appending: only complete,
CRC-checked batches are served. Records become columns in kafkalog.records.columnar (the
compiled fast path when built), never Python objects. Refuses: control records and aborted records
(under read_committed) as rows.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from kafkalog.errors import CorruptRecordError
from kafkalog.records.columnar import ARROW_HEADERS_TYPE, RecordColumns
from kafkalog.records.committed import committed_batches_in_one_pass
from kafkalog.records.scanner import AnyBatch
from kafkalog.spark.executor_codec import check_executor_codec
from kafkalog.spark.planning import OffsetRange, View, data_loss

ROWS_PER_BATCH = 10_000


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Kafka source's schema as Spark converts it to Arrow (every field nullable)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", ARROW_HEADERS_TYPE))
    return pa.schema(fields)


def _batches(r: OffsetRange, view: View, start: int) -> Iterator[AnyBatch]:
    if r.read_committed:  # one walk: markers past the end are read only to decide what is held
        yield from committed_batches_in_one_pass(view.batches(start), r.end, view.batches)
        return
    for batch in view.batches(start, r.end):
        if not batch.is_control:
            yield batch


def read_range(r: OffsetRange, schema: pa.Schema | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of ``r`` in offset order, ``ROWS_PER_BATCH`` at a time."""
    check_executor_codec()
    schema = schema if schema is not None else arrow_schema(r.include_headers)
    view = r.view()
    start = r.start
    log_start = view.log_start_offset()
    if start < log_start:
        data_loss(
            f"offset {start} of {r.topic}-{r.partition} was removed before it was read "
            f"(log start offset {log_start})",
            r.fail_on_data_loss,
        )
        start = log_start
    if start >= r.end:
        return
    columns = RecordColumns(with_headers=r.include_headers, timestamp_unit="us")
    topic = pa.scalar(r.topic, pa.string())
    partition = pa.scalar(r.partition, pa.int32())

    # the topic and partition columns of the last flush: consecutive ones are often as long
    constants: list[pa.Array] = [pa.repeat(topic, 0), pa.repeat(partition, 0)]

    def flush() -> pa.RecordBatch:
        offset, timestamp, ts_type, key, value, *headers = columns.finish()
        n = len(offset)
        if len(constants[0]) != n:
            constants[:] = [pa.repeat(topic, n), pa.repeat(partition, n)]
        topic_col, partition_col = constants
        arrays = [key, value, topic_col, partition_col, offset, timestamp, ts_type, *headers]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    read_to = start
    try:
        for batch in _batches(r, view, start):
            if batch.next_offset <= start:
                continue
            if batch.base_offset >= r.end:
                break
            columns.add_batch(batch, start, r.end)
            read_to = batch.next_offset
            if columns.rows >= ROWS_PER_BATCH:
                yield flush()
    except CorruptRecordError as err:
        # corrupt bytes are never served: fail, or (failOnDataLoss=false) say what is skipped
        data_loss(
            f"{r.topic}-{r.partition} is corrupt after offset {read_to - 1} ({err}); offsets "
            f"{read_to} to {r.end - 1} of this read were skipped",
            r.fail_on_data_loss,
        )
    if columns.rows:
        yield flush()

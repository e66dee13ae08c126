"""The cleaner's per-record loops on the compiled codec: map a batch's keys, filter its records.

Why: a cleaning round parses every dirty record twice; ``_fastcodec.KeyOffsetMap`` does both
passes without Record objects. This module turns its tuples into named results and its
complaints into the errors the reference raises for the same batch. Refuses: the decisions
about whole batches (kafkalog.cleaner.policy) and running when the compiled codec is off:
callers ask ``compiled_offset_map`` and keep the reference path when it returns None.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from kafkalog.errors import InvalidRecordError
from kafkalog.records.batch import TIMESTAMP_TYPE_MASK, RecordBatch
from kafkalog.records.fastpath import batch_error, fast_codec


def compiled_offset_map(limit: int) -> Any | None:
    """A compiled key -> latest offset map holding at most ``limit`` keys, or None when the
    reference codec is in use."""
    fast = fast_codec()
    return None if fast is None else fast.KeyOffsetMap(limit)


class RetainedRecords(NamedTuple):
    """What survived of one v2 batch's records (see ``filter_records``)."""

    read: int
    kept: int
    invalid: int  # keyless records dropped
    region: bytes | None  # re-encoded kept records; None: all kept as they are, or none kept
    base_timestamp: int
    max_timestamp: int
    delete_horizon: int | None
    last_kept_delta: int


def _timestamps(batch: RecordBatch) -> tuple[int, bool, int]:
    h = batch.header
    return h.base_timestamp, bool(h.attributes & TIMESTAMP_TYPE_MASK), h.max_timestamp


def map_batch(offset_map: Any, batch: RecordBatch, start: int) -> tuple[int, bool]:
    """Put the keys of ``batch``'s records at or above ``start``; (records read, map full).
    Damage raises CorruptRecordError as ``batch.records()`` would, before any key is put."""
    fast = fast_codec()
    assert fast is not None
    h = batch.header
    try:
        read, full = offset_map.map_records(
            batch.records_data(), h.records_count, h.base_offset, *_timestamps(batch), start
        )
    except fast.CorruptRecords as err:
        raise batch_error(batch, err) from None
    return int(read), bool(full)


def filter_records(
    offset_map: Any, batch: RecordBatch, *, keep_tombstones: bool, new_horizon: int
) -> RetainedRecords:
    """The cleaner's per-record rule over ``batch`` (kafkalog.cleaner.policy.retain_record);
    kept records come back re-encoded as the reference rebuild writes them."""
    fast = fast_codec()
    assert fast is not None
    h = batch.header
    horizon = h.delete_horizon_ms
    try:
        out = offset_map.filter_records(
            batch.records_data(),
            h.records_count,
            h.base_offset,
            *_timestamps(batch),
            keep_tombstones,
            horizon is not None,
            0 if horizon is None else horizon,
            new_horizon,
        )
    except fast.CorruptRecords as err:
        raise batch_error(batch, err) from None
    except fast.InvalidRecords as err:
        raise InvalidRecordError(str(err.args[0])) from None
    return RetainedRecords(*out)

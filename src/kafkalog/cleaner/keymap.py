"""The cleaner's compiled key map (``_keymap``): map a batch's keys, filter its records.

Why: a cleaning round parses every dirty record twice; ``_keymap.KeyOffsetMap`` does both
passes without Record objects, one batch at a time or, for runs of plain batches (uncompressed,
neither transactional nor control), a whole run per call with no Python between batches. This
module turns its tuples into named results and its complaints into the errors the reference
raises for the same batch. Refuses: the decisions about whole batches (kafkalog.cleaner.policy
passes in what the runs need: the upper bound, the producers whose last batch must stay) and
running when the compiled codec is off: callers ask ``compiled_offset_map`` and keep the
reference path when it returns None.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any, NamedTuple

from kafkalog.errors import InvalidRecordError
from kafkalog.records.batch import RecordBatch
from kafkalog.records.codec import batch_error, compiled_codec, record_codec
from kafkalog.records.crc import crc32c
from kafkalog.records.filter import RetainedRecords
from kafkalog.records.v2_layout import TIMESTAMP_TYPE_MASK

if TYPE_CHECKING:
    from kafkalog.cleaner._keymap import KeyOffsetMap

try:  # by name: the extension may not have been built
    _COMPILED_MAP: type[KeyOffsetMap] | None = importlib.import_module(
        "kafkalog.cleaner._keymap"
    ).KeyOffsetMap
except ImportError as err:  # not built: the cleaner's Python map serves
    _COMPILED_MAP = None
    if compiled_codec() is not None:  # built beside the codec, so it should be here too
        warnings.warn(f"the cleaner's compiled key map did not load ({err})", stacklevel=1)


def compiled_offset_map(limit: int, log_limit: int = 0) -> KeyOffsetMap | None:
    """A compiled key -> latest offset map holding at most ``limit`` keys, whose key scan keeps
    up to ``log_limit`` bytes of notes for the recopy; None when the reference is in use."""
    if _COMPILED_MAP is None or record_codec().module is None:
        return None
    return _COMPILED_MAP(limit, log_limit)


def _timestamps(batch: RecordBatch) -> tuple[int, bool, int]:
    h = batch.header
    return h.base_timestamp, bool(h.attributes & TIMESTAMP_TYPE_MASK), h.max_timestamp


def map_batch(offset_map: KeyOffsetMap, batch: RecordBatch, start: int) -> tuple[int, bool]:
    """Put the keys of ``batch``'s records at or above ``start``; (records read, map full).
    Damage raises CorruptRecordError as ``batch.records()`` would, before any key is put."""
    fast = compiled_codec()  # the map is compiled, so the extension was built
    assert fast is not None
    h = batch.header
    try:
        with batch.records_view() as data:
            read, full = offset_map.map_records(
                data, h.records_count, h.base_offset, *_timestamps(batch), start
            )
    except fast.CorruptRecords as err:
        raise batch_error(batch, err) from None
    return int(read), bool(full)


def filter_records(
    offset_map: KeyOffsetMap, batch: RecordBatch, *, keep_tombstones: bool, new_horizon: int
) -> RetainedRecords:
    """The cleaner's per-record rule over ``batch`` (kafkalog.cleaner.policy.retain_record);
    kept records come back re-encoded as the reference rebuild writes them."""
    fast = compiled_codec()  # the map is compiled, so the extension was built
    assert fast is not None
    h = batch.header
    horizon = h.delete_horizon_ms
    try:
        with batch.records_view() as data:
            out = offset_map.filter_records(
                data,
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


class MappedRegion(NamedTuple):
    """How far ``map_region`` walked: ``position`` is where the next batch starts."""

    position: int
    read: int
    full: bool


def map_region(
    offset_map: KeyOffsetMap,
    buffer: Any,
    segment: int,
    position: int,
    until: int,
    *,
    start: int,
    max_batch_size: int,
) -> MappedRegion:
    """``map_batch`` over the batches from ``position`` that need no decision of their own:
    uncompressed v2 batches that are neither transactional nor control batches and fit in
    ``max_batch_size``. It stops at ``until`` or at the first other batch, damaged ones
    included, which the caller reads through the scanner (whose errors are the reference's);
    ``full`` stops it at the batch during which the map filled up. ``buffer`` is the data of
    the segment whose base offset is ``segment``: the map notes what it parsed there, within
    its log limit, so ``filter_region`` over the same segment need not parse it again."""
    end = len(buffer)
    pos, read, full = offset_map.map_region(
        buffer, segment, position, until, end, start, max_batch_size
    )
    return MappedRegion(int(pos), int(read), bool(full))


class FilteredRegion(NamedTuple):
    """How far ``filter_region`` walked, and the batches it wrote, in order: (position, size,
    last offset, max timestamp, rebuilt), at a position in ``rebuilt`` if rebuilt, else in the
    buffer walked (a batch kept whole)."""

    position: int
    read: int
    kept: int
    invalid: int
    batches: list[tuple[int, int, int, int, bool]]
    rebuilt: bytes


def filter_region(
    offset_map: KeyOffsetMap,
    buffer: Any,
    segment: int,
    position: int,
    until: int,
    *,
    max_batch_size: int,
    upper_bound_offset: int,
    last_producer_ids: set[int],
    current_time: int,
    new_horizon: int,
) -> FilteredRegion:
    """The recopy of the batches ``map_region`` would take: dropped, kept whole or rebuilt as
    ``filter_records`` and the reference builder rebuild them (a kept tombstone stamping
    ``new_horizon``). It stops at the last batch of a producer in ``last_producer_ids``, at
    the batch ending at ``upper_bound_offset``, at a rebuild the reference builder refuses and
    at damage."""
    pos, read, kept, invalid, batches, rebuilt = offset_map.filter_region(
        buffer,
        segment,
        position,
        until,
        len(buffer),
        max_batch_size,
        upper_bound_offset,
        last_producer_ids,
        current_time,
        new_horizon,
        crc32c,
    )
    return FilteredRegion(int(pos), int(read), int(kept), int(invalid), batches, rebuilt)

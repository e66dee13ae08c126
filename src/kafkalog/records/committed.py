"""What a READ_COMMITTED consumer keeps of a fetch: batches minus aborted data and control batches.

Why: a READ_COMMITTED fetch returns raw batches up to the last stable offset plus the list of
aborted transactions overlapping them; dropping the aborted ones is the consumer's job. This is
the rule Kafka's consumer applies, so a reader of kafkalog sees exactly what a Java consumer
would. ``aborted_from_markers`` derives the same list from the batches themselves (their ABORT
markers), for readers that cannot trust a ``.txnindex``: one that is missing or was copied from
elsewhere must never make aborted records look committed. Refuses: I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

from kafkalog.records.control import decode_control_key
from kafkalog.records.record import Record
from kafkalog.records.scanner import AnyBatch
from kafkalog.types import ControlRecordType


class AbortedTransaction(NamedTuple):
    """An aborted transaction as a fetch reports it: its producer and first offset."""

    producer_id: int
    first_offset: int


def _is_abort_marker(batch: AnyBatch) -> bool:
    if not batch.is_control:
        return False
    records = batch.records()
    if not records:
        return False
    return decode_control_key(records[0].key).type is ControlRecordType.ABORT


def is_abort_marker(batch: AnyBatch) -> bool:
    """Whether ``batch`` is a transaction's ABORT marker."""
    return _is_abort_marker(batch)


class DecidedAbort(NamedTuple):
    """An aborted transaction as its ABORT marker decides it: producer, first offset in the
    range asked for, and the offset of the marker."""

    producer_id: int
    first_offset: int
    marker_offset: int


def aborts_decided_by_markers(
    batches: Iterable[AnyBatch], start: int, end: int
) -> list[DecidedAbort]:
    """The aborted transactions with data in ``[start, end)``, decided by their markers.

    ``batches`` run from the batch holding ``start`` on, possibly past ``end``: a transaction
    with data below ``end`` is decided by its producer's next control batch, which may come
    later (it comes before the last stable offset). The walk stops as soon as every such
    transaction is decided; one never decided within ``batches`` is reported as aborted only if
    it was, so callers pass every batch up to the log end.
    """
    open_first: dict[int, int] = {}  # producer -> first offset of its transaction seen here
    found: list[DecidedAbort] = []
    for batch in batches:
        if batch.base_offset >= end and not open_first:
            break
        pid = batch.producer_id
        if pid < 0 or not batch.is_transactional or batch.last_offset < start:
            continue
        if batch.is_control:
            first = open_first.pop(pid, None)
            if first is not None and _is_abort_marker(batch):
                found.append(DecidedAbort(pid, first, batch.last_offset))
        elif batch.base_offset < end:
            open_first.setdefault(pid, max(batch.base_offset, start))
    return sorted(found, key=lambda t: t.first_offset)


def aborted_from_markers(
    batches: Iterable[AnyBatch], start: int, end: int
) -> list[AbortedTransaction]:
    """``aborts_decided_by_markers`` as a fetch reports them (producer and first offset)."""
    return [
        AbortedTransaction(a.producer_id, a.first_offset)
        for a in aborts_decided_by_markers(batches, start, end)
    ]


def committed_batches(
    batches: Iterable[AnyBatch], aborted: Iterable[AbortedTransaction]
) -> Iterator[AnyBatch]:
    """The data batches a READ_COMMITTED consumer returns, in order.

    A producer's aborted transaction becomes active once a batch reaches its first offset; its
    transactional batches are skipped until that producer's ABORT marker. Control batches are
    never returned.
    """
    pending = sorted(aborted, key=lambda t: t.first_offset)
    next_pending = 0
    aborted_producers: set[int] = set()
    for batch in batches:
        pid = batch.producer_id
        if pid >= 0:
            last = batch.last_offset
            while next_pending < len(pending) and pending[next_pending].first_offset <= last:
                aborted_producers.add(pending[next_pending].producer_id)
                next_pending += 1
            if _is_abort_marker(batch):
                aborted_producers.discard(pid)
            elif batch.is_transactional and pid in aborted_producers:
                continue
        if not batch.is_control:
            yield batch


def committed_records(
    batches: Iterable[AnyBatch], aborted: Iterable[AbortedTransaction], start_offset: int = 0
) -> Iterator[Record]:
    """The records of ``committed_batches`` at or after ``start_offset``."""
    for batch in committed_batches(batches, aborted):
        for rec in batch.records():
            if rec.offset >= start_offset:
                yield rec

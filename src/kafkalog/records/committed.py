"""What a READ_COMMITTED consumer keeps of a fetch: batches minus aborted data and control batches.

Why: a READ_COMMITTED fetch returns raw batches up to the last stable offset plus the list of
aborted transactions overlapping them; dropping the aborted ones is the consumer's job. This is
the rule Kafka's consumer applies, so a reader of kafkalog sees exactly what a Java consumer
would. Refuses: I/O, and deciding which transactions aborted (the log's transaction index does).
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

"""What a READ_COMMITTED consumer keeps of a fetch: batches minus aborted data and control batches.

Why: a READ_COMMITTED fetch returns raw batches up to the last stable offset plus the list of
aborted transactions overlapping them; dropping the aborted ones is the consumer's job. This is
the rule Kafka's consumer applies, so a reader of kafkalog sees exactly what a Java consumer
would. ``aborted_from_markers`` derives the same list from the batches themselves (their ABORT
markers), for readers that cannot trust a ``.txnindex``: one that is missing or was copied from
elsewhere must never make aborted records look committed. Refuses: I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
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


class _Transaction:
    """One producer's transaction as the one-pass walk meets it: undecided until its marker."""

    __slots__ = ("aborted", "decided")

    def __init__(self) -> None:
        self.decided = False
        self.aborted = False


# how much a one-pass read holds back behind an undecided transaction before it reads the
# rest in two passes instead (a transaction left open across much data would hold it all)
MAX_HELD_BYTES = 64 << 20


def committed_batches_in_one_pass(
    batches: Iterable[AnyBatch],
    end: int,
    reread: Callable[[int], Iterable[AnyBatch]],
    max_held_bytes: int = MAX_HELD_BYTES,
) -> Iterator[AnyBatch]:
    """``committed_batches`` below ``end`` with each transaction decided by its marker as the
    walk reaches it, so the batches are read once rather than once for the aborted list and
    again for the data.

    ``batches`` run from the batch holding the start on, to the log end. A transactional batch,
    and every batch after it, is held until its producer's next control batch decides it
    (COMMIT: returned; ABORT: dropped); past ``end`` only control batches are looked at, until
    nothing is held. A transaction the log never decides is returned, as in
    ``aborts_decided_by_markers``. Once more than ``max_held_bytes`` are held, the rest is read
    in two passes from the first held batch: ``reread(offset)`` yields the batches from there
    again."""
    held: deque[tuple[AnyBatch, _Transaction | None]] = deque()
    held_bytes = 0
    open_txns: dict[int, _Transaction] = {}
    for batch in batches:
        if batch.base_offset >= end and not held:
            return
        pid = batch.producer_id
        if batch.is_control:
            txn = open_txns.pop(pid, None)
            if txn is not None:
                txn.decided, txn.aborted = True, _is_abort_marker(batch)
        elif batch.base_offset >= end:
            continue  # only a marker deciding what is held matters now
        elif batch.is_transactional and pid >= 0:
            txn = open_txns.get(pid)
            if txn is None:
                txn = open_txns[pid] = _Transaction()
            held.append((batch, txn))
            held_bytes += batch.size_in_bytes
        elif held:
            held.append((batch, None))
            held_bytes += batch.size_in_bytes
        else:
            yield batch
            continue
        while held and (held[0][1] is None or held[0][1].decided):
            first, txn = held.popleft()
            held_bytes -= first.size_in_bytes
            if txn is None or not txn.aborted:
                yield first
        if held_bytes > max_held_bytes:
            at = held[0][0].base_offset
            aborted = aborted_from_markers(reread(at), at, end)
            for rest in committed_batches(reread(at), aborted):
                if rest.base_offset >= end:
                    return
                yield rest
            return
    for first, txn in held:  # the log ended with these undecided
        if txn is None or not txn.aborted:
            yield first


def committed_records(
    batches: Iterable[AnyBatch], aborted: Iterable[AbortedTransaction], start_offset: int = 0
) -> Iterator[Record]:
    """The records of ``committed_batches`` at or after ``start_offset``."""
    for batch in committed_batches(batches, aborted):
        for rec in batch.records():
            if rec.offset >= start_offset:
                yield rec

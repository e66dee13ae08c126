"""The cleaner's per-batch and per-record rules (Kafka's Cleaner.cleanInto and shouldRetainRecord):
what stays, what goes.

Why: these rules decide which data a compacted topic keeps forever and which it loses, so they
live apart from the I/O that applies them: aborted transactional data goes at once, commit and
abort markers stay until their transaction's data is gone and a delete horizon has passed, the
last batch of every active producer stays (even empty) so duplicate detection survives, and a
key keeps only its latest record, a tombstone only until its horizon.
Refuses: reading or writing files, choosing which log to clean.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from kafkalog.cleaner.keymap import FilteredRegion, filter_records, filter_region
from kafkalog.cleaner.offset_map import ExactOffsetMap, OffsetMap
from kafkalog.log.cleanable import LastRecord
from kafkalog.records import Record
from kafkalog.records.batch import RecordBatch
from kafkalog.records.control import decode_control_key
from kafkalog.records.filter import BatchRetention, BatchRetentionResult, RetainedRecords
from kafkalog.records.scanner import AnyBatch
from kafkalog.storage.txn_index import AbortedTxn, TransactionIndex
from kafkalog.types import ControlRecordType


@dataclass
class _AbortedTxnState:
    txn: AbortedTxn
    last_observed_batch_offset: int | None = None


class CleanedTransactionMetadata:
    """Tracks, while walking batches in offset order, which transactional data was aborted and
    whether a marker's transaction still has data. Given ``cleaned_index``, re-indexes every
    ABORT marker that must stay (its transaction still has batches)."""

    def __init__(self) -> None:
        self._ongoing_committed: set[int] = set()
        self._ongoing_aborted: dict[int, _AbortedTxnState] = {}
        self._aborted: list[tuple[int, int, AbortedTxn]] = []  # heap by first offset
        self._pending: list[Callable[[], Iterable[AbortedTxn]]] = []
        self._seq = 0
        self.cleaned_index: TransactionIndex | None = None

    def add_aborted_transactions(self, txns: Iterable[AbortedTxn]) -> None:
        for txn in txns:
            heapq.heappush(self._aborted, (txn.first_offset, self._seq, txn))
            self._seq += 1

    def add_aborted_transactions_when_needed(
        self, collect: Callable[[], Iterable[AbortedTxn]]
    ) -> None:
        """``add_aborted_transactions(collect())`` at the first transactional or control batch,
        or never: only those batches consult the list, and collecting it may mean a walk over
        every batch header of a loaded segment (``LogSegment.txn_index_trusted``), which a log
        without transactions should not pay for in every cleaning round."""
        self._pending.append(collect)

    def _consume_aborted_up_to(self, offset: int) -> None:
        # skipping this at plain batches loses nothing: offsets only grow, so the next call
        # moves every transaction this one would have
        while self._pending:
            self.add_aborted_transactions(self._pending.pop(0)())
        while self._aborted and self._aborted[0][0] <= offset:
            _, _, txn = heapq.heappop(self._aborted)
            self._ongoing_aborted.setdefault(txn.producer_id, _AbortedTxnState(txn))

    def on_control_batch_read(self, batch: AnyBatch) -> bool:
        """True if the marker may be discarded (its transaction has no data left)."""
        self._consume_aborted_up_to(batch.last_offset)
        records = batch.records()
        if not records:
            return True  # an empty control batch was already cleaned
        kind = decode_control_key(records[0].key).type
        pid = batch.producer_id
        if kind is ControlRecordType.ABORT:
            state = self._ongoing_aborted.pop(pid, None)
            if state is not None and state.last_observed_batch_offset is not None:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(state.txn)
                return False
            return True
        if kind is ControlRecordType.COMMIT:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False

    def on_batch_read(self, batch: AnyBatch) -> bool:
        """True if this data batch belongs to an aborted transaction."""
        if not (isinstance(batch, RecordBatch) and batch.is_transactional):
            return False
        self._consume_aborted_up_to(batch.last_offset)
        state = self._ongoing_aborted.get(batch.producer_id)
        if state is not None:
            state.last_observed_batch_offset = batch.last_offset
            return True
        self._ongoing_committed.add(batch.producer_id)
        return False


@dataclass
class CleanerCounters:
    invalid_messages: int = 0


class LogCleanerFilter:
    """The RecordFilter of one segment's recopy (Kafka's filter inside ``cleanInto``)."""

    def __init__(
        self,
        *,
        offset_map: OffsetMap,
        txn_metadata: CleanedTransactionMetadata,
        last_records: Mapping[int, LastRecord],
        upper_bound_offset: int,
        retain_legacy_deletes: bool,
        current_time: int,
        delete_retention_ms: int,
        counters: CleanerCounters,
    ) -> None:
        self.offset_map = offset_map
        self.txn_metadata = txn_metadata
        self.last_records = last_records
        self.upper_bound_offset = upper_bound_offset
        self.retain_legacy_deletes = retain_legacy_deletes
        self.current_time = current_time
        self.delete_retention_ms = delete_retention_ms
        self.counters = counters
        self._discard_batch_records = False
        self._last_producer_ids: set[int] | None = None

    def _is_last_batch_of_producer(self, batch: RecordBatch) -> bool:
        last = self.last_records.get(batch.producer_id)
        if last is None:
            return False
        if last.last_data_offset is not None:
            return batch.last_offset == last.last_data_offset
        return batch.is_control and batch.producer_epoch == last.producer_epoch

    def check_batch_retention(self, batch: AnyBatch) -> BatchRetentionResult:
        is_control = isinstance(batch, RecordBatch) and batch.is_control
        if is_control:
            can_discard = self.txn_metadata.on_control_batch_read(batch)
            horizon = batch.delete_horizon_ms
            self._discard_batch_records = (
                can_discard and horizon is not None and horizon <= self.current_time
            )
        else:
            can_discard = self.txn_metadata.on_batch_read(batch)
            self._discard_batch_records = can_discard
        if (
            isinstance(batch, RecordBatch)
            and batch.header.has_producer_id
            and self._is_last_batch_of_producer(batch)
        ) or batch.next_offset == self.upper_bound_offset:
            retention = BatchRetention.RETAIN_EMPTY
        elif self._discard_batch_records:
            retention = BatchRetention.DELETE
        else:
            retention = BatchRetention.DELETE_EMPTY
        return BatchRetentionResult(retention, can_discard and is_control)

    def retain_records_in_bulk(self, batch: RecordBatch) -> RetainedRecords | None:
        """``should_retain_record`` over the whole batch in the compiled loop, when the map is
        the compiled one; None (ask per record) otherwise, and for control batches and
        discarded transactional data, which stay on the reference path."""
        if (
            not isinstance(self.offset_map, ExactOffsetMap)
            or batch.is_control
            or self._discard_batch_records
        ):
            return None
        horizon = batch.delete_horizon_ms
        retained = filter_records(
            self.offset_map.keys,
            batch,
            keep_tombstones=horizon is None or self.current_time < horizon,
            new_horizon=self.current_time + self.delete_retention_ms,
        )
        self.counters.invalid_messages += retained.invalid
        return retained

    def filter_region(
        self, buffer: memoryview, segment: int, position: int, until: int, max_batch_size: int
    ) -> FilteredRegion | None:
        """The recopy of a run of plain batches from ``position`` in one compiled call (see
        ``kafkalog.cleaner.keymap.filter_region``), or None when the map is not the
        compiled one. The batches it leaves need this filter's per-batch rules: it stops at
        every batch ``check_batch_retention`` would keep even if empty."""
        if not isinstance(self.offset_map, ExactOffsetMap):
            return None
        if self._last_producer_ids is None:
            self._last_producer_ids = set(self.last_records)
        walked = filter_region(
            self.offset_map.keys,
            buffer,
            segment,
            position,
            until,
            max_batch_size=max_batch_size,
            upper_bound_offset=self.upper_bound_offset,
            last_producer_ids=self._last_producer_ids,
            current_time=self.current_time,
            new_horizon=self.current_time + self.delete_retention_ms,
        )
        self.counters.invalid_messages += walked.invalid
        return walked

    def should_retain_record(self, batch: AnyBatch, record: Record) -> bool:
        if self._discard_batch_records:
            return False
        if isinstance(batch, RecordBatch) and batch.is_control:
            return True
        return retain_record(
            self.offset_map,
            batch,
            record,
            retain_legacy_deletes=self.retain_legacy_deletes,
            current_time=self.current_time,
            counters=self.counters,
        )


def map_record(
    offset_map: OffsetMap, key: bytes | None, offset: int, *, start: int, capacity: int
) -> bool:
    """Kafka's key scan, one record (``Cleaner.buildOffsetMapForSegment``): a keyed record at or
    above ``start`` becomes its key's latest offset; keyless records and those below ``start``
    are passed over. False, with nothing put, once the map holds ``capacity`` keys (the round
    ends there, even if this key is already in). The compiled twin is ``map_parsed`` in
    ``_keymap.c``; tests/test_cleaner_rules.py holds both to one table."""
    if key is None or offset < start:
        return True
    if offset_map.size >= capacity:
        return False
    offset_map.put(key, offset)
    return True


def retain_record(
    offset_map: OffsetMap,
    batch: AnyBatch,
    record: Record,
    *,
    retain_legacy_deletes: bool,
    current_time: int,
    counters: CleanerCounters,
) -> bool:
    """Kafka's per-record rule: beyond the map -> keep; keyless -> drop (invalid); otherwise
    keep the latest occurrence of its key, and a tombstone only until the delete horizon. The
    compiled twins are ``decide`` and ``decide_logged`` in ``_keymap.c`` / ``_keymap_runs.c``;
    tests/test_cleaner_rules.py holds all three to one table."""
    if record.offset > offset_map.latest_offset:
        return True
    key = record.key
    if key is None:
        counters.invalid_messages += 1
        return False
    if record.offset < offset_map.get(key):
        return False
    if record.value is not None:
        return True
    if isinstance(batch, RecordBatch):
        horizon = batch.delete_horizon_ms
        return horizon is None or current_time < horizon
    return retain_legacy_deletes

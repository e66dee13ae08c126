"""Per-producer state and the rules one append must pass (Kafka's ProducerStateManager,
ProducerAppendInfo).

Why: idempotence and transactions are decided per producer id: epochs fence zombies, sequences
catch lost or reordered batches, the last five batches let a retry be answered with its original
offsets, and a transactional batch opens a transaction that a COMMIT or ABORT marker closes.
``ProducerAppendInfo`` applies those rules to one append without touching the live state, so a
rejected append changes nothing. Refuses: I/O and the partition-wide view (ongoing transactions,
the last stable offset, snapshots), which ``ProducerStateManager`` keeps.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field

from kafkalog.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerStateError,
    TransactionCoordinatorFencedError,
)
from kafkalog.log.validator import AppendOrigin
from kafkalog.records import AnyBatch
from kafkalog.records.batch import decrement_sequence, increment_sequence
from kafkalog.records.control import EndTransactionMarker, decode_end_txn_marker
from kafkalog.storage.producer_snapshot import SnapshotEntry
from kafkalog.storage.segment import LogOffsetMetadata
from kafkalog.types import INT32_MAX, NO_TIMESTAMP, ControlRecordType

logger = logging.getLogger("kafkalog.log.producer_state")

NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NUM_BATCHES_TO_RETAIN = 5  # the producer's max.in.flight.requests.per.connection ceiling


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """The sequence range and offsets of one appended batch."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(frozen=True, slots=True)
class ProducerPosition:
    """Where one producer stands in a partition, as its next batch must continue: its epoch, the
    sequence its next batch must start at (wrapping after Int32.MAX, as Kafka's
    DefaultRecordBatch.incrementSequence), whether a transaction is open, and the coordinator
    epoch of its last COMMIT/ABORT marker (-1 if none)."""

    producer_epoch: int
    next_sequence: int
    in_transaction: bool
    coordinator_epoch: int


@dataclass(slots=True)
class ProducerStateEntry:
    """What the log knows of one producer id. Mutated only under the log lock."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = NO_TIMESTAMP
    current_txn_first_offset: int | None = None
    batch_metadata: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN)
    )

    @property
    def is_empty(self) -> bool:
        return not self.batch_metadata

    @property
    def first_seq(self) -> int:
        return NO_SEQUENCE if self.is_empty else self.batch_metadata[0].first_seq

    @property
    def last_seq(self) -> int:
        return NO_SEQUENCE if self.is_empty else self.batch_metadata[-1].last_seq

    @property
    def last_data_offset(self) -> int:
        return -1 if self.is_empty else self.batch_metadata[-1].last_offset

    @property
    def last_offset_delta(self) -> int:
        return 0 if self.is_empty else self.batch_metadata[-1].offset_delta

    @property
    def position(self) -> ProducerPosition:
        following = 0 if self.is_empty else increment_sequence(self.last_seq, 1)
        open_txn = self.current_txn_first_offset is not None
        return ProducerPosition(self.producer_epoch, following, open_txn, self.coordinator_epoch)

    def copy_without_batches(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
        )

    def maybe_update_producer_epoch(self, epoch: int) -> None:
        if self.producer_epoch != epoch:
            self.batch_metadata.clear()
            self.producer_epoch = epoch

    def add_batch(
        self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int
    ) -> None:
        self.maybe_update_producer_epoch(epoch)
        self.batch_metadata.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def update(self, newer: ProducerStateEntry) -> None:
        """Fold in the state an append built (``newer`` holds only that append's batches)."""
        self.maybe_update_producer_epoch(newer.producer_epoch)
        self.coordinator_epoch = newer.coordinator_epoch
        self.last_timestamp = newer.last_timestamp
        self.batch_metadata.extend(newer.batch_metadata)
        self.current_txn_first_offset = newer.current_txn_first_offset

    def find_duplicate_batch(self, batch: AnyBatch) -> BatchMetadata | None:
        """The cached batch with exactly this batch's epoch and sequence range, if any."""
        if batch.producer_epoch != self.producer_epoch:
            return None
        first, last = batch.base_sequence, batch.last_sequence
        for meta in self.batch_metadata:
            # the last sequence first: a plain field, and a mismatch for all but a retry
            if meta.last_seq == last and meta.first_seq == first:
                return meta
        return None

    def to_snapshot_entry(self) -> SnapshotEntry:
        return SnapshotEntry(
            self.producer_id,
            self.producer_epoch,
            self.last_seq,
            self.last_data_offset,
            self.last_offset_delta,
            self.last_timestamp,
            self.coordinator_epoch,
            -1 if self.current_txn_first_offset is None else self.current_txn_first_offset,
        )

    @classmethod
    def from_snapshot_entry(cls, e: SnapshotEntry) -> ProducerStateEntry:
        entry = cls(
            e.producer_id,
            e.producer_epoch,
            e.coordinator_epoch,
            e.timestamp,
            e.current_txn_first_offset if e.current_txn_first_offset >= 0 else None,
        )
        if e.last_offset >= 0:
            entry.batch_metadata.append(
                BatchMetadata(e.last_sequence, e.last_offset, e.offset_delta, e.timestamp)
            )
        return entry


@dataclass(slots=True)
class TxnMetadata:
    """An open (or completed but not yet replicated) transaction, keyed by its first offset."""

    producer_id: int
    first_offset: LogOffsetMetadata
    last_offset: int | None = None


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker just closed: ``last_offset`` is the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerAppendInfo:
    """The pending update of one producer within one append. Checks each batch against the
    producer's current entry and the batches before it in the same append; the live entry is
    changed only when the manager's ``update`` applies ``to_entry()``."""

    def __init__(self, producer_id: int, current: ProducerStateEntry, origin: AppendOrigin) -> None:
        self.producer_id = producer_id
        self.current = current
        self.origin = origin
        self.updated = current.copy_without_batches()
        self.started_transactions: list[TxnMetadata] = []

    def _fence(self, error: type[ProducerStateError], message: str, offset: int) -> None:
        """A follower copies what the leader accepted, so it only logs what a leader rejects."""
        if self.origin is AppendOrigin.REPLICATION:
            logger.warning(message)
        else:
            raise error(message, producer_id=self.producer_id, offset=offset)

    def _check_producer_epoch(self, epoch: int, offset: int) -> None:
        if epoch < self.updated.producer_epoch:
            self._fence(
                InvalidProducerEpochError,
                f"epoch of producer {self.producer_id} at offset {offset} is {epoch}, which is "
                f"smaller than the last seen epoch {self.updated.producer_epoch}",
                offset,
            )

    def _check_sequence(self, epoch: int, first_seq: int, offset: int) -> None:
        if epoch != self.updated.producer_epoch:
            if first_seq != 0 and self.updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"invalid sequence number for new epoch {epoch} of producer "
                    f"{self.producer_id} at offset {offset}: {first_seq} (request epoch), "
                    f"expected 0",
                    producer_id=self.producer_id,
                    offset=offset,
                )
            return
        if not self.updated.is_empty:
            last_seq = self.updated.last_seq
        elif epoch == self.current.producer_epoch:
            last_seq = self.current.last_seq
        else:
            last_seq = NO_SEQUENCE
        # a producer whose state is gone (retention, DeleteRecords) may continue at any sequence
        if not (
            self.current.producer_epoch == NO_PRODUCER_EPOCH or _in_sequence(last_seq, first_seq)
        ):
            raise OutOfOrderSequenceError(
                f"out of order sequence number for producer {self.producer_id} at offset "
                f"{offset}: {first_seq} (incoming seq. number), {last_seq} (current end "
                f"sequence number)",
                producer_id=self.producer_id,
                offset=offset,
            )

    def append(
        self, batch: AnyBatch, first_offset_metadata: LogOffsetMetadata | None = None
    ) -> CompletedTxn | None:
        """Apply one batch; a marker that closes a transaction returns it."""
        if batch.is_control:
            records = batch.records()
            if not records:  # the cleaner removed the whole transaction
                return None
            rec = records[0]
            marker = decode_end_txn_marker(rec.key, rec.value)
            ts = rec.timestamp if rec.timestamp is not None else NO_TIMESTAMP
            return self.append_end_txn_marker(marker, batch.producer_epoch, batch.base_offset, ts)
        meta = first_offset_metadata or LogOffsetMetadata(batch.base_offset)
        self.append_data_batch(
            batch.producer_epoch,
            batch.base_sequence,
            batch.last_sequence,
            batch.max_timestamp,
            meta,
            batch.last_offset,
            batch.is_transactional,
        )
        return None

    def append_data_batch(
        self,
        epoch: int,
        first_seq: int,
        last_seq: int,
        timestamp: int,
        first_offset_metadata: LogOffsetMetadata,
        last_offset: int,
        is_transactional: bool,
    ) -> None:
        first_offset = first_offset_metadata.message_offset
        self._check_producer_epoch(epoch, first_offset)
        if self.origin is AppendOrigin.CLIENT:
            self._check_sequence(epoch, first_seq, first_offset)
        self.updated.add_batch(epoch, last_seq, last_offset, last_offset - first_offset, timestamp)
        open_txn = self.updated.current_txn_first_offset
        if open_txn is not None and not is_transactional:
            raise InvalidTxnStateError(
                f"expected a transactional write from producer {self.producer_id} at offset "
                f"{first_offset}: its transaction from offset {open_txn} is open",
                producer_id=self.producer_id,
                offset=first_offset,
            )
        if open_txn is None and is_transactional:
            self.updated.current_txn_first_offset = first_offset
            self.started_transactions.append(TxnMetadata(self.producer_id, first_offset_metadata))

    def append_end_txn_marker(
        self, marker: EndTransactionMarker, epoch: int, offset: int, timestamp: int
    ) -> CompletedTxn | None:
        self._check_producer_epoch(epoch, offset)
        if self.updated.coordinator_epoch > marker.coordinator_epoch:
            self._fence(
                TransactionCoordinatorFencedError,
                f"invalid coordinator epoch for producer {self.producer_id} at offset {offset}: "
                f"{marker.coordinator_epoch} (zombie), {self.updated.coordinator_epoch} (current)",
                offset,
            )
        first = self.updated.current_txn_first_offset
        # a marker closing no data changes neither the LSO nor the transaction index
        completed = (
            None
            if first is None
            else CompletedTxn(
                self.producer_id, first, offset, marker.type is ControlRecordType.ABORT
            )
        )
        self.updated.maybe_update_producer_epoch(epoch)
        self.updated.current_txn_first_offset = None
        self.updated.coordinator_epoch = marker.coordinator_epoch
        self.updated.last_timestamp = timestamp
        return completed

    def to_entry(self) -> ProducerStateEntry:
        return self.updated

"""The partition's producer state: every producer's entry, the open transactions, the first unstable
offset, expiration and the snapshot files (Kafka's ProducerStateManager,
UnifiedLog.rebuildProducerState).

Why: the Log asks one object which producers exist, whether a batch is a retry, where the first
undecided transaction starts (the last stable offset), and what an ABORT's transaction-index
entry must say; the loader asks it to rebuild all of that from the nearest snapshot plus the
batches after it. Refuses: writing log data or the transaction index (the Log and the segment
do), and changing state for an append that failed (``ProducerAppendInfo`` stages it first).
Thread-safety: none of its own; the Log calls it under the log lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafkalog.config_def import ConfigDef, Type, at_least, define
from kafkalog.errors import CorruptSnapshotError
from kafkalog.log.producer_state import (
    BatchMetadata,
    CompletedTxn,
    ProducerAppendInfo,
    ProducerStateEntry,
    TxnMetadata,
)
from kafkalog.log.validator import AppendOrigin
from kafkalog.records import AnyBatch
from kafkalog.storage import filenames as fn
from kafkalog.storage import producer_snapshot as snap
from kafkalog.storage.atomic import delete_if_exists, rename_if_exists
from kafkalog.storage.segment import LogOffsetMetadata, LogSegment
from kafkalog.storage.segments import LogSegments
from kafkalog.storage.txn_index import AbortedTxn, TransactionIndex
from kafkalog.types import INT32_MAX

logger = logging.getLogger("kafkalog.log.producer_state")
INT = Type.INT


@dataclass(frozen=True)
class ProducerStateConfig:
    """The broker keys that govern producer state (Kafka's ProducerStateManagerConfig,
    TransactionLogConfig)."""

    producer_id_expiration_ms: int = define(
        "producer.id.expiration.ms", INT, 86_400_000,
        "Idle time after which a producer's state is forgotten.", at_least(1),
    )  # fmt: skip
    producer_id_expiration_check_interval_ms: int = define(
        "producer.id.expiration.check.interval.ms", INT, 600_000,
        "Period of the check for expired producers.", at_least(1),
    )  # fmt: skip
    transaction_max_timeout_ms: int = define(
        "transaction.max.timeout.ms", INT, 900_000, "Longest transaction timeout allowed.",
        at_least(1),
    )  # fmt: skip

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> ProducerStateConfig:
        return cls(**PRODUCER_STATE_CONFIG.parse(props, unknown="unknown producer state key"))


PRODUCER_STATE_CONFIG = ConfigDef.of(ProducerStateConfig)


class ProducerStateManager:
    """Owns the producers map, the ongoing and unreplicated transactions, the map end offset
    (state reflects every offset below it) and the ``.snapshot`` files of one partition."""

    def __init__(
        self,
        directory: Path,
        config: ProducerStateConfig | None = None,
        *,
        snapshots: Mapping[int, Path] | None = None,
    ) -> None:
        self.directory = directory
        self.config = config or ProducerStateConfig()
        self.producers: dict[int, ProducerStateEntry] = {}
        self._ongoing: dict[int, TxnMetadata] = {}  # by first offset
        self._unreplicated: dict[int, TxnMetadata] = {}  # completed, marker above the HW
        self._map_end_offset = 0
        self._last_snap_offset = 0
        self._snapshots: dict[int, Path] = (
            snap.list_snapshots(directory) if snapshots is None else dict(snapshots)
        )

    # --- the map -------------------------------------------------------------------------------

    @property
    def map_end_offset(self) -> int:
        return self._map_end_offset

    @property
    def is_empty(self) -> bool:
        return not self.producers and not self._unreplicated

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def next_in_sequence(self, batch: AnyBatch) -> ProducerStateEntry | None:
        """The producer's entry when a client's ``batch`` is simply its next data batch: same
        epoch, the sequence after its last, no transaction open or begun. Then
        ``ProducerAppendInfo`` would check nothing that can fail and change only what
        ``ProducerStateEntry.add_batch`` changes, so the common append can skip staging it
        (such a batch is never a duplicate: a retry repeats a sequence). None otherwise."""
        entry = self.producers.get(batch.producer_id)
        if (
            entry is None
            or not entry.batch_metadata
            or entry.producer_epoch != batch.producer_epoch
            or entry.current_txn_first_offset is not None
            or batch.is_transactional
            or batch.is_control
        ):
            return None
        last_seq = entry.batch_metadata[-1].last_seq
        first_seq = batch.base_sequence
        if first_seq == last_seq + 1 or (first_seq == 0 and last_seq == INT32_MAX):
            return entry
        return None

    def stage_updates(
        self, batches: Sequence[AnyBatch], segment: LogSegment, origin: AppendOrigin
    ) -> tuple[list[ProducerAppendInfo], list[CompletedTxn], BatchMetadata | None]:
        """The producer-state changes of the batches an append writes at the end of
        ``segment``, staged (nothing live changes here), or the cached batch a client's batch
        duplicates."""
        updates: dict[int, ProducerAppendInfo] = {}
        completed: list[CompletedTxn] = []
        position = segment.size
        for batch in batches:
            pid = batch.producer_id
            if pid >= 0:
                if origin is AppendOrigin.CLIENT:
                    entry = self.producers.get(pid)
                    duplicate = entry.find_duplicate_batch(batch) if entry else None
                    if duplicate is not None:
                        return [], [], duplicate
                info = updates.get(pid)
                if info is None:
                    info = updates[pid] = self.prepare_update(pid, origin)
                # a transaction's start position lets the LSO resolve without an index lookup
                meta = (
                    LogOffsetMetadata(batch.base_offset, segment.base_offset, position)
                    if batch.is_transactional
                    else None
                )
                txn = info.append(batch, meta)
                if txn is not None:
                    completed.append(txn)
            position += batch.size_in_bytes
        return list(updates.values()), completed, None

    def prepare_update(self, producer_id: int, origin: AppendOrigin) -> ProducerAppendInfo:
        current = self.producers.get(producer_id) or ProducerStateEntry(producer_id)
        return ProducerAppendInfo(producer_id, current, origin)

    def update(self, info: ProducerAppendInfo) -> None:
        entry = info.to_entry()
        current = self.producers.get(info.producer_id)
        if current is None:
            self.producers[info.producer_id] = entry
        else:
            current.update(entry)
        for txn in info.started_transactions:
            self._ongoing[txn.first_offset.message_offset] = txn

    def update_map_end_offset(self, offset: int) -> None:
        self._map_end_offset = offset

    def apply_batches(self, batches: Iterable[AnyBatch]) -> list[CompletedTxn]:
        """Replay batches with replication semantics (no sequence checks) and complete their
        transactions in memory; returns them (the loader's replay, Kafka's
        UnifiedLog.rebuildProducerState)."""
        infos: dict[int, ProducerAppendInfo] = {}
        completed: list[CompletedTxn] = []
        for batch in batches:
            if batch.producer_id < 0:
                continue
            info = infos.get(batch.producer_id)
            if info is None:
                info = infos[batch.producer_id] = self.prepare_update(
                    batch.producer_id, AppendOrigin.REPLICATION
                )
            txn = info.append(batch)
            if txn is not None:
                completed.append(txn)
        for info in infos.values():
            self.update(info)
        for txn in completed:
            self.complete_txn(txn)
        return completed

    # --- transactions and the first unstable offset --------------------------------------------

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO an ABORT's index entry records: the first offset of the earliest transaction
        another producer still has open, else the marker's offset + 1."""
        for first in sorted(self._ongoing):
            txn = self._ongoing[first]
            if txn.producer_id != completed.producer_id:
                return first
        return completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        txn = self._ongoing.pop(completed.first_offset, None)
        if txn is None:
            raise KeyError(
                f"transaction {completed} of {self.directory.name} was completed but never began"
            )
        txn.last_offset = completed.last_offset
        self._unreplicated[completed.first_offset] = txn

    def complete_txn_into(self, completed: CompletedTxn, txn_index: TransactionIndex) -> None:
        """Complete a transaction whose marker was just written; an ABORT also gets its entry,
        with the LSO of this moment, in the marker's segment's index (Kafka's updateTxnIndex).
        If the index write fails the transaction stays open, so the LSO does not advance."""
        if completed.is_aborted:
            lso = self.last_stable_offset(completed)
            txn_index.append(
                AbortedTxn(
                    completed.producer_id, completed.first_offset, completed.last_offset, lso
                )
            )
        self.complete_txn(completed)

    def _remove_unreplicated(self, offset: int) -> None:
        if not self._unreplicated:  # the common case, on every append
            return
        for first in [
            f
            for f, t in self._unreplicated.items()
            if t.last_offset is not None and t.last_offset < offset
        ]:
            del self._unreplicated[first]

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        self._remove_unreplicated(high_watermark)

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        self._remove_unreplicated(log_start_offset)
        self._map_end_offset = max(self._map_end_offset, log_start_offset)
        latest = self.latest_snapshot_offset()
        self._last_snap_offset = log_start_offset if latest is None else latest

    def first_unstable_offset(self) -> LogOffsetMetadata | None:
        if not self._ongoing and not self._unreplicated:
            return None
        txns = (*self._ongoing.values(), *self._unreplicated.values())
        candidates = [t.first_offset for t in txns]
        return min(candidates, key=lambda m: m.message_offset, default=None)

    def ongoing_transactions(self) -> list[TxnMetadata]:
        return [self._ongoing[k] for k in sorted(self._ongoing)]

    # --- expiration ----------------------------------------------------------------------------

    def _is_expired(self, now: int, entry: ProducerStateEntry) -> bool:
        return (
            entry.current_txn_first_offset is None
            and now - entry.last_timestamp >= self.config.producer_id_expiration_ms
        )

    def remove_expired_producers(self, now: int) -> list[int]:
        """Drop producers idle for ``producer.id.expiration.ms`` (by record time) with no open
        transaction; returns their ids."""
        gone = [pid for pid, e in self.producers.items() if self._is_expired(now, e)]
        for pid in gone:
            del self.producers[pid]
        return gone

    # --- snapshots -----------------------------------------------------------------------------

    def latest_snapshot_offset(self) -> int | None:
        return max(self._snapshots, default=None)

    def snapshot_offsets(self) -> list[int]:
        return sorted(self._snapshots)

    def take_snapshot(self, *, sync: bool = True) -> Path | None:
        """Write ``<map end offset>.snapshot`` unless the state has not moved since the last."""
        if self._map_end_offset <= self._last_snap_offset:
            return None
        path = fn.producer_snapshot_file(self.directory, self._map_end_offset)
        snap.write_snapshot(
            path, (e.to_snapshot_entry() for e in self.producers.values()), sync=sync
        )
        self._snapshots[self._map_end_offset] = path
        self._last_snap_offset = self._map_end_offset
        return path

    def _delete_snapshot(self, offset: int) -> None:
        path = self._snapshots.pop(offset, None)
        if path is not None:
            delete_if_exists(path)

    def delete_snapshots_before(self, offset: int) -> None:
        for o in [o for o in self._snapshots if o < offset]:
            self._delete_snapshot(o)

    def mark_snapshot_for_deletion(self, offset: int) -> Path | None:
        """Rename ``<offset>.snapshot`` to ``.snapshot.deleted`` (its segment is being deleted);
        returns the new path for the caller's delayed delete."""
        path = self._snapshots.pop(offset, None)
        if path is None:
            return None
        target = path.with_name(path.name + fn.DELETED_FILE_SUFFIX)
        return target if rename_if_exists(path, target) else None

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int]) -> None:
        """Keep the snapshots at segment bases and the newest stray one (a clean shutdown's
        snapshot at the log end) if it is above every base; delete the rest (Kafka's LogLoader)."""
        bases = set(segment_base_offsets)
        self._snapshots = snap.list_snapshots(self.directory)
        strays = sorted(o for o in self._snapshots if o not in bases)
        for o in strays[:-1]:
            self._delete_snapshot(o)
        if strays and bases and strays[-1] < max(bases):
            self._delete_snapshot(strays[-1])

    def _clear(self) -> None:
        self.producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()

    def _load_entry(self, entry: ProducerStateEntry) -> None:
        self.producers[entry.producer_id] = entry
        first = entry.current_txn_first_offset
        if first is not None:
            self._ongoing[first] = TxnMetadata(entry.producer_id, LogOffsetMetadata(first))

    def _load_from_snapshot(
        self, log_start_offset: int, now: int | None, *, below: int | None = None
    ) -> None:
        """Load the newest readable snapshot (at or below ``below`` when given), its producers
        idle past ``producer.id.expiration.ms`` at ``now`` left out (none when ``now`` is None).
        The owner deletes a corrupt snapshot; a reader (``below`` given) only passes it by."""
        candidates = sorted(
            (o for o in self._snapshots if below is None or o <= below), reverse=True
        )
        for offset in candidates:
            path = self._snapshots[offset]
            try:
                entries = snap.read_snapshot(path)
            except CorruptSnapshotError as err:
                if below is None:
                    logger.warning("deleting corrupt producer snapshot %s: %s", path, err)
                    self._delete_snapshot(offset)
                continue
            for e in entries:
                entry = ProducerStateEntry.from_snapshot_entry(e)
                if now is None or not self._is_expired(now, entry):
                    self._load_entry(entry)
            start = offset if below is None else max(offset, log_start_offset)
            self._last_snap_offset = self._map_end_offset = start
            return
        self._last_snap_offset = self._map_end_offset = log_start_offset

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now: int) -> None:
        """Drop snapshots outside (log start, log end]; reload from the newest left unless the
        in-memory state already ends at ``log_end_offset``."""
        for o in [o for o in self._snapshots if o > log_end_offset or o <= log_start_offset]:
            self._delete_snapshot(o)
        if log_end_offset != self._map_end_offset:
            self._clear()
            self._load_from_snapshot(log_start_offset, now)
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._clear()
        for o in list(self._snapshots):
            self._delete_snapshot(o)
        self._last_snap_offset = 0
        self._map_end_offset = offset


def rebuild_producer_state(
    state: ProducerStateManager,
    segments: LogSegments,
    *,
    log_start_offset: int,
    last_offset: int,
    now: int,
    reload_from_clean_shutdown: bool,
) -> None:
    """Bring ``state`` to ``last_offset``: from the newest usable snapshot, replaying the batches
    after it, snapshotting at the last two segment bases and at the end (Kafka's
    UnifiedLog.rebuildProducerState)."""
    bases = segments.base_offsets
    to_snapshot = {last_offset, *bases[-2:]}
    if state.latest_snapshot_offset() is None and reload_from_clean_shutdown:
        # a clean shutdown with no snapshot: nothing idempotent was ever written here
        for offset in sorted(to_snapshot):
            state.update_map_end_offset(offset)
            state.take_snapshot()
        return
    was_empty = state.is_empty and state.map_end_offset >= last_offset
    state.truncate_and_reload(log_start_offset, last_offset, now)
    if last_offset > state.map_end_offset and not was_empty:
        last_segment = segments.floor_segment(last_offset)
        for seg in segments.values(state.map_end_offset, last_offset):
            start = max(seg.base_offset, state.map_end_offset, log_start_offset)
            state.update_map_end_offset(start)
            if seg.base_offset in to_snapshot:
                state.take_snapshot()
            end = seg.size
            if seg is last_segment:
                found = seg.translate_offset(last_offset)
                end = seg.size if found is None else found.position
            begin = seg.translate_offset(start)
            if begin is not None and begin.position < end:
                state.apply_batches(seg.log.batches(begin.position, end))
    state.update_map_end_offset(last_offset)
    state.take_snapshot()


def last_stable_offset_of(
    directory: Path,
    snapshots: Mapping[int, Path],
    log_start_offset: int,
    end: int,
    batches: Callable[[int, int], Iterable[AnyBatch]],
) -> int:
    """The last stable offset at ``end`` of a partition this process does not own (a
    PartitionView's): the same state a Log keeps, rebuilt in memory from the newest readable
    snapshot at or below ``end`` among ``snapshots`` and ``batches(start, end)`` after it;
    every transaction decided below ``end`` counts as replicated. Reads files, writes none."""
    state = ProducerStateManager(directory, snapshots=snapshots)
    state._load_from_snapshot(log_start_offset, None, below=end)
    start = state.map_end_offset
    if start < end:
        state.apply_batches(b for b in batches(start, end) if b.base_offset >= start)
    state.on_high_watermark_updated(end)
    first = state.first_unstable_offset()
    return end if first is None else min(end, first.message_offset)

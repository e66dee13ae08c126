"""Which open transactions have been idle too long: the rule behind Kafka's
``transaction.timeout.ms``, as a function of the producer state, the segments and ``now``.

Why: Kafka's transaction coordinator aborts a transaction its producer abandoned, so that a
crashed writer does not hold back READ_COMMITTED readers (the last stable offset) and the
cleaner for ever. kafkalog has no coordinator, so the log owner applies the timeout itself. A
transaction is idle when neither its records' own time nor the last write to the segment
holding its last batch is within the timeout: the segment's modification time survives a
restart, which the coordinator's in-memory start time would not. Refuses: writing the markers
(the Log does, under its lock).
"""

from __future__ import annotations

from dataclasses import dataclass

from kafkalog.log.producer_state_manager import ProducerStateManager
from kafkalog.storage.segments import LogSegments


@dataclass(frozen=True, slots=True)
class TimedOutTransaction:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int


def timed_out_transactions(
    state: ProducerStateManager, segments: LogSegments, now: int, timeout_ms: int
) -> list[TimedOutTransaction]:
    """The open transactions idle for ``timeout_ms`` or more at ``now``."""
    found = []
    for txn in state.ongoing_transactions():
        entry = state.last_entry(txn.producer_id)
        if entry is None:
            continue
        last = entry.batch_metadata[-1].last_offset if entry.batch_metadata else None
        seg = segments.floor_segment(txn.first_offset.message_offset if last is None else last)
        written = seg.log.last_modified_ms() if seg is not None else now
        if now - max(entry.last_timestamp, written) >= timeout_ms:
            # an ABORT must carry at least the coordinator epoch seen last, or it is fenced
            found.append(
                TimedOutTransaction(
                    txn.producer_id, entry.producer_epoch, max(entry.coordinator_epoch, 0)
                )
            )
    return found

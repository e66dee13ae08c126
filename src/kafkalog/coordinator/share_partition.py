"""One share-partition (KIP-932): which records of a topic-partition a share group has handed
out, to whom, how often, and which are settled (Kafka's SharePartition, its state machine
without the fetch).

Why: a share group lets many members read one partition at once. The partition's leader owns
the records' fate: a fetch *acquires* records for one member under a time lock
(``group.share.record.lock.duration.ms``); the member *accepts*, *releases* (deliver again)
or *rejects* each one; a lock that runs out, or a member that leaves, puts its records back;
a record delivered ``group.share.delivery.count.limit`` times is archived rather than
offered again (a poison record stops). The share-partition start offset moves past the
settled prefix, and what is above it is persisted as state batches (share_state), where an
acquired record is written as available, so a restart delivers it again with its count.

Refuses: acknowledging a record the member did not acquire, or one not acquired at all
(INVALID_RECORD_STATE, as Kafka); acquiring past ``group.share.partition.max.record.locks``
records in flight. Time is the caller's (``now_ms`` arguments), so tests control locks.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from kafkalog.coordinator.share_state import ACKNOWLEDGED, ARCHIVED, AVAILABLE, StateBatch

ACQUIRED = 1  # never persisted: written as AVAILABLE


class AcknowledgeType(enum.IntEnum):
    """ShareAcknowledge's and ShareFetch's acknowledge types (Kafka's AcknowledgeType)."""

    GAP = 0  # an offset with no record (compacted away, a control record)
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


@dataclass(slots=True)
class InFlightRecord:
    state: int
    delivery_count: int
    member: str | None = None  # who holds it, while ACQUIRED
    lock_expiry_ms: int = 0


@dataclass(frozen=True, slots=True)
class AcquiredRecords:
    """A run of offsets handed to a member, each at ``delivery_count`` (ShareFetch's
    AcquiredRecords)."""

    first_offset: int
    last_offset: int
    delivery_count: int


class SharePartition:
    """The records from ``start_offset`` up, in the state ``batches`` (persisted state batches)
    left them: acquired ones are available again."""

    def __init__(
        self,
        start_offset: int,
        batches: list[StateBatch],
        *,
        lock_duration_ms: int,
        delivery_count_limit: int,
        max_in_flight: int,
    ) -> None:
        self.start_offset = start_offset
        self.lock_duration_ms = lock_duration_ms
        self.delivery_count_limit = delivery_count_limit
        self.max_in_flight = max_in_flight
        self.records: dict[int, InFlightRecord] = {}
        for b in batches:
            for offset in range(max(b.first_offset, start_offset), b.last_offset + 1):
                state = AVAILABLE if b.delivery_state == ACQUIRED else b.delivery_state
                self.records[offset] = InFlightRecord(state, b.delivery_count)
        # the first offset a fetch has not passed yet. Offsets below it with no record are
        # gaps (no record there: compacted, or a control batch); offsets above it with one
        # are states a previous run persisted, met again as the fetches pass them.
        self.end_offset = start_offset
        self._advance_start()

    # --- fetch ------------------------------------------------------------------------------

    def next_fetch_offset(self) -> int:
        """Where the next fetch reads from: the lowest available record below the end, else
        the end."""
        available = [
            o for o, r in self.records.items() if r.state == AVAILABLE and o < self.end_offset
        ]
        return min(available, default=self.end_offset)

    def in_flight(self) -> int:
        """The records between the start offset and the end (Kafka's in-flight window, which
        ``group.share.partition.max.record.locks`` bounds)."""
        return self.end_offset - self.start_offset

    def acquire(
        self, member: str, log_batches: list[tuple[int, int]], max_records: int, now_ms: int
    ) -> list[AcquiredRecords]:
        """Acquire for ``member`` the available records and the new ones of ``log_batches``
        (the (first, last) offsets of the batches a read from ``next_fetch_offset`` found),
        whole batches at a time, until ``max_records`` are acquired. New records are taken
        only while the in-flight window is below its limit; each acquired record's delivery
        count goes up by one."""
        acquired: list[int] = []
        for first, last in log_batches:
            if len(acquired) >= max_records:
                break
            for offset in range(max(first, self.start_offset), last + 1):
                if offset >= self.end_offset:
                    if self.in_flight() >= self.max_in_flight:
                        return _runs(acquired, self.records)
                    self.end_offset = offset + 1
                record = self.records.setdefault(offset, InFlightRecord(AVAILABLE, 0))
                if record.state != AVAILABLE:
                    continue
                record.state, record.member = ACQUIRED, member
                record.delivery_count += 1
                record.lock_expiry_ms = now_ms + self.lock_duration_ms
                acquired.append(offset)
        return _runs(acquired, self.records)

    # --- acknowledgements, locks, members ----------------------------------------------------

    def acknowledge(
        self, member: str, batches: list[tuple[int, int, list[AcknowledgeType]]]
    ) -> ErrorCode:
        """Apply ``member``'s acknowledgements: (first, last, types), one type for the whole
        range or one per offset. All or nothing: any offset the member does not hold makes
        it INVALID_RECORD_STATE and changes nothing."""
        changes: list[tuple[int, AcknowledgeType]] = []
        for first, last, types in batches:
            if last < first or len(types) not in (1, last - first + 1):
                return ErrorCode.invalid_request
            for i, offset in enumerate(range(first, last + 1)):
                record = self.records.get(offset)
                if record is None or record.state != ACQUIRED or record.member != member:
                    return ErrorCode.invalid_record_state
                changes.append((offset, types[0] if len(types) == 1 else types[i]))
        for offset, ack in changes:
            record = self.records[offset]
            if ack is AcknowledgeType.ACCEPT:
                self._settle(record, ACKNOWLEDGED)
            elif ack is AcknowledgeType.RELEASE:
                self._put_back(record)
            else:  # REJECT, GAP
                self._settle(record, ARCHIVED)
        self._advance_start()
        return ErrorCode.none

    def expire_locks(self, now_ms: int) -> bool:
        """Put back every record whose acquisition lock ran out; whether any did."""
        expired = [
            r for r in self.records.values() if r.state == ACQUIRED and r.lock_expiry_ms <= now_ms
        ]
        for record in expired:
            self._put_back(record)
        self._advance_start()
        return bool(expired)

    def release_member(self, member: str) -> bool:
        """Put back what a member that left (or was fenced) held; whether it held any."""
        held = [r for r in self.records.values() if r.state == ACQUIRED and r.member == member]
        for record in held:
            self._put_back(record)
        self._advance_start()
        return bool(held)

    def _put_back(self, record: InFlightRecord) -> None:
        """Released or timed out: offered again, unless it was delivered the limit's times."""
        exhausted = record.delivery_count >= self.delivery_count_limit
        self._settle(record, ARCHIVED if exhausted else AVAILABLE)

    @staticmethod
    def _settle(record: InFlightRecord, state: int) -> None:
        record.state, record.member, record.lock_expiry_ms = state, None, 0

    def _advance_start(self) -> None:
        """Move the start offset past the settled prefix (and past gaps the fetches passed),
        forgetting it."""
        while True:
            record = self.records.get(self.start_offset)
            if record is not None and record.state in (ACKNOWLEDGED, ARCHIVED):
                del self.records[self.start_offset]
            elif record is not None or self.start_offset >= self.end_offset:
                break
            self.start_offset += 1
        self.end_offset = max(self.end_offset, self.start_offset)

    # --- persistence --------------------------------------------------------------------------

    def save(self) -> tuple[int, int, dict[int, InFlightRecord]]:
        """The state as it is, for ``restore`` when a change cannot be written (Kafka rolls
        a change back when its persister write fails)."""
        copied = {o: dataclasses.replace(r) for o, r in self.records.items()}
        return self.start_offset, self.end_offset, copied

    def restore(self, saved: tuple[int, int, dict[int, InFlightRecord]]) -> None:
        self.start_offset, self.end_offset, self.records = saved

    def delivery_complete_count(self) -> int:
        """Records above the start offset already settled (the state records' field)."""
        return sum(r.state in (ACKNOWLEDGED, ARCHIVED) for r in self.records.values())

    def state_batches(self) -> list[StateBatch]:
        """What is persisted: runs of offsets with the same state and count, an acquired
        record written as available."""
        out: list[StateBatch] = []
        for offset in sorted(self.records):
            record = self.records[offset]
            state = AVAILABLE if record.state == ACQUIRED else record.state
            if record.delivery_count == 0:
                continue  # never delivered: nothing to remember
            last = out[-1] if out else None
            if (
                last is not None
                and last.last_offset + 1 == offset
                and (last.delivery_state, last.delivery_count) == (state, record.delivery_count)
            ):
                out[-1] = StateBatch(last.first_offset, offset, state, record.delivery_count)
            else:
                out.append(StateBatch(offset, offset, state, record.delivery_count))
        return out


def _runs(offsets: list[int], records: dict[int, InFlightRecord]) -> list[AcquiredRecords]:
    """Consecutive offsets with the same delivery count, as AcquiredRecords."""
    out: list[AcquiredRecords] = []
    for offset in offsets:
        count = records[offset].delivery_count
        last = out[-1] if out else None
        if last is not None and last.last_offset + 1 == offset and last.delivery_count == count:
            out[-1] = AcquiredRecords(last.first_offset, offset, count)
        else:
            out.append(AcquiredRecords(offset, offset, count))
    return out

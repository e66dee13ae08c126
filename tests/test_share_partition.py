"""A share-partition's state machine (KIP-932, Kafka's SharePartition): records acquired by one
member at a time under a lock, accepted, released or rejected, put back when the lock runs
out or the member leaves, archived at the delivery count limit, the start offset moving past
the settled prefix and over gaps, the in-flight window, and the state batches persisted and
read back (an acquired record comes back available, with its count). Time is injected."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kafkalog.coordinator.share_partition import (
    ACQUIRED,
    AcknowledgeType,
    AcquiredRecords,
    SharePartition,
)
from kafkalog.coordinator.share_state import (
    ACKNOWLEDGED,
    ARCHIVED,
    AVAILABLE,
    ShareGroupOffset,
    StateBatch,
    replay,
    snapshot_record,
)

ACCEPT, RELEASE, REJECT, GAP = (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE,
                                AcknowledgeType.REJECT, AcknowledgeType.GAP)  # fmt: skip
LOCK = 30_000


def partition(limit: int = 5, window: int = 2000, start: int = 0,
              batches: list[StateBatch] | None = None) -> SharePartition:  # fmt: skip
    return SharePartition(start, batches or [], lock_duration_ms=LOCK,
                          delivery_count_limit=limit, max_in_flight=window)  # fmt: skip


def test_records_go_to_one_member_and_settle_by_acknowledgement() -> None:
    sp = partition()
    assert sp.acquire("a", [(0, 4), (5, 9)], 3, 0) == [AcquiredRecords(0, 4, 1)]  # whole batch
    assert sp.next_fetch_offset() == 5
    assert sp.acquire("b", [(5, 9)], 10, 0) == [AcquiredRecords(5, 9, 1)]
    assert sp.acknowledge("a", [(0, 1, [ACCEPT]), (2, 4, [RELEASE, REJECT, ACCEPT])]) == (
        ErrorCode.none
    )
    assert sp.start_offset == 2 and sp.next_fetch_offset() == 2  # 2 is offered again
    assert sp.acquire("b", [(0, 4)], 10, 0) == [AcquiredRecords(2, 2, 2)]
    assert sp.acknowledge("b", [(2, 2, [ACCEPT]), (5, 9, [ACCEPT])]) == ErrorCode.none
    assert (sp.start_offset, sp.records, sp.delivery_complete_count()) == (10, {}, 0)


def test_only_the_holder_acknowledges_and_a_refusal_changes_nothing() -> None:
    sp = partition()
    sp.acquire("a", [(0, 3)], 10, 0)
    before = {o: (r.state, r.delivery_count, r.member) for o, r in sp.records.items()}
    assert sp.acknowledge("b", [(0, 0, [ACCEPT])]) == ErrorCode.invalid_record_state
    assert sp.acknowledge("a", [(0, 1, [ACCEPT]), (4, 4, [ACCEPT])]) == (
        ErrorCode.invalid_record_state
    )  # offset 4 was never acquired: nothing of the request is applied
    assert sp.acknowledge("a", [(0, 2, [ACCEPT, REJECT])]) == ErrorCode.invalid_request
    assert {o: (r.state, r.delivery_count, r.member) for o, r in sp.records.items()} == before
    assert sp.acknowledge("a", [(0, 0, [ACCEPT])]) == ErrorCode.none
    assert sp.acknowledge("a", [(0, 0, [ACCEPT])]) == ErrorCode.invalid_record_state  # settled


def test_an_expired_lock_or_a_member_leaving_puts_records_back() -> None:
    sp = partition()
    sp.acquire("a", [(0, 1)], 10, 1000)
    assert not sp.expire_locks(1000 + LOCK - 1)
    assert sp.expire_locks(1000 + LOCK)
    assert sp.acknowledge("a", [(0, 0, [ACCEPT])]) == ErrorCode.invalid_record_state  # too late
    assert sp.acquire("b", [(0, 1)], 10, 2000) == [AcquiredRecords(0, 1, 2)]
    assert sp.release_member("b") and not sp.release_member("b")
    assert [r.state for r in sp.records.values()] == [AVAILABLE, AVAILABLE]


def test_a_poison_record_stops_at_the_delivery_count_limit() -> None:
    sp = partition(limit=3)
    for attempt in (1, 2, 3):
        assert sp.acquire("a", [(0, 0), (1, 1)], 1, 0) == [AcquiredRecords(0, 0, attempt)]
        sp.acknowledge("a", [(0, 0, [RELEASE])])
    assert sp.start_offset == 1  # archived, not offered a fourth time
    assert sp.acquire("a", [(1, 1)], 1, 0) == [AcquiredRecords(1, 1, 1)]
    # a lock running out counts as well
    sp.expire_locks(LOCK)
    sp.acquire("a", [(1, 1)], 1, LOCK)
    sp.expire_locks(2 * LOCK)
    sp.acquire("a", [(1, 1)], 1, 2 * LOCK)
    sp.expire_locks(3 * LOCK)
    assert sp.start_offset == 2 and sp.records == {}


def test_gaps_and_the_in_flight_window() -> None:
    sp = partition(window=4)
    # a compacted log: offsets 2-3 have no batch. The window counts offsets from the start
    # offset to the end, gaps included: 0-1, the gap and 4 fill it.
    assert sp.acquire("a", [(0, 1), (4, 9)], 100, 0) == [
        AcquiredRecords(0, 1, 1), AcquiredRecords(4, 4, 1),
    ]  # fmt: skip
    assert sp.acquire("b", [(5, 9)], 100, 0) == []
    sp.acknowledge("a", [(0, 1, [ACCEPT]), (4, 4, [GAP])])
    assert sp.start_offset == 5  # past the settled records and the gap between them
    assert sp.acquire("b", [(5, 9)], 100, 0) == [AcquiredRecords(5, 8, 1)]


def test_persisted_state_comes_back_with_acquired_records_available() -> None:
    sp = partition()
    sp.acquire("a", [(0, 9)], 100, 0)
    sp.acknowledge("a", [(1, 2, [ACCEPT]), (3, 3, [RELEASE]), (4, 4, [REJECT])])
    sp.acquire("b", [(3, 3)], 10, 0)
    batches = sp.state_batches()
    assert batches == [
        StateBatch(0, 0, AVAILABLE, 1), StateBatch(1, 2, ACKNOWLEDGED, 1),
        StateBatch(3, 3, AVAILABLE, 2), StateBatch(4, 4, ARCHIVED, 1),
        StateBatch(5, 9, AVAILABLE, 1),
    ]  # fmt: skip
    # through a ShareSnapshot record and its replay, as a restart reads it back
    state: dict[tuple[str, str, int], ShareGroupOffset] = {}
    key = ("g", "u7bjN-yhSqa575FPHZaPPg", 0)
    offset = ShareGroupOffset(0, 1, 0, sp.start_offset, sp.delivery_complete_count(), 1, 1,
                              batches)  # fmt: skip
    replay(state, *snapshot_record(key, offset))
    back = partition(start=state[key].start_offset, batches=state[key].state_batches)
    assert back.start_offset == 0 and back.next_fetch_offset() == 0
    assert back.acquire("c", [(0, 9)], 100, 0) == [
        AcquiredRecords(0, 0, 2), AcquiredRecords(3, 3, 3), AcquiredRecords(5, 9, 2),
    ]  # fmt: skip


def test_a_fully_settled_persisted_state_starts_past_it() -> None:
    """Kafka persists the start offset lazily: state batches all settled above it mean the
    share-partition starts after them (what Kafka's own consumer left in the oracle run)."""
    batches = [StateBatch(3, 3, ACKNOWLEDGED, 2), StateBatch(4, 4, ARCHIVED, 1),
               StateBatch(5, 11, ACKNOWLEDGED, 1)]  # fmt: skip
    sp = partition(start=3, batches=batches)
    assert (sp.start_offset, sp.next_fetch_offset(), sp.records) == (12, 12, {})


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2), st.integers(0, 20),
                          st.integers(0, 3)), max_size=60))  # fmt: skip
def test_no_record_is_held_twice_settled_twice_or_delivered_past_the_limit(
    ops: list[tuple[int, int, int, int]],
) -> None:
    """Random fetches, acknowledgements, lock expiries and departures of three members over a
    log of 40 records in batches of 4: a record is held by one member at most, each record
    is settled once, counts never pass the limit, the start offset only moves up and never
    past an unsettled record, and what is persisted reads back to the same settled set."""
    limit, rng, now = 3, random.Random(7), 0
    sp = partition(limit=limit, window=16)
    batches = [(i, i + 3) for i in range(0, 40, 4)]
    held: dict[int, str] = {}
    settled: set[int] = set()
    last_start = 0
    for kind, who, n, extra in ops:
        member = "abc"[who]
        if kind <= 1:
            fetch_from = sp.next_fetch_offset()
            got = sp.acquire(member, [b for b in batches if b[1] >= fetch_from], n + 1, now)
            for run in got:
                for o in range(run.first_offset, run.last_offset + 1):
                    assert o not in held and o not in settled
                    assert run.delivery_count <= limit
                    held[o] = member
        elif kind == 2:
            mine = sorted(o for o, m in held.items() if m == member)[: n + 1]
            acks = [(o, o, [AcknowledgeType(1 + rng.randrange(3))]) for o in mine]
            assert sp.acknowledge(member, acks) == ErrorCode.none
            for o, _, (ack,) in acks:
                del held[o]
                record = sp.records.get(o)
                if ack is not RELEASE or record is None or record.state == ARCHIVED:
                    assert o not in settled
                    settled.add(o)
        elif kind == 3:
            now += extra * LOCK // 2
            if sp.expire_locks(now):
                for o in [o for o in held if o not in sp.records or
                          sp.records[o].state != ACQUIRED]:  # fmt: skip
                    del held[o]
                    if o not in sp.records or sp.records[o].state == ARCHIVED:
                        settled.add(o)
        else:
            sp.release_member(member)
            for o in [o for o, m in held.items() if m == member]:
                del held[o]
                if o not in sp.records or sp.records[o].state == ARCHIVED:
                    settled.add(o)
        assert sp.start_offset >= last_start
        last_start = sp.start_offset
        assert all(o in settled for o in range(sp.start_offset) if o < sp.end_offset)
        for o, r in sp.records.items():
            assert r.delivery_count <= limit
            assert (r.state == ACQUIRED) == (o in held)
    back = partition(limit=limit, window=16, start=sp.start_offset, batches=sp.state_batches())
    assert back.start_offset >= sp.start_offset
    assert {o for o, r in back.records.items() if r.state in (ACKNOWLEDGED, ARCHIVED)} == {
        o for o in settled if o >= back.start_offset
    }

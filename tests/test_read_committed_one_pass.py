"""The one-pass READ_COMMITTED walk (records.committed.committed_batches_in_one_pass) against
the two-pass rule it replaces for readers of files: the aborted list from the ABORT markers,
then the consumer's filter. Random interleavings of producers, transactions that close past
the range's end or never, and hold limits small enough to force the two-pass fallback."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalog import MemoryRecords, Record
from kafkalog.records import build_end_txn_marker
from kafkalog.records.committed import (
    aborted_from_markers,
    committed_batches,
    committed_batches_in_one_pass,
)
from kafkalog.records.scanner import AnyBatch
from kafkalog.types import ControlRecordType

NOW = 1_700_000_000_000

# each step: (producer, action) where producer 0 writes plain batches and 1-3 transactions
steps = st.lists(
    st.tuples(st.integers(0, 3), st.sampled_from(["data", "data", "commit", "abort"])),
    max_size=40,
)


def _log(plan: list[tuple[int, str]]) -> list[AnyBatch]:
    parts: list[bytes] = []
    open_: set[int] = set()
    for offset, (pid, action) in enumerate(plan):
        if pid == 0 or action == "data":
            parts.append(
                bytes(
                    MemoryRecords.build(
                        [Record(b"%d" % offset)],
                        base_offset=offset,
                        producer_id=pid if pid else -1,
                        producer_epoch=0 if pid else -1,
                        base_sequence=offset if pid else -1,
                        is_transactional=pid > 0,
                    )
                )
            )
            if pid:
                open_.add(pid)
            continue
        kind = ControlRecordType.COMMIT if action == "commit" else ControlRecordType.ABORT
        epochs = {"producer_epoch": 0, "coordinator_epoch": 0}
        parts.append(
            build_end_txn_marker(
                offset=offset, producer_id=pid, marker=kind, timestamp=NOW, **epochs
            )
        )
        open_.discard(pid)
    return list(MemoryRecords(b"".join(parts)).batches())


@settings(max_examples=400, deadline=None)
@given(steps, st.integers(0, 40), st.integers(0, 40), st.sampled_from([0, 100, 1 << 20]))
def test_one_pass_returns_what_the_two_pass_rule_returns(
    plan: list[tuple[int, str]], a: int, b: int, max_held: int
) -> None:
    batches = _log(plan)
    start, end = min(a, b), max(a, b)

    def from_(offset: int) -> list[AnyBatch]:
        return [x for x in batches if x.last_offset >= offset]

    aborted = aborted_from_markers(from_(start), start, end)
    expected = [
        x.base_offset for x in committed_batches(from_(start), aborted) if x.base_offset < end
    ]
    reads: list[int] = []

    def reread(offset: int) -> list[AnyBatch]:
        reads.append(offset)
        return from_(offset)

    got = [
        x.base_offset
        for x in committed_batches_in_one_pass(iter(from_(start)), end, reread, max_held)
    ]
    assert got == expected
    if max_held >= 1 << 20:
        assert not reads  # one pass, no second walk


def test_a_long_open_transaction_falls_back_to_two_passes_within_the_hold_limit() -> None:
    plan = [(1, "data")] + [(0, "data")] * 30 + [(1, "abort")]
    batches = _log(plan)
    reads: list[int] = []

    def reread(offset: int) -> list[AnyBatch]:
        reads.append(offset)
        return [x for x in batches if x.last_offset >= offset]

    got = [x.base_offset for x in committed_batches_in_one_pass(iter(batches), 32, reread, 500)]
    assert got == list(range(1, 31))
    assert reads == [0, 0]  # the aborted list, then the data, from the first held batch

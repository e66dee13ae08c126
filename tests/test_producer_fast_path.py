"""The appender's shortcut for a producer's next batch (``next_in_sequence``) against the
staged reference (``ProducerAppendInfo`` for every idempotent append): the same random runs of
idempotent and transactional appends, retries, gaps, epoch bumps and markers give the same
offsets, the same errors and the same producer state on both."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalog import Log, LogConfig, ManualClock, MemoryRecords, Record
from kafkalog.errors import KafkaLogError
from kafkalog.log.write_path import LogAppender

# (producer id, epoch step, sequence step, records, transactional, then a marker?)
steps = st.lists(
    st.tuples(
        st.sampled_from([7, 8]),
        st.sampled_from([0, 0, 0, 0, 1, -1]),  # mostly the same epoch; a bump; a zombie
        st.sampled_from([0, 0, 0, 0, 0, 1, -1, -3]),  # next; a gap; a retry; an older one
        st.integers(1, 4),
        st.booleans(),
        st.sampled_from([None, None, "commit", "abort"]),
    ),
    min_size=1,
    max_size=40,
)


@contextmanager
def _staging(every: bool) -> Iterator[None]:
    before = LogAppender.stage_every_update
    LogAppender.stage_every_update = every
    try:
        yield
    finally:
        LogAppender.stage_every_update = before


def _run(path: Path, plan: list[tuple[Any, ...]]) -> tuple[list[Any], list[Any]]:
    outcomes: list[Any] = []
    epochs = {7: 0, 8: 0}
    next_seq = {7: 0, 8: 0}
    with Log.open(path, LogConfig(), ManualClock(1_000)) as log:
        for pid, epoch_step, seq_step, n, txn, marker in plan:
            epochs[pid] = max(0, epochs[pid] + epoch_step)
            if epoch_step > 0:
                next_seq[pid] = 0
            seq = max(0, next_seq[pid] + seq_step)
            data = MemoryRecords.build(
                [Record(b"v%d" % i, timestamp=1_000) for i in range(n)],
                producer_id=pid, producer_epoch=epochs[pid], base_sequence=seq,
                is_transactional=txn,
            )  # fmt: skip
            try:
                info = log.append_records(data)
                outcomes.append(("ok", info.first_offset, info.last_offset, info.duplicate))
                if not info.duplicate:
                    next_seq[pid] = seq + n
            except KafkaLogError as err:
                outcomes.append((type(err).__name__, str(err)))
            if marker is not None:
                try:
                    log.append_end_txn_marker(pid, epochs[pid], marker)
                    outcomes.append(("marker", marker))
                except KafkaLogError as err:
                    outcomes.append((type(err).__name__, str(err)))
        state = log._producer_state
        entries = sorted(
            (e.to_snapshot_entry(), list(e.batch_metadata)) for e in state.producers.values()
        )
        return outcomes, entries


@settings(max_examples=60, deadline=None)
@given(plan=steps)
def test_the_shortcut_and_the_staged_update_agree(tmp_path_factory: Any, plan: Any) -> None:
    with _staging(True):
        reference = _run(tmp_path_factory.mktemp("staged"), plan)
    with _staging(False):
        shortcut = _run(tmp_path_factory.mktemp("shortcut"), plan)
    assert shortcut == reference


def test_the_shortcut_is_taken_for_a_producers_next_batch(tmp_path: Path) -> None:
    """The differential test above compares two paths only if the shortcut runs."""
    taken = []
    found_now: list[bool] = []
    with Log.open(tmp_path, LogConfig(), ManualClock(1_000)) as log:
        original = log._producer_state.next_in_sequence

        def spy(batch: Any) -> Any:
            found = original(batch)
            found_now.append(found is not None)
            return found

        log._producer_state.next_in_sequence = spy  # type: ignore[method-assign]
        for seq in (0, 1, 2, 1):  # the first has no entry yet; the last is a retry
            data = MemoryRecords.build(
                [Record(b"x")], producer_id=3, producer_epoch=0, base_sequence=seq
            )
            found_now.clear()
            log.append_records(data)
            taken.append(any(found_now))
    assert taken == [False, True, True, False]

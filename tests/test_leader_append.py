"""The leader's one-pass append (``append_in_one_pass``) against the general sequence it short-cuts:
the same random runs of producer batches (idempotent and not, retries, gaps, compressed, old
and future timestamps, empty and full segments, time rolls, leader epochs, flush and index
settings, LogAppendTime and compacted topics) give the same answers, the same errors and the
same bytes in every file of the partition, with the one pass on and off."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalog import Log, LogConfig, ManualClock, MemoryRecords, Record
from kafkalog.errors import KafkaLogError
from kafkalog.log import write_path
from kafkalog.log.leader_append import append_in_one_pass
from kafkalog.log.write_path import LogAppender
from kafkalog.records.batch import set_max_timestamp
from kafkalog.types import TimestampType

NOW = 1_700_000_000_000

configs = st.fixed_dictionaries(
    {
        "internal.segment.bytes": st.sampled_from([600, 2_000, 1 << 20]),
        "segment.ms": st.sampled_from([50, 7 * 86_400_000]),
        "segment.index.bytes": st.sampled_from([32, 48, 10 << 20]),  # 4, 6 or many entries
        "index.interval.bytes": st.sampled_from([0, 150, 4096]),
        "flush.messages": st.sampled_from([1, 7, 2**63 - 1]),
        "message.timestamp.type": st.sampled_from(["CreateTime", "CreateTime", "LogAppendTime"]),
        "message.timestamp.before.max.ms": st.sampled_from([60_000, 2**63 - 1]),
        "cleanup.policy": st.sampled_from(["delete", "delete", "compact"]),
        "compression.type": st.sampled_from(["producer", "producer", "lz4"]),
    }
)

# (producer: None or 7/8, sequence step, epoch step, records, value bytes, codec,
#  timestamp shift, null keys?, clock step, leader epoch, the header's max timestamp: the
#  producer's own, -1, or off by some)
steps = st.lists(
    st.tuples(
        st.sampled_from([None, 7, 7, 8]),
        st.sampled_from([0, 0, 0, 0, 1, -1]),
        st.sampled_from([0, 0, 0, 0, 0, 1]),
        st.integers(1, 12),
        st.integers(0, 120),
        st.sampled_from(["none", "none", "lz4", "gzip"]),
        st.sampled_from([0, 0, 0, -5, 3, -3_600_000]),
        st.booleans(),
        st.sampled_from([0, 0, 1, 30, 100]),
        st.sampled_from([None, None, None, 2, 3]),
        st.sampled_from([None, None, None, -1, -7]),
    ),
    min_size=1,
    max_size=30,
)


@contextmanager
def _one_pass(on: bool) -> Iterator[None]:
    before = LogAppender.one_pass_appends
    LogAppender.one_pass_appends = on
    try:
        yield
    finally:
        LogAppender.one_pass_appends = before


def _run(path: Path, props: dict[str, Any], plan: list[tuple[Any, ...]]) -> Any:
    outcomes: list[Any] = []
    epochs = {7: 0, 8: 0}
    next_seq = {7: 0, 8: 0}
    clock = ManualClock(NOW)
    config = LogConfig.from_properties({**props, "segment.jitter.ms": 0})
    with Log.open(path, config, clock) as log:
        for pid, seq_step, epoch_step, n, size, codec, shift, null_keys, tick, leader, top in plan:
            clock.advance(tick)
            producer: dict[str, Any] = {}
            if pid is not None:
                epochs[pid] += epoch_step
                if epoch_step:
                    next_seq[pid] = 0
                seq = max(0, next_seq[pid] + seq_step)
                producer = {"producer_id": pid, "producer_epoch": epochs[pid], "base_sequence": seq}
            records = [
                Record(
                    bytes([i]) * size,
                    key=None if null_keys else b"k%d" % i,
                    timestamp=clock.milliseconds() + shift + i,
                )
                for i in range(n)
            ]
            data = bytearray(MemoryRecords.build(records, compression=codec, **producer).buffer)
            if top is not None:  # a producer whose header max timestamp is not its records'
                wrong = -1 if top == -1 else records[-1].timestamp + top
                set_max_timestamp(data, 0, TimestampType.CREATE_TIME, wrong)
            try:
                info = log.append_records(data, leader_epoch=leader)
                outcomes.append(("ok", info))
                if pid is not None and not info.duplicate:
                    next_seq[pid] = producer["base_sequence"] + n
            except KafkaLogError as err:
                outcomes.append((type(err).__name__, str(err)))
            outcomes.append((log.log_end_offset, log.high_watermark, log.recovery_point))
        state = sorted(
            (e.to_snapshot_entry(), list(e.batch_metadata))
            for e in log._producer_state.producers.values()
        )
        outcomes.append(state)
    files = {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}
    return outcomes, files


@settings(max_examples=80, deadline=None)
@given(props=configs, plan=steps)
def test_the_one_pass_and_the_general_sequence_agree(
    tmp_path_factory: Any, props: Any, plan: Any
) -> None:
    with _one_pass(False):
        reference = _run(tmp_path_factory.mktemp("general") / "t-0", props, plan)
    with _one_pass(True):
        one_pass = _run(tmp_path_factory.mktemp("one-pass") / "t-0", props, plan)
    assert one_pass[0] == reference[0]
    assert one_pass[1].keys() == reference[1].keys()
    for name, data in reference[1].items():
        assert one_pass[1][name] == data, name


@contextmanager
def _counting() -> Iterator[list[bool]]:
    taken: list[bool] = []

    def spy(*args: Any) -> Any:
        found = append_in_one_pass(*args)
        taken.append(found is not None)
        return found

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(write_path, "append_in_one_pass", spy)
        yield taken


def test_the_one_pass_takes_a_producers_batches_and_hands_back_a_roll(tmp_path: Path) -> None:
    """The comparison above means something only if the one pass runs, and declines what it
    must: here the second and third batches of a producer and an anonymous one run in one pass,
    a batch that fills the segment and a retry are handed back, and nothing is lost."""
    clock = ManualClock(NOW)
    config = LogConfig.from_properties({"internal.segment.bytes": 400})
    with _counting() as taken, Log.open(tmp_path / "t-0", config, clock) as log:
        for seq in (0, 1, 2):
            log.append_records(
                MemoryRecords.build(
                    [Record(b"v", timestamp=NOW)], producer_id=5, producer_epoch=0,
                    base_sequence=seq,
                )
            )  # fmt: skip
        log.append_records(MemoryRecords.build([Record(b"w", timestamp=NOW)]))
        big = MemoryRecords.build([Record(b"x" * 250, timestamp=NOW)])
        log.append_records(big)  # past segment.bytes: rolled by the general sequence
        retry = MemoryRecords.build(
            [Record(b"v", timestamp=NOW)], producer_id=5, producer_epoch=0, base_sequence=2
        )
        assert log.append_records(retry).duplicate
        assert log.log_end_offset == 5
        assert len(log.segments) == 2
        values = []
        for start in (0, 4):  # a read stops at the end of its segment
            data = log.read(start, 1 << 20).records
            assert data is not None
            values += [r.value for r in MemoryRecords(data.read()).records()]
        assert values == [b"v", b"v", b"v", b"w", b"x" * 250]
    assert taken == [False, True, True, True, False, False]

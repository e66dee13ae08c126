"""Stateful model test: random operations on a real Log and on ModelLog must always agree."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kafkalog import ManualClock, Record
from kafkalog.log.config import LogConfig
from kafkalog.log.log import Log
from kafkalog.testing.model import ModelLog

NOW = 1_700_000_000_000
CONFIG = LogConfig.from_properties(
    {"segment.bytes": 700, "index.interval.bytes": 100, "segment.index.bytes": 400}
)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="kafkalog-stateful-"))
        self.dir = self.tmp / "topic-0"
        self.clock = ManualClock(NOW)
        self.log = Log.open(self.dir, CONFIG, self.clock)
        self.model = ModelLog()

    def teardown(self) -> None:
        if not self.log.closed:
            self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(
        values=st.lists(
            st.one_of(st.none(), st.binary(min_size=0, max_size=90)), min_size=1, max_size=5
        ),
        codec=st.sampled_from(["none", "gzip", "lz4", "zstd", "snappy"]),
    )
    def append(self, values: list[bytes | None], codec: str) -> None:
        self.clock.advance(7)
        info = self.log.append([Record(v, key=b"k") for v in values], compression=codec)
        first, last = self.model.append(values)
        assert (info.first_offset, info.last_offset) == (first, last)

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        low, high = self.model.log_start_offset, self.model.log_end_offset
        offset = data.draw(st.integers(min_value=low, max_value=high))
        got = [(r.offset, r.value) for r in self.log.read_records(offset, 10**7)]
        expected = self.model.read_from(offset)
        assert got == expected[: len(got)]
        if expected:
            assert got, f"nothing read at {offset}"

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule()
    def flush(self) -> None:
        self.log.flush()
        assert self.log.recovery_point == self.log.log_end_offset

    @precondition(lambda self: len(self.model.batch_starts) > 1)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        starts = [s for s in self.model.batch_starts if s >= self.model.log_start_offset]
        if not starts:
            return
        offset = data.draw(st.sampled_from(starts))
        self.log.truncate_to(offset)
        self.model.truncate_to(offset)

    @precondition(lambda self: len(self.model.batch_starts) > 1)
    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        offset = data.draw(st.sampled_from(self.model.batch_starts))
        if offset > self.model.log_start_offset:
            self.log.maybe_increment_log_start_offset(offset)
            self.model.log_start_offset = offset

    @rule()
    def close_and_reopen(self) -> None:
        self.log.close()
        self.log = Log.open(self.dir, CONFIG, self.clock)
        assert self.log.load_result.recovered_segments == []

    @rule()
    def crash_and_reopen(self) -> None:
        self.log.close_without_flush()
        self.log = Log.open(self.dir, CONFIG, self.clock)
        assert self.log.load_result.truncated_bytes == 0  # the OS kept every written byte

    @invariant()
    def offsets_agree(self) -> None:
        assert self.log.log_end_offset == self.model.log_end_offset
        assert self.log.log_start_offset == self.model.log_start_offset
        assert self.log.log_start_offset <= self.log.high_watermark <= self.log.log_end_offset
        assert self.log.recovery_point <= self.log.log_end_offset
        bases = self.log.segments.base_offsets
        assert list(bases) == sorted(set(bases))


TestLogMachine = LogMachine.TestCase
TestLogMachine.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)

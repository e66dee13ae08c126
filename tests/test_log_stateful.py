"""Stateful model test: random operations on a real Log and on ModelLog must always agree.

Besides plain appends, two idempotent producers write (transactional or not), retry their last
batch, and commit or abort; reads under READ_COMMITTED and the last stable offset must match the
model after truncations, DeleteRecords, rolls, clean reopens and crashes."""

from __future__ import annotations

import copy
import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kafkalog import ManualClock, Record
from kafkalog.errors import InvalidTxnStateError
from kafkalog.log.config import LogConfig
from kafkalog.log.log import Log
from kafkalog.log.producer_batches import ProducerFields
from kafkalog.log.view import PartitionView
from kafkalog.records import committed_records
from kafkalog.testing.model import ModelLog
from kafkalog.types import IsolationLevel

NOW = 1_700_000_000_000
CONFIG = LogConfig.from_properties(
    {"internal.segment.bytes": 700, "index.interval.bytes": 100, "segment.index.bytes": 400}
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

    @rule(
        pid=st.sampled_from([1, 2]),
        n=st.integers(min_value=1, max_value=4),
        transactional=st.booleans(),
    )
    def produce(self, pid: int, n: int, transactional: bool) -> None:
        self.clock.advance(3)
        seq = self.model.next_sequence(pid)
        values = [b"p%d-%d-%d" % (pid, seq, i) for i in range(n)]
        producer = ProducerFields(pid, 0, seq, transactional)
        if self.model.open_transaction(pid) and not transactional:
            end = self.log.log_end_offset
            try:
                self.log.append([Record(v, key=b"k") for v in values], producer=producer)
            except InvalidTxnStateError:
                assert self.log.log_end_offset == end
                return
            raise AssertionError("a plain write inside an open transaction was accepted")
        info = self.log.append([Record(v, key=b"k") for v in values], producer=producer)
        first, last = self.model.append(list(values), pid, seq, transactional)
        assert (info.first_offset, info.last_offset, info.duplicate) == (first, last, False)

    @precondition(lambda self: self.model.log_end_offset > 0)
    @rule(pid=st.sampled_from([1, 2]))
    def retry_last_batch(self, pid: int) -> None:
        last = self.model.last_data_batch(pid)
        if last is None or last.first < self.model.log_start_offset:
            return
        values = self.model.values[last.first : last.last + 1]
        producer = ProducerFields(pid, 0, last.first_seq, last.transactional)
        end = self.log.log_end_offset
        info = self.log.append([Record(v, key=b"k") for v in values], producer=producer)
        assert info.duplicate and (info.first_offset, info.last_offset) == (last.first, last.last)
        assert self.log.log_end_offset == end

    @rule(pid=st.sampled_from([1, 2]), commit=st.booleans())
    def end_transaction(self, pid: int, commit: bool) -> None:
        # only for open transactions: a marker for a producer whose state DeleteRecords removed
        # would re-create it with no sequence history (tested in test_producer_state)
        if not self.model.open_transaction(pid):
            return
        kind = "commit" if commit else "abort"
        info = self.log.append_end_txn_marker(pid, 0, kind)
        assert info.first_offset == self.model.append_marker(pid, kind)

    @rule(data=st.data())
    def read_committed(self, data: st.DataObject) -> None:
        low, high = self.model.log_start_offset, self.model.log_end_offset
        offset = data.draw(st.integers(min_value=low, max_value=high))
        start, got = offset, []
        while True:  # each fetch returns one segment's slice: keep fetching to the LSO
            fetch = self.log.read(offset, 10**7, isolation=IsolationLevel.READ_COMMITTED)
            if fetch.records is None:
                break
            batches = list(fetch.records.records().batches())
            assert fetch.aborted_transactions is not None
            got += committed_records(batches, fetch.aborted_transactions, offset)
            offset = batches[-1].next_offset
        assert offset >= min(self.model.last_stable_offset, self.model.log_end_offset)
        assert [(r.offset, r.value) for r in got] == self.model.read_committed_from(start)

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        low, high = self.model.log_start_offset, self.model.log_end_offset
        offset = data.draw(st.integers(min_value=low, max_value=high))
        expected = self.model.read_from(offset)
        got = [(r.offset, r.value) for r in self.log.read_records(offset, 10**7)]
        assert got == expected[: len(got)]
        # a fetch returns one segment's slice, which may hold only control batches
        fetched = self.log.read(offset, 10**7)
        if expected:
            assert fetched.records is not None, f"nothing read at {offset}"

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
        after = copy.deepcopy(self.model)
        after.truncate_to(offset)
        if after.last_stable_offset > min(after.open_transactions().values(), default=offset):
            # the cut would reopen a transaction that began below the log start; like Kafka,
            # the reload replays only from the log start and cannot know it (see delete_records)
            return
        self.log.truncate_to(offset)
        self.model.truncate_to(offset)

    @precondition(lambda self: len(self.model.batch_starts) > 1)
    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        offset = data.draw(st.sampled_from(self.model.batch_starts))
        # past an open transaction's start its state could only come back from a snapshot
        # (Kafka's reload skips data below the log start), so stay at or below the LSO
        if self.model.log_start_offset < offset <= self.model.last_stable_offset:
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
        assert self.log.last_stable_offset == self.model.last_stable_offset
        assert self.log.recovery_point <= self.log.log_end_offset
        bases = self.log.segments.base_offsets
        assert list(bases) == sorted(set(bases))

    @invariant()
    def a_view_of_the_files_finds_the_same_last_stable_offset(self) -> None:
        """PartitionView rebuilds the producer state from the files alone, with the Log's
        rules: snapshots, then the batches after them."""
        view = PartitionView(self.dir)
        assert view.last_stable_offset(self.log.log_end_offset) == self.model.last_stable_offset


TestLogMachine = LogMachine.TestCase
TestLogMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)

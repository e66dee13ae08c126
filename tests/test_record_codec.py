"""The record codec is one door: every per-record loop of the library goes through the codec
``record_codec()`` answers, whichever it is.

A codec that counts its calls (the reference, subclassed) is chosen for a test; appending to a
Log, reading it back, searching it for an offset and scanning its batches must each reach it.
A caller that read a process-wide switch or called a loop directly would bypass the count.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from kafkalog import ManualClock, MemoryRecords, Record
from kafkalog.log.config import LogConfig
from kafkalog.log.log import Log
from kafkalog.records import codec
from kafkalog.records.codec import RecordCodec, compiled_codec, record_codec
from kafkalog.records.record import RecordFacts

pytestmark = pytest.mark.one_codec  # the test chooses its own codec

NOW = 1_700_000_000_000


class CountingCodec(RecordCodec):
    """The reference codec, counting each operation it is asked for."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def decode_records(self, *args: Any) -> list[Record]:
        self.calls["decode_records"] += 1
        return super().decode_records(*args)

    def record_facts(self, records: Sequence[Record]) -> RecordFacts | None:
        self.calls["record_facts"] += 1
        return super().record_facts(records)

    def producer_batch(self, *args: Any) -> Any:
        self.calls["producer_batch"] += 1
        return super().producer_batch(*args)

    def encode_records(self, *args: Any) -> Any:
        self.calls["encode_records"] += 1
        return super().encode_records(*args)

    def search_offset(self, *args: Any) -> tuple[int, int, int] | None:
        self.calls["search_offset"] += 1
        return super().search_offset(*args)


@pytest.fixture
def counting() -> Iterator[CountingCodec]:
    chosen = CountingCodec()
    before = codec._chosen[0]
    codec._chosen[0] = chosen
    try:
        yield chosen
    finally:
        codec._chosen[0] = before


def test_every_loop_goes_through_the_chosen_codec(tmp_path: Path, counting: CountingCodec) -> None:
    assert record_codec() is counting
    log = Log.open(tmp_path / "t-0", LogConfig(), ManualClock(NOW))
    try:
        log.append([Record(b"v%d" % i, key=b"k") for i in range(5)])  # facts, encode
        built = MemoryRecords.build([Record(b"x"), Record(b"y")])
        log.append_records(built.buffer)  # the leader's check of a producer's batch
        values = [r.value for r in log.read_records(0)]  # the fetch's search, then decode
        assert values == [b"v0", b"v1", b"v2", b"v3", b"v4", b"x", b"y"]
    finally:
        log.close()
    for operation in (
        "decode_records",
        "record_facts",
        "producer_batch",
        "encode_records",
        "search_offset",
    ):
        assert counting.calls[operation] >= 1, (operation, counting.calls)


@pytest.mark.skipif(compiled_codec() is None, reason="the _fastcodec extension is not built")
def test_the_compiled_codec_answers_as_the_reference() -> None:
    """Chosen once: switching answers the other object; each names itself."""
    before = record_codec()
    try:
        assert codec.use_fast_path(True)
        assert record_codec().name == "compiled" and record_codec().frames_runs
        assert not codec.use_fast_path(False)
        assert record_codec().name == "reference" and record_codec().module is None
        assert record_codec().frame_v2(b"", 0, 0, 0, -1, None, -1, tuple, None) == ([], False)
    finally:
        codec._chosen[0] = before

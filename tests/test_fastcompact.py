"""The compiled cleaner (KeyOffsetMap: key scan and recopy filter) against the reference.

Every property cleans copies of one log directory twice, once per codec, and wants the same
files byte for byte, the same stats, or the same error.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kafkalog import Log, LogConfig, ManualClock, MemoryRecords, Record
from kafkalog.cleaner import CleanerConfig, LogCleaner
from kafkalog.cleaner._keymap import KeyOffsetMap
from kafkalog.cleaner.keymap import filter_records, filter_region, map_region
from kafkalog.cleaner.offset_map import DigestOffsetMap, ExactOffsetMap, new_offset_map
from kafkalog.records.batch import RecordBatch, rewrite_crc
from kafkalog.records.codec import record_codec, use_fast_path
from kafkalog.records.filter import BatchRetention, BatchRetentionResult, filter_buffer
from kafkalog.records.v2_layout import RECORD_BATCH_OVERHEAD
from kafkalog.types import CompressionType, TimestampType, TopicPartition
from test_fastpath import COMPILED, both

NOW = 1_700_000_000_000
NONE = CompressionType.NONE
RETENTION = 1_000
TP = TopicPartition("t", 0)
pytestmark = pytest.mark.one_codec  # each test runs both codecs itself, or the compiled one
needs_compiled = pytest.mark.skipif(not COMPILED, reason="the _fastcodec extension is not built")

records = st.lists(
    st.builds(
        Record,
        st.one_of(st.none(), st.binary(max_size=6)),  # None: a tombstone
        st.one_of(st.none(), st.sampled_from([b"a", b"b", b"c", b"", b"dd"])),  # None: invalid
        st.one_of(st.just(()), st.just((("h", b"x"), ("\u00e9", None)))),
        st.integers(NOW - 5, NOW + 5),
    ),
    min_size=1,
    max_size=6,
)
# gzip is left out: its frames carry a time, so two rebuilds a second apart differ in bytes
codecs = st.sampled_from(
    [CompressionType.NONE, CompressionType.LZ4, CompressionType.ZSTD, CompressionType.SNAPPY]
)
batch_specs = st.lists(
    st.tuples(records, codecs, st.booleans(), st.booleans()), min_size=1, max_size=8
)


Spec = tuple[list[Record], CompressionType, bool, bool]
CONFIG = {
    "cleanup.policy": "compact",
    "delete.retention.ms": str(RETENTION),
    "internal.segment.bytes": "700",
    "min.cleanable.dirty.ratio": "0.01",
}


def append_specs(log: Log, specs: list[Spec]) -> None:
    """Batches appended as a follower (headers kept as given): some LogAppendTime, some from an
    idempotent producer whose sequence follows its offsets; then a roll, so all is cleanable."""
    for recs, codec, log_append, idempotent in specs:
        offset = log.log_end_offset
        kw: dict[str, Any] = {"compression": codec, "base_offset": offset}
        if log_append:
            kw |= {"timestamp_type": TimestampType.LOG_APPEND_TIME, "log_append_time": NOW}
        if idempotent:
            kw |= {"producer_id": 7, "producer_epoch": 0, "base_sequence": offset}
        log.append_as_follower(MemoryRecords.build(recs, **kw))
    log.roll()


def write_log(path: Path, specs: list[Spec]) -> None:
    with Log.open(path, LogConfig.from_properties(CONFIG), ManualClock(NOW)) as log:
        append_specs(log, specs)


def clean_twice(
    source: Path,
    work: Path,
    dedupe: int,
    second: list[Spec] = (),  # type: ignore[assignment]
) -> tuple[dict[str, bytes], list[Any]]:
    """A cleaning round; then, past delete.retention.ms, ``second`` appended and another round
    (which drops the tombstones the first stamped). The files and stats after."""
    shutil.rmtree(work.parent, ignore_errors=True)  # the cleaner checkpoint lives there
    shutil.copytree(source, work)
    clock = ManualClock(NOW)
    facts: list[Any] = []
    with Log.open(work, LogConfig.from_properties(CONFIG), clock) as log:
        cleaner = LogCleaner(CleanerConfig(dedupe_buffer_size=dedupe), lambda: {TP: log}, clock)
        for wave in range(2):
            if wave:
                clock.advance(2 * RETENTION)
                append_specs(log, second)
            for result in cleaner.run_once():
                s = result.stats
                facts.append((result.end_offset, result.error))
                if s is not None:
                    facts.append(
                        (s.messages_read, s.messages_written, s.bytes_written,
                         s.map_messages_read, s.invalid_messages)
                    )  # fmt: skip
        log.flush()
        files = {f.name: f.read_bytes() for f in sorted(work.glob("*.log"))}
    return files, facts


@needs_compiled
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch_specs, batch_specs, st.sampled_from([128 * 1024 * 1024, 24 * 4]))
# a dirty batch kept whole that holds a tombstone: decided from the key scan's notes, it must
# still be rebuilt to carry a delete horizon
@example(
    [
        ([Record(b"1", b"a")], NONE, False, False),
        ([Record(None, b"b"), Record(b"2", b"c")], NONE, False, False),
        ([Record(b"3", b"d")], NONE, False, False),
    ],
    [([Record(b"4", b"a")], NONE, False, False)],
    128 * 1024 * 1024,
)
def test_a_compiled_round_writes_what_the_reference_writes(
    tmp_path: Path, specs: list[Spec], second: list[Spec], dedupe: int
) -> None:
    """Tombstones stamped then dropped, keyless records counted, producers' last batches kept
    empty, codecs and LogAppendTime kept, and (with a 3-key map) rounds ending early."""
    source = tmp_path / "source" / "t-0"
    shutil.rmtree(source.parent, ignore_errors=True)
    write_log(source, specs)
    ref, fast = both(lambda: clean_twice(source, tmp_path / "work" / "t-0", dedupe, second))
    assert not isinstance(ref, Exception), ref
    assert fast == ref


def damaged_batch(recs: list[Record], position: int, value: int, base_offset: int) -> bytes:
    """A batch whose records region is damaged under a valid CRC: a follower takes it, and the
    damage first shows when the cleaner decodes it."""
    out = bytearray(bytes(MemoryRecords.build(recs, base_offset=base_offset)))
    region = len(out) - RECORD_BATCH_OVERHEAD
    out[RECORD_BATCH_OVERHEAD + position % region] = value
    rewrite_crc(out, 0)
    return bytes(out)


@needs_compiled
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(records, st.integers(0, 200), st.integers(0, 255))
def test_damaged_records_stop_both_cleaners_alike(
    tmp_path: Path, recs: list[Record], position: int, value: int
) -> None:
    source = tmp_path / "source" / "t-0"
    shutil.rmtree(source.parent, ignore_errors=True)
    with Log.open(source, LogConfig.from_properties(CONFIG), ManualClock(NOW)) as log:
        log.append_as_follower(MemoryRecords.build([Record(b"v", b"a", timestamp=NOW)]))
        log.append_as_follower(damaged_batch(recs, position, value, 1))
        log.roll()
    ref, fast = both(lambda: clean_twice(source, tmp_path / "work" / "t-0", 1 << 20))
    assert fast[0] == ref[0]  # nothing was replaced by either
    # the same typed error from both (the compiled loop words record damage more briefly)
    errors = [[f[1] for f in facts if len(f) == 2 and f[1]] for facts in (ref[1], fast[1])]
    assert len(errors[0]) == len(errors[1])
    for r, f in zip(*errors, strict=True):
        assert r.split(":")[0] == f.split(":")[0]
        if r.startswith("CorruptRecordError: batch records are invalid"):
            assert f.startswith("CorruptRecordError: batch records are invalid")


@needs_compiled
def test_the_compiled_map_keeps_kafkas_capacity_and_exact_keys() -> None:
    before = record_codec().module is not None
    use_fast_path(True)
    try:
        m = new_offset_map(24 * 4)  # Kafka's slots: 4, usable at 0.9: 3 keys
    finally:
        use_fast_path(before)
    assert isinstance(m, ExactOffsetMap) and m.usable_capacity == 3
    for i, key in enumerate([b"a", b"", b"a" * 1000, b"a"]):
        m.put(key, 10 + i)
    assert (m.get(b"a"), m.get(b""), m.get(b"a" * 1000), m.get(b"b")) == (13, 11, 12, -1)
    assert (m.size, m.latest_offset) == (3, 13)
    m.update_latest_offset(20)
    assert m.latest_offset == 20
    for i in range(5000):  # grows past its first table
        m.put(b"k%d" % i, i)
    assert m.get(b"k4321") == 4321 and m.size == 5003
    m.clear()
    assert (m.size, m.latest_offset, m.get(b"a")) == (0, -1, -1)


def test_the_reference_codec_gets_kafkas_digest_map() -> None:
    before = record_codec().module is not None
    use_fast_path(False)
    try:
        m = new_offset_map(24 * 4)
    finally:
        use_fast_path(before)
    assert isinstance(m, DigestOffsetMap) and m.usable_capacity == 3


@needs_compiled
def test_the_key_scans_notes_stay_within_their_budget_batch_notes_included() -> None:
    """One record a batch: the notes on the batches, not on their records, dominate -- they
    count against the log limit too, or a log of small batches would outgrow the map's
    memory (log.cleaner.dedupe.buffer.size)."""
    from kafkalog.cleaner.keymap import compiled_offset_map, map_region

    data = b"".join(
        bytes(MemoryRecords.build([Record(b"v", b"k%d" % i, timestamp=NOW)], base_offset=i))
        for i in range(300)
    )
    budget = 2000
    before = record_codec().module is not None
    use_fast_path(True)
    try:
        compiled = compiled_offset_map(1000, budget)
    finally:
        use_fast_path(before)
    assert compiled is not None
    walked = map_region(compiled, data, 0, 0, len(data), start=0, max_batch_size=1 << 20)
    assert (walked.position, walked.read, walked.full) == (len(data), 300, False)
    assert 0 < compiled.log_size <= budget


def header_key_batch(key: bytes) -> bytes:
    """One record whose header key is ``key``, valid UTF-8 or not, under a valid CRC."""
    placeholder = "\u00b5" * len(key)  # two bytes a character: found, then overwritten
    rec = Record(b"v", b"k", headers=((placeholder, b"h"),), timestamp=NOW)
    out = bytearray(bytes(MemoryRecords.build([rec])))
    at = out.index(placeholder.encode())
    out[at : at + 2 * len(key)] = key * 2 if key else b""
    rewrite_crc(out, 0)
    return bytes(out)


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=4),
        st.text(max_size=3).map(lambda t: t.encode("utf-8", "surrogatepass")),
        st.sampled_from([b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80"]),
    )
)
def test_header_keys_are_utf8_exactly_as_python_decodes_them(key: bytes) -> None:
    """The compiled parse checks header keys in C; it must accept exactly what Python's strict
    UTF-8 decoder accepts (overlong forms, surrogates and code points past U+10FFFF refused)."""
    data = header_key_batch(key)
    ref, fast = both(lambda: MemoryRecords(data).to_arrow().to_pylist())
    try:
        (key * 2).decode("utf-8")
    except UnicodeDecodeError:
        assert isinstance(ref, Exception) and type(fast) is type(ref), (ref, fast)
    else:
        assert fast == ref


class _BulkFilter:
    """The reference recopy of one plain batch with the compiled per-batch call."""

    current_time = NOW
    delete_retention_ms = RETENTION

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled

    def check_batch_retention(self, batch: Any) -> BatchRetentionResult:
        return BatchRetentionResult(BatchRetention.DELETE_EMPTY)

    def should_retain_record(self, batch: Any, record: Record) -> bool:
        raise AssertionError("decided in bulk")

    def retain_records_in_bulk(self, batch: RecordBatch) -> Any:
        horizon = batch.delete_horizon_ms
        return filter_records(
            self.compiled,
            batch,
            keep_tombstones=horizon is None or horizon > NOW,
            new_horizon=NOW + RETENTION,
        )


@needs_compiled
@pytest.mark.parametrize("notes", [0, 1 << 16], ids=["parsed", "from-notes"])
@pytest.mark.parametrize("log_append_time", [False, True])
@pytest.mark.parametrize("tombstone", [False, True])
def test_a_partly_kept_batch_is_rebuilt_inside_the_walk_as_the_reference_rebuilds_it(
    notes: int, log_append_time: bool, tombstone: bool
) -> None:
    """Keys a, b, a, c, b: the first a and b are superseded. The walk takes the batch and
    rebuilds it (header fields, producer fields, offset range, a horizon for a kept
    tombstone) into the bytes the reference writes, rather than leave it to Python."""
    values = [b"1", b"2", b"3", None if tombstone else b"4", b"5"]
    recs = [
        Record(v, k, timestamp=NOW - 50 + i)
        for i, (k, v) in enumerate(zip([b"a", b"b", b"a", b"c", b"b"], values, strict=True))
    ]
    data = bytes(
        MemoryRecords.build(
            recs,
            base_offset=40,
            timestamp_type=(
                TimestampType.LOG_APPEND_TIME if log_append_time else TimestampType.CREATE_TIME
            ),
            log_append_time=NOW - 7 if log_append_time else None,
            producer_id=9,
            producer_epoch=2,
            base_sequence=11,
            partition_leader_epoch=5,
        )
    )
    maps = []
    for _ in range(2):
        compiled = KeyOffsetMap(1 << 10, notes)
        map_region(compiled, memoryview(data), 0, 0, len(data), start=0, max_batch_size=1 << 20)
        maps.append(compiled)
    walked = filter_region(
        maps[0], memoryview(data), 0, 0, len(data), max_batch_size=1 << 20,
        upper_bound_offset=1000, last_producer_ids=set(), current_time=NOW,
        new_horizon=NOW + RETENTION,
    )  # fmt: skip
    reference = filter_buffer(data, _BulkFilter(maps[1]))
    assert walked.position == len(data) and (walked.read, walked.kept) == (5, 3)
    ((position, size, last, max_ts, rebuilt),) = walked.batches
    assert rebuilt and walked.rebuilt[position : position + size] == bytes(reference.output)
    out = next(MemoryRecords(walked.rebuilt).batches())  # CRC checked
    assert (last, max_ts) == (out.last_offset, out.max_timestamp) == (44, out.max_timestamp)
    assert out.delete_horizon_ms == (NOW + RETENTION if tombstone else None)
    assert [r.offset for r in out] == [42, 43, 44]


@needs_compiled
@pytest.mark.parametrize("base", [2**63 - 2, 2**63 - 3])  # last offset past int64, or its top
def test_the_key_scan_leaves_a_next_offset_beyond_int64_to_the_scanner(base: int) -> None:
    """A base offset near the top of int64 whose last offset delta takes its next offset past
    int64 (damage the CRC does not cover): the compiled walk stops in front of it, for the
    scanner to report."""
    from kafkalog.cleaner.keymap import compiled_offset_map, map_region

    good = bytes(MemoryRecords.build([Record(b"v", b"k", timestamp=NOW)], base_offset=0))
    bad = bytearray(
        bytes(MemoryRecords.build([Record(b"v", b"k", timestamp=NOW)] * 3, base_offset=1))
    )
    struct.pack_into(">q", bad, 0, base)
    data = good + bytes(bad)
    before = record_codec().module is not None
    use_fast_path(True)
    try:
        compiled = compiled_offset_map(1000, 1 << 16)
    finally:
        use_fast_path(before)
    assert compiled is not None
    walked = map_region(compiled, data, 0, 0, len(data), start=0, max_batch_size=1 << 20)
    assert (walked.position, walked.read, walked.full) == (len(good), 1, False)

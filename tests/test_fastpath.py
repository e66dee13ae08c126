"""The compiled codec against the pure-Python reference: same columns, same bytes, same errors.

Each property runs both implementations on the same input (``use_fast_path`` switches between
them in-process) and compares: decoded tables, encoded batch bytes, and, on damaged input,
that both raise CorruptRecordError (or both succeed with equal output). ``make test`` sets
KAFKALOG_REQUIRE_FAST=1 so a build that silently lost the extension fails here.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalog import (
    CompressionType,
    CorruptRecordError,
    InvalidArgumentError,
    InvalidRecordError,
    MemoryRecords,
    Record,
)
from kafkalog.records.batch import rewrite_crc
from kafkalog.records.codec import compiled_codec, record_codec, use_fast_path
from kafkalog.records.columnar import RecordColumns
from kafkalog.records.record import decode_records
from kafkalog.records.scanner import search_offset
from kafkalog.records.v2_layout import RECORD_BATCH_OVERHEAD
from kafkalog.testing.strategies import records as record_lists

COMPILED = compiled_codec() is not None
pytestmark = pytest.mark.one_codec  # each test runs both codecs itself
needs_compiled = pytest.mark.skipif(not COMPILED, reason="the _fastcodec extension is not built")


def test_the_extension_is_built_when_required() -> None:
    if os.environ.get("KAFKALOG_REQUIRE_FAST") == "1":
        assert COMPILED, "make test expects the compiled fast path (pip install -e . builds it)"


def both(fn: Callable[[], Any]) -> tuple[Any, Any]:
    """fn() under the reference, then under the compiled codec; exceptions are returned."""
    out = []
    before = record_codec().module is not None
    try:
        for fast in (False, True):
            use_fast_path(fast)
            try:
                out.append(fn())
            except Exception as err:  # compared by the caller
                out.append(err)
    finally:
        use_fast_path(before)
    return out[0], out[1]


def table_of(data: bytes, lo: int = 0, hi: int = 2**63 - 1, headers: bool = True) -> pa.Table:
    columns = RecordColumns(with_headers=headers)
    for batch in MemoryRecords(data).batches():
        columns.add_batch(batch, lo, hi)
    return columns.to_table()


codecs = st.sampled_from(list(CompressionType))


@needs_compiled
@given(record_lists(max_size=30), codecs, st.integers(0, 40), st.integers(0, 40), st.booleans())
def test_decode_matches_the_reference(
    recs: list[Record], codec: CompressionType, lo: int, span: int, headers: bool
) -> None:
    data = bytes(MemoryRecords.build(recs, compression=codec, base_offset=3))
    ref, fast = both(lambda: table_of(data, lo, lo + span, headers))
    assert isinstance(ref, pa.Table)
    assert fast.equals(ref)
    assert ref.column("offset").to_pylist() == [
        3 + i for i in range(len(recs)) if lo <= 3 + i < lo + span
    ]


@needs_compiled
@given(st.lists(record_lists(max_size=8), min_size=1, max_size=4), st.booleans())
def test_legacy_and_v2_batches_mix_in_one_table(groups: list[list[Record]], legacy: bool) -> None:
    parts, offset = [], 0
    for i, recs in enumerate(groups):
        magic = 1 if legacy and i % 2 else 2
        if magic == 1:
            recs = [Record(r.value, r.key, (), r.timestamp) for r in recs]
        parts.append(bytes(MemoryRecords.build(recs, magic=magic, base_offset=offset)))
        offset += len(recs)
    data = b"".join(parts)
    ref, fast = both(lambda: table_of(data))
    assert fast.equals(ref)
    assert ref.num_rows == offset


def damaged(recs: list[Record], edits: list[tuple[int, int]], cut: int) -> bytes:
    """An uncompressed batch whose records region is damaged, re-framed with a valid CRC so the
    damage reaches the record decoder."""
    region = bytearray(bytes(MemoryRecords.build(recs))[RECORD_BATCH_OVERHEAD:])
    for pos, value in edits:
        if region:
            region[pos % len(region)] = value
    if cut:
        del region[-min(cut, len(region)) :]
    head = bytearray(bytes(MemoryRecords.build(recs))[:RECORD_BATCH_OVERHEAD])
    head[8:12] = (RECORD_BATCH_OVERHEAD - 12 + len(region)).to_bytes(4, "big")
    out = head + region
    rewrite_crc(out, 0)
    return bytes(out)


edits = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4)


@needs_compiled
@given(record_lists(max_size=10), edits, st.integers(0, 3))
def test_damaged_records_fail_alike(
    recs: list[Record], changes: list[tuple[int, int]], cut: int
) -> None:
    data = damaged(recs, changes, cut)
    ref, fast = both(lambda: table_of(data))
    if isinstance(ref, Exception):
        assert isinstance(ref, CorruptRecordError), ref
        assert isinstance(fast, CorruptRecordError), fast
        assert "batch records are invalid" in str(fast)
    else:
        assert isinstance(fast, pa.Table), fast
        assert fast.equals(ref)


@needs_compiled
@given(st.binary(max_size=60), st.integers(0, 6))
def test_arbitrary_record_bytes_fail_alike(region: bytes, count: int) -> None:
    """Raw bytes straight into both record loops: the reference's list of Records against the
    compiled builder's rows."""
    before = record_codec().module is not None
    use_fast_path(True)
    fast = record_codec().module
    use_fast_path(before)
    assert fast is not None
    builder = fast.ColumnBuilder(True, 1)
    try:
        ref: Any = decode_records(region, count, 0, 1000, None)
    except CorruptRecordError as err:
        ref = err
    try:
        got: Any = builder.add(region, count, 0, 1000, False, 0, 0, 0, 2**63 - 1)
    except fast.CorruptRecords as err:
        got = err
    if isinstance(ref, Exception):
        assert isinstance(got, fast.CorruptRecords), (ref, got)
        assert builder.rows == 0  # all or nothing
    else:
        assert got == len(ref)


def rows_table(recs: list[Record]) -> pa.Table:
    return pa.table(
        {
            "key": pa.array([r.key for r in recs], pa.binary()),
            "value": pa.array([r.value for r in recs], pa.binary()),
            "timestamp": pa.array([r.timestamp for r in recs], pa.int64()),
            "headers": pa.array(
                [[{"key": k, "value": v} for k, v in r.headers] or None for r in recs],
                pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
            ),
        }
    )


@needs_compiled
@given(record_lists(max_size=40), st.integers(1, 3000), st.integers(0, 10**6))
def test_encode_matches_the_reference_byte_for_byte(
    recs: list[Record], batch_size: int, base: int
) -> None:
    table = rows_table(recs)
    ref, fast = both(
        lambda: bytes(MemoryRecords.from_arrow(table, batch_size=batch_size, base_offset=base))
    )
    assert fast == ref
    decoded = list(MemoryRecords(ref).records())
    assert [(r.key, r.value, list(r.headers)) for r in decoded] == [
        (r.key, r.value, list(r.headers)) for r in recs
    ]
    assert [r.offset for r in decoded] == list(range(base, base + len(recs)))


@needs_compiled
@given(record_lists(max_size=40), codecs)
def test_one_encoded_batch_is_what_the_builder_writes(
    recs: list[Record], codec: CompressionType
) -> None:
    table = rows_table(recs)
    built = MemoryRecords.build(recs, compression=codec)
    ref, fast = both(lambda: MemoryRecords.from_arrow(table, compression=codec, batch_size=2**30))
    if codec in (CompressionType.NONE, CompressionType.ZSTD, CompressionType.SNAPPY):
        assert bytes(fast) == bytes(ref) == bytes(built)
    assert [list(b) for b in fast.batches()] == [list(b) for b in built.batches()]


def test_bad_rows_are_refused_alike() -> None:
    negative = pa.table({"value": [b"a", b"b"], "timestamp": pa.array([5, -7], pa.int64())})
    for got in both(lambda: MemoryRecords.from_arrow(negative)):
        assert isinstance(got, InvalidRecordError) and "negative timestamp -7" in str(got)
    null_key = pa.table(
        {
            "value": [b"a"],
            "headers": pa.array(
                [[{"key": None, "value": b"x"}]],
                pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
            ),
        }
    )
    for got in both(lambda: MemoryRecords.from_arrow(null_key)):
        assert isinstance(got, InvalidRecordError) and "null key" in str(got)


def test_from_arrow_takes_strings_timestamps_slices_and_chunks() -> None:
    table = pa.table(
        {
            "Value": pa.chunked_array([["a", "bb"], ["ccc"]]),
            "key": ["k1", None, "k3"],
            "timestamp": pa.array([1_000, None, 3_000], pa.timestamp("s")),
        }
    ).slice(1)
    for got in both(lambda: list(MemoryRecords.from_arrow(table).records())):
        assert [(r.offset, r.key, r.value, r.timestamp) for r in got] == [
            (0, None, b"bb", -1),
            (1, b"k3", b"ccc", 3_000_000),
        ]
    with pytest.raises(InvalidArgumentError, match="need a 'value' column"):
        MemoryRecords.from_arrow(pa.table({"key": [b"k"]}))


def test_to_arrow_hides_control_records_and_round_trips() -> None:
    from kafkalog.records import build_end_txn_marker
    from kafkalog.types import ControlRecordType

    data = bytes(
        MemoryRecords.build(
            [Record(b"v", b"k", [("h", b"1")], 7)],
            producer_id=5,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
        )
    ) + build_end_txn_marker(
        offset=1,
        producer_id=5,
        producer_epoch=0,
        marker=ControlRecordType.COMMIT,
        coordinator_epoch=0,
        timestamp=9,
    )
    for table in both(lambda: MemoryRecords(data).to_arrow()):
        assert table.column("offset").to_pylist() == [0]
        assert table.column("headers").to_pylist() == [[{"key": "h", "value": b"1"}]]
    for table in both(lambda: MemoryRecords(data).to_arrow(include_control=True)):
        assert table.num_rows == 2
    again = MemoryRecords.from_arrow(MemoryRecords(data).to_arrow())
    assert [(r.key, r.value, r.timestamp) for r in again.records()] == [(b"k", b"v", 7)]


NOW = 1_700_000_000_000
leader_records = st.lists(
    st.builds(
        Record,
        st.one_of(st.none(), st.binary(max_size=20)),
        st.one_of(st.none(), st.binary(min_size=1, max_size=8)),
        st.just(()),
        st.one_of(st.none(), st.integers(NOW - 10_000, NOW + 10_000)),
    ),
    min_size=1,
    max_size=12,
)


@needs_compiled
@given(leader_records, codecs, codecs, st.booleans(), st.sampled_from([None, 5_000]))
def test_leader_validation_decides_alike(
    recs: list[Record],
    produced: CompressionType,
    topic_codec: CompressionType,
    compact: bool,
    bound: int | None,
) -> None:
    """A producer batch through Log.append_records on both paths: the same error, or the same
    bytes in the log."""
    import tempfile
    from pathlib import Path

    from kafkalog import Log, LogConfig, ManualClock

    props: dict[str, object] = {"compression.type": topic_codec.kafka_name}
    if compact:
        props["cleanup.policy"] = "compact"
    if bound is not None:
        props["message.timestamp.before.max.ms"] = bound
        props["message.timestamp.after.max.ms"] = bound
    batch = MemoryRecords.build(recs, compression=produced)

    def append() -> tuple[bytes, int]:
        with tempfile.TemporaryDirectory() as d:
            log = Log.open(Path(d) / "t-0", LogConfig.from_properties(props), ManualClock(NOW))
            try:
                info = log.append_records(batch)
                fetch = log.read(0, 1 << 20)
                assert fetch.records is not None
                return fetch.records.read(), info.max_timestamp
            finally:
                log.close()

    ref, fast = both(append)
    if isinstance(ref, Exception):
        assert type(fast) is type(ref) and str(fast) == str(ref)
    elif topic_codec in (produced, CompressionType.NONE, CompressionType.ZSTD):
        assert fast == ref
    else:
        assert fast[1] == ref[1]


def test_a_fetch_reads_as_an_arrow_table(tmp_path: object) -> None:
    from pathlib import Path

    from kafkalog import Log, LogConfig, ManualClock

    log = Log.open(Path(str(tmp_path)) / "t-0", LogConfig(), ManualClock(NOW))
    try:
        log.append([Record(b"v%d" % i, b"k%d" % i, timestamp=NOW) for i in range(5)])
        fetch = log.read(2, 1 << 20)
        assert fetch.records is not None
        for table in both(fetch.records.to_arrow):
            assert table.column("offset").to_pylist() == [0, 1, 2, 3, 4]  # whole batches
            assert table.column("value").to_pylist()[2] == b"v2"
    finally:
        log.close()


@needs_compiled
@pytest.mark.parametrize(
    "name", ["kafkalog.records._fastcodec", "kafkalog.cleaner._keymap", "kafkalog.cleaner._pagein"]
)
def test_each_extension_module_instance_has_its_own_state(name: str) -> None:
    """Multi-phase init with per-module state (PEP 489, PEP 573): a second instance of an
    extension, as a subinterpreter would create, gets its own types and exception classes; a
    single-phase module with C globals would hand back the same objects."""
    import importlib
    import importlib.util

    loaded = importlib.import_module(name)
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.loader is not None
    second = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(second)
    assert second is not loaded
    for attr in ("ColumnBuilder", "CorruptRecords", "KeyOffsetMap"):
        if hasattr(loaded, attr):
            assert getattr(second, attr) is not getattr(loaded, attr), attr


@needs_compiled
def test_each_codec_instance_raises_its_own_corrupt_records() -> None:
    import importlib.util

    spec = importlib.util.find_spec("kafkalog.records._fastcodec")
    assert spec is not None and spec.loader is not None
    second: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(second)
    damaged = b"\x01"  # a record length varint with nothing after it
    with pytest.raises(second.CorruptRecords) as raised:
        second.ColumnBuilder().add(damaged, 1, 0, 0, False, 0, 0, 0, 1)
    assert raised.value.args == ("record declares an invalid length", 0)
    loaded = record_codec().module
    assert loaded is not None and not isinstance(raised.value, loaded.CorruptRecords)


# --- the offset search of every fetch --------------------------------------------------------

_OFFSETS = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([0, 3, 2**63 - 1, 2**63 - 4, -(2**63), -1]),
)
_ENTRIES = st.lists(
    st.tuples(
        st.sampled_from([2, 2, 2, 2, 1, 0, 3, -1]),  # magic: mostly v2, legacy, invalid
        st.one_of(st.integers(-2, 3), _OFFSETS.map(lambda o: ("at", o))),  # step or offset
        st.one_of(st.integers(0, 3), st.integers(-(2**31), 2**31 - 1)),  # last offset delta
        st.one_of(st.integers(44, 60), st.integers(44, 60), st.integers(0, 70)),  # after magic
        st.one_of(st.none(), st.none(), st.none(), st.integers(-(2**31), 2**31 - 1)),  # a lie
    ),
    max_size=8,
)


def _headers(entries: list[tuple[int, Any, int, int, int | None]], tail: bytes) -> bytes:
    """Batch headers laid back to back (bodies of zeros): v2's last offset delta in place; a
    base offset is given, or a step from the last offset before it."""
    out, last = bytearray(), 0
    for magic, base, delta, body, lie in entries:
        base = base[1] if isinstance(base, tuple) else max(-(2**63), min(2**63 - 1, last + base))
        size = lie if lie is not None else 5 + body
        entry = bytearray(struct.pack(">qiib", base, size, 0, magic)) + bytes(body)
        if len(entry) >= 27:
            struct.pack_into(">i", entry, 23, delta)
        last = base + delta if magic == 2 else base
        out += entry
    return bytes(out + tail)


def _search(data: bytes, position: int, stop: int, target: int) -> object:
    try:
        return search_offset(data, position, stop, target)
    except CorruptRecordError as err:
        return ("CorruptRecordError", str(err), err.position, err.offset)


@needs_compiled
@given(
    _ENTRIES,
    st.binary(max_size=30),
    st.one_of(st.just(0), st.just(0), st.integers(-3, 400)),
    st.one_of(st.just(10**6), st.integers(0, 400)),
    st.one_of(
        st.integers(-3, 12),
        _OFFSETS,
        st.sampled_from([2**63, 2**64, -(2**63) - 1, -(2**70)]),  # beyond int64
    ),
)
def test_the_offset_search_walks_alike(
    entries: list[tuple[int, Any, int, int, int | None]],
    tail: bytes,
    position: int,
    stop: int,
    target: int,
) -> None:
    """Same batch found, same stop, same damage (a last offset that does not rise), and an
    offset beyond int64 answered by the reference in both."""
    data = _headers(entries, tail)
    stop = min(stop, len(data))
    reference, compiled = both(lambda: _search(data, position, stop, target))
    assert compiled == reference


@needs_compiled
def test_the_offset_search_finds_and_refuses_as_kafka_does() -> None:
    before = record_codec().module is not None
    data = _headers([(2, ("at", 0), 4, 60, None), (2, 1, 4, 60, None), (2, 1, 0, 60, None)], b"")
    size = 77
    for fast in (False, True):
        use_fast_path(fast)
        try:
            assert search_offset(data, 0, len(data), 7) == (size, size, 9)
            assert search_offset(data, 0, len(data), 11) is None
            assert search_offset(data, 0, len(data) - 1, 10) is None  # the last batch is partial
            # the batch after the one found must rise above it too
            bad = _headers([(2, ("at", 0), 4, 60, None), (2, -1, 0, 60, None)], b"")
            with pytest.raises(CorruptRecordError, match="3 does not follow the offset 4") as e:
                search_offset(bad, 0, len(bad), 0)
            assert (e.value.position, e.value.offset) == (size, 3)
            # offsets beyond int64: a last offset the base offset and its delta make, a target
            top = _headers([(2, ("at", 2**63 - 1), 2, 60, None)], b"")
            assert search_offset(top, 0, len(top), 2**63) == (0, size, 2**63 + 1)
            assert search_offset(top, 0, len(top), 2**64) is None
            near = _headers([(2, ("at", 2**63 - 9), 0, 60, None), (2, 4, 10, 60, None)], b"")
            assert search_offset(near, 0, len(near), 0) == (0, size, 2**63 - 9)
            assert search_offset(data, 0, len(data), 2**64) is None
            assert search_offset(data, 0, len(data), -(2**64)) == (0, size, 4)
            assert search_offset(data, -5, len(data), 0) == (0, size, 4)  # from the start
        finally:
            use_fast_path(before)

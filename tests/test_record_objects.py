"""Record objects made and read in C (``_record_objects.c``) against the pure-Python reference.

The compiled Record type must behave as the Python class it replaces, and the compiled loops
must turn bytes into the same records and records into the same bytes as the reference, raise
on the same damaged input, and hand anything they do not take exactly (a bytearray value, a bool
timestamp, a bad offset) to the reference, so its words are the error.
"""

from __future__ import annotations

import copy
import gc
import inspect
import pickle
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalog import (
    CompressionType,
    CorruptRecordError,
    InvalidArgumentError,
    InvalidRecordError,
    KafkaLogError,
    MemoryRecords,
    Record,
)
from kafkalog.records.batch import rewrite_crc
from kafkalog.records.builder import RecordBatchBuilder
from kafkalog.records.codec import compiled_codec
from kafkalog.records.legacy import LegacyRecord
from kafkalog.records.record import ReferenceRecord, decode_records
from kafkalog.testing.strategies import records as record_lists
from kafkalog.types import TimestampType
from test_fastpath import both, damaged, edits

COMPILED = compiled_codec() is not None
pytestmark = pytest.mark.one_codec  # each test runs both codecs itself
needs_compiled = pytest.mark.skipif(not COMPILED, reason="the _fastcodec extension is not built")

BOTH_TYPES = pytest.mark.parametrize("cls", [Record, ReferenceRecord], ids=["compiled", "python"])


def fields(records: Any) -> list[tuple[Any, ...]]:
    """Each record as plain values, with the value types (bytes, not a view, must come out)."""
    return [
        (
            type(r).__name__,
            r.offset,
            r.timestamp,
            r.key,
            type(r.key),
            r.value,
            type(r.value),
            list(r.headers),
            type(r.headers),
        )
        for r in records
    ]


def decoded(data: bytes) -> list[tuple[Any, ...]]:
    return fields(MemoryRecords(data).records())


# --- the type ---------------------------------------------------------------------------------


@needs_compiled
def test_the_public_record_is_the_compiled_type() -> None:
    assert Record is not ReferenceRecord
    assert Record.__module__ == "kafkalog.records.record" and Record.__name__ == "Record"


@BOTH_TYPES
def test_both_types_construct_compare_and_print_alike(cls: Any) -> None:
    r = cls(b"v", key=b"k", headers=[("h", b"1")], timestamp=5, offset=7)
    assert (r.value, r.key, r.headers, r.timestamp, r.offset) == (b"v", b"k", [("h", b"1")], 5, 7)
    bare = cls(None)
    assert (bare.key, tuple(bare.headers), bare.timestamp, bare.offset) == (None, (), None, -1)
    assert r == cls(b"v", b"k", (("h", b"1"),), 5, 7)  # headers compare as lists
    assert r != cls(b"v", b"k", [("h", b"1")], 5, 8)
    assert repr(r) == "Record(offset=7, timestamp=5, key=b'k', value=b'v', headers=[('h', b'1')])"
    with pytest.raises(TypeError):
        hash(r)
    r.offset = 9
    assert r.offset == 9
    del r.key
    with pytest.raises(AttributeError):
        _ = r.key
    with pytest.raises(TypeError):
        cls()


@BOTH_TYPES
def test_both_types_pickle_and_copy(cls: Any) -> None:
    r = cls(b"v" * 100, b"k", [("h", None)], 2**62, 12)
    for twin in (pickle.loads(pickle.dumps(r)), copy.copy(r), copy.deepcopy(r)):
        assert type(twin) is cls and twin == r


def test_a_legacy_record_pickles_with_its_own_fields() -> None:
    r = LegacyRecord(b"v", b"k", None, 3, crc=123, valid=False)
    twin = pickle.loads(pickle.dumps(r))
    assert type(twin) is LegacyRecord and twin == r
    assert (twin.crc, twin.valid) == (123, False)


@needs_compiled
def test_decoded_records_are_outside_the_cycle_collector_made_ones_are_not() -> None:
    data = bytes(MemoryRecords.build([Record(b"v", b"k", [("h", b"1")], 1)]))
    (read,) = MemoryRecords(data).records()
    assert not gc.is_tracked(read) and not gc.is_tracked(read.headers)
    assert gc.is_tracked(Record(b"v"))
    read.headers.append(("more", None))  # still an ordinary, mutable record
    assert read.headers == [("h", b"1"), ("more", None)]


# --- decode -----------------------------------------------------------------------------------

codecs = st.sampled_from(list(CompressionType))


@needs_compiled
@given(record_lists(max_size=30), codecs, st.sampled_from([0, 3, 2**63 - 2**31 - 5]))
def test_decode_gives_the_references_records(
    recs: list[Record], codec: CompressionType, base_offset: int
) -> None:
    data = bytes(MemoryRecords.build(recs, compression=codec, base_offset=base_offset))
    ref, fast = both(lambda: decoded(data))
    assert fast == ref
    assert [f[1] for f in ref] == [base_offset + i for i in range(len(recs))]


@needs_compiled
@given(record_lists(max_size=10), st.integers(0, 2**63 - 1))
def test_log_append_time_is_every_records_timestamp(recs: list[Record], now: int) -> None:
    data = bytes(
        MemoryRecords.build(recs, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=now)
    )
    ref, fast = both(lambda: decoded(data))
    assert fast == ref and all(f[2] == now for f in ref)


@needs_compiled
def test_timestamps_and_offsets_past_int64_come_out_exact() -> None:
    """A base timestamp near the top plus a large delta overflows int64 in C; the reference's
    ints are unbounded, and so must the compiled loop's be."""
    recs = [Record(b"a", timestamp=2**62), Record(b"b", timestamp=2**63 - 1)]
    raw = bytearray(bytes(MemoryRecords.build(recs)))
    raw[27:35] = (2**63 - 1).to_bytes(8, "big")  # the base timestamp: records keep their deltas
    rewrite_crc(raw, 0)
    ref, fast = both(lambda: decoded(bytes(raw)))
    assert fast == ref
    assert ref[1][2] == 2**63 - 1 + (2**63 - 1 - 2**62)


@needs_compiled
@given(record_lists(max_size=10), edits, st.integers(0, 3))
def test_damaged_records_raise_alike(
    recs: list[Record], changes: list[tuple[int, int]], cut: int
) -> None:
    data = damaged(recs, changes, cut)
    ref, fast = both(lambda: decoded(data))
    if isinstance(ref, Exception):
        assert isinstance(ref, CorruptRecordError), ref
        assert isinstance(fast, CorruptRecordError), fast
        assert "batch records are invalid" in str(fast)
    else:
        assert fast == ref


@needs_compiled
def test_a_record_count_beyond_the_bytes_is_refused_before_allocating() -> None:
    raw = bytearray(bytes(MemoryRecords.build([Record(b"v")])))
    raw[57:61] = (2**31 - 1).to_bytes(4, "big")
    rewrite_crc(raw, 0)
    ref, fast = both(lambda: decoded(bytes(raw)))
    assert isinstance(ref, CorruptRecordError) and isinstance(fast, CorruptRecordError)
    assert fast.position == ref.position == 0


# --- encode -----------------------------------------------------------------------------------


@needs_compiled
@given(record_lists(max_size=30), codecs, st.integers(0, 2**40))
def test_build_writes_the_references_bytes(
    recs: list[Record], codec: CompressionType, base_offset: int
) -> None:
    ref, fast = both(
        lambda: bytes(MemoryRecords.build(recs, compression=codec, base_offset=base_offset))
    )
    assert fast == ref


@needs_compiled
@given(record_lists(max_size=12), st.data())
def test_own_offsets_and_a_builder_part_filled_encode_alike(
    recs: list[Record], data: st.DataObject
) -> None:
    """Records carrying their own (increasing) offsets, appended in two slices to one builder,
    with a null-timestamp stand-in (the leader's "now")."""
    gaps = data.draw(st.lists(st.integers(1, 3), min_size=len(recs), max_size=len(recs)))
    offset = 10
    for r, gap in zip(recs, gaps, strict=True):
        offset += gap
        r.offset = offset
    cut = data.draw(st.integers(0, len(recs)))
    null_ts = data.draw(st.sampled_from([-1, 0, 1_700_000_000_000]))

    def build() -> bytes:
        b = RecordBatchBuilder(base_offset=10)
        b.append_records(recs[:cut], null_timestamp=null_ts)
        b.append_records(tuple(recs[cut:]), null_timestamp=null_ts)
        return b.build()

    ref, fast = both(build)
    assert fast == ref


ODD_BUT_ACCEPTED = {
    "a bytearray value": Record(bytearray(b"v"), b"k"),
    "a memoryview key": Record(b"v", memoryview(b"key")),
    "headers as a tuple of lists": Record(b"v", None, (["h", b"1"],)),  # type: ignore[arg-type]
    "a bool timestamp": Record(b"v", None, (), True),
    "a subclass": LegacyRecord(b"v", b"k", None, 5, crc=0, valid=True),
}
REFUSED = {
    "a str value": Record("v", b"k"),  # type: ignore[arg-type]
    "an int key": Record(b"v", 5),  # type: ignore[arg-type]
    "a negative timestamp": Record(b"v", None, (), -5),
    "a float timestamp": Record(b"v", None, (), 1.5),  # type: ignore[arg-type]
    "a header without a value": Record(b"v", None, [("h",)]),  # type: ignore[list-item]
    "a header key with a surrogate": Record(b"v", None, [("\ud800", b"x")]),
}


@needs_compiled
@pytest.mark.parametrize("case", list(ODD_BUT_ACCEPTED) + list(REFUSED))
def test_records_the_compiled_loop_does_not_take_go_to_the_reference(case: str) -> None:
    odd = ODD_BUT_ACCEPTED.get(case) or REFUSED[case]
    recs = [Record(b"first", b"k", (), 1), odd, Record(b"last", None, (), 2)]
    ref, fast = both(lambda: bytes(MemoryRecords.build(recs)))
    if case in REFUSED:
        assert isinstance(ref, KafkaLogError), ref
        assert type(fast) is type(ref) and str(fast) == str(ref)
    else:
        assert isinstance(ref, bytes), ref
        assert fast == ref


@needs_compiled
@pytest.mark.parametrize(
    "offsets",
    [[5, 5], [7, 6], [0, 2**31 + 1]],
    ids=["repeated", "decreasing", "delta past int32"],
)
def test_bad_own_offsets_are_refused_in_the_references_words(offsets: list[int]) -> None:
    recs = [Record(b"v", offset=o) for o in offsets]
    ref, fast = both(lambda: bytes(MemoryRecords.build(recs)))
    assert isinstance(ref, InvalidRecordError), ref
    assert type(fast) is type(ref) and str(fast) == str(ref)


@needs_compiled
def test_a_generator_of_records_is_built_too() -> None:
    ref, fast = both(lambda: bytes(MemoryRecords.build(Record(b"%d" % i) for i in range(5))))
    assert fast == ref and len(MemoryRecords(fast).first_batch() or ()) == 5


def test_the_reference_refuses_a_non_record_with_our_error() -> None:
    with pytest.raises(InvalidArgumentError):
        MemoryRecords.build([Record(b"v", headers=[(1, b"x")])])  # type: ignore[list-item]


@needs_compiled
@given(record_lists(max_size=20))
def test_record_facts_summarise_what_the_leader_checks(recs: list[Record]) -> None:
    codec = compiled_codec()
    assert codec is not None
    given_ts = [r.timestamp for r in recs if r.timestamp not in (None, -1)]
    expected = (
        sum(r.key is None for r in recs),
        min(given_ts, default=None),
        max(given_ts, default=None),
    )
    assert codec.record_facts(recs) == expected
    assert codec.record_facts([*recs, LegacyRecord(b"v", None, 1, 0, 0, True)]) is None
    assert codec.record_facts([*recs, Record(b"v", None, (), 1.5)]) is None  # type: ignore[arg-type]


@needs_compiled
@given(
    st.binary(max_size=80),
    st.integers(0, 8),
    st.sampled_from([0, 2**63 - 1]),
    st.sampled_from([0, -(2**63), 2**63 - 1]),
    st.sampled_from([None, 7]),
)
def test_arbitrary_bytes_decode_alike(
    region: bytes, count: int, base_offset: int, base_timestamp: int, lat: int | None
) -> None:
    """Raw bytes straight into both loops, with base offsets and timestamps at the int64 edges
    (the deltas then overflow int64): equal records, or both refuse."""
    codec = compiled_codec()
    assert codec is not None
    try:
        ref: Any = fields(decode_records(region, count, base_offset, base_timestamp, lat))
    except CorruptRecordError as err:
        ref = err
    try:
        got: Any = fields(codec.decode_records(region, count, base_offset, base_timestamp, lat))
    except codec.CorruptRecords as err:
        got = err
    if isinstance(ref, Exception):
        assert isinstance(got, codec.CorruptRecords), (ref, got)
    else:
        assert got == ref


def test_both_types_have_the_same_signature() -> None:
    """inspect.signature reads the C type's from its doc: same names, same defaults."""

    def shape(cls: Any) -> list[tuple[str, Any]]:
        return [(p.name, p.default) for p in inspect.signature(cls).parameters.values()]

    assert shape(Record) == shape(ReferenceRecord)
    assert shape(Record) == [
        ("value", inspect.Parameter.empty),
        ("key", None),
        ("headers", ()),
        ("timestamp", None),
        ("offset", -1),
    ]


@pytest.mark.parametrize("bad", [[1], None, "x", [Record(b"v"), object()]])
def test_append_records_refuses_what_is_not_records_with_our_error(bad: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="Record"):
        RecordBatchBuilder().append_records(bad)


# --- freed records kept for the next decode ---------------------------------------------------


def _batch_of(n: int, tag: bytes) -> bytes:
    recs = [Record(tag + b"-%d" % i, b"k%d" % i, [("h", tag)], 1000 + i) for i in range(n)]
    return bytes(MemoryRecords.build(recs))


@needs_compiled
def test_reused_records_never_show_another_batch() -> None:
    """Records freed go back to a freelist the next decode takes from: a record still held
    keeps its fields, a reused one has only its new batch's, and user-made records and a
    subclass's instances, freed among them, change nothing."""

    class Tagged(Record):
        pass

    kept = list(MemoryRecords(_batch_of(3000, b"a")).records())  # more than the freelist keeps
    for round_ in range(4):
        tag = b"r%d" % round_
        made = [Record(b"mine", None, (), 1), Tagged(b"sub")]
        got = list(MemoryRecords(_batch_of(2500, tag)).records())
        assert [(r.value, r.key, r.headers, r.timestamp, r.offset) for r in got] == [
            (tag + b"-%d" % i, b"k%d" % i, [("h", tag)], 1000 + i, i) for i in range(2500)
        ]
        assert all(type(r) is Record for r in got)
        del got[::2], made
        gc.collect()
    assert [(r.value, r.offset) for r in kept] == [(b"a-%d" % i, i) for i in range(3000)]
    # a record kept for reuse holds none of its old fields (the freelist emptied first, as a
    # full one frees instead)
    drained = list(MemoryRecords(_batch_of(2100, b"d")).records())
    value, key, headers = b"v" * 100, b"k" * 100, [("h", b"h")]
    before = [sys.getrefcount(x) for x in (value, key, headers)]
    records = [Record(value, key, headers, 1) for _ in range(100)]
    del records
    assert [sys.getrefcount(x) for x in (value, key, headers)] == before
    assert len(drained) == 2100


@needs_compiled
def test_reused_header_lists_never_show_another_record() -> None:
    """A freed record's header list that nothing else holds goes back, emptied, for the next
    decode: a list still held (taken from a decoded record, or given to a record made by the
    caller) keeps its items, a reused one has only its new record's and stays out of the cycle
    collector, and items whose release decodes another batch meanwhile change nothing."""
    kept: list[Any] = []
    for round_ in range(4):
        tag = b"r%d" % round_
        got = list(MemoryRecords(_batch_of(2500, tag)).records())
        assert [r.headers for r in got] == [[("h", tag)]] * 2500
        assert not any(gc.is_tracked(r.headers) for r in got)
        kept.append(got[-1].headers)  # a list frees its items last first: onto the freelist
        given = [("m", b"1"), ("m", b"2")]
        mine = Record(b"v", None, given, 1)
        wide = Record(b"v", None, [("w", b"%d" % i) for i in range(50)], 1)  # freed, not kept
        del got, mine, wide
    assert kept == [[("h", b"r%d" % i)] for i in range(4)]
    assert given == [("m", b"1"), ("m", b"2")]

    inner: list[list[Record]] = []

    class DecodesWhenFreed:
        def __del__(self) -> None:
            inner.append(list(MemoryRecords(_batch_of(5, b"in")).records()))

    made = Record(b"v", None, [DecodesWhenFreed(), ("x", b"y")], 1)
    del made
    assert [r.headers for r in inner[0]] == [[("h", b"in")]] * 5
    after = list(MemoryRecords(_batch_of(3000, b"z")).records())
    assert [r.headers for r in after] == [[("h", b"z")]] * 3000
    assert [r.headers for r in inner[0]] == [[("h", b"in")]] * 5


@needs_compiled
def test_two_threads_decoding_and_freeing_share_the_freelists_safely() -> None:
    """Two threads decode, keep some records' header lists, and free the rest at once; an
    item's release (run between them by the interpreter) may switch threads while a list is
    being emptied for the freelist. Every record keeps its own batch's headers."""
    import threading

    batches = {tag: _batch_of(600, tag) for tag in (b"t0", b"t1")}
    kept: dict[bytes, list[Any]] = {tag: [] for tag in batches}
    errors: list[BaseException] = []

    def work(tag: bytes) -> None:
        try:
            for i in range(150):
                got = list(MemoryRecords(batches[tag]).records())
                if [r.headers for r in got] != [[("h", tag)]] * 600:
                    raise AssertionError(f"{tag!r} round {i}: another batch's headers")
                kept[tag].append(got[-1 - i % 7].headers)
        except BaseException as err:  # reported by the main thread
            errors.append(err)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch as often as the interpreter will
    try:
        threads = [threading.Thread(target=work, args=(tag,)) for tag in batches]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(old)
    assert errors == []
    for tag, lists in kept.items():
        assert lists == [[("h", tag)]] * 150


@needs_compiled
def test_records_outliving_their_codec_instance_are_freed_safely() -> None:
    """A second instance of the extension (as a subinterpreter would load) decodes records that
    are freed after the instance itself is gone: its freelist is emptied when the module is,
    and later frees go straight back to the allocator."""
    import importlib.util

    spec = importlib.util.find_spec("kafkalog.records._fastcodec")
    assert spec is not None and spec.loader is not None
    second: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(second)
    region = _batch_of(50, b"x")[61:]
    first = second.decode_records(region, 50, 0, 0, None)
    del first[:25]  # into the instance's freelist
    later = second.decode_records(region, 50, 0, 0, None)  # from it
    record_type = type(later[0])
    del second, spec
    gc.collect()
    assert [r.value for r in first] == [b"x-%d" % i for i in range(25, 50)]
    del first, later
    gc.collect()
    assert record_type(b"still usable").value == b"still usable"

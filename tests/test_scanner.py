"""The one scanner: valid prefix and stop reason, never an exception mid-stream."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalog import CorruptRecordError, MemoryRecords, Record
from kafkalog.records import BatchScanner, ScanStop, next_batch_size
from kafkalog.records.batch import rewrite_crc
from kafkalog.records.codec import compiled_codec, record_codec, use_fast_path


def batches(n: int, magic: int = 2) -> list[bytes]:
    return [
        bytes(
            MemoryRecords.build(
                [Record(b"value-%d" % i, key=b"k", timestamp=i if magic else None)],
                magic=magic,
                base_offset=i,
            )
        )
        for i in range(n)
    ]


def test_clean_end_mixed_magics() -> None:
    parts = batches(2, 0) + batches(2, 1) + batches(2, 2)
    data = b"".join(parts)
    scanner = BatchScanner(data)
    got = list(scanner)
    assert [b.magic for b in got] == [0, 0, 1, 1, 2, 2]
    assert [b.position for b in got] == [sum(map(len, parts[:i])) for i in range(6)]
    assert scanner.stop is ScanStop.END and scanner.valid_bytes == len(data)
    assert scanner.error is None and scanner.batches_read == 6


@pytest.mark.parametrize("extra", range(0, 7))
def test_trailing_partial_bytes_are_ignored(extra: int) -> None:
    parts = batches(3)
    data = b"".join(parts) + parts[0][:extra]
    scanner = BatchScanner(data)
    assert len(list(scanner)) == 3
    assert scanner.valid_bytes == len(data) - extra
    assert scanner.stop is (ScanStop.END if extra == 0 else ScanStop.TRUNCATED)


def test_partial_batch_whose_header_is_complete_is_truncated_not_corrupt() -> None:
    parts = batches(2)
    data = parts[0] + parts[1][:-1]
    scanner = BatchScanner(data)
    assert len(list(scanner)) == 1 and scanner.stop is ScanStop.TRUNCATED


def test_bad_size_bad_magic_and_bad_crc_are_reported() -> None:
    good = b"".join(batches(2))
    first = len(batches(1)[0])
    small = bytearray(good)
    struct.pack_into(">i", small, first + 8, 5)
    magic = bytearray(good)
    magic[first + 16] = 7
    crc = bytearray(good)
    crc[first + 30] ^= 0x01
    for data, stop in (
        (small, ScanStop.BAD_SIZE),
        (magic, ScanStop.BAD_MAGIC),
        (crc, ScanStop.BAD_CRC),
    ):
        scanner = BatchScanner(data)
        assert len(list(scanner)) == 1
        assert scanner.stop is stop and scanner.stop.is_corruption
        assert scanner.valid_bytes == first
        assert scanner.error is not None and scanner.error.position == first
        assert scanner.error.offset == 1


def test_v2_batch_smaller_than_its_header_is_bad_size() -> None:
    data = bytearray(batches(1)[0])
    struct.pack_into(">i", data, 8, 30)
    scanner = BatchScanner(data)
    assert list(scanner) == [] and scanner.stop is ScanStop.BAD_SIZE


def test_max_batch_size() -> None:
    data = b"".join(batches(2))
    scanner = BatchScanner(data, max_batch_size=10)
    assert list(scanner) == [] and scanner.stop is ScanStop.BAD_SIZE


def test_crc_check_can_be_skipped() -> None:
    data = bytearray(batches(1)[0])
    data[-1] ^= 0xFF
    assert list(BatchScanner(data, verify_crc=False))
    assert not list(BatchScanner(data))


def test_deep_scan_stops_at_malformed_records() -> None:
    good = batches(1)[0]
    bad = bytearray(MemoryRecords.build([Record(b"abc")], base_offset=1).buffer)
    bad[57:61] = (2).to_bytes(4, "big")  # declares two records, holds one
    from kafkalog.records.crc import crc32c
    from kafkalog.records.v2_layout import CRC_OFFSET, CRC_START

    struct.pack_into(">I", bad, CRC_OFFSET, crc32c(bytes(bad[CRC_START:])))
    data = good + bytes(bad)
    assert len(list(BatchScanner(data))) == 2  # shallow: the CRC is fine
    deep = BatchScanner(data, deep=True)
    assert len(list(deep)) == 1 and deep.stop is ScanStop.BAD_RECORDS
    assert deep.valid_bytes == len(good)


def test_start_and_end_bound_the_scan() -> None:
    parts = batches(3)
    data = b"".join(parts)
    scanner = BatchScanner(data, start=len(parts[0]), end=len(parts[0]) + len(parts[1]))
    (only,) = list(scanner)
    assert only.base_offset == 1 and scanner.stop is ScanStop.END


def test_memory_records_batches_raise_on_damage() -> None:
    data = bytearray(b"".join(batches(2)))
    data[-3] ^= 0x10
    got = []
    with pytest.raises(CorruptRecordError, match="crc"):
        for b in MemoryRecords(data).batches():
            got.append(b)
    assert len(got) == 1


def test_next_batch_size_probe() -> None:
    good = batches(1)[0]
    assert next_batch_size(good[:11]) is None
    assert next_batch_size(good[:16]) is None
    assert next_batch_size(good[:17]) == len(good)
    with pytest.raises(CorruptRecordError):
        next_batch_size(b"\x00" * 8 + struct.pack(">i", 13))
    bad_magic = bytearray(good)
    bad_magic[16] = 3
    with pytest.raises(CorruptRecordError, match="magic"):
        next_batch_size(bytes(bad_magic))


def test_scanner_accepts_any_buffer_without_copying() -> None:
    data = bytearray(b"".join(batches(2)))
    (first, _) = list(BatchScanner(memoryview(data)))
    data[12:16] = b"\x00\x00\x00\x09"  # partition leader epoch, outside the CRC
    assert first.buffer[12:16].tobytes() == b"\x00\x00\x00\x09"


needs_compiled = pytest.mark.skipif(
    compiled_codec() is None, reason="the _fastcodec extension is not built"
)


def _both(fn: Any) -> tuple[object, object]:
    """fn() under the reference, then with the compiled walk."""
    before = record_codec().module is not None
    try:
        use_fast_path(False)
        reference = fn()
        use_fast_path(True)
        return reference, fn()
    finally:
        use_fast_path(before)


# --- the framing of every batch read ----------------------------------------------------------

_BATCH_PIECES = st.lists(
    st.tuples(
        st.sampled_from([2, 2, 2, 2, 2, 1, 0]),  # magic: mostly v2
        st.one_of(st.integers(-2, 3), st.sampled_from([2**31, -(2**40)])),  # base offset step
        st.integers(1, 3),  # records
        st.sampled_from(["none", "none", "lz4"]),
    ),
    max_size=7,
)


def _laid_batches(pieces: list[tuple[int, int, int, str]]) -> bytes:
    out, next_base = bytearray(), 0
    for magic, step, count, codec in pieces:
        base = max(0, next_base + step)
        records = [
            Record(b"v%d" % i * 9, b"k", timestamp=i if magic else None) for i in range(count)
        ]
        out += bytes(MemoryRecords.build(records, magic=magic, base_offset=base, compression=codec))
        next_base = base + count
    return bytes(out)


def _scan(data: bytes, start: int, end: int | None, options: dict[str, Any]) -> object:
    scanner = BatchScanner(data, start=start, end=end, **options)
    seen = [(b.position, b.size_in_bytes, getattr(b, "header", None)) for b in scanner]
    error = scanner.error
    facts = None if error is None else (str(error), error.position, error.offset)
    return seen, scanner.valid_bytes, scanner.batches_read, scanner.stop, facts


@needs_compiled
@given(
    _BATCH_PIECES,
    st.lists(st.tuples(st.integers(0, 2000), st.integers(1, 255)), max_size=3),  # flipped bytes
    st.binary(max_size=70),
    st.one_of(st.just(0), st.integers(0, 300)),
    st.one_of(st.none(), st.integers(0, 2000)),
    st.fixed_dictionaries(
        {
            "verify_crc": st.booleans(),
            "max_batch_size": st.one_of(st.none(), st.integers(50, 300)),
            "base_offset": st.one_of(st.none(), st.integers(-2, 3), st.just(2**62)),
        }
    ),
)
def test_the_framing_of_a_scan_walks_alike(
    pieces: list[tuple[int, int, int, str]],
    flips: list[tuple[int, int]],
    tail: bytes,
    start: int,
    end: int | None,
    options: dict[str, Any],
) -> None:
    """The same batches with the same headers, the same valid prefix and the same stop and
    damage (bad sizes, magics and CRCs, offsets that leave the segment or go back, a partial
    tail), whether the compiled walk frames runs of v2 batches or the reference each one."""
    data = bytearray(_laid_batches(pieces) + tail)
    for at, xor in flips:
        if at < len(data):
            data[at] ^= xor
    reference, compiled = _both(lambda: _scan(bytes(data), start, end, options))
    assert compiled == reference


@needs_compiled
def test_the_framing_walks_in_runs_that_grow() -> None:
    """A caller that takes one batch has a small run framed, not the whole buffer; a long scan
    frames it all, run after run, through the reference's step between runs."""
    data = b"".join(
        bytes(MemoryRecords.build([Record(bytes(1000), b"k")], base_offset=i)) for i in range(3000)
    )
    fast = compiled_codec()
    assert fast is not None
    headers, more = fast.frame_v2(data, 0, len(data), 16 << 10, -1, None, -1, tuple, None)
    assert more and 16 <= len(headers) <= 17
    scanner = BatchScanner(data, base_offset=0)
    assert [b.base_offset for b in scanner] == list(range(3000))
    assert scanner.stop is ScanStop.END and scanner.valid_bytes == len(data)


def _v2_batch(base: int, last_offset_delta: int) -> bytes:
    """One batch at ``base`` with its last offset delta set (CRC rewritten to match)."""
    batch = bytearray(bytes(MemoryRecords.build([Record(b"v", b"k")], base_offset=base)))
    struct.pack_into(">i", batch, 23, last_offset_delta)
    rewrite_crc(batch, 0)
    return bytes(batch)


@needs_compiled
@pytest.mark.parametrize(
    ("batches", "segment_base", "framed"),
    [
        ([(0, 0), (1, 2**31 - 2)], 0, 2),  # the last offset an index entry reaches
        ([(0, 0), (1, 2**31 - 1)], 0, 1),  # one past it
        ([(0, 0), (5, -1)], 0, 1),  # a last offset below the batch's base
        ([(0, 3), (3, 0)], 0, 1),  # a base offset below the last batch's next offset
        ([(2**63 - 9, 0), (2**63 - 8, 20)], 2**63 - 9, 2),  # a last offset beyond int64
    ],
)
def test_segment_offsets_at_their_edges_are_judged_alike(
    batches: list[tuple[int, int]], segment_base: int, framed: int
) -> None:
    data = b"".join(_v2_batch(base, delta) for base, delta in batches)

    def scan() -> object:
        scanner = BatchScanner(data, base_offset=segment_base)
        return [b.position for b in scanner], scanner.stop, str(scanner.error)

    reference, compiled = _both(scan)
    assert compiled == reference
    assert len(reference[0]) == framed  # type: ignore[index]

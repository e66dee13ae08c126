"""Fuzzing the scanner and decoders: only kafkalog errors may escape (never struct.error,
IndexError, UnicodeDecodeError or a codec library's exception).

Two generators: raw arbitrary bytes, and valid batches with random damage whose CRC is then
recomputed, so the damage gets past the checksum into the record decoder and the codecs.
"""

from __future__ import annotations

import contextlib
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalog import KafkaLogError, MemoryRecords, Record
from kafkalog.records import BatchScanner, decode_batch
from kafkalog.records.crc import crc32, crc32c
from kafkalog.records.v2_layout import CRC_OFFSET, CRC_START
from kafkalog.testing.strategies import codecs_for, records


def exercise(data: bytes) -> None:
    """Drive every decoding entry point over ``data``; kafkalog errors are fine."""
    for deep in (False, True):
        for verify in (True, False):
            scanner = BatchScanner(data, deep=deep, verify_crc=verify)
            for batch in scanner:
                try:
                    for rec in batch:
                        _ = (rec.offset, rec.timestamp, rec.key, rec.value, list(rec.headers))
                    _ = (batch.base_offset, batch.last_offset, batch.max_timestamp)
                except KafkaLogError:
                    pass
            assert scanner.valid_bytes <= len(data)
    with contextlib.suppress(KafkaLogError):
        for rec in MemoryRecords(data).records():
            _ = rec.value
    with contextlib.suppress(KafkaLogError):
        list(decode_batch(data, verify_crc=False))


@settings(max_examples=400)
@given(st.binary(max_size=300))
def test_arbitrary_bytes(data: bytes) -> None:
    exercise(data)


@st.composite
def damaged_batches(draw: st.DrawFn) -> bytes:
    magic = draw(st.sampled_from([0, 1, 2]))
    codec = draw(st.sampled_from(codecs_for(magic)))
    recs = draw(records(magic, max_size=6))
    data = bytearray(bytes(MemoryRecords.build(recs, magic=magic, compression=codec)))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        pos = draw(st.integers(min_value=0, max_value=len(data) - 1))
        data[pos] = draw(st.integers(min_value=0, max_value=255))
    if draw(st.booleans()):
        cut = draw(st.integers(min_value=0, max_value=len(data)))
        data = data[:cut] + data[cut + draw(st.integers(min_value=1, max_value=8)) :]
    # recompute the first entry's checksum so the damage reaches the decoder
    if len(data) >= 61 and data[16] == 2:
        struct.pack_into(">I", data, CRC_OFFSET, crc32c(bytes(data[CRC_START:])))
    elif len(data) >= 17 and data[16] in (0, 1):
        struct.pack_into(">I", data, 12, crc32(bytes(data[16:])))
    return bytes(data)


@settings(max_examples=600)
@given(damaged_batches())
def test_damaged_batches_with_valid_crc(data: bytes) -> None:
    exercise(data)


def test_known_nasty_inputs() -> None:
    nasty = [
        b"\x00" * 17,
        b"\x00" * 8 + struct.pack(">i", 2**31 - 1) + b"\x00\x00\x00\x00\x02",
        b"\x00" * 8 + struct.pack(">i", -5) + b"\x00" * 10,
        bytes(MemoryRecords.build([Record(b"x" * 100)], compression="gzip"))[:-3],
    ]
    for data in nasty:
        exercise(data)

"""Zig-zag varints: known encodings, round trips and Kafka's length bounds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalog import CorruptRecordError
from kafkalog.records.varint import (
    UNSIGNED_VARINT_TABLE,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    read_unsigned,
    size_of_varint,
    size_of_varlong,
)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (-1, "01"),
        (1, "02"),
        (-2, "03"),
        (63, "7e"),
        (64, "8001"),
        (-65, "8101"),
        (2**31 - 1, "feffffff0f"),
        (-(2**31), "ffffffff0f"),
    ],
)
def test_known_varints(value: int, encoded: str) -> None:
    assert encode_varint(value).hex() == encoded
    assert decode_varint(bytes.fromhex(encoded)) == (value, len(encoded) // 2)


@given(st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_varint_round_trip(value: int) -> None:
    data = encode_varint(value)
    assert len(data) == size_of_varint(value) <= 5
    assert decode_varint(data + b"\xff") == (value, len(data))


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varlong_round_trip(value: int) -> None:
    data = encode_varlong(value)
    assert len(data) == size_of_varlong(value) <= 10
    assert decode_varlong(data) == (value, len(data))


def test_overlong_varint_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="longer than 5"):
        decode_varint(b"\x80\x80\x80\x80\x80\x01")
    with pytest.raises(CorruptRecordError, match="longer than 10"):
        decode_varlong(b"\x80" * 10 + b"\x01")


def test_truncated_varint_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="past the end"):
        decode_varint(b"\x80\x80")


def test_out_of_range_values_are_rejected() -> None:
    with pytest.raises(ValueError):
        encode_varint(2**31)
    with pytest.raises(ValueError):
        encode_varlong(-(2**63) - 1)


def test_small_value_table_is_each_values_own_encoding() -> None:
    """The import-time table of one- and two-byte encodings, entry by entry, decodes back to
    its index in exactly its own length (the encoders look values below 2**14 up in it)."""
    assert len(UNSIGNED_VARINT_TABLE) == 1 << 14
    for u, encoded in enumerate(UNSIGNED_VARINT_TABLE):
        assert read_unsigned(encoded, 0, 2) == (u, len(encoded)), u
        assert len(encoded) == (1 if u < 0x80 else 2)

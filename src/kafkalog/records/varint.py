"""Zig-zag varints as Kafka writes them inside v2 records.

Why: every length, delta and count in a v2 record is a zig-zag base-128 varint; Kafka bounds a
varint at 5 bytes and a varlong at 10 and treats a longer run as corruption. Refuses: any I/O;
unbounded reads (an overlong or truncated varint is a CorruptRecordError, never an IndexError).
The record decoder inlines the one-byte fast path for speed; these functions are the reference.
"""

from __future__ import annotations

from kafkalog.errors import CorruptRecordError

MAX_VARINT_BYTES = 5
MAX_VARLONG_BYTES = 10

_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF

# Encodings of every unsigned value below 2**14 (one or two bytes): record lengths, deltas and
# key/value sizes almost always fall here, and a table lookup beats the shift loop.
_SMALL_LIMIT = 1 << 14


def _encode_unsigned_slow(u: int) -> bytes:
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def _small_table() -> tuple[bytes, ...]:
    # Built from its two byte columns rather than by the loop above: 2 ms at import, not 13
    # (every command pays it before its first line).
    one_byte = [bytes((u,)) for u in range(0x80)]
    continued = [bytes((u | 0x80,)) for u in range(0x80)]
    two_bytes = (low + high for high in one_byte[1:] for low in continued)
    return (*one_byte, *two_bytes)


UNSIGNED_VARINT_TABLE: tuple[bytes, ...] = _small_table()
assert len(UNSIGNED_VARINT_TABLE) == _SMALL_LIMIT


def zigzag32(value: int) -> int:
    if not -(2**31) <= value < 2**31:
        raise ValueError(f"varint value {value} does not fit in 32 bits")
    return ((value << 1) ^ (value >> 31)) & _MASK32


def zigzag64(value: int) -> int:
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"varlong value {value} does not fit in 64 bits")
    return ((value << 1) ^ (value >> 63)) & _MASK64


def unzigzag(u: int) -> int:
    return (u >> 1) ^ -(u & 1)


def encode_unsigned(u: int) -> bytes:
    if u < _SMALL_LIMIT:
        return UNSIGNED_VARINT_TABLE[u]
    return _encode_unsigned_slow(u)


def encode_varint(value: int) -> bytes:
    """Zig-zag varint of a signed 32-bit value (1-5 bytes)."""
    return encode_unsigned(zigzag32(value))


def encode_varlong(value: int) -> bytes:
    """Zig-zag varint of a signed 64-bit value (1-10 bytes)."""
    return encode_unsigned(zigzag64(value))


def size_of_varint(value: int) -> int:
    return len(encode_unsigned(zigzag32(value)))


def size_of_varlong(value: int) -> int:
    return len(encode_unsigned(zigzag64(value)))


def read_unsigned(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int) -> tuple[int, int]:
    """Read a base-128 unsigned varint of at most ``max_bytes`` bytes; return (value, next pos)."""
    result = 0
    shift = 0
    end = len(buf)
    for i in range(max_bytes):
        if pos + i >= end:
            raise CorruptRecordError("varint runs past the end of the buffer", position=pos)
        b = buf[pos + i]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos + i + 1
        shift += 7
    kind = "varint" if max_bytes == MAX_VARINT_BYTES else "varlong"
    raise CorruptRecordError(f"{kind} is longer than {max_bytes} bytes", position=pos)


def decode_varint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Decode a zig-zag varint (signed 32-bit); return (value, next position)."""
    u, pos = read_unsigned(buf, pos, MAX_VARINT_BYTES)
    return unzigzag(u & _MASK32), pos


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Decode a zig-zag varlong (signed 64-bit); return (value, next position)."""
    u, pos = read_unsigned(buf, pos, MAX_VARLONG_BYTES)
    return unzigzag(u & _MASK64), pos

"""Checksums: CRC-32C for v2 batches and snapshots, CRC-32 (IEEE) for v0/v1 messages.

Why: one place names which polynomial covers which format (mixing them is the classic bug).
Refuses: a pure-Python CRC; the ``crc32c`` package computes in hardware and accepts memoryviews
of mmaps without a copy.
"""

from __future__ import annotations

import zlib
from typing import Protocol

import crc32c as _crc32c

Buffer = bytes | bytearray | memoryview


class _Crc32c(Protocol):
    def __call__(self, data: Buffer, value: int = 0, /) -> int: ...


# CRC-32C (Castagnoli) as an unsigned 32-bit value; ``value`` continues an earlier CRC. The
# package's own function, not a wrapper: readers call it once per batch.
crc32c: _Crc32c = _crc32c.crc32c


def crc32(data: Buffer) -> int:
    """CRC-32 (IEEE, zlib) as an unsigned 32-bit value."""
    return zlib.crc32(data) & 0xFFFFFFFF

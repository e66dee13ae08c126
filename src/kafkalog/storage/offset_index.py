"""The offset index, ``<base>.index`` (Kafka's OffsetIndex).

Why: maps a batch's last offset to the byte position where the appended chunk starts, sparsely
(one entry per ``index.interval.bytes``), so a read seeks near its target and scans forward.
Refuses: decisions about when to add an entry (the segment applies the interval rule).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from kafkalog.errors import CorruptIndexError, InvalidOffsetError
from kafkalog.storage.index_file import IndexFile
from kafkalog.types import INT32_MAX

ENTRY = struct.Struct(">ii")  # relative offset, position


class OffsetPosition(NamedTuple):
    offset: int
    position: int


class OffsetIndex(IndexFile):
    """Entries (relative offset, position), strictly increasing in offset."""

    entry = ENTRY

    @property
    def last_offset(self) -> int:
        with self._lock:
            return (
                self.base_offset
                if self.entries == 0
                else self.base_offset + self._read(self.entries - 1)[0]
            )

    def entry_at(self, n: int) -> OffsetPosition:
        rel, pos = self.raw_entry(n)
        return OffsetPosition(self.base_offset + rel, pos)

    def append(self, offset: int, position: int) -> None:
        with self._lock:
            self._check_open()
            if self.is_full():
                raise ValueError(f"attempt to append to a full index {self.path}")
            if self.entries and offset <= self.base_offset + self._keys[-1]:
                raise InvalidOffsetError(
                    f"attempt to append offset {offset} to {self.path}, whose last offset is "
                    f"{self.last_offset}"
                )
            relative = offset - self.base_offset
            if not 0 <= relative <= INT32_MAX:
                raise InvalidOffsetError(
                    f"offset {offset} overflows the index of base offset {self.base_offset}"
                )
            self._write_next(relative, position)

    def lookup(self, target: int) -> OffsetPosition:
        """The entry with the largest offset <= target, or (base offset, 0)."""
        with self._lock:
            slot = self._largest_at_most(target - self.base_offset, 0)
            if slot < 0:
                return OffsetPosition(self.base_offset, 0)
            rel, pos = self._read(slot)
            return OffsetPosition(self.base_offset + rel, pos)

    def fetch_upper_bound_offset(self, start_position: int, fetch_size: int) -> int | None:
        """Offset of the entry with the smallest position >= start_position + fetch_size."""
        with self._lock:
            slot = self._smallest_at_least(start_position + fetch_size, 1)
            return None if slot < 0 else self.base_offset + self._read(slot)[0]

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        with self._lock:
            slot = self._largest_at_most(offset - self.base_offset, 0)
            if slot < 0:
                keep = 0
            elif self.base_offset + self._read(slot)[0] == offset:
                keep = slot
            else:
                keep = slot + 1
            self._truncate_to_entries(min(keep, self.entries))

    def _entries_problem(self, data_size: int) -> str | None:
        keys = self._keys
        if self.entries and data_size == 0:
            return f"{self.entries} entries for an empty segment"
        if self.entries and keys[0] < 0:
            return f"entry 0 has a negative relative offset {keys[0]}"
        for n in range(1, self.entries):
            if keys[n] <= keys[n - 1]:
                return f"entry {n} (relative offset {keys[n]}) does not follow {keys[n - 1]}"
        last_position = -1
        for n, (_, position) in enumerate(ENTRY.iter_unpack(self._buf)):
            if position < last_position or position >= data_size:
                return f"entry {n} points at position {position} (data size {data_size})"
            last_position = position
        return None

    def sanity_check(self) -> None:
        if self.entries and self.last_offset < self.base_offset:
            raise CorruptIndexError(
                f"corrupt index: last offset {self.last_offset} is below the base offset "
                f"{self.base_offset}",
                file=str(self.path),
            )
        if self.length % ENTRY.size:
            raise CorruptIndexError(
                f"index file length {self.length} is not a multiple of {ENTRY.size}",
                file=str(self.path),
            )

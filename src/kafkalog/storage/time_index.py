"""The time index, ``<base>.timeindex`` (Kafka's TimeIndex).

Why: maps "the largest timestamp seen so far" to the last offset of the batch that reached it,
so offset-for-timestamp lookups and time-based retention need no data scan. Refuses: deciding
when to append (the segment does), and entries whose timestamp does not increase.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from kafkalog.errors import CorruptIndexError, InvalidOffsetError
from kafkalog.storage.index_file import IndexFile
from kafkalog.types import INT32_MAX, NO_TIMESTAMP

ENTRY = struct.Struct(">qi")  # timestamp, relative offset


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


class TimeIndex(IndexFile):
    """Entries (timestamp, relative offset); timestamps strictly increase, offsets never fall.

    Full one slot early: the last slot is kept for the entry written when the segment is rolled.
    """

    entry = ENTRY

    def is_full(self) -> bool:
        return self.entries >= self.max_entries - 1

    def last_entry(self) -> TimestampOffset:
        with self._lock:
            if self.entries == 0:
                return TimestampOffset(NO_TIMESTAMP, self.base_offset)
            ts, rel = self._read(self.entries - 1)
            return TimestampOffset(ts, self.base_offset + rel)

    def entry_at(self, n: int) -> TimestampOffset:
        ts, rel = self.raw_entry(n)
        return TimestampOffset(ts, self.base_offset + rel)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        with self._lock:
            self._check_open()
            if not skip_full_check and self.is_full():
                raise ValueError(f"attempt to append to a full time index {self.path}")
            last = self.last_entry()
            if self.entries and offset < last.offset:
                raise InvalidOffsetError(
                    f"attempt to append offset {offset} to {self.path}, whose last entry has "
                    f"offset {last.offset}"
                )
            if self.entries and timestamp < last.timestamp:
                raise InvalidOffsetError(
                    f"attempt to append timestamp {timestamp} to {self.path}, whose last entry "
                    f"has timestamp {last.timestamp}"
                )
            if timestamp > last.timestamp:
                relative = offset - self.base_offset
                if not 0 <= relative <= INT32_MAX:
                    raise InvalidOffsetError(f"offset {offset} overflows base {self.base_offset}")
                if self.entries >= self.max_entries:
                    raise ValueError(f"time index {self.path} has no slot left")
                self._write_next(timestamp, relative)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp <= target, or (-1, base offset)."""
        with self._lock:
            slot = self._largest_at_most(target_timestamp, 0)
            if slot < 0:
                return TimestampOffset(NO_TIMESTAMP, self.base_offset)
            ts, rel = self._read(slot)
            return TimestampOffset(ts, self.base_offset + rel)

    def truncate_to(self, offset: int) -> None:
        with self._lock:
            slot = self._largest_at_most(offset - self.base_offset, 1)
            if slot < 0:
                keep = 0
            elif self.base_offset + self._read(slot)[1] == offset:
                # entries may share an offset; drop every entry with this offset
                keep = slot
                while keep > 0 and self.base_offset + self._read(keep - 1)[1] == offset:
                    keep -= 1
            else:
                keep = slot + 1
            self._truncate_to_entries(min(keep, self.entries))

    def _entries_problem(self, data_size: int) -> str | None:
        last_ts, last_rel = NO_TIMESTAMP, 0
        for n, (ts, rel) in enumerate(ENTRY.iter_unpack(self._buf)):
            if (n and ts <= last_ts) or rel < last_rel or not 0 <= rel <= INT32_MAX:
                return f"entry {n} ({ts}, {rel}) does not follow ({last_ts}, {last_rel})"
            last_ts, last_rel = ts, rel
        if self.entries and data_size == 0:
            return f"{self.entries} entries for an empty segment"
        return None

    def sanity_check(self) -> None:
        if self.entries:
            first = self.entry_at(0)
            last = self.last_entry()
            if last.timestamp < first.timestamp:
                raise CorruptIndexError(
                    f"corrupt time index: last timestamp {last.timestamp} is below the first "
                    f"{first.timestamp}",
                    file=str(self.path),
                )
            if last.offset < self.base_offset:
                raise CorruptIndexError(
                    f"corrupt time index: last offset {last.offset} is below the base offset",
                    file=str(self.path),
                )
        if self.length % ENTRY.size:
            raise CorruptIndexError(
                f"time index file length {self.length} is not a multiple of {ENTRY.size}",
                file=str(self.path),
            )

"""The ordered set of a partition's segments (Kafka's LogSegments).

Why: reads look up "the segment holding offset X" (floor) and walk forward (higher) while the
writer rolls, deletes and swaps segments. Every change publishes a new immutable snapshot, so a
reader never waits for the writer and never sees a half-changed list. Refuses: I/O.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator

from kafkalog.storage.segment import LogSegment


class _Snapshot:
    __slots__ = ("bases", "by_base")

    def __init__(self, bases: tuple[int, ...], by_base: dict[int, LogSegment]) -> None:
        self.bases = bases
        self.by_base = by_base


class LogSegments:
    """Segments keyed by base offset. Writers serialise on a lock; readers take a snapshot."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snap = _Snapshot((), {})

    def _publish(self, by_base: dict[int, LogSegment]) -> None:
        self._snap = _Snapshot(tuple(sorted(by_base)), by_base)

    def add(self, segment: LogSegment) -> LogSegment | None:
        """Add (or replace the segment with the same base); return the one replaced."""
        with self._lock:
            by_base = dict(self._snap.by_base)
            old = by_base.get(segment.base_offset)
            by_base[segment.base_offset] = segment
            self._publish(by_base)
            return old

    def remove(self, base_offset: int) -> LogSegment | None:
        with self._lock:
            by_base = dict(self._snap.by_base)
            old = by_base.pop(base_offset, None)
            self._publish(by_base)
            return old

    def clear(self) -> list[LogSegment]:
        with self._lock:
            old = [self._snap.by_base[b] for b in self._snap.bases]
            self._publish({})
            return old

    def get(self, base_offset: int) -> LogSegment | None:
        return self._snap.by_base.get(base_offset)

    def __len__(self) -> int:
        return len(self._snap.bases)

    def is_empty(self) -> bool:
        return not self._snap.bases

    def __iter__(self) -> Iterator[LogSegment]:
        snap = self._snap
        return iter([snap.by_base[b] for b in snap.bases])

    def values(
        self, from_offset: int | None = None, to_offset: int | None = None
    ) -> list[LogSegment]:
        """Segments with base in [from, to); with ``from``, the floor segment of it is included."""
        snap = self._snap
        bases = snap.bases
        start = 0
        if from_offset is not None:
            start = max(bisect.bisect_right(bases, from_offset) - 1, 0)
        end = len(bases) if to_offset is None else bisect.bisect_left(bases, to_offset)
        return [snap.by_base[b] for b in bases[start:end]]

    @property
    def base_offsets(self) -> tuple[int, ...]:
        return self._snap.bases

    def first_segment(self) -> LogSegment | None:
        snap = self._snap
        return snap.by_base[snap.bases[0]] if snap.bases else None

    def last_segment(self) -> LogSegment | None:
        snap = self._snap
        return snap.by_base[snap.bases[-1]] if snap.bases else None

    active_segment = last_segment

    def floor_segment(self, offset: int) -> LogSegment | None:
        """The segment with the largest base <= offset."""
        snap = self._snap
        i = bisect.bisect_right(snap.bases, offset)
        return snap.by_base[snap.bases[i - 1]] if i else None

    def higher_segment(self, offset: int) -> LogSegment | None:
        """The segment with the smallest base > offset."""
        snap = self._snap
        i = bisect.bisect_right(snap.bases, offset)
        return snap.by_base[snap.bases[i]] if i < len(snap.bases) else None

    def higher_segments(self, offset: int) -> list[LogSegment]:
        snap = self._snap
        i = bisect.bisect_right(snap.bases, offset)
        return [snap.by_base[b] for b in snap.bases[i:]]

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self)

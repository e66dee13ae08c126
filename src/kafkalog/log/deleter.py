"""Asynchronous segment deletion (Kafka's UnifiedLog.deleteOldSegments,
LocalLog.deleteSegmentFiles): rename to ``.deleted`` now, remove later.

Why: a reader that already holds a segment's file descriptors must be able to finish its read
after truncation or retention drops the segment; Kafka waits ``file.delete.delay.ms`` before
removing the files. Truncation and retention use it. Refuses: choosing what to delete.
"""

from __future__ import annotations

import threading
from pathlib import Path

from kafkalog.clock import Clock
from kafkalog.storage import filenames as fn
from kafkalog.storage.atomic import delete_if_exists
from kafkalog.storage.segment import LogSegment


class SegmentDeleter:
    """Segments renamed to ``.deleted`` and due for removal. Thread-safe."""

    def __init__(self, clock: Clock, delay_ms: int) -> None:
        self._clock = clock
        self._delay_ms = delay_ms
        self._lock = threading.Lock()
        self._pending: list[tuple[int, LogSegment | Path]] = []

    def set_delay(self, delay_ms: int) -> None:
        """A new ``file.delete.delay.ms``: files scheduled from now on wait this long."""
        self._delay_ms = delay_ms

    def schedule(self, segment: LogSegment) -> None:
        segment.change_file_suffixes("", fn.DELETED_FILE_SUFFIX)
        with self._lock:
            self._pending.append((self._clock.milliseconds() + self._delay_ms, segment))

    def schedule_file(self, path: Path) -> None:
        """Remove an already renamed file (a ``.snapshot.deleted``) after the delay."""
        with self._lock:
            self._pending.append((self._clock.milliseconds() + self._delay_ms, path))

    def run(self, force: bool = False) -> int:
        """Remove the files of every segment that is due (all, with ``force``); return how many."""
        if not self._pending:  # every append asks: no lock when nothing waits (a file
            return 0  # scheduled by another thread meanwhile waits for the next call)
        with self._lock:
            if not self._pending:
                return 0
            now = self._clock.milliseconds()
            due = [s for t, s in self._pending if force or now >= t]
            self._pending = [(t, s) for t, s in self._pending if not (force or now >= t)]
        for item in due:
            if isinstance(item, Path):
                delete_if_exists(item)
            else:
                item.delete_files()
        return len(due)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)

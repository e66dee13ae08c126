"""The stretch of a segment's data known to be sound, so a zero-copy read never sends damage.

Why: ``kafkalog serve`` answers Fetch with the segment's bytes as they are (``sendfile``), and
a batch's base offset lies outside its CRC: a flipped bit there (bit rot, a stray write while
the broker was down) would reach clients as records at offsets that never existed. Bytes this
process appended, or recovery checked, are sound; other bytes are checked -- CRC, offsets that
stay in the segment and keep increasing -- the first time a read reaches them, and the stretch
checked grows as reads and appends go on, so a consumer following the log pays for each byte
once. A read far from that stretch (a second consumer elsewhere) checks what it sends and the
stretch moves there. Refuses: repairing anything (the read that reaches a damaged batch fails,
as a decoding reader would, and recovery decides) and reading what no fetch asked for.
"""

from __future__ import annotations

import threading

from kafkalog.errors import CorruptRecordError
from kafkalog.records.scanner import AnyBatch
from kafkalog.storage.file_records import FileRecords
from kafkalog.types import INT32_MAX


class CheckedRange:
    """Bytes ``[low, high)`` of ``records`` are sound, and the batch at ``high`` must start at
    ``next_offset`` or above (unknown, the segment's base, when ``low`` is not 0). Thread-safe:
    reads check without the log lock; the range changes under its own lock, and only from the
    state the checker started with, so an append or truncation meanwhile wins."""

    def __init__(self, records: FileRecords, base_offset: int) -> None:
        self._records = records
        self._base_offset = base_offset
        self._lock = threading.Lock()
        self.low = self.high = 0
        self.next_offset = base_offset

    def appended(self, start: int, end: int, next_offset: int) -> None:
        """The writer appended sound batches at ``[start, end)``."""
        with self._lock:
            if self.high == start:
                self.high, self.next_offset = end, next_offset

    def trust(self, end: int, next_offset: int) -> None:
        """Recovery checked ``[0, end)``."""
        with self._lock:
            self.low, self.high, self.next_offset = 0, end, next_offset

    def reset(self) -> None:
        """The data was cut: check again when next read."""
        with self._lock:
            self.low = self.high = 0
            self.next_offset = self._base_offset

    def sendable(self, start: int, end: int) -> int:
        """How far from ``start`` (a batch boundary) towards ``end`` the data is sound: ``end``,
        or the position of the first damaged batch after ``start``; CorruptRecordError if the
        batch at ``start`` itself is damaged. What comes before the damage is served, as a
        reader of the same bytes would get it, and the read that reaches it fails."""
        with self._lock:
            low, high, expected = self.low, self.high, self.next_offset
        if low <= start and end <= high:
            return end
        state = (low, high, expected)
        if not low <= start <= high:  # elsewhere: check from here, nothing known before it
            low, high, expected = start, start, self._base_offset
        position = high
        error: CorruptRecordError | None = None
        previous: tuple[int, int] | None = None  # the batch before: (position, its expected)
        with self._records.scanner(position, end) as scan:
            for batch in scan:
                problem = self._offset_problem(batch, expected)
                if problem is not None:
                    error = CorruptRecordError(
                        problem,
                        file=str(self._records.path),
                        position=position,
                        offset=batch.base_offset,
                    )
                    if previous is not None and self._in_segment(batch):
                        # offsets that go back: the batch before may be the one whose base
                        # offset was flipped up, so neither is sent
                        position, expected = previous
                    break
                previous = (position, expected)
                expected = batch.last_offset + 1
                position = scan.valid_bytes
            error = error or scan.error
        with self._lock:
            if (self.low, self.high, self.next_offset) == state:
                self.low, self.high, self.next_offset = low, position, expected
        if error is None or position >= end:
            return end
        if position <= start:
            raise error
        return position

    def _in_segment(self, batch: AnyBatch) -> bool:
        first = batch.base_offset if batch.magic == 2 else batch.last_offset
        return self._base_offset <= first <= batch.last_offset <= self._base_offset + INT32_MAX

    def _offset_problem(self, batch: AnyBatch, expected: int) -> str | None:
        """Why ``batch``'s offsets cannot be where they are, or None (Kafka's segment rules:
        offsets relative to the base fit an int, and they increase; a legacy wrapper carries
        its last inner offset)."""
        first = batch.base_offset if batch.magic == 2 else batch.last_offset
        if not self._in_segment(batch) or first < expected:
            return (
                f"batch offsets [{first}, {batch.last_offset}] do not follow offset "
                f"{expected - 1} in the segment based at {self._base_offset}"
            )
        return None

"""The batches of a segment file read a chunk at a time, for ``dump-log``.

Why: a dump must start printing at once and hold a bounded amount of memory whatever the
segment's size (a 1 GiB segment read whole took its size in RSS before the first line). This
reads a 1 MiB chunk, hands the complete batches in it to the one scanner, and goes on from the
end of the last one; a batch larger than the chunk grows it. Refuses: writing, and going past
the first damage (the dump reports the invalid bytes from there).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from kafkalog.records.scanner import AnyBatch, BatchScanner, ScanStop, next_batch_size

READ_CHUNK = 1024 * 1024  # a dump holds one chunk (or one larger batch) at a time


class SegmentWalk:
    """The complete batches of the first ``limit`` bytes of a segment file, with their
    positions, read a chunk at a time; ``valid_end`` is where the valid prefix ends."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path = path
        self.limit = limit
        self.size = 0
        self.valid_end = 0

    def __iter__(self) -> Iterator[tuple[int, AnyBatch]]:
        with self.path.open("rb") as f:
            fd = f.fileno()
            self.size = size = min(os.fstat(fd).st_size, self.limit)
            position, chunk = 0, READ_CHUNK
            while position < size:
                data = os.pread(fd, min(chunk, size - position), position)
                scan = BatchScanner(data, verify_crc=False, file=str(self.path))
                for batch in scan:
                    yield position + scan.valid_bytes - batch.size_in_bytes, batch
                if scan.valid_bytes == 0:
                    if scan.stop is ScanStop.TRUNCATED and len(data) < size - position:
                        chunk = max(chunk * 2, next_batch_size(data) or chunk)  # a big batch
                        continue
                    break  # damage, or a partial batch at the end
                position += scan.valid_bytes
                self.valid_end = position
                chunk = READ_CHUNK

"""Checksums of a large follower append, computed on another core while its bytes are written.

Why: a follower's append is a CRC-32C pass over the data and a copy into the page cache; done one
after the other, the CRC costs a quarter of the time. ``crc32c`` and ``os.pwrite`` both release
the GIL, so the two run side by side. Safety does not move: the bytes are written past the
file's logical end, and the size only advances (and readers only see them) after every batch has
passed; a failure undoes the write. After a crash in between, recovery checks CRCs anyway.
Refuses: small appends (a thread hand-off costs more than their CRC) and changing any error: a
failure raises exactly what the in-line check raises.
"""

from __future__ import annotations

from collections.abc import Sequence

from kafkalog.records import AnyBatch
from kafkalog.storage.background import BackgroundJob, BackgroundWorker

# Below this the hand-off (tens of µs on a VM) costs more than the CRC it hides.
OVERLAP_MIN_BYTES = 256 * 1024

_WORKER = BackgroundWorker("kafkalog-crc")


class PendingChecksums(BackgroundJob):
    """The checksums of ``batches``, being verified in the background.

    ``wait()`` blocks until they are known and raises the first bad batch's
    CorruptRecordError, as the scanner would have; it may be called any number of times.
    """

    __slots__ = ("_batches",)

    def __init__(self, batches: Sequence[AnyBatch]) -> None:
        super().__init__()
        self._batches = batches
        _WORKER.submit(self)

    def run(self) -> None:
        for batch in self._batches:
            batch.ensure_valid()

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

import os
import queue
import threading
from collections.abc import Sequence

from kafkalog.records import AnyBatch

# Below this the hand-off (tens of µs on a VM) costs more than the CRC it hides.
OVERLAP_MIN_BYTES = 256 * 1024

_lock = threading.Lock()
# One worker per process (a forked child starts its own: the parent's thread is gone). A bare
# thread and queue, not an executor: submitting to ThreadPoolExecutor costs about 16 µs, a
# twentieth of the write this hides.
_queues: dict[int, queue.SimpleQueue[PendingChecksums]] = {}


def _work(jobs: queue.SimpleQueue[PendingChecksums]) -> None:
    while True:
        jobs.get().run()


def _jobs() -> queue.SimpleQueue[PendingChecksums]:
    pid = os.getpid()
    with _lock:
        jobs = _queues.get(pid)
        if jobs is None:
            _queues.clear()
            jobs = _queues[pid] = queue.SimpleQueue()
            threading.Thread(target=_work, args=(jobs,), name="kafkalog-crc", daemon=True).start()
        return jobs


class PendingChecksums:
    """The checksums of ``batches``, being verified in the background.

    ``wait()`` blocks until they are known and raises the first bad batch's
    CorruptRecordError, as the scanner would have; it may be called any number of times.
    """

    __slots__ = ("_batches", "_done", "_error")

    def __init__(self, batches: Sequence[AnyBatch]) -> None:
        self._batches = batches
        self._error: BaseException | None = None
        self._done = threading.Lock()
        self._done.acquire()  # released by the worker when the verdict is in
        _jobs().put(self)

    def run(self) -> None:
        try:
            for batch in self._batches:
                batch.ensure_valid()
        except BaseException as err:  # handed to the waiting appender, not lost in the worker
            self._error = err
        finally:
            self._done.release()

    def wait(self) -> None:
        with self._done:
            pass
        if self._error is not None:
            raise self._error

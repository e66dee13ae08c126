"""The threads that read remote (tiered) data for fetches, with a bounded queue in front.

Why: a remote read can take as long as the store does, and a fetch that gives up waiting for
it (``remote.fetch.max.wait.ms``) leaves it running. Without a bound, a client that keeps
fetching remote offsets of a slow store queues reads without end: memory grows, and everybody
else's remote reads wait behind them. Kafka's RemoteStorageThreadPool runs
``remote.log.reader.threads`` threads over a queue of at most
``remote.log.reader.max.pending.tasks`` reads, and a read that finds the queue full is
rejected; the fetch answers that partition with the error (UNKNOWN_SERVER_ERROR, as
ReplicaManager's RejectedExecutionException becomes through ``Errors.forException``).

Refuses: to queue a read beyond the bound, and to count a read that a thread has taken as
waiting.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class RemoteReadRejectedError(Exception):
    """Every remote reader thread is busy and the queue in front of them is full."""


class RemoteReaderPool:
    """``threads`` reader threads; at most ``max_pending`` reads wait for one."""

    def __init__(self, threads: int, max_pending: int) -> None:
        self._executor = concurrent.futures.ThreadPoolExecutor(threads, "kafkalog-remote-reader")
        self.max_pending = max_pending
        self._pending = 0  # submitted and not yet taken by a thread
        self._lock = threading.Lock()

    @property
    def pending(self) -> int:
        return self._pending

    def submit(self, read: Callable[[], T]) -> concurrent.futures.Future[T]:
        """Queue ``read``; raises RemoteReadRejectedError if ``max_pending`` reads wait."""
        with self._lock:
            if self._pending >= self.max_pending:
                raise RemoteReadRejectedError(
                    f"{self._pending} remote reads wait for a reader thread "
                    f"(remote.log.reader.max.pending.tasks={self.max_pending})"
                )
            self._pending += 1
        try:
            return self._executor.submit(self._taken, read)
        except BaseException:
            self._release()
            raise

    def _taken(self, read: Callable[[], T]) -> T:
        self._release()
        return read()

    def _release(self) -> None:
        with self._lock:
            self._pending -= 1

    def shutdown(self) -> None:
        """Stop taking reads; queued ones are dropped and the running ones finish unheard."""
        self._executor.shutdown(wait=False, cancel_futures=True)

"""The request handler threads (Kafka's KafkaRequestHandlerPool, ``num.io.threads``): work the
event loop hands off, and the future it awaits for the answer.

Why not ``loop.run_in_executor`` over a ThreadPoolExecutor: every request makes this trip, and
that one costs about 65 us of wall time and GIL (a lock, a concurrent Future chained to an
asyncio one, the thread-count check) where a queue and one wake-up of the loop cost about 40.
Refuses: to run work whose future was cancelled before a thread took it (as a
ThreadPoolExecutor does not), and to take work once shut down.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")
_STOP = object()


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


class RequestHandlerPool:
    """``threads`` daemon threads taking work in order from one queue."""

    def __init__(self, threads: int, loop: asyncio.AbstractEventLoop, name: str) -> None:
        self._loop = loop
        self._work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def run(self, fn: Callable[..., _T], *args: Any) -> asyncio.Future[_T]:
        """``fn(*args)`` on a handler thread; call on the loop."""
        if self._closed:
            raise RuntimeError("the request handler pool is shut down")
        future: asyncio.Future[_T] = self._loop.create_future()
        self._work.put((future, fn, args))
        return future

    def _serve(self) -> None:
        while (item := self._work.get()) is not _STOP:
            future, fn, args = item
            if future.cancelled():  # its caller is gone; a read of a flag, safe off the loop
                continue
            result, error = None, None
            try:
                result = fn(*args)
            except BaseException as err:  # handed to the awaiting task, as an executor does
                error = err
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                self._loop.call_soon_threadsafe(_settle, future, result, error)

    def shutdown(self) -> None:
        """Let the threads finish the work queued so far, then stop them."""
        self._closed = True
        for _ in self._threads:
            self._work.put(_STOP)
        for thread in self._threads:
            thread.join()

"""Fetches that wait for data (Kafka's DelayedFetch in the fetch purgatory).

Why: a consumer's Fetch with ``min_bytes`` not yet available waits up to ``max_wait_ms`` for an
append. While it waits it is parked here, on the event loop, holding no worker and no request
slot (the request door tells its connection it has parked), and it is tried again after each
append and once more when its time is up. A small fetch (a frame of at most
``FETCH_ON_THE_LOOP_BYTES``: a few dozen partitions) is tried on the event loop itself, as a
small Produce is appended there: a consumer sends its next fetch only once it has the last
answer, so the two thread hand-offs of a try on a worker were latency on every round trip. A
try only reads (the log's read path takes no lock), so it cannot wait behind a handler thread.
Refuses: holding anything of the files between tries (a try that finds too little closes what
it opened) and leaking descriptors of a try whose client went away.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from kafkalog.protocol.fetch_frame import FetchFrame, FetchResponseData, encode_fetch_response
from kafkalog.protocol.wire import Request
from kafkalog.server.context import BrokerContext
from kafkalog.server.fetch import FetchResult, handle_fetch
from kafkalog.server.quotas import throttle_fetch

# the largest Fetch frame tried on the event loop: about 28 partitions at 33 bytes each (v12+),
# a try of a millisecond or less; a larger one goes to a handler thread, not to hold the loop
FETCH_ON_THE_LOOP_BYTES = 1024


class AppendSignal:
    """Wakes waiting fetches after an append. ``notify`` may be called from any thread.

    A notify costs nothing unless a fetch has taken the current future since the last wake:
    every Produce notifies, and on the event loop's own thread a wake through
    ``call_soon_threadsafe`` was a write to the loop's self-pipe, a read of it and a loop
    iteration per request, for no fetch at all in a produce-only load. The skip is safe: a
    fetch takes the future before it reads the log, so an append it did not see is one whose
    notify sees the future taken."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()  # made on the loop (FetchPurgatory.start)
        self._future: asyncio.Future[None] = loop.create_future()
        self._taken = False

    def current(self) -> asyncio.Future[None]:
        self._taken = True
        return self._future

    def notify(self) -> None:
        if not self._taken:
            return
        if threading.get_ident() == self._loop_thread:
            self._wake()
        else:
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        self._taken = False
        future, self._future = self._future, self._loop.create_future()
        if not future.done():
            future.set_result(None)


class FetchPurgatory:
    """Runs Fetch requests, parking those that must wait. Lives on the event loop; ``start``
    there before the first fetch."""

    def __init__(
        self,
        context: BrokerContext,
        run: Callable[..., asyncio.Future[tuple[Request, FetchResult, FetchFrame | None]]],
    ) -> None:
        self._context = context
        self._run = run  # on a request handler thread
        self._signal: AppendSignal | None = None
        self.parked = 0  # fetches waiting for data now

    def start(self) -> None:
        self._signal = AppendSignal(asyncio.get_running_loop())
        self._context.on_append = self._signal.notify

    def _fetch_once(
        self, request: Request, final: bool, throttled: Callable[[int], None]
    ) -> tuple[FetchResult, FetchFrame | None]:
        timed = self._context.quotas.enabled
        started = time.perf_counter_ns() if timed else 0
        result = handle_fetch(self._context, request, final=final)
        if not result.satisfied:
            result.close()
            return result, None
        if timed:
            result = self._maybe_throttled(request, result, started, throttled)
        try:
            return result, encode_fetch_response(
                request.correlation_id, request.api_version, result.response
            )
        except BaseException:
            result.close()
            raise

    def _maybe_throttled(
        self, request: Request, result: FetchResult, started: int, throttled: Callable[[int], None]
    ) -> FetchResult:
        """The result, or, when the client's quotas throttle it, an empty one that says how
        long to wait (KIP-219) while the connection is muted that long."""
        size = sum(p.records_size for t in result.response.topics for p in t.partitions)
        spent = time.perf_counter_ns() - started
        ms = throttle_fetch(self._context, request, size, spent)
        if ms <= 0:
            return result
        result.close()
        throttled(ms)
        return FetchResult(FetchResponseData(0, throttle_ms=ms), True, 0)

    def _decode_and_fetch(
        self, decode: Callable[[], Request], throttled: Callable[[int], None]
    ) -> tuple[Request, FetchResult, FetchFrame | None]:
        request = decode()
        return request, *self._fetch_once(request, False, throttled)

    async def fetch(
        self,
        decode: Callable[[], Request],
        park: Callable[[], None],
        throttled: Callable[[int], None] = lambda ms: None,
        on_the_loop: bool = False,
    ) -> FetchFrame:
        """The Fetch's response frame, once it has ``min_bytes`` or its time is up; ``park``
        is called when it starts to wait. ``decode`` parses the request, in the first try
        (on a handler thread: one trip to a thread, not two). ``on_the_loop``: every try runs
        here on the event loop, none on a handler thread."""
        loop = asyncio.get_running_loop()
        assert self._signal is not None, "start the purgatory first"
        woken = self._signal.current()
        encoded: FetchFrame | None
        if on_the_loop:
            request, result, encoded = self._decode_and_fetch(decode, throttled)
        else:
            request, result, encoded = await self._in_worker(
                self._decode_and_fetch, decode, throttled
            )
        if encoded is not None:
            return encoded
        park()
        self.parked += 1
        try:
            deadline = loop.time() + result.max_wait_ms / 1000
            while encoded is None:
                remaining = deadline - loop.time()
                if remaining > 0:  # asyncio.wait: it neither cancels the shared future nor
                    await asyncio.wait({woken}, timeout=remaining)  # swallows our cancel
                woken = self._signal.current()
                final = loop.time() >= deadline
                if on_the_loop:
                    result, encoded = self._fetch_once(request, final, throttled)
                else:
                    _, result, encoded = await self._in_worker(
                        self._fetch_again, request, final, throttled
                    )
            return encoded
        finally:
            self.parked -= 1

    def _fetch_again(
        self, request: Request, final: bool, throttled: Callable[[int], None]
    ) -> tuple[Request, FetchResult, FetchFrame | None]:
        return request, *self._fetch_once(request, final, throttled)

    async def _in_worker(
        self, fn: Callable[..., tuple[Request, FetchResult, FetchFrame | None]], *args: Any
    ) -> tuple[Request, FetchResult, FetchFrame | None]:
        """A try on a handler thread. If the client goes while it runs, the thread still
        finishes, and the descriptors it took are closed then rather than leaked."""
        future = self._run(fn, *args)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            future.add_done_callback(_close_abandoned)
            raise


def _close_abandoned(
    future: asyncio.Future[tuple[Request, FetchResult, FetchFrame | None]],
) -> None:
    if not future.cancelled() and future.exception() is None:
        future.result()[1].close()

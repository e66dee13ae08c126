"""Fetches that wait for data (Kafka's DelayedFetch in the fetch purgatory).

Why: a consumer's Fetch with ``min_bytes`` not yet available waits up to ``max_wait_ms`` for an
append. While it waits it is parked here, on the event loop, holding no worker and no request
slot (the request door tells its connection it has parked), and it is tried again after an
append to one of its partitions (appends to others wake nobody) and once more when its time is
up. A small fetch (a frame of at most ``FETCH_ON_THE_LOOP_BYTES``: a few dozen partitions) is
tried on the event loop itself, as a small Produce is appended there: a consumer sends its next
fetch only once it has the last answer, so the two thread hand-offs of a try on a worker were
latency on every round trip. A try only reads (the log's read path takes no lock), so it
cannot wait behind a handler thread. Refuses: holding anything of the files between tries (a
try that finds too little closes what it opened) and leaking descriptors of a try whose client
went away.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from kafkalog.protocol.fetch_frame import FetchFrame, encode_fetch_response
from kafkalog.protocol.wire import Request
from kafkalog.server.context import BrokerContext
from kafkalog.server.fetch import (
    FetchResult,
    RemoteReadOffTheLoop,
    available_bytes,
    handle_fetch,
    isolation_of,
)
from kafkalog.server.fetch_sessions import FetchSessionCache, SessionContext
from kafkalog.server.quotas import throttle_fetch

# the largest Fetch frame tried on the event loop: about 28 partitions at 33 bytes each (v12+),
# a try of a millisecond or less; a larger one goes to a handler thread, not to hold the loop
FETCH_ON_THE_LOOP_BYTES = 1024


Partition = tuple[str, int]  # (topic, partition), as a produce names what it appended


class Watch:
    """A parked fetch's interest in its partitions. ``woken`` is set by an append to one of
    them since the fetch last read, and ``changed`` says which; ``future`` exists while the
    fetch waits on the loop."""

    __slots__ = ("changed", "closed", "future", "partitions", "woken")

    def __init__(self) -> None:
        self.partitions: frozenset[Partition] = frozenset()
        self.changed: set[Partition] = set()
        self.woken = False
        self.future: asyncio.Future[None] | None = None
        self.closed = False


class AppendSignal:
    """Wakes the fetches that asked for a partition after an append to it (Kafka's fetch
    purgatory, keyed by partition): an append wakes no fetch waiting on other partitions.
    ``watch``, ``forget`` and ``notify`` may be called from any thread; ``waiting`` and
    ``rearm`` on the loop.

    A fetch watches its partitions before it reads the log, and an append notifies after it
    wrote, so an append the read did not see is one whose notify finds the watch. A notify
    with nobody watching costs one test of an empty dict: every Produce notifies, and a
    produce-only load must cost the loop nothing (a wake through ``call_soon_threadsafe`` is a
    write to the loop's self-pipe, a read of it and a loop iteration)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()  # made on the loop (FetchPurgatory.start)
        self._lock = threading.Lock()
        self._watchers: dict[Partition, set[Watch]] = {}

    def watch(self, watch: Watch, partitions: Iterable[Partition]) -> None:
        """Have appends to ``partitions`` wake ``watch`` (not once it is forgotten: a fetch
        whose client went while its first try ran on a thread)."""
        with self._lock:
            if watch.closed:
                return
            watch.partitions = frozenset(partitions)
            for tp in watch.partitions:
                self._watchers.setdefault(tp, set()).add(watch)

    def forget(self, watch: Watch) -> None:
        with self._lock:
            watch.closed = True
            for tp in watch.partitions:
                group = self._watchers.get(tp)
                if group is not None:
                    group.discard(watch)
                    if not group:
                        del self._watchers[tp]

    def waiting(self, watch: Watch) -> asyncio.Future[None]:
        """The future an append wakes; done already if one came since the last read."""
        future = self._loop.create_future()
        with self._lock:
            watch.future = future
            if watch.woken:
                future.set_result(None)
        return future

    def rearm(self, watch: Watch) -> set[Partition]:
        """Before the fetch reads again: what wakes it now is an append after this read.
        Returns the partitions appended to since the last rearm."""
        with self._lock:
            watch.woken = False
            watch.future = None
            changed, watch.changed = watch.changed, set()
        return changed

    @property
    def watched(self) -> int:
        """How many partitions some parked fetch watches."""
        return len(self._watchers)

    def notify(self, partitions: Iterable[Partition]) -> None:
        watchers = self._watchers
        if not watchers:
            return
        woken: list[asyncio.Future[None]] = []
        with self._lock:
            for tp in partitions:
                for watch in watchers.get(tp, ()):
                    watch.changed.add(tp)
                    if not watch.woken:
                        watch.woken = True
                        if watch.future is not None:
                            woken.append(watch.future)
        if not woken:
            return
        if threading.get_ident() == self._loop_thread:
            _wake(woken)
        else:
            self._loop.call_soon_threadsafe(_wake, woken)


def _wake(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)


class FetchPurgatory:
    """Runs Fetch requests, parking those that must wait. Lives on the event loop; ``start``
    there before the first fetch."""

    def __init__(
        self,
        context: BrokerContext,
        run: Callable[..., asyncio.Future[Any]],
    ) -> None:
        self._context = context
        self._run = run  # on a request handler thread
        self._signal: AppendSignal | None = None
        self.sessions = FetchSessionCache(context.settings.fetch_session_cache_slots)
        self.parked = 0  # fetches waiting for data now

    def start(self) -> None:
        self._signal = AppendSignal(asyncio.get_running_loop())
        self._context.on_append = self._signal.notify

    @property
    def signal(self) -> AppendSignal | None:
        """What appends wake (for other waiters on appends: share fetches)."""
        return self._signal

    @property
    def watched_partitions(self) -> int:
        """How many partitions some parked fetch waits on (an append to any other wakes
        nobody)."""
        return 0 if self._signal is None else self._signal.watched

    def _fetch_once(
        self,
        asked: SessionContext,
        final: bool,
        throttled: Callable[[int], None],
        on_the_loop: bool = False,
    ) -> tuple[FetchResult, FetchFrame | None]:
        request = asked.request
        timed = self._context.quotas.enabled
        started = time.perf_counter_ns() if timed else 0
        result = handle_fetch(self._context, request, final=final, remote_reads=not on_the_loop)
        if not result.satisfied:
            result.close()
            return result, None
        held = self._maybe_throttled(asked, result, started, throttled) if timed else None
        # not throttled: the answer as its session cuts it (and the session learns what it says)
        result = held or FetchResult(asked.finish(result.response), True, result.max_wait_ms)
        try:
            return result, encode_fetch_response(
                request.correlation_id, request.api_version, result.response
            )
        except BaseException:
            result.close()
            raise

    def _maybe_throttled(
        self,
        asked: SessionContext,
        result: FetchResult,
        started: int,
        throttled: Callable[[int], None],
    ) -> FetchResult | None:
        """When the client's quotas throttle it, an empty result that says how long to wait
        (KIP-219) while the connection is muted that long; None when they do not."""
        size = sum(p.records_size for t in result.response.topics for p in t.partitions)
        spent = time.perf_counter_ns() - started
        ms = throttle_fetch(self._context, asked.request, size, spent)
        if ms <= 0:
            return None
        result.close()
        throttled(ms)
        return FetchResult(asked.throttled(ms), True, 0)

    def _decode_and_fetch(
        self,
        decode: Callable[[], Request],
        throttled: Callable[[int], None],
        watch: Watch,
        on_the_loop: bool = False,
    ) -> tuple[SessionContext, FetchResult | None, FetchFrame | None]:
        """The first try; on the loop, no result when a partition's records are remote."""
        asked = self.sessions.begin(decode())  # an incremental fetch: the session's partitions
        assert self._signal is not None
        self._signal.watch(watch, _partitions(asked.request))  # before the read: none missed
        try:
            return asked, *self._fetch_once(asked, False, throttled, on_the_loop)
        except RemoteReadOffTheLoop:
            return asked, None, None

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
        signal = self._signal
        assert signal is not None, "start the purgatory first"
        watch = Watch()
        encoded: FetchFrame | None
        try:
            if on_the_loop:
                asked, tried, encoded = self._decode_and_fetch(decode, throttled, watch, True)
                if tried is None:  # records in remote storage: this fetch leaves the loop
                    on_the_loop = False
                    _, tried, encoded = await self._in_worker(
                        self._fetch_again, asked, False, throttled
                    )
            else:
                asked, tried, encoded = await self._in_worker(
                    self._decode_and_fetch, decode, throttled, watch
                )
            assert tried is not None
            result = tried
            if encoded is not None:
                return encoded
            park()
            self.parked += 1
            try:
                deadline = loop.time() + result.max_wait_ms / 1000
                waiting = _Waiting(self._context, asked.request, result)
                while encoded is None:
                    remaining = deadline - loop.time()
                    if remaining > 0:  # asyncio.wait: it does not swallow our cancel
                        await asyncio.wait({signal.waiting(watch)}, timeout=remaining)
                    changed = signal.rearm(watch)
                    final = loop.time() >= deadline
                    if not final and not (
                        waiting.enough_after(changed)
                        if on_the_loop  # a large fetch's sizing stays off the loop too
                        else await self._run(waiting.enough_after, changed)
                    ):
                        continue  # sized what changed, read nothing whole
                    again: FetchResult | None = None
                    if on_the_loop:
                        try:
                            again, encoded = self._fetch_once(asked, final, throttled, True)
                        except RemoteReadOffTheLoop:
                            on_the_loop = False  # records in remote storage: off the loop
                    if again is None:
                        _, again, encoded = await self._in_worker(
                            self._fetch_again, asked, final, throttled
                        )
                    assert again is not None
                    result = again
                    waiting = _Waiting(self._context, asked.request, result)
                return encoded
            finally:
                self.parked -= 1
        finally:
            signal.forget(watch)

    def _fetch_again(
        self, asked: SessionContext, final: bool, throttled: Callable[[int], None]
    ) -> tuple[SessionContext, FetchResult, FetchFrame | None]:
        return asked, *self._fetch_once(asked, final, throttled)

    async def _in_worker(
        self,
        fn: Callable[..., tuple[SessionContext, FetchResult | None, FetchFrame | None]],
        *args: Any,
    ) -> tuple[SessionContext, FetchResult | None, FetchFrame | None]:
        """A try on a handler thread. If the client goes while it runs, the thread still
        finishes, and the descriptors it took are closed then rather than leaked."""
        future = self._run(fn, *args)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            future.add_done_callback(_close_abandoned)
            raise


class _Waiting:
    """What a parked fetch has so far, partition by partition, from its last whole try; an
    append sizes only the partitions it changed, and the fetch reads everything again only
    once they add up to ``min_bytes`` (a fetch of a thousand partitions woken by an append
    to one of them reads one)."""

    def __init__(self, context: BrokerContext, request: Request, result: FetchResult) -> None:
        self._context = context
        self._isolation = isolation_of(request)
        self._min_bytes: int = request.body.min_bytes
        self._asked = {(t.topic, p.partition): p for t in request.body.topics for p in t.partitions}
        self._sizes = {
            (t.name, p.index): p.records_size for t in result.response.topics for p in t.partitions
        }
        self._total = sum(self._sizes.values())

    def enough_after(self, changed: set[Partition]) -> bool:
        """Whether, with ``changed`` sized again, the fetch may have its bytes (or an error
        to answer with): then it reads everything again."""
        for key in changed:
            part = self._asked.get(key)
            if part is None:
                continue
            size = available_bytes(self._context, key[0], part, self._isolation)
            if size is None:
                return True
            self._total += size - self._sizes.get(key, 0)
            self._sizes[key] = size
        return self._total >= self._min_bytes


def _partitions(request: Request) -> list[Partition]:
    return [(t.topic, p.partition) for t in request.body.topics for p in t.partitions]


def _close_abandoned(
    future: asyncio.Future[tuple[SessionContext, FetchResult | None, FetchFrame | None]],
) -> None:
    if not future.cancelled() and future.exception() is None:
        result = future.result()[1]
        if result is not None:
            result.close()

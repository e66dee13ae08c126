"""The append signal that wakes parked fetches, keyed by partition: an append wakes only the
fetches watching its partition; one with nobody watching costs the loop nothing (every
Produce notifies); a wake from the loop's own thread goes without the self-pipe, from any
other thread through it; and an append between a fetch's watch and its wait is not missed."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from kafkalog.server.purgatory import AppendSignal, Watch

pytestmark = pytest.mark.one_codec


def _counting_threadsafe_calls(loop: asyncio.AbstractEventLoop) -> list[Any]:
    calls: list[Any] = []
    real = loop.call_soon_threadsafe

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
    return calls


def _from_a_thread(fn: Any, *args: Any) -> None:
    thread = threading.Thread(target=fn, args=args)
    thread.start()
    thread.join()


def test_a_notify_nobody_watches_costs_the_loop_nothing() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        signal = AppendSignal(loop)
        calls = _counting_threadsafe_calls(loop)
        for _ in range(3):
            signal.notify([("t", 0)])
            _from_a_thread(signal.notify, [("t", 0)])
        assert calls == [] and signal.watched == 0

    asyncio.run(main())


def test_an_append_wakes_only_the_fetches_watching_its_partition() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        signal = AppendSignal(loop)
        on_zero, on_one, on_both = Watch(), Watch(), Watch()
        signal.watch(on_zero, [("t", 0)])
        signal.watch(on_one, [("t", 1)])
        signal.watch(on_both, [("t", 0), ("t", 1)])
        waits = {w: signal.waiting(w) for w in (on_zero, on_one, on_both)}
        calls = _counting_threadsafe_calls(loop)
        _from_a_thread(signal.notify, [("t", 1), ("u", 0)])  # a handler thread's append
        await asyncio.wait_for(waits[on_one], 5)
        await asyncio.wait_for(waits[on_both], 5)
        await asyncio.sleep(0)
        assert not waits[on_zero].done()
        assert len(calls) == 1  # one trip to the loop for both fetches it woke
        signal.rearm(on_one)
        again = signal.waiting(on_one)
        signal.notify([("t", 0)])  # on the loop's thread: at once, no self-pipe
        assert waits[on_zero].done() and not again.done()
        assert len(calls) == 1

    asyncio.run(main())


def test_an_append_between_watching_and_waiting_is_not_missed() -> None:
    """The fetch watches, then reads (finds nothing), then waits: an append after the watch
    wakes it even though it was not waiting yet when the append notified."""

    async def main() -> None:
        signal = AppendSignal(asyncio.get_running_loop())
        watch = Watch()
        signal.watch(watch, [("t", 0)])
        _from_a_thread(signal.notify, [("t", 0)])  # the append, on a handler thread
        assert signal.waiting(watch).done()
        signal.rearm(watch)  # the fetch reads again: that append is behind it now
        assert not signal.waiting(watch).done()

    asyncio.run(main())


def test_a_forgotten_watch_leaves_nothing_behind() -> None:
    """Forgotten, a watch is out of every partition's set; one forgotten before its first try
    registered (the client went while the try ran on a thread) never registers."""

    async def main() -> None:
        signal = AppendSignal(asyncio.get_running_loop())
        first, second = Watch(), Watch()
        signal.watch(first, [("t", 0), ("t", 1)])
        signal.watch(second, [("t", 1)])
        assert signal.watched == 2
        signal.forget(first)
        assert signal.watched == 1
        signal.forget(second)
        assert signal.watched == 0
        late = Watch()
        signal.forget(late)
        signal.watch(late, [("t", 0)])
        assert signal.watched == 0

    asyncio.run(main())

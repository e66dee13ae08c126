"""The append signal that wakes parked fetches: a wake only when a fetch took the current
future (every Produce notifies; a produce-only load must cost the loop nothing), from the
loop's own thread without the self-pipe, from any other thread through it."""

from __future__ import annotations

import asyncio
import threading

import pytest

from kafkalog.server.purgatory import AppendSignal

pytestmark = pytest.mark.one_codec


def test_a_notify_nobody_waits_for_changes_nothing() -> None:
    async def main() -> None:
        signal = AppendSignal(asyncio.get_running_loop())
        before = signal._future
        for _ in range(3):
            signal.notify()
        await asyncio.sleep(0)
        assert signal._future is before and not before.done()

    asyncio.run(main())


def test_a_taken_future_is_woken_from_the_loop_and_from_a_thread() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        signal = AppendSignal(loop)
        woken = signal.current()
        signal.notify()  # on the loop's thread: at once
        assert woken.done()
        again = signal.current()
        assert again is not woken and not again.done()
        thread = threading.Thread(target=signal.notify)
        thread.start()
        thread.join()
        await asyncio.wait_for(again, 5)
        signal.notify()  # nobody took the new future
        await asyncio.sleep(0)
        assert not signal._future.done()

    asyncio.run(main())


def test_an_append_between_taking_and_waiting_is_not_missed() -> None:
    """The fetch takes the future, then reads (finds nothing), then waits: an append after the
    take wakes it even though nobody was waiting yet when it notified."""

    async def main() -> None:
        signal = AppendSignal(asyncio.get_running_loop())
        woken = signal.current()
        thread = threading.Thread(target=signal.notify)  # the append, on a handler thread
        thread.start()
        thread.join()
        await asyncio.wait_for(woken, 5)

    asyncio.run(main())

"""The request handler threads (server.handler_pool): results and errors reach the awaiting
task, work cancelled before a thread takes it never runs, and shutdown finishes what was
queued."""

from __future__ import annotations

import asyncio
import threading

import pytest

from kafkalog.server.handler_pool import RequestHandlerPool

pytestmark = [pytest.mark.one_codec, pytest.mark.timeout(60)]


def test_results_errors_cancellation_and_shutdown() -> None:
    async def scenario() -> None:
        pool = RequestHandlerPool(2, asyncio.get_running_loop(), "test-io")
        names: set[str] = set()

        def where(x: int) -> int:
            names.add(threading.current_thread().name)
            return x * 2

        assert await asyncio.gather(*(pool.run(where, i) for i in range(50))) == [
            i * 2 for i in range(50)
        ]
        assert names <= {"test-io-0", "test-io-1"}

        def fails() -> None:
            raise ValueError("from a handler")

        with pytest.raises(ValueError, match="from a handler"):
            await pool.run(fails)

        gate, ran = threading.Event(), []
        blockers = [pool.run(gate.wait, 10) for _ in range(2)]  # both threads busy
        skipped = pool.run(ran.append, "cancelled")
        skipped.cancel()
        queued = pool.run(ran.append, "queued")
        gate.set()
        await asyncio.gather(*blockers)
        await queued
        assert ran == ["queued"]

        late = [pool.run(ran.append, i) for i in range(5)]
        await asyncio.get_running_loop().run_in_executor(None, pool.shutdown)
        assert ran[1:] == list(range(5))  # finished before the threads stopped
        await asyncio.gather(*late)
        with pytest.raises(RuntimeError, match="shut down"):
            pool.run(ran.append, "after")

    asyncio.run(scenario())

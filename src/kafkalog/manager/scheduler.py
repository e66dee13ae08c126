"""Periodic background tasks on an injectable clock (Kafka's KafkaScheduler, made testable).

Why: retention, flushing, checkpoints and producer expiry run on periods; tests must drive them
with a ManualClock and no sleeping, and a real process wants them on a daemon thread. ``tick``
runs whatever is due at the clock's time; ``start`` calls ``tick`` from a thread. Refuses: deciding
what the tasks do, and running one task concurrently with itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from kafkalog.clock import Clock

logger = logging.getLogger("kafkalog.manager.scheduler")


@dataclass
class _Task:
    name: str
    period_ms: int
    action: Callable[[], object]
    next_ms: int


class Scheduler:
    """Named periodic tasks. Thread-safe; each task runs on the ticking thread."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._tasks: list[_Task] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def schedule(
        self, name: str, action: Callable[[], object], *, period_ms: int, delay_ms: int = 0
    ) -> None:
        """Run ``action`` every ``period_ms`` from ``delay_ms`` on; a period of Long.MAX never runs
        (Kafka's default for the flusher)."""
        if period_ms >= 2**62:
            return
        with self._lock:
            self._tasks.append(_Task(name, period_ms, action, self.clock.milliseconds() + delay_ms))

    def tick(self) -> list[str]:
        """Run every task that is due now; returns their names."""
        now = self.clock.milliseconds()
        with self._lock:
            due = [t for t in self._tasks if t.next_ms <= now]
            for t in due:
                t.next_ms = now + t.period_ms
        for t in due:
            try:
                t.action()
            except Exception:  # a failing task must not stop the others (as Kafka's scheduler)
                logger.exception("background task %s failed", t.name)
        return [t.name for t in due]

    def start(self, poll_ms: int = 100) -> None:
        if self._thread is not None:
            return
        self._stop.clear()

        def loop() -> None:
            while not self._stop.wait(poll_ms / 1000):
                self.tick()

        self._thread = threading.Thread(target=loop, name="kafkalog-scheduler", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

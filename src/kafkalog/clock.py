"""Time as an injected dependency.

Why: roll, retention, flush and expiry policies are functions of ``now``; tests must drive time
by hand (Kafka's MockTime). Refuses: any policy logic. Nothing else in kafkalog calls
``time.time()``.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """A source of wall-clock milliseconds and monotonic nanoseconds."""

    def milliseconds(self) -> int:
        """Wall-clock time in milliseconds since the epoch (record timestamps, retention)."""

    def nanoseconds(self) -> int:
        """A monotonic reading in nanoseconds (intervals, deadlines)."""

    def sleep(self, ms: int) -> None:
        """Wait ``ms`` milliseconds (a manual clock advances instead)."""


class SystemClock:
    """The real clock."""

    def milliseconds(self) -> int:
        """``time.time_ns()`` in milliseconds."""
        return time.time_ns() // 1_000_000

    def nanoseconds(self) -> int:
        """``time.monotonic_ns()``."""
        return time.monotonic_ns()

    def sleep(self, ms: int) -> None:
        """``time.sleep`` for ``ms`` milliseconds."""
        time.sleep(ms / 1000)


class ManualClock:
    """A clock that only moves when told to. Thread-safe."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._lock = threading.Lock()
        self._ms = start_ms
        self._extra_ns = 0

    def milliseconds(self) -> int:
        """The time the clock was set or advanced to."""
        with self._lock:
            return self._ms

    def nanoseconds(self) -> int:
        """The milliseconds in nanoseconds: moves only with ``advance``."""
        with self._lock:
            return self._ms * 1_000_000 + self._extra_ns

    def sleep(self, ms: int) -> None:
        """Advance by ``ms`` at once: a test never waits."""
        self.advance(ms)

    def advance(self, ms: int) -> None:
        """Move the clock forward ``ms`` milliseconds; ValueError for a negative step."""
        if ms < 0:
            raise ValueError(f"cannot move a clock backwards by {ms} ms")
        with self._lock:
            self._ms += ms


SYSTEM_CLOCK = SystemClock()

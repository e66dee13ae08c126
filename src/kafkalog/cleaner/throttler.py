"""An I/O throttle shared by the cleaner threads (``log.cleaner.io.max.bytes.per.second``).

Why: compaction rewrites whole segments; left unthrottled it can starve the appends and reads
the log exists for. Kafka's Throttler checks the observed rate every 300 ms and sleeps just long
enough to bring it back to the target; we do the same on the injected clock, so tests can prove
the sleeps without waiting. Refuses: deciding what is throttled (callers report their bytes).
"""

from __future__ import annotations

import math
import threading

from kafkalog.clock import Clock

CHECK_INTERVAL_MS = 300


class Throttler:
    def __init__(self, desired_rate_per_sec: float, clock: Clock) -> None:
        self.desired_rate_per_sec = desired_rate_per_sec
        self._clock = clock
        self._lock = threading.Lock()
        self._period_start_ns = clock.nanoseconds()
        self._observed = 0.0
        self.slept_ms = 0  # total, for stats and tests

    @property
    def unlimited(self) -> bool:
        return math.isinf(self.desired_rate_per_sec)

    def maybe_throttle(self, observed: float) -> None:
        if self.unlimited:
            return
        with self._lock:
            self._observed += observed
            elapsed_ns = self._clock.nanoseconds() - self._period_start_ns
            if elapsed_ns <= CHECK_INTERVAL_MS * 1_000_000 or self._observed <= 0:
                return
            rate = self._observed * 1e9 / elapsed_ns
            if rate > self.desired_rate_per_sec:
                desired_per_ms = self.desired_rate_per_sec / 1000
                sleep_ms = round(self._observed / desired_per_ms - elapsed_ns // 1_000_000)
                if sleep_ms > 0:
                    self._clock.sleep(sleep_ms)
                    self.slept_ms += sleep_ms
            self._period_start_ns = self._clock.nanoseconds()
            self._observed = 0.0

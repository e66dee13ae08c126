"""What the perf tools measure and how they print it: Kafka's ProducerPerformance and
ConsumerPerformance lines, their 5-second windows and ``--print-metrics`` tables.

Why: people compare these numbers with Kafka's tools' and parse them with the same scripts, so
every line has Kafka's fields, order and number formats; only the percentiles keep two decimals
where Kafka prints whole milliseconds, as in-process latencies are mostly under one. Clocks are
injected so the windows can be tested without waiting. Refuses: printing a metric it did not
measure (the metric tables hold only Kafka's names for quantities these tools count).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

MB = 1024 * 1024
REPORTING_INTERVAL_MS = 5000  # Kafka's producer perf window; the consumer's default interval


class ThroughputThrottler:
    """Keep the send rate at or under ``target`` records/s (Kafka's ThroughputThrottler)."""

    def __init__(
        self,
        target: float,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.target = target
        self.clock = clock
        self.sleep = sleep
        self.start = clock()

    def throttle(self, sent: int) -> None:
        """Sleep until ``sent`` records are no longer ahead of the target rate."""
        if self.target <= 0:
            return
        ahead = sent / self.target - (self.clock() - self.start)
        if ahead > 0:
            self.sleep(ahead)


@dataclass
class LatencyStats:
    """Latencies in ms; percentiles by rank over every sample, as Kafka's tools report them."""

    samples: list[float] = field(default_factory=list)

    def percentile(self, p: float) -> float:
        """The sample at rank ``p`` (0..1) of the sorted samples; 0 when there are none."""
        if not self.samples:
            return 0.0
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))]

    @property
    def max(self) -> float:
        return max(self.samples, default=0.0)

    @property
    def avg(self) -> float:
        return sum(self.samples) / len(self.samples) if self.samples else 0.0


class ProducerStats:
    """Kafka's ProducerPerformance.Stats: the totals, and a line for each window of at least
    ``interval_ms`` (printed through ``emit`` as the window closes)."""

    def __init__(
        self,
        emit: Callable[[str], None],
        interval_ms: float = REPORTING_INTERVAL_MS,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.emit = emit
        self.interval_ms = interval_ms
        self.clock = clock
        self.start = self.window_start = clock()
        self.latency = LatencyStats()
        self.count = self.bytes = 0
        self._window: list[float] = []
        self._window_bytes = 0

    def record(self, latencies_ms: list[float], nbytes: int) -> None:
        """Count one appended batch: each record's latency, and the batch's value bytes."""
        self.latency.samples.extend(latencies_ms)
        self._window.extend(latencies_ms)
        self.count += len(latencies_ms)
        self.bytes += nbytes
        self._window_bytes += nbytes
        now = self.clock()
        if (now - self.window_start) * 1000 >= self.interval_ms:
            self.emit(self._window_line(now))
            self.window_start = now
            self._window = []
            self._window_bytes = 0

    def _window_line(self, now: float) -> str:
        seconds = max(now - self.window_start, 1e-9)
        n = len(self._window)
        return (
            f"{n} records sent, {n / seconds:.1f} records/sec "
            f"({self._window_bytes / seconds / MB:.2f} MB/sec), "
            f"{sum(self._window) / max(n, 1):.1f} ms avg latency, "
            f"{max(self._window, default=0.0):.1f} ms max latency."
        )

    def total_line(self) -> str:
        """Kafka's closing line over every record."""
        return producer_summary(self.count, self.clock() - self.start, self.bytes, self.latency)


class SteadyStats:
    """The records after ``--warmup-records`` (Kafka 4's ProducerPerformance): counted from
    the first record past the warm-up, summed up in one more closing line."""

    def __init__(self, warmup: int, clock: Callable[[], float] = time.perf_counter) -> None:
        self.warmup = warmup
        self.clock = clock
        self.start: float | None = None
        self.latency = LatencyStats()
        self.count = self.bytes = 0

    def record(self, first: int, latencies_ms: list[float], sizes: list[int]) -> bool:
        """Count the records of a batch that are past the warm-up (``first`` is the batch's
        first record number); True when this batch is the one that ends the warm-up."""
        skip = max(0, self.warmup - first)
        if skip >= len(latencies_ms):
            return False
        began = self.start is None
        if began:
            self.start = self.clock()
        self.latency.samples.extend(latencies_ms[skip:])
        self.count += len(latencies_ms) - skip
        self.bytes += sum(sizes[skip:])
        return began

    def total_line(self) -> str:
        start = self.clock() if self.start is None else self.start
        line = producer_summary(self.count, self.clock() - start, self.bytes, self.latency)
        return line.replace(" records sent, ", " steady state records sent, ", 1)


def producer_summary(count: int, seconds: float, nbytes: int, latency: LatencyStats) -> str:
    rate = count / seconds if seconds > 0 else 0.0
    mb_rate = nbytes / MB / seconds if seconds > 0 else 0.0
    return (  # records/sec as Java's %f: six decimals
        f"{count} records sent, {rate:.6f} records/sec ({mb_rate:.2f} MB/sec), "
        f"{latency.avg:.2f} ms avg latency, {latency.max:.2f} ms max latency, "
        f"{latency.percentile(0.5):.2f} ms 50th, {latency.percentile(0.95):.2f} ms 95th, "
        f"{latency.percentile(0.99):.2f} ms 99th, {latency.percentile(0.999):.2f} ms 99.9th."
    )


NEW_FIELDS = ", rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
CONSUMER_HEADER = "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, " \
    "nMsg.sec" + NEW_FIELDS  # fmt: skip
DETAILED_HEADER = "time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, " \
    "nMsg.sec" + NEW_FIELDS  # fmt: skip


def when(epoch_seconds: float) -> str:
    """Kafka's default ``--date-format``, yyyy-MM-dd HH:mm:ss:SSS, in local time."""
    stamp = datetime.fromtimestamp(epoch_seconds)
    return stamp.strftime("%Y-%m-%d %H:%M:%S:") + f"{stamp.microsecond // 1000:03d}"


def consumer_summary(start: float, end: float, nbytes: int, count: int) -> str:
    """Kafka's closing line (start and end are epoch seconds); no group, so no rebalance time."""
    seconds = max(end - start, 1e-9)
    mb = nbytes / MB
    return (
        f"{when(start)}, {when(end)}, {mb:.4f}, {mb / seconds:.4f}, {count}, "
        f"{count / seconds:.4f}, 0, {seconds * 1000:.0f}, {mb / seconds:.4f}, "
        f"{count / seconds:.4f}"
    )


def consumer_progress(
    end: float, nbytes: int, last_bytes: int, count: int, last_count: int, window_s: float
) -> str:
    """Kafka's ``--show-detailed-stats`` line for the window that ended at ``end``."""
    seconds = max(window_s, 1e-9)
    mb, window_mb = nbytes / MB, (nbytes - last_bytes) / MB
    rate, msg_rate = window_mb / seconds, (count - last_count) / seconds
    return (
        f"{when(end)}, 0, {mb:.4f}, {rate:.4f}, {count}, {msg_rate:.4f}, 0, "
        f"{seconds * 1000:.0f}, {rate:.4f}, {msg_rate:.4f}"
    )


def fetch_latency_line(latency: LatencyStats) -> str:
    return (
        f"fetch latency: {latency.avg:.2f} ms avg, {latency.percentile(0.5):.2f} ms 50th, "
        f"{latency.percentile(0.95):.2f} ms 95th, {latency.percentile(0.99):.2f} ms 99th, "
        f"{latency.max:.2f} ms max, {len(latency.samples)} fetches."
    )


def metrics_table(group: str, client_id: str, values: Mapping[str, float]) -> list[str]:
    """Kafka's ToolsUtils.printMetrics: a blank line, a header, then ``group:name:{tags} :
    value`` sorted by name, padded to the longest name, values with three decimals."""
    names = {f"{group}:{name}:{{client-id={client_id}}}": v for name, v in values.items()}
    width = max(len(n) for n in names)
    lines = ["", f"{'Metric Name':<{width}}   Value"]
    lines += [f"{name:<{width}} : {names[name]:.3f}" for name in sorted(names)]
    return lines

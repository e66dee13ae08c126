"""``perf produce`` and ``perf consume``: kafka-producer-perf-test and kafka-consumer-perf-test.

Why: the first question about a log on a new machine is how fast it takes and serves records.
These drive the library the way a producer and a consumer would (a producer builds batches of
``--batch-size`` bytes and appends them; a consumer fetches ``--fetch-size`` bytes and decodes
every record) and print Kafka's summary lines. Latencies are in-process, so they are printed
with two decimals where Kafka prints whole milliseconds. Refuses: creating the topic (as Kafka's
tools do, it must exist) and reporting anything it did not time.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import click
import pyarrow as pa
import pyarrow.compute as pc

from kafkalog.cli.admin import existing_dirs, log_dirs_option
from kafkalog.cli.console import partition_count
from kafkalog.cli.errors import user_errors
from kafkalog.cli.progress import progress
from kafkalog.errors import InvalidArgumentError
from kafkalog.manager.log_manager import LogManager
from kafkalog.records import MemoryRecords
from kafkalog.records.columnar import RecordColumns
from kafkalog.types import CompressionType

Wrap = Callable[[Callable[..., object]], Callable[..., object]]
MB = 1024 * 1024
RECORD_OVERHEAD = 8  # a v2 record's framing beside its value, for filling a batch


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


def producer_summary(count: int, seconds: float, nbytes: int, latency: LatencyStats) -> str:
    rate = count / seconds if seconds > 0 else 0.0
    mb_rate = nbytes / MB / seconds if seconds > 0 else 0.0
    return (
        f"{count} records sent, {rate:.1f} records/sec ({mb_rate:.2f} MB/sec), "
        f"{latency.avg:.2f} ms avg latency, {latency.max:.2f} ms max latency, "
        f"{latency.percentile(0.5):.2f} ms 50th, {latency.percentile(0.95):.2f} ms 95th, "
        f"{latency.percentile(0.99):.2f} ms 99th, {latency.percentile(0.999):.2f} ms 99.9th."
    )


CONSUMER_HEADER = (
    "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
    "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
)


def _when(epoch_seconds: float) -> str:
    stamp = datetime.fromtimestamp(epoch_seconds)
    return stamp.strftime("%Y-%m-%d %H:%M:%S:") + f"{stamp.microsecond // 1000:03d}"


def consumer_summary(
    start: float, end: float, nbytes: int, count: int, latency: LatencyStats
) -> list[str]:
    seconds = max(end - start, 1e-9)
    mb = nbytes / MB
    return [
        CONSUMER_HEADER,
        f"{_when(start)}, {_when(end)}, {mb:.4f}, {mb / seconds:.4f}, {count}, "
        f"{count / seconds:.4f}, 0, {seconds * 1000:.0f}, {mb / seconds:.4f}, "
        f"{count / seconds:.4f}",
        f"fetch latency: {latency.avg:.2f} ms avg, {latency.percentile(0.5):.2f} ms 50th, "
        f"{latency.percentile(0.95):.2f} ms 95th, {latency.percentile(0.99):.2f} ms 99th, "
        f"{latency.max:.2f} ms max, {len(latency.samples)} fetches.",
    ]


def _check_positive(name: str, value: int) -> None:
    if value <= 0:
        raise InvalidArgumentError(f"{name} must be > 0, not {value}")


@click.group()
def perf() -> None:
    """Producer and consumer performance tests (kafka-*-perf-test)."""


@perf.command("produce")
@log_dirs_option
@click.option("--topic", required=True)
@click.option("--num-records", type=int, required=True)
@click.option("--record-size", type=int, default=100, show_default=True)
@click.option("--throughput", type=float, default=-1, show_default=True,
              help="Records/s ceiling; -1 for none.")  # fmt: skip
@click.option("--batch-size", type=int, default=16384, show_default=True,
              help="Bytes per batch (Kafka's batch.size).")  # fmt: skip
@click.option("--compression-type", default="none", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True, help="Payload seed.")
@user_errors
def perf_produce(
    log_dirs: str,
    topic: str,
    num_records: int,
    record_size: int,
    throughput: float,
    batch_size: int,
    compression_type: str,
    seed: int,
) -> None:
    """Append --num-records records of --record-size bytes and print Kafka's summary.

    \b
    Example:
      kafkalog perf produce --log-dirs data --topic perf --num-records 100000 \\
          --record-size 100 --compression-type lz4
    """
    _check_positive("--num-records", num_records)
    _check_positive("--record-size", record_size)
    _check_positive("--batch-size", batch_size)
    codec = CompressionType.parse(compression_type)
    rng = random.Random(seed)
    payload = bytes(rng.randrange(65, 91) for _ in range(record_size))  # A-Z as Kafka's
    per_batch = max(1, batch_size // (record_size + RECORD_OVERHEAD))
    latency = LatencyStats()
    with LogManager(existing_dirs(log_dirs)) as manager:
        count = partition_count(manager, topic)
        logs = [manager.get_log(topic, p) for p in range(count)]
        throttler = ThroughputThrottler(throughput)
        sent = 0
        start = time.perf_counter()
        with progress("produce", num_records) as advance:
            while sent < num_records:
                n = min(per_batch, num_records - sent)
                enqueued: list[float] = []
                for _ in range(n):
                    throttler.throttle(sent + len(enqueued))
                    enqueued.append(time.perf_counter())
                rows = pa.table(
                    {
                        "value": pa.repeat(pa.scalar(payload, pa.binary()), n),
                        "timestamp": pa.repeat(pa.scalar(int(time.time() * 1000)), n),
                    }
                )  # columns, encoded by the compiled loop: no Record per row
                batch = MemoryRecords.from_arrow(rows, compression=codec, batch_size=1 << 30)
                logs[(sent // per_batch) % count].append_records(batch)  # sticky per batch
                done = time.perf_counter()
                latency.samples.extend((done - t) * 1000 for t in enqueued)
                sent += n
                advance(n)
        seconds = time.perf_counter() - start
    click.echo(producer_summary(sent, seconds, sent * record_size, latency))


@perf.command("consume")
@log_dirs_option
@click.option("--topic", required=True)
@click.option("--num-records", "--messages", "num_records", type=int, required=True,
              help="Stop after this many records (Kafka's --messages).")  # fmt: skip
@click.option("--fetch-size", type=int, default=MB, show_default=True,
              help="Bytes per fetch (Kafka's max.partition.fetch.bytes).")  # fmt: skip
@user_errors
def perf_consume(log_dirs: str, topic: str, num_records: int, fetch_size: int) -> None:
    """Read and decode up to --num-records records from the start and print Kafka's summary.

    \b
    Example:
      kafkalog perf consume --log-dirs data --topic perf --num-records 100000
    """
    _check_positive("--num-records", num_records)
    _check_positive("--fetch-size", fetch_size)
    latency = LatencyStats()
    with LogManager(existing_dirs(log_dirs)) as manager:
        count = partition_count(manager, topic)
        logs = [manager.get_log(topic, p) for p in range(count)]
        positions = [log.log_start_offset for log in logs]
        consumed = nbytes = 0
        start_wall = time.time()
        with progress("consume", num_records) as advance:
            live = set(range(count))
            while live and consumed < num_records:
                for p in sorted(live):
                    began = time.perf_counter()
                    info = logs[p].read(positions[p], fetch_size)
                    if info.records is None:
                        live.discard(p)
                        continue
                    columns = RecordColumns(with_headers=False)
                    for batch in info.records.records().batches():
                        if not batch.is_control:
                            columns.add_batch(batch, positions[p])
                        positions[p] = batch.next_offset
                    offset, _, _, key, value = columns.finish()
                    got = len(offset)
                    nbytes += _byte_count(key) + _byte_count(value)
                    latency.samples.append((time.perf_counter() - began) * 1000)
                    consumed += got
                    advance(got)
                    if consumed >= num_records:
                        break
        end_wall = time.time()
    for line in consumer_summary(start_wall, end_wall, nbytes, consumed, latency):
        click.echo(line)


def _byte_count(column: pa.Array) -> int:
    return int(pc.sum(pc.binary_length(column)).as_py() or 0)

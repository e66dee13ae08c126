"""``perf produce`` and ``perf consume``: kafka-producer-perf-test and kafka-consumer-perf-test.

Why: the first question about a log on a new machine is how fast it takes and serves records.
These take Kafka's flags and drive the library the way a producer and a consumer would (a
producer fills batches of ``batch.size`` bytes and appends them; a consumer fetches
``--fetch-size`` bytes and decodes every record), printing Kafka's lines (perf_stats.py).
Deliberate differences, said in ``--help``: no ``--bootstrap-server`` or group (the log is on
disk), so neither --producer-props nor --producer.config is required. Refuses: creating the
topic (as Kafka's tools do, it must exist), transactions, and reporting anything it did not time.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import click
import pyarrow as pa
import pyarrow.compute as pc

from kafkalog.cli.admin import existing_dirs, log_dirs_option
from kafkalog.cli.console import partition_count
from kafkalog.cli.errors import user_errors
from kafkalog.cli.perf_stats import (
    CONSUMER_HEADER,
    DETAILED_HEADER,
    MB,
    REPORTING_INTERVAL_MS,
    LatencyStats,
    ProducerStats,
    SteadyStats,
    ThroughputThrottler,
    consumer_progress,
    consumer_summary,
    fetch_latency_line,
    metrics_table,
)
from kafkalog.cli.producer_props import ProducerSettings
from kafkalog.config_def import load_properties
from kafkalog.errors import InvalidArgumentError
from kafkalog.manager.log_manager import LogManager
from kafkalog.records import MemoryRecords
from kafkalog.records.columnar import RecordColumns

RECORD_OVERHEAD = 8  # a v2 record's framing beside its value, for filling a batch


def _check_positive(name: str, value: int) -> None:
    if value <= 0:
        raise InvalidArgumentError(f"{name} must be > 0, not {value}")


class Payloads:
    """The values to send, as Kafka's tool makes them: one random A-Z payload of
    --record-size bytes, a random line of --payload-file per record, or the record's number."""

    def __init__(self, record_size: int | None, payload_file: str | None,
                 delimiter: str, monotonic: bool, seed: int) -> None:  # fmt: skip
        given = [record_size is not None, payload_file is not None, monotonic]
        if sum(given) > 1:
            raise click.UsageError(
                "Use exactly one of --record-size, --payload-file or --payload-monotonic."
            )
        self.rng = random.Random(seed)
        self.fixed: bytes | None = None
        self.choices: list[bytes] = []
        self.monotonic = monotonic
        if payload_file is not None:
            text = Path(payload_file).read_text(encoding="utf-8")
            self.choices = [p.encode() for p in text.split(delimiter) if p]
            click.echo(f"Reading payloads from: {Path(payload_file).resolve()}")
            if not self.choices:
                raise InvalidArgumentError(f"File does not contain any payloads: {payload_file}")
            click.echo(f"Number of messages read: {len(self.choices)}")
        elif not monotonic:
            size = 100 if record_size is None else record_size
            _check_positive("--record-size", size)
            self.fixed = bytes(self.rng.randrange(65, 91) for _ in range(size))  # A-Z

    def typical_size(self) -> int:
        if self.fixed is not None:
            return len(self.fixed)
        if self.choices:
            return sum(map(len, self.choices)) // len(self.choices)
        return 7

    def values(self, first: int, n: int) -> pa.Array:
        if self.fixed is not None:
            return pa.repeat(pa.scalar(self.fixed, pa.binary()), n)
        if self.choices:
            return pa.array([self.rng.choice(self.choices) for _ in range(n)], pa.binary())
        return pa.array([str(i).encode() for i in range(first, first + n)], pa.binary())


@click.group()
def perf() -> None:
    """Producer and consumer performance tests (kafka-*-perf-test)."""


@perf.command(
    "produce", context_settings={"allow_extra_args": True, "ignore_unknown_options": False}
)
@log_dirs_option
@click.option("--topic", required=True)
@click.option("--num-records", type=int, required=True)
@click.option("--record-size", type=int, default=None, help="Value bytes (default 100).")
@click.option("--payload-file", default=None, help="Values: random entries of this UTF-8 file.")
@click.option(
    "--payload-delimiter",
    default="\n",
    help="What separates the payloads of --payload-file. Default: a line break (\\n).",
)
@click.option("--payload-monotonic", is_flag=True, help="Values: each record's number.")
@click.option("--throughput", type=float, default=-1, show_default=True,
              help="Records/s ceiling; -1 for none (Kafka requires the flag).")  # fmt: skip
@click.option("--command-property", "--producer-props", "producer_props", multiple=True,
              metavar="PROP=VALUE ...",
              help="batch.size, compression.type, compression.<codec>.level are honoured; "
              "network settings are ignored with a warning (--producer-props is Kafka 3's "
              "name).")  # fmt: skip
@click.option("--command-config", "--producer.config", "producer_config", default=None,
              metavar="CONFIG-FILE", help="A properties file (--producer.config is Kafka 3's "
              "name).")  # fmt: skip
@click.option("--print-metrics", is_flag=True, help="Kafka's producer-metrics table at the end.")
@click.option("--warmup-records", type=int, default=0, show_default=True,
              help="Records left out of a second, steady-state summary line.")  # fmt: skip
@click.option("--reporting-interval", type=int, default=REPORTING_INTERVAL_MS,
              show_default=True, help="Milliseconds between progress lines.")  # fmt: skip
@click.option("--batch-size", type=int, default=None, hidden=True)  # batch.size, before 0.5
@click.option("--compression-type", default=None, hidden=True)  # compression.type, before 0.5
@click.option("--seed", type=int, default=0, show_default=True, help="Payload seed.")
@click.pass_context
@user_errors
def perf_produce(
    ctx: click.Context,
    log_dirs: str,
    topic: str,
    num_records: int,
    record_size: int | None,
    payload_file: str | None,
    payload_delimiter: str,
    payload_monotonic: bool,
    throughput: float,
    producer_props: tuple[str, ...],
    producer_config: str | None,
    print_metrics: bool,
    warmup_records: int,
    reporting_interval: int,
    batch_size: int | None,
    compression_type: str | None,
    seed: int,
) -> None:
    """Append --num-records records and print Kafka's lines: one per 5-second window, then
    the summary (and the steady state's, after --warmup-records). Appends are synchronous,
    so linger.ms and acks have no meaning here.

    \b
    Example:
      kafkalog perf produce --log-dirs data --topic perf --num-records 100000 \\
          --record-size 100 --throughput -1 --producer-props compression.type=lz4
    """
    props: dict[str, str] = {}
    if batch_size is not None:
        props["batch.size"] = str(batch_size)
    if compression_type is not None:
        props["compression.type"] = compression_type
    if producer_config is not None:
        props.update(load_properties(producer_config))  # as Java reads it
    props.update(_key_values((*producer_props, *ctx.args)))  # --producer-props a=1 b=2
    settings = ProducerSettings.from_properties(props)
    for warning in settings.warnings:
        click.echo(warning, err=True)
    _check_positive("--num-records", num_records)
    _check_positive("--reporting-interval", reporting_interval)
    if not 0 <= warmup_records < num_records:
        raise click.UsageError("--warmup-records must be at least 0 and below --num-records")
    payloads = Payloads(record_size, payload_file, payload_delimiter, payload_monotonic, seed)
    per_batch = max(1, settings.batch_size // (payloads.typical_size() + RECORD_OVERHEAD))
    stats = ProducerStats(click.echo, reporting_interval)
    steady = SteadyStats(warmup_records)
    if warmup_records:
        click.echo(
            f"Warmup first {warmup_records} records. Steady state results will print after "
            "the complete test summary."
        )
    appends = LatencyStats()
    batch_bytes: list[int] = []
    with LogManager(existing_dirs(log_dirs)) as manager:
        count = partition_count(manager, topic, create=True)
        logs = [manager.get_log(topic, p) for p in range(count)]
        throttler = ThroughputThrottler(throughput)
        sent = 0
        while sent < num_records:
            n = min(per_batch, num_records - sent)
            enqueued: list[float] = []
            for _ in range(n):
                throttler.throttle(sent + len(enqueued))
                enqueued.append(time.perf_counter())
            values = payloads.values(sent, n)
            rows = pa.table(
                {"value": values, "timestamp": pa.repeat(pa.scalar(int(time.time() * 1000)), n)}
            )  # columns, encoded by the compiled loop: no Record per row
            began = time.perf_counter()
            batch = MemoryRecords.from_arrow(
                rows, compression=settings.compression, batch_size=1 << 30,
                compression_level=settings.compression_level,
            )  # fmt: skip
            logs[(sent // per_batch) % count].append_records(batch)  # sticky per batch
            done = time.perf_counter()
            appends.samples.append((done - began) * 1000)
            batch_bytes.append(batch.size_in_bytes)
            latencies = [(done - t) * 1000 for t in enqueued]
            if warmup_records and steady.record(sent, latencies, _sizes(values)):
                click.echo("In steady state.")
            stats.record(latencies, _byte_count(values))
            sent += n
    click.echo(stats.total_line())
    if warmup_records:
        click.echo(steady.total_line())
    if print_metrics:
        seconds = max(time.perf_counter() - stats.start, 1e-9)
        metrics = {
            "batch-size-avg": sum(batch_bytes) / len(batch_bytes),
            "batch-size-max": float(max(batch_bytes)),
            "outgoing-byte-rate": sum(batch_bytes) / seconds,
            "outgoing-byte-total": float(sum(batch_bytes)),
            "record-send-rate": sent / seconds,
            "record-send-total": float(sent),
            "records-per-request-avg": sent / len(batch_bytes),
            "request-latency-avg": appends.avg,
            "request-latency-max": appends.max,
            "request-total": float(len(batch_bytes)),
        }
        for line in metrics_table("producer-metrics", "perf-producer-client", metrics):
            click.echo(line)


def _key_values(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.UsageError(f"{pair!r} is not PROP-NAME=PROP-VALUE (--producer-props)")
        out[key] = value
    return out


@perf.command("consume")
@log_dirs_option
@click.option("--topic", required=True)
@click.option("--messages", "--num-records", "num_records", type=int, required=True,
              help="Stop after this many records.")  # fmt: skip
@click.option("--fetch-size", type=int, default=MB, show_default=True,
              help="Bytes per fetch (Kafka's max.partition.fetch.bytes).")  # fmt: skip
@click.option("--timeout", "timeout_ms", type=int, default=10000, show_default=True,
              help="Most ms to wait between records before giving up, as Kafka's.")  # fmt: skip
@click.option("--show-detailed-stats", is_flag=True, help="A line per --reporting-interval.")
@click.option("--reporting-interval", type=int, default=REPORTING_INTERVAL_MS, show_default=True)
@click.option("--hide-header", is_flag=True)
@click.option("--print-metrics", is_flag=True)
@user_errors
def perf_consume(
    log_dirs: str,
    topic: str,
    num_records: int,
    fetch_size: int,
    timeout_ms: int,
    show_detailed_stats: bool,
    reporting_interval: int,
    hide_header: bool,
    print_metrics: bool,
) -> None:
    """Read and decode up to --messages records from the start and print Kafka's lines; the
    fetch latencies, kafkalog's own, go to stderr so the last stdout line stays Kafka's.

    \b
    Example:
      kafkalog perf consume --log-dirs data --topic perf --messages 100000
    """
    _check_positive("--messages", num_records)
    _check_positive("--fetch-size", fetch_size)
    _check_positive("--reporting-interval", reporting_interval)
    if not hide_header:
        click.echo(DETAILED_HEADER if show_detailed_stats else CONSUMER_HEADER)
    latency = LatencyStats()
    fetched: list[int] = []
    with LogManager(existing_dirs(log_dirs)) as manager:
        count = partition_count(manager, topic)
        logs = [manager.get_log(topic, p) for p in range(count)]
        positions = [log.log_start_offset for log in logs]
        consumed = nbytes = 0
        start_wall = last_report = last_record = time.time()
        reported_count = reported_bytes = 0
        while consumed < num_records and (time.time() - last_record) * 1000 <= timeout_ms:
            got_any = False
            for p in range(count):
                began = time.perf_counter()
                info = logs[p].read(positions[p], fetch_size)
                if info.records is None:
                    continue
                columns = RecordColumns(with_headers=False)
                for batch in info.records.records().batches():
                    if not batch.is_control:
                        columns.add_batch(batch, positions[p])
                    positions[p] = batch.next_offset
                offset, _, _, key, value = columns.finish()
                nbytes += _byte_count(key) + _byte_count(value)
                latency.samples.append((time.perf_counter() - began) * 1000)
                fetched.append(info.size)
                consumed += len(offset)
                got_any = got_any or len(offset) > 0
                if consumed >= num_records:
                    break
            now = time.time()
            if got_any:
                last_record = now
            else:
                time.sleep(min(0.1, max(timeout_ms, 1) / 1000))
            due = (now - last_report) * 1000 >= reporting_interval
            if show_detailed_stats and got_any and due:  # as Kafka: when records came
                click.echo(consumer_progress(now, nbytes, reported_bytes, consumed,
                                             reported_count, now - last_report))  # fmt: skip
                last_report, reported_count, reported_bytes = now, consumed, nbytes
        if consumed < num_records:
            click.echo(
                f"WARNING: Exiting before consuming the expected number of messages: timeout "
                f"({timeout_ms} ms) exceeded. You can use the --timeout option to increase the "
                "timeout."
            )
        end_wall = time.time()
    if not show_detailed_stats:
        click.echo(consumer_summary(start_wall, end_wall, nbytes, consumed))
    click.echo(fetch_latency_line(latency), err=True)
    if print_metrics and fetched:
        seconds = max(end_wall - start_wall, 1e-9)
        metrics = {
            "bytes-consumed-rate": sum(fetched) / seconds,
            "bytes-consumed-total": float(sum(fetched)),
            "fetch-latency-avg": latency.avg,
            "fetch-latency-max": latency.max,
            "fetch-rate": len(fetched) / seconds,
            "fetch-size-avg": sum(fetched) / len(fetched),
            "fetch-size-max": float(max(fetched)),
            "fetch-total": float(len(fetched)),
            "records-consumed-rate": consumed / seconds,
            "records-consumed-total": float(consumed),
            "records-per-request-avg": consumed / len(fetched),
        }
        for line in metrics_table("consumer-fetch-manager-metrics", "perf-consumer-client",
                                  metrics):  # fmt: skip
            click.echo(line)


def _byte_count(column: pa.Array) -> int:
    return int(pc.sum(pc.binary_length(column)).as_py() or 0)


def _sizes(column: pa.Array) -> list[int]:
    return [size or 0 for size in pc.binary_length(column).to_pylist()]

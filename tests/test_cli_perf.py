"""``perf produce`` / ``perf consume`` with kafka-*-perf-test's flags and lines: the 5-second
windows, ``--producer-props`` as Kafka takes them (several after one flag), the payload
options, ``--print-metrics`` tables, and the consumer's ``--timeout`` warning and detailed
stats; what goes to stderr so ``tail -1`` of stdout stays Kafka's line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from kafkalog.cli.errors import EXIT_INVALID
from kafkalog.cli.main import cli
from kafkalog.cli.perf_stats import ProducerStats, metrics_table
from kafkalog.log.view import PartitionView
from kafkalog.types import CompressionType

pytestmark = pytest.mark.one_codec  # the tools' own behaviour

SUMMARY = re.compile(
    r"^\d+ records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
    r"[\d.]+ ms max latency, [\d.]+ ms 50th, [\d.]+ ms 95th, [\d.]+ ms 99th, [\d.]+ ms 99\.9th\.$"
)
PROGRESS = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}, 0, [\d.]+, [\d.]+, \d+, [\d.]+, 0, \d+, "
    r"[\d.]+, [\d.]+$"
)


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def data(tmp_path: Path) -> str:
    d = str(tmp_path)
    assert run("topics", "--log-dirs", d, "--create", "--topic", "p", "--partitions", "1")[0] == 0
    return d


def produce(data: str, *args: str) -> tuple[int, str, str]:
    return run("perf", "produce", "--log-dirs", data, "--topic", "p", *args)


def test_a_window_line_each_interval_then_the_summary() -> None:
    now = [0.0]
    lines: list[str] = []
    stats = ProducerStats(lines.append, interval_ms=5000, clock=lambda: now[0])
    stats.record([1.0, 3.0], 200)
    now[0] = 4.0
    stats.record([2.0], 100)  # 4 s: the window is still open
    assert lines == []
    now[0] = 5.0
    stats.record([6.0], 100)  # 5 s: Kafka's printWindow over the four records
    assert lines == [
        "4 records sent, 0.8 records/sec (0.00 MB/sec), 3.0 ms avg latency, 6.0 ms max latency."
    ]
    now[0] = 10.5
    stats.record([1.0], 1024 * 1024)  # the next window starts where the last one closed
    assert lines[1] == (
        "1 records sent, 0.2 records/sec (0.18 MB/sec), 1.0 ms avg latency, 1.0 ms max latency."
    )
    # records/sec as Java's %f, six decimals (ProducerPerformance.Stats.printTotal)
    assert stats.total_line().startswith("5 records sent, 0.476190 records/sec (0.10 MB/sec), ")


def test_producer_props_as_kafka_takes_them(data: str) -> None:
    code, out, err = produce(
        data, "--num-records", "500", "--record-size", "10", "--throughput", "-1",
        "--producer-props", "compression.type=zstd", "batch.size=200", "acks=all",
        "bootstrap.servers=localhost:9092", "--print-metrics",
    )  # fmt: skip
    assert code == 0, err
    assert err == (
        "WARN kafkalog appends to local files, so these producer configs have no effect: "
        "acks, bootstrap.servers\n"
    )
    lines = out.splitlines()
    assert SUMMARY.match(lines[0]) and lines[0].startswith("500 records sent")
    assert lines[1] == "" and lines[2].startswith("Metric Name") and lines[2].endswith("Value")
    assert re.search(
        r"\nproducer-metrics:record-send-total:\{client-id=perf-producer-client\} +"
        r": 500\.000\n",
        out,
    )
    batches = list(PartitionView(Path(data) / "p-0").batches(0))
    assert {b.compression for b in batches} == {CompressionType.ZSTD}
    assert max(b.last_offset - b.base_offset + 1 for b in batches) == 200 // (10 + 8)
    # Kafka 4's names for the same (KIP-1147): --command-property, --command-config
    code, out, err = produce(
        data, "--num-records", "10", "--record-size", "10", "--throughput", "-1",
        "--command-property", "compression.type=lz4", "batch.size=100",
    )  # fmt: skip
    assert code == 0 and err == "", err
    later = list(PartitionView(Path(data) / "p-0").batches(500))
    assert {b.compression for b in later} == {CompressionType.LZ4}


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ("compression.type=LZ4", "Invalid value LZ4 for configuration compression.type: String "
         "must be one of: none, gzip, snappy, lz4, zstd"),
        ("batch.size=big", "Invalid value big for configuration batch.size: Not a number of "
         "type INT"),
        ("batch.size=-1", "Invalid value -1 for configuration batch.size: Value must be at "
         "least 0"),
        ("transactional.id=t", "transactional.id: kafkalog perf produce runs no transactions"),
    ],
)  # fmt: skip
def test_producer_props_kafka_would_refuse(data: str, props: str, message: str) -> None:
    code, _, err = produce(data, "--num-records", "1", "--producer-props", props)
    assert code == EXIT_INVALID and err == f"error: {message}\n"


def test_producer_config_file_and_payload_options(data: str, tmp_path: Path) -> None:
    config = tmp_path / "producer.properties"
    config.write_text("# Kafka's format\ncompression.type = gzip\nbatch.size:64\n")
    assert produce(data, "--num-records", "5", "--payload-monotonic",
                   "--producer.config", str(config))[0] == 0  # fmt: skip
    payloads = tmp_path / "payloads.txt"
    payloads.write_text("alpha|beta|", encoding="utf-8")
    code, out, _ = produce(data, "--num-records", "20", "--payload-file", str(payloads),
                           "--payload-delimiter", "|")  # fmt: skip
    assert code == 0
    assert out.splitlines()[:2] == [
        f"Reading payloads from: {payloads.resolve()}",
        "Number of messages read: 2",
    ]
    batches = list(PartitionView(Path(data) / "p-0").batches(0))
    values = [r.value for b in batches for r in b]
    assert values[:5] == [b"0", b"1", b"2", b"3", b"4"]
    assert set(values[5:]) == {b"alpha", b"beta"}
    assert batches[0].compression == CompressionType.GZIP
    code, _, err = produce(data, "--num-records", "1", "--record-size", "5",
                           "--payload-monotonic")  # fmt: skip
    assert code == 2 and "exactly one of --record-size, --payload-file" in err


def test_consumer_timeout_warning_detailed_stats_and_stdout_tail(data: str) -> None:
    assert produce(data, "--num-records", "300", "--record-size", "10")[0] == 0
    code, out, err = run("perf", "consume", "--log-dirs", data, "--topic", "p",
                         "--messages", "301", "--timeout", "200")  # fmt: skip
    assert code == 0
    header, warning, summary = out.splitlines()
    assert header.startswith("start.time, end.time, ")
    assert warning == (
        "WARNING: Exiting before consuming the expected number of messages: timeout (200 ms) "
        "exceeded. You can use the --timeout option to increase the timeout."
    )
    fields = summary.split(", ")
    assert len(fields) == 10 and fields[4] == "300" and int(fields[7]) >= 200
    assert err.startswith("fetch latency: ")
    # a batch per fetch, 60 fetches: well over the 1 ms interval, so progress lines come
    assert produce(data, "--num-records", "300", "--record-size", "10", "--producer-props",
                   "batch.size=90")[0] == 0  # fmt: skip
    code, out, _ = run("perf", "consume", "--log-dirs", data, "--topic", "p", "--messages",
                       "600", "--show-detailed-stats", "--reporting-interval", "1",
                       "--fetch-size", "1", "--print-metrics")  # fmt: skip
    lines = out.splitlines()
    assert lines[0].startswith("time, threadId, data.consumed.in.MB, ")
    progress = lines[1 : lines.index("")]
    assert progress and all(re.match(PROGRESS, line) for line in progress)
    assert not any(SUMMARY.match(line) for line in lines)  # Kafka: no summary with details
    assert "consumer-fetch-manager-metrics:records-consumed-total:" in out
    code, out, _ = run("perf", "consume", "--log-dirs", data, "--topic", "p", "--messages",
                       "10", "--hide-header")  # fmt: skip
    assert len(out.splitlines()) == 1 and out.split(", ")[4] == "600"  # whole fetches


def test_metrics_table_is_kafkas_layout() -> None:
    assert metrics_table("g", "c", {"b-total": 2.0, "a-rate": 0.12345}) == [
        "",
        "Metric Name               Value",
        "g:a-rate:{client-id=c}  : 0.123",
        "g:b-total:{client-id=c} : 2.000",
    ]


def test_warmup_records_add_kafka_4s_steady_state_lines(data: str) -> None:
    """The lines of Kafka 4.3.1's ProducerPerformance with --warmup-records, as it printed
    them against kafkalog serve: a notice first, one when the warm-up ends, and a second
    summary over the records after it."""
    code, out, err = produce(
        data, "--num-records", "1000", "--record-size", "10", "--throughput", "-1",
        "--warmup-records", "400", "--reporting-interval", "60000",
        "--command-property", "batch.size=180",
    )  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == (
        "Warmup first 400 records. Steady state results will print after the complete test summary."
    )
    assert lines[1] == "In steady state."
    assert SUMMARY.match(lines[2]) and lines[2].startswith("1000 records sent, ")
    steady = lines[3]
    assert steady.startswith("600 steady state records sent, ")
    assert SUMMARY.match(steady.replace(" steady state records", " records"))
    assert len(lines) == 4
    code, _, err = produce(data, "--num-records", "10", "--record-size", "1", "--warmup-records",
                           "10")  # fmt: skip
    assert code == 2 and "--warmup-records must be at least 0 and below --num-records" in err

"""``kafkalog serve`` against Apache Kafka's broker on the same machine, driven by Kafka's own
``kafka-producer-perf-test`` and ``kafka-consumer-perf-test`` (the serve speed targets).

Both servers run one after the other as processes of their own, with the same durability
(acks=all, one replica, the page cache: neither fsyncs per request), and each gets the same
workloads: 100-byte and 1 KiB records, compression none and lz4 (the producer's default
level), the producer's default batch.size and linger.ms, topics created on first use and
``group.initial.rebalance.delay.ms=0`` on both (the consume figure is the perf tool's
``fetch.nMsg.sec``, after the group join). The broker runs as ``kafka-server-start.sh`` starts
it (1 GiB heap, G1). Throughput is one run per server, so the host's run-to-run noise (about
15%) applies; produce latency (p99) at a fixed rate of half of Kafka's maximum is the median of
three runs. For each server the suite also reports the server's peak RSS (``VmHWM``) and its
CPU seconds per MB moved (from ``/proc/<pid>/stat``). The perf tools are Kafka's newest pinned
version for both servers. librdkafka (confluent-kafka, in this process) is the second client:
100-byte records, acks=all, its default batching, produced then read back from the start, on
each server.
"""

from __future__ import annotations

import os
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.harness import Row, in_temp_dir

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the oracle harness lives beside the tests

# kafka-server-start.sh's KAFKA_HEAP_OPTS and KAFKA_JVM_PERFORMANCE_OPTS
BROKER_JVM = ["-Xmx1G", "-Xms1G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
              "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent"]  # fmt: skip
WORKLOADS = [(100, "none", 300_000), (100, "lz4", 300_000), (1024, "none", 60_000),
             (1024, "lz4", 60_000)]  # fmt: skip
PRODUCE_TARGET, CONSUME_TARGET, LATENCY_TARGET = 0.5, 0.8, 0.5  # latency: Kafka's p99 / ours
# One run's p99 is its worst 1% of records, ~80 ms of traffic at these rates: a single stall of
# the client's JVM or the host decides it. Both servers swung 170-830 ms run to run on the same
# workload, so each reports the median of its runs' p99.
LATENCY_RUNS = 3
_SENT = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th"
)


class Server:
    """A running server process: its bootstrap address, CPU seconds and peak RSS."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes], port: int) -> None:
        self.name, self.proc, self.port = name, proc, port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def peak_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _wait_listening(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited at start")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{what} did not listen in 120 s")


def start_kafka(root: Path, version: str) -> Server:
    from kafka_oracle import BROKER_LOG, KafkaBroker, classpath

    # topics are created on first use on both servers (the oracle harness turns it off)
    broker = KafkaBroker(version, root / "kafka", {"auto.create.topics.enable": "true"})
    broker.format()
    cmd = ["java", *BROKER_JVM, *BROKER_LOG, "-cp", classpath(version), "kafka.Kafka",
           str(broker.config)]  # fmt: skip
    out = (root / "kafka.out").open("wb")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    _wait_listening(broker.port, proc, f"Kafka {version}")
    return Server(f"Kafka {version}", proc, broker.port)


def start_kafkalog(root: Path) -> Server:
    from kafka_oracle import free_port

    port = free_port()
    cmd = [sys.executable, "-m", "kafkalog", "serve", "--log-dirs", str(root / "kafkalog"),
           "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
           "--override", "group.initial.rebalance.delay.ms=0"]  # fmt: skip
    out = (root / "kafkalog.out").open("wb")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    _wait_listening(port, proc, "kafkalog serve")
    return Server("kafkalog serve", proc, port)


def _tool(version: str, main: str, *args: str) -> str:
    from kafka_oracle import JVM_FLAGS, TOOL_LOG, classpath

    cmd = ["java", *JVM_FLAGS, *TOOL_LOG, "-cp", classpath(version), main, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{main} {args}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc.stdout


def produce(version: str, server: Server, topic: str, size: int, codec: str, n: int,
            throughput: float = -1) -> dict[str, float]:  # fmt: skip
    out = _tool(
        version, "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
        "--num-records", str(n), "--record-size", str(size), "--throughput", str(int(throughput)),
        "--producer-props", f"bootstrap.servers={server.bootstrap}", "acks=all",
        f"compression.type={codec}",
    )  # fmt: skip
    match = _SENT.search(out.strip().splitlines()[-1])
    if match is None:
        raise RuntimeError(f"no summary line in {out[-500:]}")
    return {"records/s": float(match.group(2)), "MB/s": float(match.group(3)),
            "p99 ms": float(match.group(8))}  # fmt: skip


def consume(version: str, server: Server, topic: str, n: int) -> dict[str, float]:
    out = _tool(
        version, "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server",
        server.bootstrap, "--topic", topic, "--messages", str(n), "--timeout", "120000",
    )  # fmt: skip
    header, row = out.strip().splitlines()[-2:]
    fields = dict(zip([h.strip() for h in header.split(",")], row.split(","), strict=False))
    # the fetch phase only: joining the group is not the throughput being compared
    return {"MB/s": float(fields["fetch.MB.sec"]), "records/s": float(fields["fetch.nMsg.sec"])}


RDKAFKA_RECORDS = 300_000


def rdkafka_produce_consume(server: Server, topic: str, n: int) -> dict[str, float]:
    """librdkafka's throughput on ``server``: n 100-byte records produced with acks=all, then
    consumed from the start of the partition (records/s each)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "linger.ms": 5})
    value = bytes(100)
    producer.produce(topic, value, partition=0)  # creates the topic before the clock starts
    producer.flush(60)
    start = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.01)
    if producer.flush(120):
        raise RuntimeError("librdkafka did not deliver every record")
    produced = n / (time.perf_counter() - start)
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"rd-{topic}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    got, start = 0, time.perf_counter()
    while got < n + 1:  # never ask for more than is left: consume() waits to fill its batch
        batch = consumer.consume(min(10_000, n + 1 - got), 5.0)
        if not batch:
            raise RuntimeError(f"librdkafka read {got} of {n + 1} records")
        got += sum(1 for m in batch if m.error() is None)
    consumed = got / (time.perf_counter() - start)
    consumer.close()
    return {"produce": produced, "consume": consumed}


def measure(server: Server, version: str) -> dict[str, dict[str, float]]:
    """Every workload's figures on one server, plus its CPU s/MB and peak RSS."""
    results: dict[str, dict[str, float]] = {}
    for size, codec, n in WORKLOADS:
        name = f"{size}B-{codec}"
        topic = f"perf-{size}-{codec}"
        cpu = server.cpu_seconds()
        produced = produce(version, server, topic, size, codec, n)
        consumed = consume(version, server, topic, n)
        mb = 2 * n * size / 2**20  # in and out
        results[name] = {
            "produce": produced["records/s"],
            "produce MB/s": produced["MB/s"],
            "consume": consumed["records/s"],
            "consume MB/s": consumed["MB/s"],
            "cpu s/MB": (server.cpu_seconds() - cpu) / mb,
        }
    results["librdkafka"] = rdkafka_produce_consume(server, "rdkafka-100", RDKAFKA_RECORDS)
    results["rss"] = {"peak MB": server.peak_rss_mb()}
    return results


def run() -> list[Row]:
    return in_temp_dir("kafkalog-bench-serve-", _run)


def _run(root: Path) -> list[Row]:
    from kafka_oracle import KAFKA_VERSIONS

    version = KAFKA_VERSIONS[-1]
    figures: dict[str, dict[str, dict[str, float]]] = {}
    latency: dict[str, dict[str, float]] = {}
    for starter in (lambda: start_kafka(root, version), lambda: start_kafkalog(root)):
        server = starter()
        try:
            figures[server.name] = measure(server, version)
            side = "ours" if server.name == "kafkalog serve" else "kafka"
            latency[side] = {}
            for size, codec, n in WORKLOADS[::2]:  # uncompressed: 100 B and 1 KiB
                name = f"{size}B-{codec}"
                kafka_max = figures[f"Kafka {version}"][name]["produce"]
                p99s = [
                    produce(version, server, f"latency-{name}-{attempt}", size, codec, n,
                            throughput=kafka_max / 2)["p99 ms"]
                    for attempt in range(LATENCY_RUNS)
                ]  # fmt: skip
                latency[side][name] = statistics.median(p99s)
        finally:
            server.stop()
    ours, kafka = figures["kafkalog serve"], figures[f"Kafka {version}"]
    rows: list[Row] = []
    for size, codec, n in WORKLOADS:
        name = f"{size}B-{codec}"
        what = f"{n:,} records of {size} B, {codec}, acks=all, perf-test defaults"
        rows.append(Row(
            "serve", f"produce {name} (kafka-producer-perf-test)", "rec/s",
            ours[name]["produce"], f"Kafka {version} broker", kafka[name]["produce"],
            target=PRODUCE_TARGET,
            notes=f"{what}; CPU s/MB ours {ours[name]['cpu s/MB']:.3f}, "
                  f"Kafka {kafka[name]['cpu s/MB']:.3f} (produce+consume)",
        ))  # fmt: skip
        rows.append(Row(
            "serve", f"consume {name} (kafka-consumer-perf-test)", "rec/s",
            ours[name]["consume"], f"Kafka {version} broker", kafka[name]["consume"],
            target=CONSUME_TARGET,
            notes="the same records read back from the start; fetch.nMsg.sec (after the join)",
        ))  # fmt: skip
    for op, target in (("produce", PRODUCE_TARGET), ("consume", CONSUME_TARGET)):
        rows.append(Row(
            "serve", f"{op} 100B-none (librdkafka)", "rec/s", ours["librdkafka"][op],
            f"Kafka {version} broker", kafka["librdkafka"][op], target=target,
            notes=f"{RDKAFKA_RECORDS:,} records of 100 B, none, acks=all, confluent-kafka "
                  "defaults and linger.ms=5, one partition; read back from the start",
        ))  # fmt: skip
    for name, p99 in latency["ours"].items():
        rows.append(Row(
            "serve", f"produce p99 latency {name} at half Kafka's max rate", "ms", p99,
            f"Kafka {version} broker", latency["kafka"][name], target=LATENCY_TARGET,
            paired_ratio=latency["kafka"][name] / p99 if p99 else float("inf"),
            notes=f"median p99 of {LATENCY_RUNS} runs on each server, a new topic each; ratio is "
            "Kafka's p99 / ours: >= 0.5 means at most 2x Kafka's p99",
        ))  # fmt: skip
    rows.append(Row(
        "serve", "server peak RSS over all the above", "MB", ours["rss"]["peak MB"],
        f"Kafka {version} broker (1 GiB heap)", kafka["rss"]["peak MB"],
        notes="VmHWM of the server process; reported, no target",
    ))  # fmt: skip
    return rows

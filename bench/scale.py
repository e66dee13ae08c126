"""``kafkalog serve`` and Apache Kafka's broker carrying thousands of partitions (the scale
targets): descriptors, memory, restarts, Metadata, CreateTopics, produce beside a consumer of
every topic, and an idle server's CPU.

Like with like: for each size, each server runs alone on the machine, on a fresh directory,
after a warm-up (a million records of 100 B produced and read back, and Metadata requests, on a
topic of its own), Kafka as ``kafka-server-start.sh`` starts it (1 GiB heap, G1; its JVM raises
its soft limit on open files to the hard one at start, and ``kafkalog serve`` does the same).
Topics of ten partitions are created through the Admin API (librdkafka), fifty topics a request;
a size's creation time runs until Metadata lists every partition. Restarts (after SIGTERM, and
after a kill -9) run until Metadata lists every partition again. Metadata latency is the median
of raw requests on one connection, for one topic and for every topic. The produce row sends
``PRODUCE_RECORDS`` records of 100 B round-robin over every partition (librdkafka, acks=all,
linger.ms=5) while one consumer subscribed to every topic reads them; it reports the rate and
the server's CPU seconds per 100,000 records. It runs twice: beside librdkafka's consumer, which
has no fetch sessions (every fetch names every partition), then beside Kafka's Java consumer
(ConsumerPerformance), which fetches through a KIP-227 session. Descriptors are the server
process's (``/proc/<pid>/fd``) after the first produce; RSS its VmRSS then. Sizes come from
``KAFKALOG_BENCH_SCALE_PARTITIONS`` (default 1,000, 4,000 and 10,000), and one more run keeps
ten segments in each of 1,000 partitions (``segment.ms``: each round of the produce rolls).
"""

from __future__ import annotations

import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench.harness import Row, in_temp_dir
from bench.serve import BROKER_JVM, Server, tool_command, wait_listening

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the oracle harness lives beside the tests

SIZES = [
    int(n) for n in os.environ.get("KAFKALOG_BENCH_SCALE_PARTITIONS", "1000,4000,10000").split(",")
]
SEGMENTED = (1000, 10)  # partitions, segments each
TOPIC_PARTITIONS = 10
TOPICS_PER_REQUEST = 50
PRODUCE_RECORDS = 200_000
IDLE_SECONDS = 10
# 100 B, produced and read back on a topic of its own
WARMUP_RECORDS = int(os.environ.get("KAFKALOG_BENCH_SCALE_WARMUP", "1000000"))
# requests timed; for one topic 500 (some 100 ms): fifty (10 ms) caught one moment of the disk
# and the scheduler on either server, the median moving 0.12-0.28 ms on ours and 0.23-1 ms on
# Kafka's from one run of this bench to the next
METADATA_ONE, METADATA_ALL = 500, 5


class ScaleServer(Server):
    """One server on its own directory, started and restarted with the same command (the
    serve suite's Server, whose process is replaced at each start)."""

    proc: subprocess.Popen[bytes]

    def __init__(self, name: str, cmd: list[str], port: int, out: Path) -> None:
        self.name, self.cmd, self.port, self.out = name, cmd, port, out

    def start(self) -> None:
        with self.out.open("ab") as out:
            self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT)
        wait_listening(self.port, self.proc, self.name, timeout=600)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        self.proc.send_signal(sig)
        try:
            self.proc.wait(300)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def descriptors(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")


def kafka_server(root: Path, version: str) -> ScaleServer:
    from kafka_oracle import BROKER_LOG, KafkaBroker, classpath

    broker = KafkaBroker(version, root, {"num.partitions": str(TOPIC_PARTITIONS)})
    broker.format()
    cmd = ["java", *BROKER_JVM, *BROKER_LOG, "-cp", classpath(version), "kafka.Kafka",
           str(broker.config)]  # fmt: skip
    return ScaleServer(f"Kafka {version}", cmd, broker.port, root / "kafka.out")


def kafkalog_server(root: Path) -> ScaleServer:
    from kafka_oracle import free_port

    port = free_port()
    cmd = [sys.executable, "-m", "kafkalog", "serve", "--log-dirs", str(root / "data"),
           "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
           "--override", "group.initial.rebalance.delay.ms=0",
           "--override", "offsets.topic.num.partitions=1"]  # fmt: skip
    root.mkdir(parents=True, exist_ok=True)
    return ScaleServer("kafkalog serve", cmd, port, root / "kafkalog.out")


class MetadataProbe:
    """Raw Metadata v12 requests on one connection (the clients' own caches would hide the
    server's cost)."""

    def __init__(self, port: int) -> None:
        from server_helpers import frame, metadata_request

        self._frame, self._request = frame, metadata_request
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)

    def ask(self, topics: list[str] | None) -> tuple[float, int]:
        """(seconds, partitions listed)."""
        from server_helpers import decode_response, read_frame

        data = self._frame(3, 12, self._request(12, topics))
        start = time.perf_counter()
        self.sock.sendall(data)
        answer = read_frame(self.sock)
        took = time.perf_counter() - start
        body = decode_response(3, 12, answer, header_v1=True)
        listed = [t for t in body.topics if t.error_code == 0 and t.name.startswith("scale-")]
        return took, sum(len(t.partitions) for t in listed)

    def close(self) -> None:
        self.sock.close()


def _until_listed(server: ScaleServer, partitions: int, since: float) -> float:
    """Seconds from ``since`` until Metadata lists ``partitions`` partitions of the topics."""
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        try:
            probe = MetadataProbe(server.port)
            try:
                if probe.ask(None)[1] >= partitions:
                    return time.monotonic() - since
            finally:
                probe.close()
        except (OSError, AssertionError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{server.name} did not list {partitions} partitions in 900 s")


def _topics(partitions: int) -> list[str]:
    return [f"scale-{i:05d}" for i in range(partitions // TOPIC_PARTITIONS)]


def create_topics(server: ScaleServer, partitions: int, configs: dict[str, str]) -> float:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    names = _topics(partitions)
    start = time.monotonic()
    for i in range(0, len(names), TOPICS_PER_REQUEST):
        batch = [
            NewTopic(t, TOPIC_PARTITIONS, 1, config=configs)
            for t in names[i : i + TOPICS_PER_REQUEST]
        ]
        for future in admin.create_topics(batch, request_timeout=300).values():
            future.result()
    return _until_listed(server, partitions, start)


def produce_with_consumer(server: ScaleServer, partitions: int, rounds: int = 1,
                          pause: float = 0.0, reader: str = "librdkafka",
                          already: int = 0) -> tuple[float, float]:  # fmt: skip
    """(records/s, server CPU s per 100k records): PRODUCE_RECORDS records round-robin over
    every partition while one consumer of every topic reads them: librdkafka's (no fetch
    sessions, every fetch names every partition) or Kafka's Java consumer (``reader="java"``,
    ConsumerPerformance, which fetches through a KIP-227 session; ``already``: the records in
    those topics before)."""
    expected = PRODUCE_RECORDS // rounds * rounds
    consumer = JavaReader(server, already, expected) if reader == "java" else RdkafkaReader(server)
    try:
        cpu, start = server.cpu_seconds(), time.perf_counter()
        sent = _produce_round_robin(server, partitions, rounds, pause)
        rate = sent / (time.perf_counter() - start)
        consumer.wait(sent)
        return rate, (server.cpu_seconds() - cpu) / (sent / 100_000)
    finally:
        consumer.close()


def _produce_round_robin(server: ScaleServer, partitions: int, rounds: int, pause: float) -> int:
    from confluent_kafka import Producer

    names = _topics(partitions)
    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "linger.ms": 5})
    value = bytes(100)
    per_round = PRODUCE_RECORDS // rounds
    sent = 0
    for r in range(rounds):
        for i in range(per_round):
            p = (sent + i) % partitions
            while True:
                try:
                    producer.produce(names[p // TOPIC_PARTITIONS], value,
                                     partition=p % TOPIC_PARTITIONS)  # fmt: skip
                    break
                except BufferError:
                    producer.poll(0.01)
        sent += per_round
        if producer.flush(300):
            raise RuntimeError(f"{server.name}: not every record was delivered")
        if pause and r + 1 < rounds:
            time.sleep(pause)
    return sent


class RdkafkaReader:
    """librdkafka's consumer of every ``scale-`` topic, reading on a thread of this process."""

    def __init__(self, server: ScaleServer) -> None:
        from confluent_kafka import Consumer

        self.server = server
        self.consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "scale",
                                  "auto.offset.reset": "earliest",
                                  "enable.auto.commit": True})  # fmt: skip
        self.consumer.subscribe(["^scale-.*"])
        self.read = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._consume, daemon=True)
        self.thread.start()

    def _consume(self) -> None:
        while not self.stop.is_set():
            for m in self.consumer.consume(10_000, 0.2):
                if m.error() is None:
                    self.read += 1

    def wait(self, sent: int) -> None:
        deadline = time.monotonic() + 300
        while self.read < sent and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.read < sent:
            raise RuntimeError(f"{self.server.name}: the consumer read {self.read} of {sent}")

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.consumer.close()


class JavaReader:
    """Kafka's own consumer (ConsumerPerformance of the oracle version, the JVM options of
    its script) subscribed to every ``scale-`` topic from their ends; the produce starts once
    its group has committed a position at the end of every partition (``already``: the records
    there before), so neither the join nor the reset is in the measurement; it exits once it
    read the ``expected`` records produced after."""

    GROUP = "scale-java"

    def __init__(self, server: ScaleServer, already: int, expected: int) -> None:
        from kafka_oracle import KAFKA_VERSIONS

        self.server = server
        self.out = server.out.with_name(server.out.name + ".consumer")
        cmd = tool_command(KAFKA_VERSIONS[-1], "org.apache.kafka.tools.ConsumerPerformance",
                           "--bootstrap-server", server.bootstrap, "--include", "^scale-.*",
                           "--group", self.GROUP, "--from-latest", "--num-records", str(expected),
                           "--timeout", "300000")  # fmt: skip
        with self.out.open("wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        self._until_at_the_end(already)

    def _until_at_the_end(self, already: int) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.server.bootstrap})
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and self.proc.poll() is None:
            asked = [ConsumerGroupTopicPartitions(self.GROUP)]
            found = admin.list_consumer_group_offsets(asked)[self.GROUP].result()
            if sum(max(tp.offset, 0) for tp in found.topic_partitions) >= already:
                return
            time.sleep(0.5)
        raise RuntimeError(f"{self.server.name}: the Java consumer did not start ({self.out})")

    def wait(self, sent: int) -> None:
        if self.proc.wait(timeout=300) != 0:
            raise RuntimeError(f"{self.server.name}: the Java consumer failed ({self.out})")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def warm_up(server: ScaleServer) -> None:
    """A produce, a read back and Metadata requests on a topic of its own before anything is
    measured, so Kafka's JIT has compiled its paths."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic("warm-up", 1, 1)])["warm-up"].result()
    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "linger.ms": 5})
    for _ in range(WARMUP_RECORDS):
        while True:
            try:
                producer.produce("warm-up", bytes(100))
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(300)
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "warm-up",
                         "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.subscribe(["warm-up"])
    got, deadline = 0, time.monotonic() + 300
    while got < WARMUP_RECORDS and time.monotonic() < deadline:
        got += len(consumer.consume(10_000, 0.5))
    consumer.close()
    probe = MetadataProbe(server.port)
    for _ in range(200):
        probe.ask(["warm-up"])
    probe.close()


def measure(server: ScaleServer, partitions: int, segments: int = 1) -> dict[str, float]:
    out: dict[str, float] = {}
    server.start()
    try:
        warm_up(server)
        configs = {"segment.ms": "1000"} if segments > 1 else {}
        out["create s"] = create_topics(server, partitions, configs)
        probe = MetadataProbe(server.port)
        one = [probe.ask([_topics(partitions)[0]])[0] for _ in range(METADATA_ONE)]
        every = [probe.ask(None)[0] for _ in range(METADATA_ALL)]
        probe.close()
        out["metadata one ms"] = statistics.median(one) * 1000
        out["metadata all ms"] = statistics.median(every) * 1000
        pause = 1.2 if segments > 1 else 0
        rate, cpu = produce_with_consumer(server, partitions, segments, pause)
        out["produce rec/s"], out["cpu s/100k"] = rate, cpu
        out["descriptors"] = server.descriptors()
        out["rss MB"] = server.rss_mb()
        # in one round: ten more would roll ten more segments a partition at 1,000 x 10, some
        # 20,000 in all against the machine's 20,000 descriptors (Kafka's broker stopped
        # answering there in a try)
        rate, cpu = produce_with_consumer(
            server, partitions, reader="java", already=PRODUCE_RECORDS
        )
        out["produce, Java consumer rec/s"], out["cpu, Java consumer s/100k"] = rate, cpu
        cpu0 = server.cpu_seconds()
        time.sleep(IDLE_SECONDS)
        out["idle cpu %"] = (server.cpu_seconds() - cpu0) / IDLE_SECONDS * 100
        listed = MetadataProbe(server.port)
        total = listed.ask(None)[1]
        listed.close()
        for how, sig in (("clean", signal.SIGTERM), ("kill -9", signal.SIGKILL)):
            server.stop(sig)
            start = time.monotonic()
            server.start()
            out[f"restart {how} s"] = _until_listed(server, total, start)
    finally:
        server.stop()
    return out


def run() -> list[Row]:
    return in_temp_dir("kafkalog-bench-scale-", _run)


def _run(root: Path) -> list[Row]:
    from kafka_oracle import KAFKA_VERSIONS

    version = KAFKA_VERSIONS[-1]
    results: dict[tuple[str, int, int], dict[str, float]] = {}
    cases = [(n, 1) for n in SIZES] + ([SEGMENTED] if os.environ.get(
        "KAFKALOG_BENCH_SCALE_SEGMENTS", "1") == "1" else [])  # fmt: skip
    for partitions, segments in cases:
        for make in (lambda d: kafka_server(d, version), kafkalog_server):
            server = make(root / f"{partitions}x{segments}-{len(results)}")
            print(f"scale: {server.name} at {partitions} x {segments}", file=sys.stderr, flush=True)
            results[(server.name, partitions, segments)] = measure(server, partitions, segments)
    return _rows(f"Kafka {version}", "kafkalog serve", cases, results)


# (key, unit, more is better, what the row measures)
ROWS: list[tuple[str, str, bool, str]] = [
    ("descriptors", "fds", False, "open descriptors of the server process after the produce"),
    ("rss MB", "MB", False, "VmRSS of the server process after the produce"),
    ("create s", "s", False, "CreateTopics of every partition (ten a topic, fifty topics a "
     "request) until Metadata lists them"),
    ("restart clean s", "s", False, "SIGTERM, then start until Metadata lists every partition"),
    ("restart kill -9 s", "s", False, "kill -9, then start until Metadata lists every partition"),
    ("metadata one ms", "ms", False, f"Metadata v12 for one topic, median of {METADATA_ONE}"),
    ("metadata all ms", "ms", False, f"Metadata v12 for every topic, median of {METADATA_ALL}"),
    ("produce rec/s", "rec/s", True, f"{PRODUCE_RECORDS:,} x 100 B round-robin over every "
     "partition, acks=all, linger.ms=5, one librdkafka consumer subscribed to every topic "
     "(no fetch sessions)"),
    ("cpu s/100k", "s", False, "server CPU seconds per 100,000 records of that produce"),
    ("produce, Java consumer rec/s", "rec/s", True, "the same produce (in one round) while "
     "Kafka's Java consumer (ConsumerPerformance, fetching through a KIP-227 session) reads "
     "every topic"),
    ("cpu, Java consumer s/100k", "s", False, "server CPU seconds per 100,000 records of that "
     "produce"),
    ("idle cpu %", "%", False, f"server CPU over {IDLE_SECONDS} s with no client"),
]  # fmt: skip


def _rows(kafka: str, ours: str, cases: list[tuple[int, int]],
          results: dict[tuple[str, int, int], dict[str, float]]) -> list[Row]:  # fmt: skip
    rows: list[Row] = []
    for partitions, segments in cases:
        a, b = results[(ours, partitions, segments)], results[(kafka, partitions, segments)]
        label = f"{partitions:,} partitions" + (f" x {segments} segments" if segments > 1 else "")
        for key, unit, more_is_better, what in ROWS:
            mine, theirs = a[key], b[key]
            ratio: Callable[[float, float], float] = (
                (lambda m, t: m / t) if more_is_better else (lambda m, t: t / m if m else 99.0)
            )
            rows.append(Row(
                "scale", f"{key.rsplit(' ', 1)[0]} at {label}", unit, mine, kafka, theirs,
                target=1.0, paired_ratio=ratio(mine, theirs),
                notes=f"{what}; ratio >= 1 means at or better than Kafka"
                      + ("" if more_is_better else " (Kafka's / ours)"),
            ))  # fmt: skip
    return rows

"""``kafkalog serve`` against Apache Kafka's broker on the same machine, both warm, driven by
Kafka's own ``kafka-producer-perf-test`` and ``kafka-consumer-perf-test`` (the serve targets).

Like with like: the broker runs as ``kafka-server-start.sh`` starts it (1 GiB heap, G1) and the
perf tools with the JVM options of their shipped scripts (``-Xmx512M``, G1). Both servers run
side by side the whole time, each in a session of its own (``OWN_SESSION``), with the same
durability (acks=all, one replica, the page cache: neither fsyncs per request) and
``group.initial.rebalance.delay.ms=0``; each first gets a warm-up (a produce and a consume of
``WARMUP`` records) so that Kafka's JIT has compiled its paths before anything is measured. Each
workload then runs on Kafka, then on kafkalog, for ``ROUNDS`` rounds, each run on a new topic
and long enough for a steady state (each row says how long the faster side's run lasted, and
whether that is short of ``MIN_SECONDS``: on this machine about 30 s on one partition and 15-17
s on eight); the reported figure on both sides is the best round. Workloads: 100-byte records
with none and lz4, 1 KiB with none, on 1 and on 8 partitions, the producer's defaults otherwise.
Consume reads back what the produce run wrote, from the start (``fetch.nMsg.sec``, after the
group join). CPU seconds per MiB are the server process's (``/proc/<pid>/stat``) over the
produce run; beside them, the producer client's own CPU seconds per million records and its
``record-queue-time-avg``, because on two cores the client and the server share the machine: a
client whose ``buffer.memory`` fills spends more CPU per record, and what it takes the server
lacks. The p99 rows produce at a fixed rate: half of Kafka's best and half of kafkalog's own
best, on both servers. librdkafka (confluent-kafka, in this process) is the second client.
``KAFKALOG_BENCH_SERVE_SCALE`` (default 1) scales every record count, for a quick look;
``KAFKALOG_BENCH_SERVE_SESSION=shared`` runs both servers in the perf tools' session.
"""

from __future__ import annotations

import os
import re
import resource
import socket
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
# kafka-producer-perf-test.sh / kafka-consumer-perf-test.sh: KAFKA_HEAP_OPTS, then
# kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS
PERF_JVM = ["-Xmx512M", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
            "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true"]  # fmt: skip
SCALE = float(os.environ.get("KAFKALOG_BENCH_SERVE_SCALE", "1"))
# Each server in a session of its own, as a service manager or another terminal starts a
# broker: with the kernel's autogroup scheduling the CPU is then shared between the server and
# the client, not between their threads. In one session a server's share of a contended
# machine grows with the number of threads it keeps runnable, whatever its work. "shared"
# runs both servers in the bench's session, beside the perf tools, as before.
OWN_SESSION = os.environ.get("KAFKALOG_BENCH_SERVE_SESSION", "own") != "shared"
# records per run: about 30 s of the faster side's produce on one partition on this machine
# and 15-17 s on eight (Kafka: 1.6 M records/s of 100 B, 290 k of 1 KiB); each row says how long
# the faster side's best run lasted, so a faster machine shows as a short run
RECORDS = {100: int(24_000_000 * SCALE), 1024: int(5_000_000 * SCALE)}
WORKLOADS = [(100, "none"), (100, "lz4"), (1024, "none")]
PARTITIONS = (1, 8)
ROUNDS = 2
WARMUP = int(10_000_000 * SCALE)  # 100-byte records, produced and consumed, on each server
MIN_SECONDS = 20
LATENCY_SECONDS = 20  # each p99 run's length at its fixed rate
PRODUCE_TARGET = CONSUME_TARGET = 1.0
LATENCY_TARGET = 0.667  # Kafka's p99 / ours: ours at most 1.5x Kafka's
CPU_TARGET = 0.667  # Kafka's CPU s/MiB / ours: ours at most 1.5x Kafka's
_LOWER_IS_BETTER = ("cpu s/MiB", "client cpu s/M", "queue ms", "latency ms", "wake wait ms")
_SENT = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th"
)
_QUEUE_TIME = re.compile(
    r"producer-metrics:record-queue-time-avg:\{client-id=[^}]*\}\s*:\s*([\d.]+)"
)
_REQUEST_LATENCY = re.compile(
    r"producer-metrics:request-latency-avg:\{client-id=[^}]*\}\s*:\s*([\d.]+)"
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

    def run_queue(self) -> tuple[int, int]:
        """Nanoseconds the process's threads have waited for a core while runnable, and the
        times they were put on one (each thread's ``schedstat``, summed)."""
        waited = slices = 0
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            try:
                fields = (task / "schedstat").read_text().split()
            except OSError:  # the thread ended
                continue
            waited += int(fields[1])
            slices += int(fields[2])
        return waited, slices

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


def wait_listening(
    port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 120
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited at start")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{what} did not listen in {timeout:.0f} s")


def start_kafka(root: Path, version: str) -> Server:
    from kafka_oracle import BROKER_LOG, KafkaBroker, classpath

    # topics are created on first use on both servers (the oracle harness turns it off)
    broker = KafkaBroker(version, root / "kafka", {"auto.create.topics.enable": "true"})
    broker.format()
    cmd = ["java", *BROKER_JVM, *BROKER_LOG, "-cp", classpath(version), "kafka.Kafka",
           str(broker.config)]  # fmt: skip
    out = (root / "kafka.out").open("wb")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=OWN_SESSION)  # fmt: skip
    wait_listening(broker.port, proc, f"Kafka {version}")
    return Server(f"Kafka {version}", proc, broker.port)


def start_kafkalog(root: Path) -> Server:
    from kafka_oracle import free_port

    port = free_port()
    cmd = [sys.executable, "-m", "kafkalog", "serve", "--log-dirs", str(root / "kafkalog"),
           "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
           "--override", "group.initial.rebalance.delay.ms=0"]  # fmt: skip
    out = (root / "kafkalog.out").open("wb")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=OWN_SESSION)  # fmt: skip
    wait_listening(port, proc, "kafkalog serve")
    return Server("kafkalog serve", proc, port)


def tool_command(version: str, main: str, *args: str) -> list[str]:
    """Kafka ``version``'s tool ``main`` as its script starts it (the perf tools' JVM options)."""
    from kafka_oracle import TOOL_LOG, classpath

    return ["java", *PERF_JVM, *TOOL_LOG, "-cp", classpath(version), main, *args]


def _tool(version: str, main: str, *args: str) -> str:
    cmd = tool_command(version, main, *args)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{main} {args}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc.stdout


def produce(version: str, server: Server, topic: str, size: int, codec: str, n: int,
            throughput: float = -1) -> dict[str, float]:  # fmt: skip
    """The perf tool's summary, with the client's side of it: the tool JVM's CPU seconds and
    its producer's ``record-queue-time-avg`` (how long a record waited in the accumulator:
    near the linger when the server keeps up, hundreds of ms when ``buffer.memory`` is full)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = _tool(
        version, "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
        "--num-records", str(n), "--record-size", str(size), "--throughput", str(int(throughput)),
        "--producer-props", f"bootstrap.servers={server.bootstrap}", "acks=all",
        f"compression.type={codec}", "--print-metrics",
    )  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = [line for line in out.splitlines() if _SENT.search(line)]
    queue = _QUEUE_TIME.search(out)
    latency = _REQUEST_LATENCY.search(out)
    if not summary or queue is None or latency is None:
        raise RuntimeError(f"no summary line in {out[-500:]}")
    match = _SENT.search(summary[-1])
    assert match is not None
    client_cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"records/s": float(match.group(2)), "MB/s": float(match.group(3)),
            "p99 ms": float(match.group(8)), "client cpu s": client_cpu,
            "queue ms": float(queue.group(1)), "latency ms": float(latency.group(1))}  # fmt: skip


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


def create_topic(version: str, server: Server, topic: str, partitions: int) -> None:
    _tool(version, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", server.bootstrap,
          "--create", "--topic", topic, "--partitions", str(partitions),
          "--replication-factor", "1")  # fmt: skip


def delete_topic(version: str, server: Server, topic: str) -> None:
    """A measured run's topic, gone once read back: two servers keeping every run's records
    would need some 50 GB of disk."""
    _tool(version, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", server.bootstrap,
          "--delete", "--topic", topic)  # fmt: skip


def warm_up(version: str, server: Server) -> None:
    """A produce and a consume long enough for Kafka's JIT to compile its hot paths (and
    kafkalog's page cache and allocator to settle) before anything is measured."""
    create_topic(version, server, "warm-up", 1)
    produce(version, server, "warm-up", 100, "none", WARMUP)
    consume(version, server, "warm-up", WARMUP)


def run() -> list[Row]:
    return in_temp_dir("kafkalog-bench-serve-", _run)


def _run(root: Path) -> list[Row]:
    from kafka_oracle import KAFKA_VERSIONS

    version = KAFKA_VERSIONS[-1]
    kafka = start_kafka(root, version)
    ours = start_kafkalog(root)
    servers = (kafka, ours)
    try:
        for server in servers:
            warm_up(version, server)
        best: dict[tuple[str, str], dict[str, float]] = {}
        for size, codec in WORKLOADS:
            for parts in PARTITIONS:
                name = f"{size}B-{codec}-{parts}p"
                for attempt in range(ROUNDS):  # Kafka, kafkalog, Kafka, kafkalog: drift hits both
                    for server in servers:
                        got = _produce_and_consume(version, server, f"{name}-r{attempt}", size,
                                                   codec, parts)  # fmt: skip
                        mine = best.setdefault((server.name, name), {})
                        for key, value in got.items():
                            better = min if key in _LOWER_IS_BETTER else max
                            mine[key] = better(mine.get(key, value), value)
        latency = _latencies(version, servers, best)
        rdkafka = {
            s.name: rdkafka_produce_consume(s, "rdkafka-100", RDKAFKA_RECORDS) for s in servers
        }
        rss = {s.name: s.peak_rss_mb() for s in servers}
    finally:
        for server in servers:
            server.stop()
    return _rows(kafka.name, ours.name, best, latency, rdkafka, rss)


def _produce_and_consume(version: str, server: Server, topic: str, size: int, codec: str,
                         parts: int) -> dict[str, float]:  # fmt: skip
    n = RECORDS[size]
    create_topic(version, server, topic, parts)
    cpu = server.cpu_seconds()
    waited, slices = server.run_queue()
    produced = produce(version, server, topic, size, codec, n)
    cpu_per_mib = (server.cpu_seconds() - cpu) / (n * size / 2**20)
    waited_after, slices_after = server.run_queue()
    wake_wait_ms = (waited_after - waited) / max(1, slices_after - slices) / 1e6
    consumed = consume(version, server, topic, n)
    delete_topic(version, server, topic)
    return {"produce": produced["records/s"], "consume": consumed["records/s"],
            "cpu s/MiB": cpu_per_mib, "client cpu s/M": produced["client cpu s"] / n * 1e6,
            "queue ms": produced["queue ms"], "latency ms": produced["latency ms"],
            "wake wait ms": wake_wait_ms}  # fmt: skip


def _latencies(
    version: str, servers: tuple[Server, Server], best: dict[tuple[str, str], dict[str, float]]
) -> dict[tuple[str, str, str], float]:
    """p99 at half of each server's best rate (1 partition, none), on both servers; the
    lowest p99 of the rounds."""
    out: dict[tuple[str, str, str], float] = {}
    for size in (100, 1024):
        name = f"{size}B-none-1p"
        for whose in servers:
            rate = best[(whose.name, name)]["produce"] / 2
            n = int(rate * LATENCY_SECONDS * max(SCALE, 0.05))
            for attempt in range(ROUNDS):
                for server in servers:
                    topic = f"latency-{size}-{whose.name.split()[0]}-{attempt}"
                    create_topic(version, server, topic, 1)
                    p99 = produce(version, server, topic, size, "none", n, throughput=rate)
                    delete_topic(version, server, topic)
                    key = (server.name, name, whose.name)
                    out[key] = min(out.get(key, p99["p99 ms"]), p99["p99 ms"])
    return out


def _rows(
    kafka: str,
    ours: str,
    best: dict[tuple[str, str], dict[str, float]],
    latency: dict[tuple[str, str, str], float],
    rdkafka: dict[str, dict[str, float]],
    rss: dict[str, float],
) -> list[Row]:
    session = ("each server in a session of its own (its own autogroup)" if OWN_SESSION
               else "both servers in the perf tools' session (one autogroup)")  # fmt: skip
    how = (f"after a warm-up of {WARMUP:,} records on each server; best of {ROUNDS} rounds "
           f"alternating the servers; perf tools with their scripts' JVM options; {session}")  # fmt: skip
    rows: list[Row] = []
    for size, codec in WORKLOADS:
        for parts in PARTITIONS:
            name = f"{size}B-{codec}-{parts}p"
            a, b = best[(ours, name)], best[(kafka, name)]
            n = RECORDS[size]
            what = (f"{n:,} records of {size} B, {codec}, {parts} partition(s), acks=all, "
                    f"perf-test defaults, {how}")  # fmt: skip
            lasted = n / max(a["produce"], b["produce"])  # the faster side's best run
            read = n / max(a["consume"], b["consume"])
            rows.append(Row("serve", f"produce {name} (kafka-producer-perf-test)", "rec/s",
                            a["produce"], kafka, b["produce"], target=PRODUCE_TARGET,
                            notes=f"{what}; the faster side's run lasted {lasted:.0f} s"
                                  + (f", under {MIN_SECONDS} s" if lasted < MIN_SECONDS else "")
                            ))  # fmt: skip
            rows.append(Row("serve", f"CPU per MiB produced {name}", "s/MiB", a["cpu s/MiB"],
                            kafka, b["cpu s/MiB"], target=CPU_TARGET,
                            paired_ratio=b["cpu s/MiB"] / a["cpu s/MiB"],
                            notes="server process CPU seconds over the produce run per MiB of "
                                  "values; ratio is Kafka's / ours: >= 0.67 means at most 1.5x "
                                  "Kafka's; the server's threads waited "
                                  f"{a['wake wait ms']:.2f} ms (kafkalog) and "
                                  f"{b['wake wait ms']:.2f} ms (Kafka) for a core each time one "
                                  "was put on it (schedstat, lowest of the rounds)"))  # fmt: skip
            rows.append(Row("serve", f"producer client CPU per million records {name}", "s",
                            a["client cpu s/M"], kafka, b["client cpu s/M"],
                            paired_ratio=b["client cpu s/M"] / a["client cpu s/M"],
                            notes="the perf tool JVM's CPU seconds over the produce run per "
                                  "million records; its record-queue-time-avg "
                                  f"{a['queue ms']:.0f} ms against kafkalog, "
                                  f"{b['queue ms']:.0f} ms against Kafka (lowest of the rounds: "
                                  "hundreds of ms mean buffer.memory was full), its "
                                  f"request-latency-avg {a['latency ms']:.1f} ms against "
                                  f"kafkalog, {b['latency ms']:.1f} ms against Kafka (lowest of "
                                  "the rounds); ratio is Kafka's / ours"))  # fmt: skip
            rows.append(Row("serve", f"consume {name} (kafka-consumer-perf-test)", "rec/s",
                            a["consume"], kafka, b["consume"], target=CONSUME_TARGET,
                            notes="the produce run's records read back from the start; "
                                  f"fetch.nMsg.sec (after the join), the faster side's fetch "
                                  f"lasting {read:.1f} s; {how}"))  # fmt: skip
    for size in (100, 1024):
        name = f"{size}B-none-1p"
        for whose in (kafka, ours):
            mine, theirs = latency[(ours, name, whose)], latency[(kafka, name, whose)]
            rows.append(Row(
                "serve", f"produce p99 latency {name} at half {whose.split()[0]}'s max rate",
                "ms", mine, kafka, theirs,
                target=LATENCY_TARGET if whose == kafka else None,
                paired_ratio=theirs / mine if mine else float("inf"),
                notes=f"{LATENCY_SECONDS} s at a fixed rate, lowest p99 of {ROUNDS} rounds on "
                      "each server; ratio is Kafka's p99 / ours: >= 0.67 means at most 1.5x "
                      "Kafka's",
            ))  # fmt: skip
    for op in ("produce", "consume"):
        rows.append(Row(
            "serve", f"{op} 100B-none (librdkafka)", "rec/s", rdkafka[ours][op], kafka,
            rdkafka[kafka][op], target=PRODUCE_TARGET if op == "produce" else CONSUME_TARGET,
            notes=f"{RDKAFKA_RECORDS:,} records of 100 B, none, acks=all, confluent-kafka "
                  "defaults and linger.ms=5, one partition; read back from the start",
        ))  # fmt: skip
    rows.append(Row(
        "serve", "server peak RSS over all the above", "MB", rss[ours],
        f"{kafka} (1 GiB heap)", rss[kafka], notes="VmHWM of the server process; reported",
    ))  # fmt: skip
    return rows

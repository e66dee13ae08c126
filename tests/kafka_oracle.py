"""Apache Kafka itself, run beside the tests as the oracle for kafkalog's file formats.

Why: kafkalog claims byte-compatibility with a broker's files, and only a real broker and Kafka's
own tools (DumpLogSegments, the console clients, GetOffsetShell) can prove it. The jars come from
Maven Central through ``interop/kafka-pom.xml``; Maven's local repository is the cache and the
resolved classpath is remembered under ``~/.cache/kafkalog`` (never inside the repository).

What it refuses to do: download anything by hand, or run a broker with more than one node. A
missing ``java``/``mvn`` makes the tests skip locally but fail under ``CI=true``.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
POM = ROOT / "interop" / "kafka-pom.xml"
# The latest 3.9.x and the latest 4.x whose kafka-tools artifact is on Maven Central.
KAFKA_VERSIONS = tuple(
    line.strip()
    for line in (ROOT / "interop" / "kafka-versions.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
)
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kafkalog"
JVM_FLAGS = ["-Xms64m", "-Xmx768m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
BROKER_LOG = [f"-Dlog4j.configuration=file:{ROOT / 'interop' / 'log4j.properties'}"]
TOOL_LOG = [f"-Dlog4j.configuration=file:{ROOT / 'interop' / 'log4j-tools.properties'}"]


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(reason: str) -> None:
    """Locally a missing JVM or Maven skips the oracle tests; CI must never skip them."""
    if in_ci():
        pytest.fail(f"real-Kafka oracle unavailable under CI: {reason}", pytrace=False)
    pytest.skip(reason)


def classpath(version: str) -> str:
    """Resolve (once) Kafka ``version``'s broker, tools and clients with Maven; return the path."""
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            unavailable(f"'{tool}' is not on PATH (see the Makefile's check-java / check-mvn)")
    CACHE.mkdir(parents=True, exist_ok=True)
    out = CACHE / f"kafka-{version}.classpath"
    if out.exists():
        jars = out.read_text().strip().split(os.pathsep)
        if jars and all(Path(j).exists() for j in jars):
            return out.read_text().strip()
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    cmd = [
        "mvn", "-q", "-B", "-f", str(POM), f"-Dkafka.version={version}",
        "dependency:build-classpath", f"-Dmdep.outputFile={tmp}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        unavailable(f"mvn could not resolve Kafka {version}: {proc.stdout[-2000:]}{proc.stderr}")
    os.replace(tmp, out)
    return out.read_text().strip()


def sources_jar(version: str, artifact: str) -> Path:
    """Kafka ``version``'s ``artifact`` sources jar (fetched once with Maven): the one place
    some of Kafka's message schemas ship (the storage jar leaves out its JSON)."""
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            unavailable(f"'{tool}' is not on PATH (see the Makefile's check-java / check-mvn)")
    folder = CACHE / "sources"
    out = folder / f"{artifact}-{version}-sources.jar"
    if out.exists():
        return out
    tmp = folder / f"tmp-{os.getpid()}"
    cmd = [
        "mvn", "-q", "-B", "dependency:copy",
        f"-Dartifact=org.apache.kafka:{artifact}:{version}:jar:sources", f"-DoutputDirectory={tmp}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        unavailable(f"mvn could not fetch {artifact} {version} sources: {proc.stdout[-2000:]}")
    os.replace(tmp / out.name, out)
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def java(version: str, main: str, *args: str, timeout: float = 180) -> str:
    """Run one of Kafka's command-line classes; return its stdout, raising on failure."""
    cmd = ["java", *JVM_FLAGS, *TOOL_LOG, "-cp", classpath(version), main, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"{main} {args} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc.stdout


# Kafka 4's bin/*.sh scripts -> the class each one runs, for tools that call scripts by name
SCRIPTS = {
    "kafka-console-producer.sh": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer.sh": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-topics.sh": "org.apache.kafka.tools.TopicCommand",
    "kafka-configs.sh": "kafka.admin.ConfigCommand",
    "kafka-acls.sh": "org.apache.kafka.tools.AclCommand",
    "kafka-consumer-groups.sh": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-transactions.sh": "org.apache.kafka.tools.TransactionsCommand",
}


def write_scripts(version: str, bindir: Path) -> Path:
    """``bindir`` filled with Kafka ``version``'s scripts as small shims over its jars (no
    Kafka distribution is unpacked); returns ``bindir``."""
    bindir.mkdir(parents=True, exist_ok=True)
    flags = " ".join(["-Xmx512m", *TOOL_LOG])
    for script, main in SCRIPTS.items():
        shim = bindir / script
        shim.write_text(f'#!/bin/sh\nexec java {flags} -cp "{classpath(version)}" {main} "$@"\n')
        shim.chmod(0o755)
    return bindir


def dump_log_segments_class(version: str) -> str:
    # KAFKA-14525 moved DumpLogSegments from core (Scala) to the tools module in 4.0.
    return (
        "kafka.tools.DumpLogSegments"
        if version.startswith("3.")
        else ("org.apache.kafka.tools.DumpLogSegments")
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class KafkaBroker:
    """One combined controller+broker KRaft node on loopback, its data under ``root``."""

    version: str
    root: Path
    overrides: dict[str, str] = field(default_factory=dict)
    port: int = 0
    # a dynamic quorum (KIP-853): formatted --standalone, so the metadata log and its first
    # snapshot carry KRaftVersion and KRaftVoters records
    standalone: bool = False
    log_dir: Path = field(init=False)
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.log_dir = self.root / "data"
        self.port = self.port or free_port()
        self.controller_port = free_port()
        self.config = self.root / "server.properties"
        self.output = self.root / "broker.out"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def properties(self) -> dict[str, str]:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
            f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.log_dir),
            # The cluster metadata log lives apart so the data dir holds only topic partitions.
            "metadata.log.dir": str(self.root / "metadata"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            "log.cleaner.backoff.ms": "200",
            "log.retention.check.interval.ms": "300",
            # retention's first run (KAFKA-16552's internal key, since 3.8; 30 s by default)
            "log.initial.task.delay.ms": "100",
            "log.segment.delete.delay.ms": "0",
            "log.flush.offset.checkpoint.interval.ms": "500",
            "log.flush.start.offset.checkpoint.interval.ms": "500",
        }
        if self.standalone:
            voters = props.pop("controller.quorum.voters")
            props["controller.quorum.bootstrap.servers"] = voters.split("@", 1)[1]
        props.update(self.overrides)
        return props

    def add_sasl_listener(self, settings: dict[str, str]) -> str:
        """A SASL_PLAINTEXT listener for clients beside the PLAINTEXT one broker and controller
        use (its anonymous principal a super user, besides those ``settings`` name), with
        ``settings`` (mechanisms, JAAS, authorizer ...); its bootstrap address."""
        port = free_port()
        props = self.properties()
        supers = ";".join(filter(None, [settings.get("super.users", ""), "User:ANONYMOUS"]))
        self.overrides.update(
            {
                **settings,
                "listeners": f"{props['listeners']},SASL_PLAINTEXT://127.0.0.1:{port}",
                "advertised.listeners": f"{props['advertised.listeners']},"
                f"SASL_PLAINTEXT://127.0.0.1:{port}",
                "listener.security.protocol.map": f"{props['listener.security.protocol.map']},"
                "SASL_PLAINTEXT:SASL_PLAINTEXT",
                "super.users": supers,
            }
        )
        return f"127.0.0.1:{port}"

    def format(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        lines = [f"{k}={v}" for k, v in self.properties().items()]
        self.config.write_text("\n".join(lines) + "\n")
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        args = ("format", f"--cluster-id={cid}", f"--config={self.config}")
        args += ("--standalone",) if self.standalone else ()
        java(self.version, "kafka.tools.StorageTool", *args)

    def start(self, timeout: float = 120) -> KafkaBroker:
        if self._proc is not None:  # `with broker.start():` would otherwise leak a broker
            raise AssertionError(f"Kafka {self.version} under {self.root} is already running")
        if not self.config.exists():
            self.format()
        cp = classpath(self.version)
        cmd = ["java", *JVM_FLAGS, *BROKER_LOG, "-cp", cp, "kafka.Kafka", str(self.config)]
        out = self.output.open("ab")
        seen = out.tell()  # a restart appends: only this run's lines count
        self._proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        out.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._proc = None  # gone: it may be started again
                raise AssertionError(f"Kafka {self.version} died at start:\n{self.tail()}")
            if self._listening() and b"Kafka Server started" in self.output.read_bytes()[seen:]:
                return self
            time.sleep(0.2)
        self.kill()
        raise AssertionError(f"Kafka {self.version} did not start in {timeout}s:\n{self.tail()}")

    def _listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def tail(self, n: int = 6000) -> str:
        return self.output.read_bytes()[-n:].decode(errors="replace")

    def stop(self, timeout: float = 120) -> None:
        """SIGTERM: a controlled shutdown that writes the clean-shutdown marker."""
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
            raise AssertionError(f"Kafka {self.version} ignored SIGTERM:\n{self.tail()}") from None
        finally:
            self._proc = None

    def kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.stop()
        else:
            self.kill()

    def tool(self, main: str, *args: str, timeout: float = 180) -> str:
        return java(self.version, main, *args, timeout=timeout)


if __name__ == "__main__":  # `make kafka-oracle`: fetch every pinned version before the tests
    for v in KAFKA_VERSIONS:
        print(f"Apache Kafka {v}: {len(classpath(v).split(os.pathsep))} jars resolved")
    print(f"schemas from {sources_jar(KAFKA_VERSIONS[-1], 'kafka-storage').name}")
    import pyspark

    from spark_connector import connector_version

    print(
        f"Spark's Kafka connector {connector_version()} for PySpark {pyspark.__version__}"
        " (fetched by spark.jars.packages when a Spark session starts)"
    )

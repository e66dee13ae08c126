"""Topics written by a real Apache Kafka broker, with a record of what its clients were told.

Why: the oracle tests compare kafkalog's reading of a broker's files with what the broker
acknowledged and answered while it ran (ListOffsets, DescribeProducers, topic IDs). Everything
the comparison needs is captured here, once per Kafka version, then the broker is stopped.
What it refuses to do: guess. Every expected value was told to a client by the broker.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    OffsetSpec,
)

from kafka_oracle import JVM_FLAGS, TOOL_LOG, KafkaBroker, classpath, java
from spark_connector import ConnectorReads

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
BASE_TS = 1_700_000_000_000


@dataclass(frozen=True)
class Acked:
    """One record as the broker acknowledged it to the producer."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass
class BrokerWritten:
    version: str
    data_dir: Path
    acked: dict[str, list[Acked]] = field(default_factory=dict)
    aborted_offsets: dict[str, set[int]] = field(default_factory=dict)
    aborted_first_offsets: dict[str, list[int]] = field(default_factory=dict)
    topic_ids: dict[str, str] = field(default_factory=dict)
    # topic -> {"earliest", "latest", "latest_committed", "max_timestamp", ("ts", t)} -> offset
    list_offsets: dict[str, dict[object, tuple[int, int]]] = field(default_factory=dict)
    describe_producers: dict[str, str] = field(default_factory=dict)
    console_lines: list[str] = field(default_factory=list)
    perf_records: int = 0
    # Spark's own Kafka connector's answers to tests/spark_connector.py's queries, and its version
    connector: dict[str, object] = field(default_factory=dict)


def _collector(acked: list[Acked], headers: list):  # type: ignore[no-untyped-def]
    """A delivery callback; librdkafka does not hand the headers back, so they come from the
    record as it was sent."""

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            raise KafkaException(err)
        hdrs = tuple((k, v) for k, v in headers)
        acked.append(Acked(msg.offset(), msg.timestamp()[1], msg.key(), msg.value(), hdrs))

    return on_delivery


def _produce(
    bootstrap: str, topic: str, rows: list[tuple[bytes | None, bytes | None, list, int]], **conf
) -> list[Acked]:
    acked: list[Acked] = []
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 4096, **conf}
    producer = Producer(conf)
    for key, value, headers, ts in rows:
        cb = _collector(acked, headers)
        producer.produce(topic, value=value, key=key, headers=headers, timestamp=ts, on_delivery=cb)
    assert producer.flush(60) == 0
    acked.sort(key=lambda a: a.offset)
    return acked


def _rows(n: int, start: int, ts0: int) -> list[tuple[bytes | None, bytes | None, list, int]]:
    rows: list[tuple[bytes | None, bytes | None, list, int]] = []
    for i in range(start, start + n):
        key = None if i % 7 == 0 else f"key-{i % 13}".encode()
        value = None if i % 11 == 0 else (f"value-{i}-" + "x" * (i % 50)).encode()
        headers = [] if i % 3 else [("h1", f"v{i}".encode()), ("empty", b""), ("nul", None)]
        rows.append((key, value, headers, ts0 + i * 10))
    return rows


def _create(admin: AdminClient, topic: str, version: str = "", **config: str) -> None:
    if version.startswith("4.") and "segment.bytes" in config:
        # Kafka 4.0 set segment.bytes' minimum to 1 MiB (KIP-1030); its tests use this key.
        config["internal.segment.bytes"] = config.pop("segment.bytes")
    futures = admin.create_topics([NewTopic(topic, 1, 1, config=config)], operation_timeout=30)
    for f in futures.values():
        f.result(60)


def _wait(predicate, what: str, timeout: float = 90) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def _earliest(admin: AdminClient, topic: str) -> int:
    tp = TopicPartition(topic, 0)
    return admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(30).offset


def write_topics(version: str, root: Path) -> BrokerWritten:
    # Time retention off: the records carry fixed timestamps from 2023.
    broker = KafkaBroker(version, root / "broker", {"log.retention.ms": "-1"})
    out = BrokerWritten(version, broker.log_dir)
    with broker:
        connector = ConnectorReads(broker.bootstrap, root / "connector.pickle")
        try:
            _write(broker, out)
            out.connector = connector.results()
        finally:
            connector.kill()
    return out


def _write(broker: KafkaBroker, out: BrokerWritten) -> None:
    version, bs = broker.version, broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    # One topic per codec: keys, null keys and values, headers, explicit timestamps.
    for codec in CODECS:
        topic = f"codec-{codec}"
        _create(admin, topic, version, **{"segment.bytes": "16384"})
        rows = _rows(600, 0, BASE_TS)
        out.acked[topic] = _produce(bs, topic, rows, **{"compression.type": codec})
    # Idempotent producer and transactions, committed and aborted, interleaved.
    _create(admin, "txn")
    out.acked["txn"], aborted = _transactions(bs)
    out.aborted_offsets["txn"] = set().union(*aborted)
    out.aborted_first_offsets["txn"] = [min(t) for t in aborted]
    # Retention moves the log start: small segments, small retention.bytes.
    _create(admin, "retained", version, **{"segment.bytes": "2048", "retention.bytes": "4096"})
    out.acked["retained"] = _produce(
        bs, "retained", _rows(400, 0, BASE_TS), acks="all", **{"batch.size": 1000}
    )
    _wait(lambda: _earliest(admin, "retained") > 0, "retention to move the log start")
    # A compacted topic the broker's cleaner has cleaned.
    _compacted(bs, admin, out)
    # Kafka's own console and perf producers.
    _create(admin, "console")
    out.console_lines = [f"h{i}:{i},hh:x\tk{i % 4}\tline {i}" for i in range(50)]
    _console_produce(broker, out.console_lines)
    _create(admin, "perf", version, **{"segment.bytes": "65536"})
    out.perf_records = 3000
    broker.tool(
        "org.apache.kafka.tools.ProducerPerformance", "--topic", "perf",
        "--num-records", str(out.perf_records), "--record-size", "100",
        "--throughput", "-1", "--producer-props", f"bootstrap.servers={bs}",
        "compression.type=lz4", "acks=all", "linger.ms=5",
    )  # fmt: skip
    _consume_group(bs, "codec-none")
    if not version.startswith("3."):
        _share_group(broker, admin)
    _answers(broker, admin, out)


def _transactions(bs: str) -> tuple[list[Acked], list[set[int]]]:
    """Interleaved: an idempotent producer and a transactional one that aborts every third
    transaction. Returns what was acknowledged and the offsets of each aborted transaction."""
    acked: list[Acked] = []
    aborted: list[set[int]] = []
    txn = Producer({"bootstrap.servers": bs, "transactional.id": "oracle-txn", "linger.ms": 5})
    idem = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 5})
    txn.init_transactions(30)
    for round_ in range(6):
        txn.begin_transaction()
        mine: list[Acked] = []
        for key, value, headers, ts in _rows(40, round_ * 40, BASE_TS):
            txn.produce("txn", value=value, key=key, headers=headers, timestamp=ts,
                        on_delivery=_collector(mine, headers))  # fmt: skip
        for key, value, headers, ts in _rows(10, 1000 + round_ * 10, BASE_TS):
            idem.produce("txn", value=value, key=key, headers=headers, timestamp=ts,
                         on_delivery=_collector(acked, headers))  # fmt: skip
        idem.flush(30)
        txn.flush(30)
        if round_ % 3 == 1:
            txn.abort_transaction(30)
            aborted.append({a.offset for a in mine})
        else:
            txn.commit_transaction(30)
        acked.extend(mine)
    assert idem.flush(30) == 0
    acked.sort(key=lambda a: a.offset)
    return acked, aborted


def _compacted(bs: str, admin: AdminClient, out: BrokerWritten) -> None:
    _create(
        admin,
        "compacted",
        **{
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
            "min.compaction.lag.ms": "0",
        },
    )
    acked: list[Acked] = []
    for round_ in range(5):
        rows = [
            (f"k{i % 20}".encode(), None if (i + round_) % 9 == 0 else f"r{round_}-{i}".encode(),
             [], BASE_TS + round_ * 1000 + i)
            for i in range(60)
        ]  # fmt: skip
        acked += _produce(bs, "compacted", rows)
        time.sleep(0.3)  # segment.ms: the next append rolls
    acked += _produce(bs, "compacted", [(b"last", b"roll", [], BASE_TS + 9000)])
    out.acked["compacted"] = acked
    checkpoint = out.data_dir / "cleaner-offset-checkpoint"

    def cleaned() -> bool:
        text = checkpoint.read_text() if checkpoint.exists() else ""
        return any(line.startswith("compacted 0 ") and line.split()[2] != "0"
                   for line in text.splitlines())  # fmt: skip

    _wait(cleaned, "the broker's cleaner to clean 'compacted'")


def _console_produce(broker: KafkaBroker, lines: list[str]) -> None:
    main = (
        "kafka.tools.ConsoleProducer"
        if broker.version.startswith("3.")
        else "org.apache.kafka.tools.ConsoleProducer"
    )
    cmd = [
        "java", *JVM_FLAGS, *TOOL_LOG, "-cp", classpath(broker.version), main,
        "--bootstrap-server", broker.bootstrap, "--topic", "console",
        "--property", "parse.key=true", "--property", "parse.headers=true",
        "--producer-property", "acks=all",
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, input="\n".join(lines) + "\n", text=True, capture_output=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr


def _consume_group(bs: str, topic: str) -> None:
    """Fill ``__consumer_offsets``: offset commits of a group without members, and a classic
    consumer group whose member joins (GroupMetadata with its subscription and assignment),
    consumes, commits and leaves (GroupMetadata of the empty group)."""
    consumer = Consumer({"bootstrap.servers": bs, "group.id": "oracle-group"})
    for offset in (10, 100):
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    consumer.close()
    member = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": "oracle-members",
            "client.id": "oracle-member",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    member.subscribe([topic])
    deadline = time.monotonic() + 60
    while member.poll(0.5) is None:
        assert time.monotonic() < deadline, "the group member got no records"
    member.commit(asynchronous=False)
    member.close()


def _share_group(broker: KafkaBroker, admin: AdminClient) -> None:
    """Fill ``__share_group_state`` and a share group's records in ``__consumer_offsets``
    (Kafka 4's share groups, on by default from 4.2): Kafka's KafkaShareConsumer takes
    twelve records of topic "shared", releasing three once (each delivered again, then
    accepted) and rejecting two, committing its acknowledgements as it goes."""
    _create(admin, "shared")
    values = [b"s%d%s" % (i, b"r" if i % 4 == 3 else b"x" if i % 5 == 4 else b"")
              for i in range(12)]  # fmt: skip
    _produce(broker.bootstrap, "shared", [(None, v, [], BASE_TS + i) for i, v in enumerate(values)])
    program = str(Path(__file__).parent.parent / "interop" / "ShareConsumer.java")
    out = java(broker.version, program, broker.bootstrap, "oracle-share", "shared", "12")
    assert out.count(" release") == 3 and out.count(" reject") == 2, out


def list_offsets(
    admin: AdminClient, topic: str, timestamps: tuple[int, ...]
) -> dict[object, tuple[int, int]]:
    """The broker's ListOffsets answers for partition 0: (offset, timestamp) by spec name."""
    tp = TopicPartition(topic, 0)
    specs: dict[object, OffsetSpec] = {
        "earliest": OffsetSpec.earliest(),
        "latest": OffsetSpec.latest(),
        "max_timestamp": OffsetSpec.max_timestamp(),
        **{("ts", t): OffsetSpec.for_timestamp(t) for t in timestamps},
    }
    answers: dict[object, tuple[int, int]] = {}
    for name, spec in specs.items():
        info = admin.list_offsets({tp: spec})[tp].result(30)
        answers[name] = (info.offset, info.timestamp)
    committed = admin.list_offsets(
        {tp: OffsetSpec.latest()}, isolation_level=IsolationLevel.READ_COMMITTED
    )[tp].result(30)
    answers["latest_committed"] = (committed.offset, committed.timestamp)
    return answers


def _answers(broker: KafkaBroker, admin: AdminClient, out: BrokerWritten) -> None:
    """What the broker says about each topic, to check kafkalog's reading against."""
    topics = [*out.acked, "console", "perf"]
    described = admin.describe_topics(TopicCollection(topics))
    for topic, fut in described.items():
        out.topic_ids[topic] = str(fut.result(30).topic_id)
    for topic in topics:
        timestamps = (BASE_TS - 1, BASE_TS, BASE_TS + 1234, BASE_TS + 5995, BASE_TS + 10**9)
        answers = list_offsets(admin, topic, timestamps)
        out.list_offsets[topic] = answers
    out.describe_producers["txn"] = broker.tool(
        "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", broker.bootstrap,
        "describe-producers", "--topic", "txn", "--partition", "0",
    )  # fmt: skip


def kafka_uuid(text: str) -> str:
    """confluent-kafka prints a topic ID in standard base64; Kafka's Uuid uses the URL-safe
    alphabet without padding (org.apache.kafka.common.Uuid#toString)."""
    import base64

    return base64.urlsafe_b64encode(base64.b64decode(text + "==")).decode().rstrip("=")

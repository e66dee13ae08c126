"""Files kafkalog wrote, served by a real Apache Kafka broker: it must read exactly them.

The broker creates the topics (a KRaft broker deletes partition directories whose topic ID its
metadata does not know), stops; kafkalog writes the partitions under the broker's topic IDs
(compressed batches, transactions with commits and aborts, a topic compacted by kafkalog's
cleaner, several segments, producer snapshots, checkpoints); the broker starts on the same
directory, and consumers (Kafka's console consumer on the transactions, librdkafka on the rest)
and ListOffsets must return what kafkalog wrote. The
same after a kafkalog writer is killed with SIGKILL: the broker's recovery and kafkalog's must
agree on what survived.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka")

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafka_oracle import KafkaBroker
from kafka_scenarios import kafka_uuid, list_offsets
from kafkalog import (
    IsolationLevel,
    Log,
    LogManager,
    ProducerFields,
    Record,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SEGMENT_BYTES = 8192
TOPICS = {
    "k-none": {},
    "k-lz4": {},
    "k-zstd": {},
    "k-txn": {},
    "k-compacted": {"cleanup.policy": "compact"},
}
BASE_TS = 1_700_000_000_000
RECOVERY_LOG = re.compile(
    r"[Rr]ecovering (unflushed )?segment|[Tt]runcating|Found invalid|[Cc]orrupt|"
    r"[Rr]ebuilding index|[Dd]eleting (index|segment)"
)
# LogLoader loads the newest producer snapshot and replays the log after it; from the log end
# offset, nothing is replayed
REPLAY_LOG = re.compile(r"partition=(k-[\w-]+)-0,.*rebuilding producer state from offset (\d+)")


def records(n: int, start: int = 0, keys: int = 17, keyless: bool = True) -> list[Record]:
    return [
        Record(
            key=None if keyless and i % 9 == 0 else f"key-{i % keys}".encode(),
            value=None if i % 13 == 0 else f"value-{i}".encode() * (1 + i % 4),
            timestamp=BASE_TS + i * 10,
            headers=[] if i % 2 else [("h", f"{i}".encode()), ("empty", b"")],
        )
        for i in range(start, start + n)
    ]


def create_on_broker(broker: KafkaBroker) -> dict[str, str]:
    """Create the topics through the broker; return their topic IDs in Kafka's form."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics(
        [NewTopic(t, 1, 1, config=dict(cfg)) for t, cfg in TOPICS.items()], operation_timeout=30
    )
    for f in futures.values():
        f.result(60)
    described = admin.describe_topics(TopicCollection(list(TOPICS)))
    return {t: kafka_uuid(str(f.result(30).topic_id)) for t, f in described.items()}


def write_with_kafkalog(data_dir: Path, topic_ids: dict[str, str]) -> None:
    for topic in TOPICS:
        shutil.rmtree(data_dir / f"{topic}-0")  # the broker's empty partition
    config = {"internal.segment.bytes": str(SEGMENT_BYTES)}
    with LogManager(data_dir) as manager:
        for topic, overrides in TOPICS.items():
            manager.create_topic(topic, 1, {**config, **overrides}, topic_id=topic_ids[topic])
        for i in range(0, 400, 50):
            manager.get_log("k-none").append(records(50, i))
            manager.get_log("k-lz4").append(records(50, i), compression="lz4")
            manager.get_log("k-zstd").append(records(50, i), compression="zstd")
        txn = manager.get_log("k-txn")
        seq = {7: 0}
        for round_ in range(6):
            idem = ProducerFields(9, 0, round_ * 5)
            txn.append(records(5, 1000 + round_ * 5), producer=idem)
            fields = ProducerFields(7, 0, seq[7], is_transactional=True)
            txn.append(records(20, round_ * 20), producer=fields)
            seq[7] += 20
            txn.append_end_txn_marker(7, 0, "ABORT" if round_ % 3 == 1 else "COMMIT")
        compacted = manager.get_log("k-compacted")
        for round_ in range(6):
            compacted.append(records(60, round_ * 60, 10, False), compression="gzip")
        compacted.roll()
        assert manager.run_cleaner(), "kafkalog's cleaner compacts k-compacted"


def expected(log_dir: Path, topic: str, isolation: IsolationLevel) -> list[tuple]:
    with LogManager(log_dir) as manager:
        log = manager.get_log(topic)
        out = []
        offset = log.log_start_offset
        end = log.last_stable_offset if isolation is IsolationLevel.READ_COMMITTED else None
        limit = end if end is not None else log.log_end_offset
        while offset < limit:
            info = log.read(offset, 1 << 20, isolation=isolation)
            assert info.records is not None
            from kafkalog.records.scanner import BatchScanner

            batches = list(BatchScanner(info.records.read()))
            recs = log.read_records(offset, 1 << 20, isolation=isolation)
            out += [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in recs]
            offset = batches[-1].last_offset + 1
        return out


def consume(broker: KafkaBroker, topic: str, isolation: str, count: int) -> list[tuple]:
    """Kafka's own console consumer, every field printed, parsed back."""
    props = ["print.timestamp", "print.offset", "print.key", "print.headers", "print.value"]
    args = ["--bootstrap-server", broker.bootstrap, "--topic", topic, "--from-beginning",
            "--max-messages", str(count), "--timeout-ms", "20000",
            "--isolation-level", isolation]  # fmt: skip
    # 4.0 renamed --property to --formatter-property and warns about the old one on stdout
    flag = "--property" if broker.version.startswith("3.") else "--formatter-property"
    formatter = ["headers.separator=|", "null.literal=<null>"]
    for p in formatter + [f"{p}=true" for p in props]:
        args += [flag, p]
    if count == 0:
        return []
    out = broker.tool("org.apache.kafka.tools.consumer.ConsoleConsumer", *args, timeout=120)
    rows = []
    for line in out.splitlines():
        assert line.count("\t") == 4, line
        ts, off, headers, key, value = line.split("\t")
        hdrs: tuple = ()
        if headers != "NO_HEADERS":
            pairs = [h.split(":", 1) for h in headers.split("|")]  # key:value, key:<null>
            hdrs = tuple((k, None if v == "<null>" else v.encode()) for k, v in pairs)
        rows.append((
            int(off.removeprefix("Offset:")),
            int(ts.removeprefix("CreateTime:")),
            None if key == "<null>" else key.encode(),
            None if value == "<null>" else value.encode(),
            hdrs,
        ))  # fmt: skip
    return rows


def consume_rdkafka(broker: KafkaBroker, topic: str, isolation: str, count: int) -> list[tuple]:
    """``consume``'s rows, read by librdkafka with its CRC check on."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "oracle-check",
            "isolation.level": isolation,
            "check.crcs": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    rows: list[tuple] = []
    deadline = time.monotonic() + 60
    try:
        while len(rows) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            headers = tuple(message.headers() or ())
            rows.append(
                (message.offset(), message.timestamp()[1], message.key(), message.value(), headers)
            )
    finally:
        consumer.close()
    return rows


def broker_list_offsets(broker: KafkaBroker, topic: str) -> dict[object, tuple[int, int]]:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    return list_offsets(admin, topic, (BASE_TS + 1555,))


def kafkalog_list_offsets(log_dir: Path, topic: str) -> dict[object, tuple[int, int]]:
    with LogManager(log_dir) as manager:
        log = manager.get_log(topic)
        answers = {
            "earliest": log.list_offsets(-2),
            "latest": log.list_offsets(-1),
            "max_timestamp": log.list_offsets(-3),
            ("ts", BASE_TS + 1555): log.list_offsets(BASE_TS + 1555),
            "latest_committed": log.list_offsets(-1, IsolationLevel.READ_COMMITTED),
        }
    return {k: (v.offset, v.timestamp) for k, v in answers.items() if v is not None}


@pytest.fixture(params=["3.9.2", "4.3.1"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> KafkaBroker:
    from kafka_oracle import KAFKA_VERSIONS

    if request.param not in KAFKA_VERSIONS:
        pytest.skip(f"Kafka {request.param} is not pinned in interop/kafka-versions.txt")
    return KafkaBroker(request.param, tmp_path / "broker", {"log.retention.ms": "-1"})


def segment_bytes(data_dir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(data_dir)): p.read_bytes() for p in sorted(data_dir.glob("k-*/*.log"))
    }


def test_broker_serves_what_kafkalog_wrote(broker: KafkaBroker, tmp_path: Path) -> None:
    with broker:
        topic_ids = create_on_broker(broker)
    write_with_kafkalog(broker.log_dir, topic_ids)
    before = segment_bytes(broker.log_dir)
    assert sum(1 for name in before if name.startswith("k-none")) >= 3  # several segments
    snapshot = tmp_path / "kafkalog-copy"
    shutil.copytree(broker.log_dir, snapshot)
    want = {
        (t, iso): expected(snapshot, t, iso)
        for t in TOPICS
        for iso in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED)
    }
    want_offsets = {t: kafkalog_list_offsets(snapshot, t) for t in TOPICS}
    mark = broker.output.stat().st_size if broker.output.exists() else 0
    with broker:
        for topic in TOPICS:
            for iso, name in ((IsolationLevel.READ_UNCOMMITTED, "read_uncommitted"),
                              (IsolationLevel.READ_COMMITTED, "read_committed")):  # fmt: skip
                rows = want[(topic, iso)]
                # Kafka's Java consumer on the transactions, where the client drops what was
                # aborted; librdkafka (checking CRCs) on the rest, sparing eight JVM starts
                read = consume if topic == "k-txn" else consume_rdkafka
                assert read(broker, topic, name, len(rows)) == rows, (topic, name)
            assert broker_list_offsets(broker, topic) == want_offsets[topic], topic
    startup = broker.output.read_bytes()[mark:].decode(errors="replace")
    for line in startup.splitlines():
        if "k-" in line:
            # the UnifiedLog/LogLoader messages of a recovery, an index rebuild or a truncation
            assert not RECOVERY_LOG.search(line), line
            replay = REPLAY_LOG.search(line)
            if replay:
                assert int(replay[2]) == want_offsets[replay[1]]["latest"][0], line
    after = segment_bytes(broker.log_dir)
    assert {k: v for k, v in after.items() if k in before} == before  # nothing rewritten
    assert (
        read_topic_id(broker.log_dir / "k-txn-0") == topic_ids["k-txn"]
    )  # the broker kept the directory


def read_topic_id(partition: Path) -> str:
    from kafkalog.storage.partition_metadata import read_partition_metadata

    meta = read_partition_metadata(partition)
    assert meta is not None
    return meta.topic_id


WRITER = textwrap.dedent(
    """
    import sys
    from kafkalog import LogManager, Record
    manager = LogManager(sys.argv[1])
    log = manager.get_log("k-none")
    i = 0
    while True:
        log.append([Record(key=b"k%d" % i, value=b"v" * 200, timestamp=1700000000000 + i)])
        i += 1
        if i == 300:
            print("ready", flush=True)
    """
)


def test_broker_and_kafkalog_agree_after_a_killed_writer(
    broker: KafkaBroker, tmp_path: Path
) -> None:
    with broker:
        topic_ids = create_on_broker(broker)
    write_with_kafkalog(broker.log_dir, topic_ids)
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(broker.log_dir)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.stdout is not None and child.stdout.readline().strip() == b"ready"
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert not (broker.log_dir / ".kafka_cleanshutdown").exists()
    copy = tmp_path / "kafkalog-recovers"
    shutil.copytree(broker.log_dir, copy)
    with Log.open(copy / "k-none-0") as log:  # kafkalog's recovery, on its own copy
        survived = log.log_end_offset
    want = expected(copy, "k-none", IsolationLevel.READ_UNCOMMITTED)
    assert len(want) == survived >= 400 + 300
    with broker:
        assert broker_list_offsets(broker, "k-none")["latest"][0] == survived
        assert consume(broker, "k-none", "read_uncommitted", len(want)) == want

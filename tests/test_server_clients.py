"""``kafkalog serve`` against clients no one here wrote: kafka-python, aiokafka, confluent-kafka
(librdkafka) and Kafka's own Java console tools and kafka-topics. Each scenario checks what the
clients see and what kafkalog's files hold afterwards (the records, and ``kafkalog verify``)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import kafkalog
from kafka_oracle import JVM_FLAGS, KAFKA_VERSIONS, TOOL_LOG, classpath
from kafkalog import LogManager
from kafkalog.cli.main import cli
from kafkalog.server import serve

pytestmark = [pytest.mark.one_codec, pytest.mark.timeout(300)]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
N = 40


def expected(codec: str) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]]:
    rows: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]] = []
    for i in range(N):
        key = None if i % 7 == 0 else f"k{i}".encode()
        value = None if i % 11 == 5 else f"{codec}-{i}".encode() * (i % 5 + 1)
        headers = [("h", str(i).encode())] if i % 3 == 0 else []
        rows.append((key, value, headers))
    return rows


def stored(
    log_dir: Path, topic: str
) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]]:
    """What the files hold, read with the library after the server stopped."""
    with LogManager([log_dir]) as manager:
        log = manager.get_log(topic, 0)
        return [
            (r.key, r.value, [(k, bytes(v or b"")) for k, v in r.headers])
            for r in log.read_records(0, 1 << 24)
        ]


def verified(log_dir: Path) -> None:
    result = CliRunner().invoke(cli, ["verify", "--log-dirs", str(log_dir)])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_produces_and_consumes_every_codec(tmp_path: Path, codec: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    rows = expected(codec)
    with serve(tmp_path) as server:
        producer = KafkaProducer(
            bootstrap_servers=server.bootstrap_servers,
            compression_type=None if codec == "none" else codec,
            acks="all",
            enable_idempotence=True,
        )
        for key, value, headers in rows:
            producer.send("kp", key=key, value=value, headers=headers)
        producer.flush()
        producer.close()
        consumer = KafkaConsumer(
            bootstrap_servers=server.bootstrap_servers,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            consumer_timeout_ms=5000,
        )
        consumer.assign([TopicPartition("kp", 0)])
        got = []
        for m in consumer:
            got.append((m.key, m.value, [(k, v) for k, v in m.headers]))
            if len(got) == len(rows):
                break
        consumer.close()
    assert got == rows
    assert stored(tmp_path, "kp") == rows
    verified(tmp_path)


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4", "zstd"])
def test_aiokafka_produces_and_consumes(tmp_path: Path, codec: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    rows = expected(codec)

    async def run(
        bootstrap: str,
    ) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]]:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            enable_idempotence=True,
            compression_type=None if codec == "none" else codec,
        )
        await producer.start()
        try:
            sent = [await producer.send("aio", key=k, value=v, headers=h) for k, v, h in rows]
            await asyncio.gather(*sent)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
        )
        await consumer.start()
        got: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]] = []
        try:
            consumer.assign([TopicPartition("aio", 0)])
            deadline = time.monotonic() + 20
            while len(got) < len(rows) and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=1000)
                for messages in batches.values():
                    got.extend((m.key, m.value, list(m.headers)) for m in messages)
        finally:
            await consumer.stop()
        return got

    with serve(tmp_path) as server:
        got = asyncio.run(run(server.bootstrap_servers))
    assert got == rows
    assert stored(tmp_path, "aio") == rows
    verified(tmp_path)


@pytest.mark.parametrize("codec", CODECS)
def test_librdkafka_produces_and_consumes(tmp_path: Path, codec: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    rows = expected(codec)
    with serve(tmp_path) as server:
        producer = Producer(
            {
                "bootstrap.servers": server.bootstrap_servers,
                "enable.idempotence": True,
                "compression.type": codec,
                "linger.ms": 5,
            }
        )
        errors: list[object] = []
        for key, value, headers in rows:
            producer.produce(
                "rd",
                key=key,
                value=value,
                headers=headers or None,
                on_delivery=lambda err, _msg: errors.append(err) if err else None,
            )
        assert producer.flush(30) == 0 and not errors
        consumer = Consumer(
            {
                "bootstrap.servers": server.bootstrap_servers,
                "group.id": "unused-no-subscribe",
                "enable.auto.commit": False,
            }
        )
        consumer.assign([TopicPartition("rd", 0, 0)])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < len(rows) and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append((message.key(), message.value(), list(message.headers() or [])))
        consumer.close()
    assert got == rows
    assert stored(tmp_path, "rd") == rows
    verified(tmp_path)


def test_a_waiting_fetch_is_answered_when_a_record_arrives(tmp_path: Path) -> None:
    """Long polling: a consumer waiting with fetch.wait.max.ms=10000 gets a record produced
    while it waits within about a second, not after the wait (Kafka's DelayedFetch)."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    with kafkalog.serve(tmp_path, port=0) as server:  # the README's form
        consumer = KafkaConsumer(
            bootstrap_servers=server.bootstrap_servers,
            fetch_max_wait_ms=10_000,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        producer = KafkaProducer(bootstrap_servers=server.bootstrap_servers)
        producer.send("poll", b"first").get(10)
        consumer.assign([TopicPartition("poll", 0)])
        assert [
            m.value for m in consumer.poll(5000, max_records=1).get(TopicPartition("poll", 0), [])
        ] == [b"first"]
        consumer.poll(500)  # the next fetch is now waiting on the broker

        def later() -> None:
            time.sleep(1.0)
            producer.send("poll", b"second").get(10)

        sent_at = time.monotonic()
        threading.Thread(target=later).start()
        got: list[bytes] = []
        while not got and time.monotonic() - sent_at < 15:
            for messages in consumer.poll(200).values():
                got.extend(m.value for m in messages)
        waited = time.monotonic() - sent_at
        producer.close()
        consumer.close()
    assert got == [b"second"]
    assert waited < 5, f"the waiting fetch was answered after {waited:.1f} s"


def test_a_restarted_server_serves_the_same_records_and_new_producer_ids(tmp_path: Path) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    def produce(values: list[bytes]) -> int:
        with serve(tmp_path) as server:
            producer = KafkaProducer(
                bootstrap_servers=server.bootstrap_servers, enable_idempotence=True
            )
            for v in values:
                producer.send("again", v).get(10)
            producer.close()
        with LogManager([tmp_path]) as manager:
            return max(
                b.producer_id
                for b in manager.get_log("again", 0).read(0, 1 << 20).records.records().batches()
            )

    first = produce([b"a", b"b"])
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    second = produce([b"c"])
    assert second != first
    with serve(tmp_path) as server:
        consumer = KafkaConsumer(
            bootstrap_servers=server.bootstrap_servers,
            auto_offset_reset="earliest",
            consumer_timeout_ms=3000,
        )
        consumer.assign([TopicPartition("again", 0)])
        assert [m.value for m in consumer] == [b"a", b"b", b"c"]
        consumer.close()


def test_a_new_producer_never_gets_an_id_another_writer_left_in_the_files(tmp_path: Path) -> None:
    """Producer ids in the partitions' producer state, from a Kafka broker (low ids) or from
    an earlier kafkalog whose block file is not there (a copy of the partitions), are never
    handed out again: given one, a new producer's first batch (epoch 0, sequence 0) would be
    taken for a retry of the old one's and dropped, though acknowledged."""
    from kafka import KafkaProducer

    from kafkalog.log.producer_batches import ProducerFields
    from kafkalog.server.producer_ids import BLOCK_SIZE, FIRST_ID

    with LogManager([tmp_path]) as manager:
        manager.create_topic("inherited", 1)
        log = manager.get_log("inherited", 0)
        for pid in (0, FIRST_ID + 5):  # what two earlier producers left, at epoch 0
            log.append([kafkalog.Record(b"old-%d" % pid)], producer=ProducerFields(pid, 0, 0))
    with serve(tmp_path) as server:
        producer = KafkaProducer(
            bootstrap_servers=server.bootstrap_servers, enable_idempotence=True
        )
        assert producer.send("inherited", b"new").get(10).offset == 2
        producer.close()
    values = [v for _, v, _ in stored(tmp_path, "inherited")]
    assert values == [b"old-0", b"old-%d" % (FIRST_ID + 5), b"new"]
    with LogManager([tmp_path]) as manager:
        batches = manager.get_log("inherited", 0).read(0, 1 << 20).records.records().batches()
        pids = [b.producer_id for b in batches]
        assert pids == [0, FIRST_ID + 5, FIRST_ID + BLOCK_SIZE]  # the block after the last used


# --- Kafka's own Java tools --------------------------------------------------------------------


def _tool(version: str, main: str, *args: str, stdin: str | None = None) -> str:
    cmd = ["java", *JVM_FLAGS, *TOOL_LOG, "-cp", classpath(version), main, *args]
    proc = subprocess.run(
        cmd, input=stdin, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, f"{main} {args}: {proc.stdout}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _tools_package(version: str) -> tuple[str, str, str]:
    """(console producer, console consumer, kafka-topics): the producer moved from core to
    the tools module in 4.0 (KAFKA-14585); the other two were in tools by 3.9."""
    producer = (
        "kafka.tools.ConsoleProducer"
        if version.startswith("3.")
        else "org.apache.kafka.tools.ConsoleProducer"
    )
    return (
        producer,
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "org.apache.kafka.tools.TopicCommand",
    )


@pytest.mark.parametrize("version", KAFKA_VERSIONS)
def test_kafkas_console_tools_and_kafka_topics(tmp_path: Path, version: str) -> None:
    producer_main, consumer_main, topics_main = _tools_package(version)
    # 4.x renamed --property (KIP-1147): --reader-property and --formatter-property
    old = version.startswith("3.")
    reader_flag = "--property" if old else "--reader-property"
    formatter_flag = "--property" if old else "--formatter-property"
    with serve(tmp_path) as server:
        bs = server.bootstrap_servers
        out = _tool(
            version,
            topics_main,
            "--bootstrap-server",
            bs,
            "--create",
            "--topic",
            "jt",
            "--partitions",
            "2",
            "--config",
            "cleanup.policy=compact",
        )
        assert "Created topic jt." in out
        assert _tool(version, topics_main, "--bootstrap-server", bs, "--list").split() == ["jt"]
        described = _tool(
            version, topics_main, "--bootstrap-server", bs, "--describe", "--topic", "jt"
        )
        assert "PartitionCount: 2" in described and "ReplicationFactor: 1" in described
        assert "Configs: cleanup.policy=compact" in described
        assert "Partition: 1\tLeader: 1\tReplicas: 1\tIsr: 1" in described
        _tool(
            version,
            topics_main,
            "--bootstrap-server",
            bs,
            "--alter",
            "--topic",
            "jt",
            "--partitions",
            "3",
        )
        grown = _tool(version, topics_main, "--bootstrap-server", bs, "--describe", "--topic", "jt")
        assert "PartitionCount: 3" in grown and "Partition: 2\tLeader: 1" in grown
        assert grown.split()[3] == described.split()[3]  # the same TopicId
        lines = [f"k{i}\tvalue {i} é" for i in range(20)]
        _tool(
            version,
            producer_main,
            "--bootstrap-server",
            bs,
            "--topic",
            "jt",
            reader_flag,
            "parse.key=true",
            "--producer-property",
            "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner",
            stdin="\n".join(lines) + "\n",
        )
        consumed = []
        for partition in ("0", "1", "2"):
            consumed += _tool(
                version,
                consumer_main,
                "--bootstrap-server",
                bs,
                "--topic",
                "jt",
                "--partition",
                partition,
                "--offset",
                "earliest",
                "--timeout-ms",
                "5000",
                formatter_flag,
                "print.key=true",
            ).splitlines()
        _tool(version, topics_main, "--bootstrap-server", bs, "--delete", "--topic", "jt")
        assert _tool(version, topics_main, "--bootstrap-server", bs, "--list").split() == []
    assert sorted(consumed) == sorted(lines)
    verified(tmp_path)


@pytest.mark.parametrize("version", KAFKA_VERSIONS)
def test_kafkas_admin_tools_delete_records_log_dirs_offsets_and_cluster_id(
    tmp_path: Path, version: str
) -> None:
    from kafka import KafkaProducer

    def tool(main: str, *args: str) -> str:
        return _tool(version, f"org.apache.kafka.tools.{main}", *args, "--bootstrap-server", bs)

    with serve(tmp_path) as server:
        bs = server.bootstrap_servers
        producer = KafkaProducer(bootstrap_servers=bs)
        for i in range(10):
            producer.send("dr", b"%d" % i)
        producer.close()
        offsets_file = tmp_path / "delete.json"
        offsets_file.write_text(
            '{"partitions":[{"topic":"dr","partition":0,"offset":4}],"version":1}'
        )
        deleted = tool("DeleteRecordsCommand", "--offset-json-file", str(offsets_file))
        assert "partition: dr-0\tlow_watermark: 4" in deleted
        assert tool("GetOffsetShell", "--topic", "dr", "--time", "-2").split() == ["dr:0:4"]
        assert tool("GetOffsetShell", "--topic", "dr", "--time", "-1").split() == ["dr:0:10"]
        described = json.loads(tool("LogDirsCommand", "--describe").splitlines()[-1])
        (log_dir,) = described["brokers"][0]["logDirs"]
        assert log_dir["logDir"] == str(tmp_path) and log_dir["error"] is None
        assert [p["partition"] for p in log_dir["partitions"]] == ["dr-0"]
        assert log_dir["partitions"][0]["size"] > 0
        assert tool("ClusterTool", "cluster-id").strip().startswith("Cluster ID: ")
    with LogManager([tmp_path]) as manager:
        assert manager.get_log("dr", 0).log_start_offset == 4  # durable, as Kafka's checkpoint


@pytest.mark.parametrize("version", KAFKA_VERSIONS)
def test_kafka_configs_alters_and_describes_topic_configs(tmp_path: Path, version: str) -> None:
    """``kafka-configs --alter --add-config/--delete-config`` (IncrementalAlterConfigs) and
    ``--describe``; the change is in kafkalog's files and in force on the open log."""

    def configs(*args: str) -> str:
        return _tool(
            version,
            "kafka.admin.ConfigCommand",
            "--bootstrap-server",
            bs,
            "--entity-type",
            "topics",
            "--entity-name",
            "cfg",
            *args,
        )

    with serve(tmp_path) as server:
        bs = server.bootstrap_servers
        server.manager.create_topic("cfg", 1, {"segment.ms": "600000"})
        configs("--alter", "--add-config", "retention.ms=1000,cleanup.policy=[compact,delete]")
        configs("--alter", "--delete-config", "segment.ms")
        described = configs("--describe")
        assert "retention.ms=1000" in described and "cleanup.policy=compact,delete" in described
        assert "segment.ms" not in described
        assert server.manager.get_log("cfg").config.retention_ms == 1000  # in force at once
        proc = subprocess.run(
            ["java", *JVM_FLAGS, *TOOL_LOG, "-cp", classpath(version), "kafka.admin.ConfigCommand",
             "--bootstrap-server", bs, "--entity-type", "topics", "--entity-name", "cfg",
             "--alter", "--add-config", "retention.ms=soon"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert proc.returncode != 0 and "retention.ms" in proc.stdout + proc.stderr
    with LogManager([tmp_path]) as manager:
        assert manager.topic_overrides("cfg") == {
            "retention.ms": "1000",
            "cleanup.policy": "compact,delete",
        }


def test_incremental_alter_configs_appends_and_subtracts_through_librdkafka(
    tmp_path: Path,
) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    def alter(*entries: ConfigEntry, name: str = "lists") -> None:
        resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=list(entries))
        (future,) = admin.incremental_alter_configs([resource]).values()
        future.result(30)

    with serve(tmp_path) as server:
        server.manager.create_topic("lists", 1)
        admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
        alter(
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)
        )
        assert server.manager.topic_overrides("lists") == {"cleanup.policy": "delete,compact"}
        alter(
            ConfigEntry(
                "cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT
            )
        )
        assert server.manager.get_log("lists").config.cleanup_policy == {"compact"}
        with pytest.raises(Exception, match="append is not allowed"):
            alter(ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.APPEND))
        with pytest.raises(Exception, match="UNKNOWN_TOPIC_OR_PART"):
            alter(
                ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.SET),
                name="nope",
            )

"""Transactions through ``kafkalog serve`` with clients no one here wrote: Kafka's Java client in
a consume-transform-produce loop (interop/TransactionalCopier.java, with aborts, and with the
server killed -9 in the middle), confluent-kafka (librdkafka), aiokafka, and Kafka's
``kafka-transactions.sh``. Each checks what read_committed readers see (the clients, kafkalog's
own reads and the Spark source), the group's committed offsets, and ``__transaction_state``
read by kafkalog's and Kafka's ``dump-log --transaction-log-decoder``."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kafka_oracle import (
    JVM_FLAGS,
    KAFKA_VERSIONS,
    ROOT,
    TOOL_LOG,
    classpath,
    dump_log_segments_class,
    free_port,
    java,
)
from kafkalog import LogManager, Record
from kafkalog.cli.main import cli
from kafkalog.coordinator.offsets_store import load_offsets
from kafkalog.coordinator.txn_store import TransactionMetadata, load_transactions
from kafkalog.log.producer_batches import ProducerFields
from kafkalog.records.committed import AbortedTransaction, committed_records
from kafkalog.server import serve
from kafkalog.types import OFFSETS_TOPIC, TRANSACTION_TOPIC, IsolationLevel
from server_helpers import start_serve_process

pytestmark = [pytest.mark.one_codec, pytest.mark.timeout(600)]

LATEST = KAFKA_VERSIONS[-1]
FAST = {"group.initial.rebalance.delay.ms": "0"}
PARTITIONS = 3


def _input(log_dir: Path, per_partition: int) -> None:
    with LogManager([log_dir]) as manager:
        manager.create_topic("in", PARTITIONS)
        manager.create_topic("out", PARTITIONS)
        for p in range(PARTITIONS):
            log = manager.get_log("in", p)
            log.append([Record(b"v%d-%d" % (p, i), b"k%d" % i) for i in range(per_partition)])


def _copier(
    bootstrap: str, count: int, abort_every: int, version: str = LATEST
) -> subprocess.Popen[str]:
    program = str(ROOT / "interop" / "TransactionalCopier.java")
    cmd = ["java", *JVM_FLAGS, *TOOL_LOG, "-cp", classpath(version), program, bootstrap,
           "in", "out", "copier", "copier-1", str(count), str(abort_every)]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _read(log_dir: Path, topic: str, isolation: IsolationLevel) -> dict[int, list[bytes]]:
    """Each partition's values as a reader at ``isolation`` sees them (kafkalog's own read,
    with the consumer's rule for a fetch's aborted transactions)."""
    out: dict[int, list[bytes]] = {}
    with LogManager([log_dir]) as manager:
        for p in range(PARTITIONS):
            info = manager.get_log(topic, p).read(0, 1 << 26, isolation=isolation)
            assert info.records is not None
            aborted = [AbortedTransaction(t.producer_id, t.first_offset)
                       for t in info.aborted_transactions or ()]  # fmt: skip
            records = committed_records(info.records.records().batches(), aborted)
            out[p] = [r.value for r in records if r.value is not None]
    return out


def _expected(per_partition: int) -> dict[int, list[bytes]]:
    return {p: [b"V%d-%d" % (p, i) for i in range(per_partition)] for p in range(PARTITIONS)}


def _committed_offsets(log_dir: Path) -> dict[tuple[str, int], int]:
    with LogManager([log_dir]) as manager:
        logs = {tp.partition: lg for tp, lg in manager.logs().items() if tp.topic == OFFSETS_TOPIC}
        committed = load_offsets(logs).committed
    return {tp: o.offset for tp, o in committed.get("copier", {}).items()}


def _transaction(log_dir: Path, transactional_id: str) -> TransactionMetadata:
    with LogManager([log_dir]) as manager:
        logs = [lg for tp, lg in manager.logs().items() if tp.topic == TRANSACTION_TOPIC]
        return load_transactions(logs)[transactional_id]


def _transaction_states(log_dir: Path) -> dict[str, str]:
    with LogManager([log_dir]) as manager:
        logs = [lg for tp, lg in manager.logs().items() if tp.topic == TRANSACTION_TOPIC]
        return {t: m.state_name for t, m in load_transactions(logs).items()}


@pytest.mark.parametrize("version", KAFKA_VERSIONS)
def test_java_consume_transform_produce_commits_each_record_once(
    tmp_path: Path, version: str
) -> None:
    """sendOffsetsToTransaction under read_committed, every third transaction aborted first:
    committed readers see each input record once, in order; the aborted copies are in the log
    (read_uncommitted) and the aborted offset commits never count. Kafka 4's client speaks
    transaction version 2 (the broker finalizes it): no AddPartitionsToTxn or AddOffsetsToTxn,
    and an epoch bump on every commit and abort; Kafka 3.9's speaks version 1, epoch fixed."""
    _input(tmp_path, 100)
    with serve(tmp_path, overrides=FAST) as server:
        copier = _copier(server.bootstrap_servers, 3 * 100, 3, version)
        out, err = copier.communicate(timeout=300)
        assert copier.returncode == 0, f"{out}\n{err[-3000:]}"
        assert "restarting" not in out, out
    assert _read(tmp_path, "out", IsolationLevel.READ_COMMITTED) == _expected(100)
    everything = _read(tmp_path, "out", IsolationLevel.READ_UNCOMMITTED)
    assert sum(map(len, everything.values())) > 300  # the aborted copies are there
    assert _committed_offsets(tmp_path) == {("in", p): 100 for p in range(PARTITIONS)}
    assert set(_transaction_states(tmp_path).values()) <= {"CompleteCommit", "Empty"}
    ended = sum(line.startswith(("committed", "aborted")) for line in out.splitlines())
    meta = _transaction(tmp_path, "copier-1")
    if int(version.split(".", maxsplit=1)[0]) >= 4:
        assert meta.client_transaction_version == 2
        assert meta.producer_epoch >= ended > 0  # one bump per end
    else:
        assert (meta.client_transaction_version, meta.producer_epoch) == (0, 0)
    _check_dump_log(tmp_path)


def _check_dump_log(log_dir: Path) -> None:
    """kafkalog's and Kafka's DumpLogSegments decode the coordinator's records alike."""
    segments = sorted(log_dir.glob(f"{TRANSACTION_TOPIC}-*/*.log"))
    segment = next(s for s in segments if s.stat().st_size > 0)
    ours = CliRunner().invoke(
        cli, ["dump-log", "--files", str(segment), "--transaction-log-decoder"]
    )
    assert ours.exit_code == 0, ours.output
    theirs = java(
        LATEST, dump_log_segments_class(LATEST), "--files", str(segment),
        "--transaction-log-decoder",
    )  # fmt: skip
    assert '"transactionalId":"copier-1"' in theirs
    assert '"transactionalId":"copier-1"' in ours.output
    mine = [line for line in ours.output.splitlines() if "payload" in line]
    kafka = [line for line in theirs.splitlines() if "payload" in line]
    assert mine and [m.split("payload")[1] for m in mine] == [k.split("payload")[1] for k in kafka]


def _start_cli_server(log_dir: Path, port: int) -> subprocess.Popen[str]:
    return start_serve_process(log_dir, port, {"group.initial.rebalance.delay.ms": "0"})


def test_kill_9_in_the_middle_of_transactions_commits_each_record_once(
    tmp_path: Path, spark: Any
) -> None:
    """The server killed -9 twice while Kafka 4.3.1's Java copier (transaction version 2)
    commits transactions (and aborts some), restarted on the same directory each time: once
    the copier finishes, every input record is in the output once for read_committed readers
    (kafkalog's reads and the Spark source agree), and the group's offsets are exactly what
    the committed transactions said."""
    per_partition = 400
    _input(tmp_path, per_partition)
    port = free_port()
    server = _start_cli_server(tmp_path, port)
    copier = _copier(f"127.0.0.1:{port}", PARTITIONS * per_partition, 4)
    lines: list[str] = []
    reader = threading.Thread(
        target=lambda: lines.extend(iter(copier.stdout.readline, "")),  # type: ignore[union-attr]
        daemon=True,
    )
    reader.start()
    try:
        for kill in (3, 9):
            deadline = time.monotonic() + 120
            while sum(line.startswith("committed") for line in lines) < kill:
                assert time.monotonic() < deadline, f"no progress: {lines}"
                assert copier.poll() is None, f"{lines}\n{copier.stderr.read()[-3000:]}"  # type: ignore[union-attr]
                time.sleep(0.05)
            os.kill(server.pid, signal.SIGKILL)
            committed_before_kill = sum(line.startswith("committed") for line in lines)
            server.wait(30)
            time.sleep(1)
            server = _start_cli_server(tmp_path, port)
        assert copier.wait(300) == 0, f"{lines}\n{copier.stderr.read()[-3000:]}"  # type: ignore[union-attr]
    finally:
        copier.kill()
        server.send_signal(signal.SIGTERM)
        server.wait(60)
    # A Java client may ride out a kill without an error: its requests are retried while the
    # server restarts, and the restarted coordinator reloads the open transaction from
    # __transaction_state. So what is demanded is that each kill came while the copier was
    # mid-run (checked before each kill above) and that it committed after the last restart.
    assert sum(line.startswith("committed") for line in lines) > committed_before_kill, lines
    expected = _expected(per_partition)
    assert _read(tmp_path, "out", IsolationLevel.READ_COMMITTED) == expected
    assert _committed_offsets(tmp_path) == {("in", p): per_partition for p in range(PARTITIONS)}
    # Kafka 4.3.1's client ran on transaction version 2 throughout: an epoch bump per end
    meta = _transaction(tmp_path, "copier-1")
    assert meta.client_transaction_version == 2 and meta.producer_epoch > kill
    rows = (
        spark.read.format("kafkalog")
        .option("path", str(tmp_path))
        .option("subscribe", "out")
        .option("kafka.isolation.level", "read_committed")
        .load()
        .collect()
    )
    by_partition: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for row in sorted(rows, key=lambda r: (r.partition, r.offset)):
        by_partition[row.partition].append(bytes(row.value))
    assert by_partition == expected


def test_confluent_kafka_transactions_commit_abort_and_offsets(tmp_path: Path) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    with serve(tmp_path, overrides={**FAST, "num.partitions": "2"}) as server:
        bs = server.bootstrap_servers
        producer = Producer({"bootstrap.servers": bs, "transactional.id": "rd"})
        producer.init_transactions(30)
        group = Consumer({"bootstrap.servers": bs, "group.id": "rd-group"})
        for commit in (True, False, True):
            producer.begin_transaction()
            prefix = b"c" if commit else b"a"
            for i in range(4):
                producer.produce("t", value=b"%s-%d" % (prefix, i), partition=i % 2)
            offsets = [TopicPartition("t", 0, 7 if commit else 99)]
            producer.send_offsets_to_transaction(offsets, group.consumer_group_metadata(), 30)
            if commit:
                producer.commit_transaction(30)
            else:
                producer.flush(30)
                producer.abort_transaction(30)
        seen: dict[str, list[bytes]] = {}
        for isolation in ("read_committed", "read_uncommitted"):
            consumer = Consumer(
                {"bootstrap.servers": bs, "group.id": "r-" + isolation,
                 "isolation.level": isolation, "enable.auto.commit": False}
            )  # fmt: skip
            consumer.assign([TopicPartition("t", p, 0) for p in range(2)])
            got: list[bytes] = []
            deadline = time.monotonic() + 10
            while len(got) < (8 if isolation == "read_committed" else 12):
                assert time.monotonic() < deadline, got
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    got.append(msg.value())
            time.sleep(0.5)
            msg = consumer.poll(0.5)
            assert msg is None or msg.error() is not None, msg.value()
            consumer.close()
            seen[isolation] = sorted(got)
        assert seen["read_committed"] == sorted([b"c-%d" % i for i in range(4)] * 2)
        assert len(seen["read_uncommitted"]) == 12
        committed = group.committed([TopicPartition("t", 0)], 10)
        assert committed[0].offset == 7  # the aborted commit of 99 never counted
        group.close()


def test_aiokafka_transactions(tmp_path: Path) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    async def scenario(bs: str) -> tuple[list[bytes], dict[TopicPartition, int | None]]:
        producer = AIOKafkaProducer(bootstrap_servers=bs, transactional_id="aio")
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait("t", b"kept-1", partition=0)
                await producer.send_offsets_to_transaction({TopicPartition("t", 0): 1}, "aio-group")
            with pytest.raises(RuntimeError):
                async with producer.transaction():
                    await producer.send_and_wait("t", b"dropped", partition=0)
                    await producer.send_offsets_to_transaction(
                        {TopicPartition("t", 0): 50}, "aio-group"
                    )
                    raise RuntimeError("abort this one")
            async with producer.transaction():
                await producer.send_and_wait("t", b"kept-2", partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bs, isolation_level="read_committed",
                                    auto_offset_reset="earliest", group_id="aio-group",
                                    enable_auto_commit=False)  # fmt: skip
        await consumer.start()
        try:
            tp = TopicPartition("t", 0)
            committed = {tp: await consumer.committed(tp)}
            consumer.assign([tp])
            consumer.seek(tp, 0)
            got = []
            for msg in (await consumer.getmany(timeout_ms=3000)).get(tp, []):
                got.append(msg.value)
        finally:
            await consumer.stop()
        return got, committed

    with serve(tmp_path, overrides=FAST) as server:
        got, committed = asyncio.run(scenario(server.bootstrap_servers))
    assert got == [b"kept-1", b"kept-2"]
    assert list(committed.values()) == [1]


def test_kafka_transactions_tool_lists_describes_and_aborts_a_hanging_one(tmp_path: Path) -> None:
    """kafka-transactions.sh list / describe / describe-producers / find-hanging / abort: a
    transaction left open by a writer with no coordinator (written here through the storage
    API, an hour old) is found hanging and aborted with a marker from the tool."""
    from confluent_kafka import Producer

    hour_ago = int(time.time() * 1000) - 3_600_000
    with LogManager([tmp_path]) as manager:
        manager.create_topic("t", 1)
        manager.get_log("t", 0).append(
            [Record(b"hanging", timestamp=hour_ago)], producer=ProducerFields(777, 0, 0, True)
        )
    main = "org.apache.kafka.tools.TransactionsCommand"
    with serve(tmp_path, overrides=FAST) as server:
        bs = server.bootstrap_servers
        producer = Producer({"bootstrap.servers": bs, "transactional.id": "open-one"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("t", b"pending", partition=0)
        producer.flush(30)
        listed = java(LATEST, main, "--bootstrap-server", bs, "list")
        assert "open-one" in listed and "Ongoing" in listed, listed
        described = java(LATEST, main, "--bootstrap-server", bs, "describe",
                         "--transactional-id", "open-one")  # fmt: skip
        assert "Ongoing" in described and "t-0" in described, described
        producers = java(LATEST, main, "--bootstrap-server", bs, "describe-producers",
                         "--topic", "t", "--partition", "0")  # fmt: skip
        assert "777" in producers, producers
        node = str(server.settings.node_id)
        hanging = java(LATEST, main, "--bootstrap-server", bs, "find-hanging",
                       "--broker-id", node)  # fmt: skip
        assert "777" in hanging and "open-one" not in hanging, hanging
        java(LATEST, main, "--bootstrap-server", bs, "abort", "--topic", "t",
             "--partition", "0", "--start-offset", "0")  # fmt: skip
        after = java(LATEST, main, "--bootstrap-server", bs, "find-hanging",
                     "--broker-id", node)  # fmt: skip
        assert "777" not in after, after
        producer.abort_transaction(30)
        log = server.manager.get_log("t", 0) if server.manager else None
        assert log is not None and log.last_stable_offset == log.log_end_offset


def test_an_abandoned_transaction_times_out_and_its_producer_is_fenced(tmp_path: Path) -> None:
    """transaction.timeout.ms: the coordinator's periodic check aborts the transaction, so
    read_committed readers move past it, and the producer that left it is fenced."""
    from confluent_kafka import KafkaException, Producer

    overrides = {**FAST, "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}
    with serve(tmp_path, overrides=overrides) as server:
        config = {"transactional.id": "slow", "transaction.timeout.ms": 1500}
        producer = Producer({"bootstrap.servers": server.bootstrap_servers, **config})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("t", b"abandoned", partition=0)
        producer.flush(30)
        assert server.manager is not None
        log = server.manager.get_log("t", 0)
        assert log.last_stable_offset == 0
        deadline = time.monotonic() + 30
        while log.last_stable_offset == 0:
            assert time.monotonic() < deadline, "the transaction never timed out"
            time.sleep(0.1)
        assert log.last_stable_offset == log.log_end_offset == 2  # the data and an ABORT
        with pytest.raises(KafkaException):
            producer.commit_transaction(10)
    assert _transaction_states(tmp_path)["slow"] == "CompleteAbort"

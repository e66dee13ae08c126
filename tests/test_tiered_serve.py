"""``kafkalog serve`` with tiered storage: a topic made with ``remote.storage.enable`` through
the Admin API has its closed segments copied and its local segments trimmed by the broker's own
remote log manager, and stock clients read the whole topic back exactly from offset 0 --
librdkafka at both isolation levels (transactions committed and aborted), and Kafka's own
console consumer -- while Kafka's kafka-get-offsets answers the tiered ListOffsets specs."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from kafka_oracle import JVM_FLAGS, TOOL_LOG, classpath
from kafkalog.server import serve
from kafkalog.tiered.remote_store import RemoteLogStore
from s3_server import S3Server
from tcp_proxy import TcpProxy

pytestmark = pytest.mark.one_codec

RECORDS_PER_TXN = 400


def _value(txn: int, i: int) -> bytes:
    return b"%05d-%04d;" % (txn, i) * 100  # about 1 KiB


def _fill(bootstrap: str, transactions: int) -> list[bytes]:
    """Transactions of RECORDS_PER_TXN records; every third aborts. Returns the committed
    values in order."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": "tiered-writer",
            "linger.ms": 5,
        }
    )
    producer.init_transactions(30)
    committed: list[bytes] = []
    for txn in range(transactions):
        producer.begin_transaction()
        values = [_value(txn, i) for i in range(RECORDS_PER_TXN)]
        for value in values:
            producer.produce("tiered", value, key=b"%d" % txn, partition=0)
        if txn % 3 == 2:
            producer.flush(30)  # written, then aborted (librdkafka drops what it has not sent)
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            committed += values
    return committed


def _consume(bootstrap: str, isolation: str, expected: int, topic: str = "tiered") -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"tiered-{isolation}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(values) < expected and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is None:
            continue
        assert message.error() is None, message.error()
        values.append(message.value())
    consumer.close()
    return values


def _tiering(store: Path, interval_ms: int) -> dict[str, str]:
    """The broker keys that turn tiered storage on, with a store in ``store``."""
    return {
        "remote.log.storage.system.enable": "true",
        "rsm.config.kafkalog.store.uri": str(store),
        "remote.log.manager.task.interval.ms": str(interval_ms),
    }


def _tiered_partition(manager: Any, *, partitions: int, txn: int) -> Any:
    """Topic ``tiered`` with 2,500 records in partition 0, waited for until its broker copied
    and trimmed it."""
    from kafkalog import Record

    config = {"remote.storage.enable": "true", "local.retention.bytes": "1"}
    manager.create_topic("tiered", partitions, {**config, "segment.bytes": "1048576"})
    log = manager.get_log("tiered", 0)
    for i in range(2500):
        log.append([Record(_value(txn, i))])
    deadline = time.monotonic() + 30
    while log.local_log_start_offset == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert log.local_log_start_offset > 0
    return log


def _tool(main: str, *args: str) -> str:
    cmd = ["java", *JVM_FLAGS, *TOOL_LOG, "-cp", classpath("4.3.1"), main, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.kafka
def test_stock_clients_read_a_tiered_topic_from_offset_0(tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    with serve(tmp_path / "logs", overrides=_tiering(tmp_path / "remote", 200)) as server:
        bootstrap = server.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topic = NewTopic(
            "tiered",
            1,
            1,
            config={
                "remote.storage.enable": "true",
                "segment.bytes": "1048576",
                "local.retention.bytes": "1",
            },
        )
        admin.create_topics([topic])["tiered"].result(30)
        committed = _fill(bootstrap, transactions=15)  # about 6 MiB: several segments
        assert server.manager is not None
        log = server.manager.get_log("tiered", 0)
        deadline = time.monotonic() + 60
        while log.local_log_start_offset == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        local_start = log.local_log_start_offset
        assert local_start > 0 and log.log_start_offset == 0  # copied, then trimmed locally
        everything = _consume(bootstrap, "read_uncommitted", 15 * RECORDS_PER_TXN)
        assert len(everything) == 15 * RECORDS_PER_TXN
        assert [v for v in everything if v in set(committed)] == committed
        assert _consume(bootstrap, "read_committed", len(committed)) == committed
        shown = _tool(
            "org.apache.kafka.tools.GetOffsetShell",
            "--bootstrap-server", bootstrap, "--topic", "tiered", "--time", "-4",
        )  # fmt: skip
        assert shown.strip() == f"tiered:0:{log.local_log_start_offset}"
        consumed = _tool(
            "org.apache.kafka.tools.consumer.ConsoleConsumer",
            "--bootstrap-server", bootstrap, "--topic", "tiered", "--partition", "0",
            "--offset", "earliest", "--max-messages", str(len(committed)),
            "--isolation-level", "read_committed", "--timeout-ms", "30000",
        )  # fmt: skip
        assert consumed.splitlines() == [v.decode() for v in committed]


def test_a_slow_remote_read_holds_up_no_other_client(tmp_path: Path) -> None:
    """A Fetch whose records are remote is read on a request handler thread: while the store
    takes seconds to answer it, other clients' produce requests are answered at once."""
    import threading

    from confluent_kafka import Producer

    keys = {**_tiering(tmp_path / "remote", 100), "remote.fetch.max.wait.ms": "10000"}
    with serve(tmp_path / "logs", overrides=keys) as server:
        manager = server.manager
        assert manager is not None
        manager.create_topic("other", 1)
        log = _tiered_partition(manager, partitions=1, txn=0)
        tier = log.tiering.tier
        assert tier is not None
        store_read = tier.store.fetch_log_segment
        entered = threading.Event()

        def slow(*args: object) -> bytes:
            entered.set()
            time.sleep(3)
            return store_read(*args)  # type: ignore[arg-type]

        tier.store.fetch_log_segment = slow  # type: ignore[method-assign]
        reader = threading.Thread(
            target=_consume, args=(server.bootstrap_servers, "read_uncommitted", 10)
        )
        reader.start()
        assert entered.wait(30)
        producer = Producer({"bootstrap.servers": server.bootstrap_servers})
        started = time.monotonic()
        for i in range(20):
            producer.produce("other", b"%d" % i)
            producer.flush(10)
        elapsed = time.monotonic() - started
        reader.join(60)
        assert elapsed < 2.0, elapsed  # the remote read takes 3 s a segment
        assert manager.get_log("other", 0).log_end_offset == 20


def test_an_s3_store_down_under_load_costs_no_record_and_no_produce(
    tmp_path: Path, s3: S3Server
) -> None:
    """Producers write without pause while the S3 store is unreachable (connections refused
    and cut, for ``KAFKALOG_STORE_OUTAGE_S`` seconds: 10 here, 60 in ``make fault-loops``):
    no produce fails, copies stop and local retention waits, then copies resume and every
    acknowledged record reads back from offset 0, with no orphan left in the store."""
    import os
    import threading

    from confluent_kafka import Producer

    outage = float(os.environ.get("KAFKALOG_STORE_OUTAGE_S", "10"))
    proxy = TcpProxy(s3.port)
    proxy.up()
    store = RemoteLogStore.from_uri(s3.uri("outage"))
    store.filesystem.create_dir("outage")
    uri = s3.uri("outage").replace(f":{s3.port}", f":{proxy.port}")
    overrides = {
        "remote.log.storage.system.enable": "true",
        "rsm.config.kafkalog.store.uri": uri,
        "rsm.config.kafkalog.store.timeout.ms": "1000",
        "rsm.config.kafkalog.store.attempts": "1",
        "remote.log.manager.task.interval.ms": "200",
    }
    try:
        with serve(tmp_path / "logs", overrides=overrides) as server:
            manager = server.manager
            assert manager is not None
            manager.create_topic(
                "tiered",
                1,
                {"remote.storage.enable": "true", "local.retention.bytes": "1",
                 "segment.bytes": "1048576"},
            )  # fmt: skip
            log = manager.get_log("tiered", 0)
            delivered: list[int] = []
            failed: list[object] = []
            stop = threading.Event()

            def produce() -> None:
                producer = Producer({"bootstrap.servers": server.bootstrap_servers, "acks": "all"})

                def done(err: object, message: object) -> None:
                    if err is not None:
                        failed.append(err)
                    else:
                        delivered.append(message.offset())  # type: ignore[attr-defined]

                i = 0
                while not stop.is_set():
                    producer.produce("tiered", _value(1, i % 10000), key=b"%d" % i, callback=done)
                    producer.poll(0)
                    i += 1
                    if i % 50 == 0:
                        time.sleep(0.02)  # at most about 2.5 MB/s
                producer.flush(30)

            writer = threading.Thread(target=produce)
            writer.start()
            deadline = time.monotonic() + 60
            while log.tiering.highest_offset < 0 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert log.tiering.highest_offset >= 0
            proxy.down()
            time.sleep(1)  # a copy under way when it went down fails within the timeout
            copied, local_start = log.tiering.highest_offset, log.local_log_start_offset
            before = len(delivered)
            time.sleep(outage)
            assert len(delivered) > before + 1000  # produce went on
            assert log.tiering.highest_offset == copied  # nothing copied while it was down
            assert log.local_log_start_offset == local_start  # local retention waited
            proxy.up()
            deadline = time.monotonic() + 60
            while log.tiering.highest_offset <= copied and time.monotonic() < deadline:
                time.sleep(0.1)
            assert log.tiering.highest_offset > copied  # copies resumed
            stop.set()
            writer.join(60)
            assert failed == []
            assert sorted(delivered) == list(range(len(delivered)))
            values = _consume(server.bootstrap_servers, "read_uncommitted", len(delivered))
            assert values == [_value(1, i % 10000) for i in range(len(delivered))]
            tier = log.tiering.tier
            assert tier is not None
            # the next passes copy the backlog the outage left and sweep what it cut short
            deadline = time.monotonic() + 60 + 2 * outage
            while time.monotonic() < deadline and (
                log.tiering.highest_offset < log.active_segment.base_offset - 1
                or {s for _o, s in store.object_sets(tier.topic_id_partition)}
                != {m.segment_id.id for m in tier.segments(None)}
                or any(m.state.name != "COPY_SEGMENT_FINISHED" for m in tier.segments(None))
            ):
                time.sleep(0.2)
            held = {s for _o, s in store.object_sets(tier.topic_id_partition)}
            assert held == {m.segment_id.id for m in tier.segments()}
            assert held == {m.segment_id.id for m in tier.segments(None)}
    finally:
        proxy.down()


@pytest.mark.kafka
def test_kafka_configs_turns_tiering_on_for_a_topic_and_kafkas_rule_guards_turning_it_off(
    tmp_path: Path,
) -> None:
    from kafkalog import Record

    with serve(tmp_path / "logs", overrides=_tiering(tmp_path / "remote", 100)) as server:
        manager = server.manager
        assert manager is not None
        manager.create_topic("later", 1, {"segment.bytes": "1048576"})
        log = manager.get_log("later", 0)
        for i in range(2500):
            log.append([Record(_value(2, i))])
        time.sleep(1)
        assert log.tiering.highest_offset == -1 and log.local_log_start_offset == 0
        alter = (
            "kafka.admin.ConfigCommand", "--bootstrap-server", server.bootstrap_servers,
            "--alter", "--entity-type", "topics", "--entity-name", "later",
        )  # fmt: skip
        _tool(*alter, "--add-config", "remote.storage.enable=true,local.retention.bytes=1")
        deadline = time.monotonic() + 30
        while log.local_log_start_offset == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert log.local_log_start_offset > 0 and log.log_start_offset == 0
        values = _consume(server.bootstrap_servers, "read_uncommitted", 2500, "later")
        assert values == [_value(2, i) for i in range(2500)]
        # kafka-log-dirs reports what is on local disk, as Kafka's DescribeLogDirs does
        shown = _tool(
            "org.apache.kafka.tools.LogDirsCommand", "--bootstrap-server",
            server.bootstrap_servers, "--describe", "--topic-list", "later",
        )  # fmt: skip
        described = json.loads(shown.strip().splitlines()[-1])
        sizes = [
            p["size"]
            for broker in described["brokers"]
            for log_dir in broker["logDirs"]
            for p in log_dir["partitions"]
            if p["partition"] == "later-0"
        ]
        assert sizes == [log.size_in_bytes]  # the local tail, not the copied segments
        cmd = ["java", *JVM_FLAGS, *TOOL_LOG, "-cp", classpath("4.3.1"), *alter,
               "--add-config", "remote.storage.enable=false"]  # fmt: skip
        refused = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        assert refused.returncode != 0
        assert "invalid to disable remote storage without deleting remote data" in (
            refused.stdout + refused.stderr
        )


def test_a_fetch_waits_for_remote_data_at_most_remote_fetch_max_wait_ms(tmp_path: Path) -> None:
    """Kafka's DelayedRemoteFetch: a remote read not done within remote.fetch.max.wait.ms
    leaves its partition empty in the answer (no error: the client fetches again), while the
    other partitions of the same Fetch are answered with their records."""
    from kafkalog import Record
    from server_helpers import decode_response, fetch_body, frame, read_frame

    keys = {**_tiering(tmp_path / "remote", 100), "remote.fetch.max.wait.ms": "300"}
    with serve(tmp_path / "logs", overrides=keys) as server:
        manager = server.manager
        assert manager is not None
        log = _tiered_partition(manager, partitions=2, txn=3)
        manager.get_log("tiered", 1).append([Record(b"local")])
        tier = log.tiering.tier
        assert tier is not None and log.local_log_start_offset > 0
        store_read = tier.store.fetch_log_segment
        tier.store.fetch_log_segment = lambda *a: (  # type: ignore[method-assign]
            time.sleep(2),
            store_read(*a),  # type: ignore[arg-type]
        )[1]
        host, port = server.bootstrap_servers.split(":")
        body = fetch_body(12, "tiered", 0, 0, max_wait_ms=0, partitions=(0, 1))
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            started = time.monotonic()
            sock.sendall(frame(1, 12, body))
            answer = decode_response(1, 12, read_frame(sock), header_v1=True)
            elapsed = time.monotonic() - started
        (topic,) = answer.responses
        by_partition = {p.partition_index: p for p in topic.partitions}
        assert 0.25 < elapsed < 1.5, elapsed
        assert by_partition[0].error_code == 0 and not by_partition[0].records
        assert by_partition[1].error_code == 0 and by_partition[1].records


def test_remote_reads_wait_in_a_bounded_queue(tmp_path: Path) -> None:
    """Kafka's remote.log.reader.max.pending.tasks: a client fetching remote offsets of a store
    that does not answer queues at most that many reads behind the busy reader threads; each
    fetch beyond them is answered at once with UNKNOWN_SERVER_ERROR for the partition (Kafka's
    RejectedExecutionException), and once the store answers again the queue drains and the
    records read back."""
    import threading

    from server_helpers import decode_response, fetch_body, frame, read_frame

    keys = {
        **_tiering(tmp_path / "remote", 100),
        "remote.fetch.max.wait.ms": "50",
        "remote.log.reader.threads": "1",
        "remote.log.reader.max.pending.tasks": "2",
    }
    with serve(tmp_path / "logs", overrides=keys) as server:
        manager = server.manager
        assert manager is not None
        log = _tiered_partition(manager, partitions=1, txn=0)
        tier = log.tiering.tier
        assert tier is not None and log.local_log_start_offset > 0
        store_read = tier.store.fetch_log_segment
        answering = threading.Event()

        def hung(*args: object) -> bytes:
            answering.wait(60)
            return store_read(*args)  # type: ignore[arg-type]

        tier.store.fetch_log_segment = hung  # type: ignore[method-assign]
        host, port = server.bootstrap_servers.split(":")
        body = fetch_body(12, "tiered", 0, 0, max_wait_ms=0)

        def fetch(sock: socket.socket, correlation: int) -> Any:
            sock.sendall(frame(1, 12, body, correlation))
            (topic,) = decode_response(1, 12, read_frame(sock), header_v1=True).responses
            return topic.partitions[0]

        codes, most_waiting = [], 0
        try:
            with socket.create_connection((host, int(port)), timeout=10) as sock:
                for correlation in range(40):
                    codes.append(fetch(sock, correlation).error_code)
                    most_waiting = max(most_waiting, server.waiting_remote_reads)
        finally:
            answering.set()
        # the first read runs, the next two wait; every later fetch is refused at once
        assert codes[:3] == [0, 0, 0], codes
        assert set(codes[3:]) == {-1}, codes
        assert most_waiting == 2
        deadline = time.monotonic() + 30
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            while True:
                answer = fetch(sock, 100)
                if answer.error_code == 0 and answer.records:
                    break
                assert time.monotonic() < deadline, answer
                time.sleep(0.1)
        assert server.waiting_remote_reads == 0

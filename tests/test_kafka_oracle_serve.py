"""After clients wrote through ``kafkalog serve``, a real Apache Kafka broker starts on the same
log directory and serves the same records.

The broker creates the topics first (a KRaft broker removes partition directories whose topic
ID its metadata does not know), idempotent librdkafka producers write to them through it, and
it stops; ``kafkalog serve`` opens the broker's directory (its partitions, ``partition.metadata``
and ``meta.properties``: the same cluster ID), librdkafka producers write through it with
compression, keys, headers and idempotence; the server stops cleanly; the broker starts again,
must not recover anything, and Kafka's console consumer must read exactly what the clients were
acknowledged for.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka")

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

from kafka_oracle import KAFKA_VERSIONS, ROOT, KafkaBroker, java
from kafkalog import LogManager
from kafkalog.coordinator.txn_store import TransactionMetadata, load_transactions
from kafkalog.errors import LogDirectoryLockedError
from kafkalog.server import serve
from kafkalog.storage.dir_lock import held_by_writer
from kafkalog.types import TRANSACTION_TOPIC
from test_kafka_oracle_write import RECOVERY_LOG, consume

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.one_codec]

TOPICS = ("served-lz4", "served-zstd")


@pytest.fixture(params=["3.9.2", "4.3.1"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> KafkaBroker:
    from kafka_oracle import KAFKA_VERSIONS

    if request.param not in KAFKA_VERSIONS:
        pytest.skip(f"Kafka {request.param} is not pinned in interop/kafka-versions.txt")
    return KafkaBroker(request.param, tmp_path / "broker", {"log.retention.ms": "-1"})


Acked = dict[str, list[tuple[int, bytes | None, bytes | None]]]


def _produce(bootstrap: str, acked: Acked, counts: tuple[int, ...], tag: str) -> None:
    """Records to each topic with an idempotent librdkafka producer, each topic's codec, in
    runs of ``counts``, flushed after each; what was acknowledged goes to ``acked``. Stamped
    now: a producer whose last batch is older than ``producer.id.expiration.ms`` (a day) is
    dropped from the producer state when the partition is loaded."""
    for topic, codec in zip(TOPICS, ("lz4", "zstd"), strict=True):
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "compression.type": codec,
                "linger.ms": 5,
            }
        )

        def delivered(err: object, msg: object, topic: str = topic) -> None:
            assert err is None, err
            acked[topic].append((msg.offset(), msg.key(), msg.value()))  # type: ignore[attr-defined]

        for i in range(sum(counts)):
            key = None if i % 7 == 0 else f"k{i % 13}".encode()
            value = None if i % 11 == 0 else f"{tag}-{codec}-{i}".encode() * (1 + i % 3)
            producer.produce(
                topic,
                key=key,
                value=value,
                headers=[("n", str(i).encode())],
                on_delivery=delivered,
            )
            if i + 1 in itertools.accumulate(counts):
                assert producer.flush(30) == 0


def test_kafka_serves_what_clients_wrote_through_kafkalog_serve(broker: KafkaBroker) -> None:
    """Kafka's own idempotent producers write first, so their ids are in the partitions'
    producer state: kafkalog must give its clients other ids, or their first batches would be
    taken for retries of Kafka's producers' and dropped, though acknowledged. Then Kafka's
    producers write again, with ids its controller hands out after a restart: those must not
    be ours either."""
    acked: Acked = {t: [] for t in TOPICS}
    with broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic(t, 1, 1) for t in TOPICS]).values():
            future.result(60)
        _produce(broker.bootstrap, acked, (50,), "kafka")
    with serve(broker.log_dir, overrides={"auto.create.topics.enable": "false"}) as server:
        # the first run has the shape of Kafka's (sequences 0-49, likely one batch): given
        # Kafka's producer's id and epoch, it would be "recognised" as that batch's retry
        _produce(server.bootstrap_servers, acked, (50, 250), "kafkalog")
    assert (broker.log_dir / ".kafka_cleanshutdown").exists()
    mark = broker.output.stat().st_size
    with broker:
        # the broker's next producers get ids from its controller's next block: none of ours
        _produce(broker.bootstrap, acked, (50,), "kafka-again")
        for topic in TOPICS:
            rows = consume(broker, topic, "read_uncommitted", len(acked[topic]))
            assert [(off, key, value) for off, _ts, key, value, _h in rows] == sorted(acked[topic])
            assert all(h[0][0] == "n" for *_, h in rows)
    startup = broker.output.read_bytes()[mark:].decode(errors="replace")
    for line in startup.splitlines():
        if "served-" in line:
            assert not RECOVERY_LOG.search(line), line


def _transactions(bootstrap: str, tag: str, first_commits: bool) -> list[bytes]:
    """Two transactions of transactional id "tx-app" on topic "tx": the first committed or
    aborted, the second committed. The values a read_committed reader must then see."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx-app"})
    producer.init_transactions(30)
    committed: list[bytes] = []
    for n, commit in (("first", first_commits), ("second", True)):
        values = [f"{tag}-{n}-{i}".encode() for i in range(5)]
        producer.begin_transaction()
        for value in values:
            producer.produce("tx", value=value)
        if commit:
            producer.commit_transaction(30)
            committed += values
        else:
            producer.abort_transaction(30)
    return committed


def _read_committed(bootstrap: str, count: int, topic: str = "tx") -> list[bytes]:
    """The first ``count`` values of ``topic`` a read_committed consumer gets: once it has
    them from "tx", the markers are written (Kafka writes them after EndTxn is answered)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "check", "isolation.level": "read_committed"}
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(values) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    return values


def test_one_transactional_id_goes_on_across_kafka_and_kafkalog_serve(
    broker: KafkaBroker,
) -> None:
    """The same transactional producer on Kafka, on Kafka again after a restart (which moves
    the leader epochs, and so the coordinator epoch its markers carry), on ``kafkalog serve``
    over the broker's directory, and on Kafka once more: every transaction ends, and Kafka's
    read_committed consumer sees exactly the committed ones. kafkalog's markers must carry
    the coordinator epoch Kafka reached, and its batches the partitions' leader epochs."""
    committed: list[bytes] = []
    with broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic("tx", 1, 1)]).values():
            future.result(60)
        committed += _transactions(broker.bootstrap, "kafka-1", True)
        assert _read_committed(broker.bootstrap, len(committed)) == committed
    with broker:
        committed += _transactions(broker.bootstrap, "kafka-2", False)
        # its markers are in (with the coordinator epoch the restart moved to 2) before it stops
        assert _read_committed(broker.bootstrap, len(committed)) == committed
    checkpoint = broker.log_dir / "tx-0" / "leader-epoch-checkpoint"
    epochs = checkpoint.read_text()  # a restart moved the leader epoch: "2 <offset>" is in it
    assert epochs.splitlines()[1] != "1"
    with serve(broker.log_dir, overrides={"auto.create.topics.enable": "false"}) as server:
        committed += _transactions(server.bootstrap_servers, "kafkalog", False)
        # our markers are in: Kafka, finding a decision without them, would write its own
        assert _read_committed(server.bootstrap_servers, len(committed)) == committed
    assert checkpoint.read_text() == epochs  # our batches carried the latest epoch: no new entry
    with broker:
        committed += _transactions(broker.bootstrap, "kafka-3", True)
        assert _read_committed(broker.bootstrap, len(committed)) == committed


def _java_transactions(bootstrap: str, tag: str, ends: str) -> list[bytes]:
    """Transactions of id "tv-app" on topic "tv" by Kafka 4.3.1's Java producer (transaction
    version 2 wherever the broker finalizes it), one per letter of ``ends`` ("c" commit, "a"
    abort); the values a read_committed reader must then see."""
    latest = KAFKA_VERSIONS[-1]
    program = str(ROOT / "interop" / "TransactionalProducer.java")
    out = java(latest, program, bootstrap, "tv-app", "tv", tag, ends)
    assert out.split() == [w for n, e in enumerate(ends)
                           for w in ("committed" if e == "c" else "aborted", str(n))]  # fmt: skip
    return [f"{tag}-{n}-{i}".encode() for n, e in enumerate(ends) if e == "c" for i in range(3)]


def _tv_app(log_dir: Path) -> TransactionMetadata:
    with LogManager([log_dir]) as manager:
        logs = [lg for tp, lg in manager.logs().items() if tp.topic == TRANSACTION_TOPIC]
        return load_transactions(logs)["tv-app"]


def test_a_transaction_version_2_id_goes_on_across_kafka_and_kafkalog_serve(
    broker: KafkaBroker,
) -> None:
    """Kafka's Java producer ends transactions on Kafka (4.3.1 finalizes transaction version
    2, 3.9.2 does not: version 1 there), then on ``kafkalog serve`` (version 2: an epoch bump
    per end, markers at the bumped epoch), then on Kafka again: each side loads the other's
    ``__transaction_state`` (value version 1, with the client's transaction version), takes
    the id over with one more epoch, and Kafka's read_committed consumer sees exactly the
    committed transactions."""
    committed: list[bytes] = []
    with broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic("tv", 1, 1)]).values():
            future.result(60)
        committed += _java_transactions(broker.bootstrap, "kafka-1", "ca")
        assert _read_committed(broker.bootstrap, len(committed), "tv") == committed
    on_kafka = _tv_app(broker.log_dir)
    kafka_v2 = not broker.version.startswith("3.")
    assert on_kafka.client_transaction_version == (2 if kafka_v2 else 0)
    with serve(broker.log_dir, overrides={"auto.create.topics.enable": "false"}) as server:
        committed += _java_transactions(server.bootstrap_servers, "kafkalog", "ac")
        assert _read_committed(server.bootstrap_servers, len(committed), "tv") == committed
    on_kafkalog = _tv_app(broker.log_dir)
    assert (on_kafkalog.producer_id, on_kafkalog.client_transaction_version) == (
        on_kafka.producer_id, 2,
    )  # fmt: skip
    assert on_kafkalog.producer_epoch == on_kafka.producer_epoch + 1 + 2  # init, two ends
    with broker:
        committed += _java_transactions(broker.bootstrap, "kafka-2", "cac")
        assert _read_committed(broker.bootstrap, len(committed), "tv") == committed
    assert _tv_app(broker.log_dir).producer_epoch > on_kafkalog.producer_epoch


def _joined(bootstrap: str, group: str) -> Consumer:
    """A librdkafka member of ``group`` on topic "members", once it has read the topic's four
    records (so the group is Stable with its assignment stored). Left open: its broker stops
    under it, as a broker restart leaves its applications running."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": f"{group}-client",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 45_000,
        }
    )
    consumer.subscribe(["members"])
    seen = 0
    deadline = time.monotonic() + 60
    while seen < 4 and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        seen += message is not None and message.error() is None
    assert seen == 4
    return consumer


_COORDINATOR_LOADING = (
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
)


def _members(bootstrap: str, group: str) -> tuple[str, list[tuple[str, str, list[int]]]]:
    """A group's state and its members (member id, client id, assigned partitions). A broker
    just started may still be loading ``__consumer_offsets`` (COORDINATOR_LOAD_IN_PROGRESS, a
    retriable error that librdkafka's describe hands back rather than retries): asked again."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 60
    while True:
        try:
            described = admin.describe_consumer_groups([group])[group].result(60)
            break
        except KafkaException as err:
            loading = err.args[0].code() in _COORDINATOR_LOADING or err.args[0].retriable()
            if not loading or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    return str(described.state).rsplit(".", 1)[-1], [
        (m.member_id, m.client_id, sorted(p.partition for p in m.assignment.topic_partitions))
        for m in described.members
    ]


def test_a_classic_group_goes_on_across_kafka_and_kafkalog_serve(broker: KafkaBroker) -> None:
    """Each side loads the Stable group the other stored in ``__consumer_offsets`` (a
    GroupMetadataValue): the same member id, client id and assignment, before the member's
    session would time out. Before, kafkalog skipped these records and a restart onto it
    emptied every group."""
    with broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic("members", 2, 1)]).values():
            future.result(60)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(4):
            producer.produce("members", value=b"%d" % i, partition=i % 2)
        assert producer.flush(30) == 0
        on_kafka = _joined(broker.bootstrap, "on-kafka")
        kafka_member = on_kafka.memberid()
    overrides = {"auto.create.topics.enable": "false", "group.initial.rebalance.delay.ms": "0"}
    with serve(broker.log_dir, overrides=overrides) as server:
        assert _members(server.bootstrap_servers, "on-kafka") == (
            "STABLE", [(kafka_member, "on-kafka-client", [0, 1])]
        )  # fmt: skip
        on_kafkalog = _joined(server.bootstrap_servers, "on-kafkalog")
        our_member = on_kafkalog.memberid()
    with broker:
        assert _members(broker.bootstrap, "on-kafkalog") == (
            "STABLE", [(our_member, "on-kafkalog-client", [0, 1])]
        )  # fmt: skip
    for consumer in (on_kafka, on_kafkalog):
        consumer.close()


def test_a_running_broker_and_kafkalog_keep_out_of_each_others_directory(tmp_path: Path) -> None:
    """Kafka locks each log directory's ``.lock`` with an fcntl record lock, kafkalog with an
    flock and a record lock: kafkalog refuses the directory of a running broker, and the
    broker refuses to start on a directory ``kafkalog serve`` holds. (The newest pinned Kafka
    only: both versions lock through the JVM's FileChannel.tryLock.)"""
    from kafka_oracle import KAFKA_VERSIONS

    broker = KafkaBroker(KAFKA_VERSIONS[-1], tmp_path / "broker")
    with broker:
        with pytest.raises(LogDirectoryLockedError, match="Kafka broker"):
            LogManager([broker.log_dir])
        assert held_by_writer(broker.log_dir)
    with serve(broker.log_dir):
        with pytest.raises(AssertionError, match="died at start"):
            broker.start()
        assert "Failed to acquire lock on file .lock" in broker.tail(20_000)
    with broker:  # and each lets go when it stops
        pass


def test_kafkas_metadata_log_in_the_log_directory_is_left_to_kafka(tmp_path: Path) -> None:
    """With ``metadata.log.dir`` unset (Kafka's own example configs), a KRaft node keeps
    ``__cluster_metadata-0`` in its log directory. ``kafkalog serve`` leaves it to Kafka, as
    Kafka's LogManager does: no client sees it as a topic, nothing in it changes (no
    retention, no producer snapshot at close), and the broker starts again on it. It does read
    the topic configs there: a topic Kafka keeps forever is not cut by the server's own
    seven-day, here one-millisecond, retention, which a topic with no override does get; and
    the broker defaults Kafka was given at run time (``kafka-configs --entity-type brokers``,
    for every broker and for node 1). DescribeConfigs then answers as the broker did: every
    key's value, source, flags and synonyms."""
    from kafka_oracle import KAFKA_VERSIONS

    root = tmp_path / "broker"
    broker = KafkaBroker(KAFKA_VERSIONS[-1], root, {"metadata.log.dir": str(root / "data")})
    with broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topics = [NewTopic("m", 1, 1, config={"retention.ms": "-1"}), NewTopic("plain", 1, 1)]
        for future in admin.create_topics(topics).values():
            future.result(60)
        every = ("--entity-type", "brokers", "--entity-default", "--alter", "--add-config")
        broker.tool("kafka.admin.ConfigCommand", "--bootstrap-server", broker.bootstrap, *every,
                    "log.segment.bytes=2097152")  # fmt: skip
        own = ConfigEntry("log.roll.ms", "18000000", incremental_operation=AlterConfigOpType.SET)
        node = ConfigResource("BROKER", "1", incremental_configs=[own])  # --entity-name 1
        admin.incremental_alter_configs([node])[node].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for topic in ("m", "plain"):
            for i in range(5):  # stamped long ago: past any retention but -1
                producer.produce(topic, value=b"v%d" % i, timestamp=1_700_000_000_000 + i)
        assert producer.flush(30) == 0
        kafka_described = _describe_topics(admin, "m", "plain")
        kafka_broker = _describe(admin, ConfigResource("BROKER", "1"))
    metadata = broker.log_dir / "__cluster_metadata-0"
    before = {p.name: p.read_bytes() for p in metadata.iterdir()}
    static = {k: v for k, v in broker.properties().items() if k.startswith(("log.", "metadata."))}
    overrides = {**static, "log.retention.ms": "1", "log.retention.check.interval.ms": "100"}
    with serve(broker.log_dir, overrides=overrides) as server:
        admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
        assert set(admin.list_topics(timeout=30).topics) == {"m", "plain"}
        created = admin.create_topics([NewTopic("__cluster_metadata", 1, 1)])
        with pytest.raises(KafkaException, match="prohibited"):
            created["__cluster_metadata"].result(30)
        deadline = time.monotonic() + 30
        while server.manager.get_log("plain").log_start_offset < 5:  # retention ran
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert server.manager.get_log("m").log_start_offset == 0
        described = _describe_topics(admin, "m", "plain")
        segment, roll = described["plain"]["segment.bytes"], described["plain"]["segment.ms"]
        every, own = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, ConfigSource.DYNAMIC_BROKER_CONFIG
        assert segment[:2] == ("2097152", every.value)
        assert roll[:2] == (str(5 * 3600 * 1000), own.value)
        for topic in ("m", "plain"):  # all but what serve's own log.retention.ms=1 sets
            del described[topic]["retention.ms"], kafka_described[topic]["retention.ms"]
        assert described == kafka_described
        ours = _describe(admin, ConfigResource("BROKER", "1"))  # keys Kafka changes at run time
        # but for what the two servers were started with differently: serve's own retention
        # and listeners
        mismatched = ("log.retention.", "listeners", "listener.security.protocol.map")
        ours = {k: v for k, v in ours.items() if not k.startswith(mismatched)}
        assert len(ours) > 90
        assert ours == {k: kafka_broker[k] for k in ours}
        assert ours["log.roll.ms"][:2] == ("18000000", own.value)
        assert ours["log.roll.hours"][3] is True  # read-only: not a dynamic key in Kafka
    assert {p.name: p.read_bytes() for p in metadata.iterdir()} == before
    with broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert {"m", "plain"} <= set(admin.list_topics(timeout=30).topics)
        assert _read_committed(broker.bootstrap, 5, "m") == [b"v%d" % i for i in range(5)]


def _describe_topics(admin: AdminClient, *topics: str) -> dict[str, dict[str, tuple[object, ...]]]:
    return {topic: _describe(admin, ConfigResource("TOPIC", topic)) for topic in topics}


def _describe(admin: AdminClient, resource: ConfigResource) -> dict[str, tuple[object, ...]]:
    """Each key as DescribeConfigs gives it: value, source, the default, read-only and
    sensitive flags, and its synonyms (librdkafka keeps one per name)."""
    return {
        name: (e.value, int(e.source), e.is_default, e.is_read_only, e.is_sensitive,
               sorted((s.name, s.value, int(s.source)) for s in e.synonyms.values()))
        for name, e in admin.describe_configs([resource])[resource].result(30).items()
    }  # fmt: skip


def test_kafka_configs_describes_a_group_as_kafka_4_does(tmp_path: Path) -> None:
    """``kafka-configs --entity-type groups --describe --all`` (DescribeConfigs on a GROUP
    resource, Kafka 4's group configs) prints the same lines against Kafka 4.3.1 and against
    ``kafkalog serve``: every group key with its broker default, for a group that exists and
    for one that does not, and a group's own value once set (``--alter``)."""
    from kafka_oracle import KAFKA_VERSIONS

    version = KAFKA_VERSIONS[-1]
    describe = ("--entity-type", "groups", "--describe", "--all", "--entity-name")
    alter = ("--entity-type", "groups", "--entity-name", "g", "--alter", "--add-config",
             "consumer.session.timeout.ms=50000")  # fmt: skip

    def configs(bootstrap: str, *args: str) -> str:
        return broker.tool("kafka.admin.ConfigCommand", "--bootstrap-server", bootstrap, *args)

    def session_set(bootstrap: str) -> str:  # Kafka's describe lags its alteration a little
        deadline = time.monotonic() + 60
        out = configs(bootstrap, *describe, "g")
        while "consumer.session.timeout.ms=50000 " not in out:
            assert time.monotonic() < deadline, out
            time.sleep(1)
            out = configs(bootstrap, *describe, "g")
        return out

    broker = KafkaBroker(version, tmp_path / "broker", {})
    with broker:
        kafka = [configs(broker.bootstrap, *describe, group) for group in ("nobody", "g")]
        configs(broker.bootstrap, *alter)
        kafka.append(session_set(broker.bootstrap))
    with LogManager(tmp_path / "data") as manager:
        manager.create_topic("t", 1)
    with serve(tmp_path / "data") as server:
        consumer = Consumer({"bootstrap.servers": server.bootstrap_servers, "group.id": "g"})
        consumer.commit(offsets=[TopicPartition("t", 0, 1)], asynchronous=False)
        consumer.close()
        bootstrap = server.bootstrap_servers
        ours = [configs(bootstrap, *describe, group) for group in ("nobody", "g")]
        configs(bootstrap, *alter)
        ours.append(configs(bootstrap, *describe, "g"))
    assert len(kafka[0].splitlines()) == 18  # the heading and 17 keys
    assert ours == kafka

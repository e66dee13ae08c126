"""ACLs on ``kafkalog serve`` managed as on Kafka: Kafka's own ``kafka-acls.sh`` (AclCommand)
adds, lists and removes them, with its ``--producer`` and ``--consumer`` shortcuts; librdkafka's
Admin API does the same; clients then get exactly what the ACLs allow. ACLs survive a restart
and a kill -9 right after the answer, and an ACL set on a Kafka broker keeps protecting its
data when kafkalog takes the directory over (read from its KRaft metadata log)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from kafkalog import LogManager
from kafkalog.server import serve
from server_helpers import start_serve_process

pytestmark = [pytest.mark.one_codec, pytest.mark.timeout(600)]

JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        'user_admin="admin-pw" user_alice="alice-pw" user_bob="bob-pw";')  # fmt: skip
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SECURED = {
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": STANDARD_AUTHORIZER,
    "super.users": "User:admin",
    "offsets.topic.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
}


def _client(user: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": f"{user}-pw"}  # fmt: skip


def _produce(bootstrap: str, user: str, topic: str, value: bytes) -> object:
    """None once the record is acknowledged, else the delivery error."""
    from confluent_kafka import Producer

    outcome: list[object] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 8000,
                         **_client(user)})  # fmt: skip
    producer.produce(topic, value, partition=0, on_delivery=lambda err, _: outcome.append(err))
    producer.flush(15)
    return outcome[0] if outcome else "no delivery report"


def _consume(bootstrap: str, user: str, topic: str, group: str, wanted: int) -> list[bytes]:
    from confluent_kafka import Consumer, KafkaException

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", **_client(user)})  # fmt: skip
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < wanted and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                raise KafkaException(message.error())
            values.append(message.value())
    finally:
        consumer.close()
    return values


def _admin_properties(tmp_path: Path) -> Path:
    path = tmp_path / "admin.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-pw";\n'
    )
    return path


@pytest.mark.kafka
def test_kafka_acls_sh_manages_acls_and_clients_get_what_they_allow(tmp_path: Path) -> None:
    from confluent_kafka import KafkaException

    from kafka_oracle import KAFKA_VERSIONS, java

    data = tmp_path / "data"
    with LogManager(data) as manager:
        manager.create_topic("orders", 1)
    overrides = {**SECURED, "listeners": "SASL_PLAINTEXT://127.0.0.1:0"}
    admin = _admin_properties(tmp_path)

    def acls(bs: str, *args: str) -> str:
        return java(KAFKA_VERSIONS[-1], "org.apache.kafka.tools.AclCommand",
                    "--bootstrap-server", bs, "--command-config", str(admin), *args)  # fmt: skip

    with serve(data, overrides=overrides) as server:
        bs = server.bootstrap_servers
        assert _produce(bs, "alice", "orders", b"early") is not None  # no ACL yet: refused
        acls(bs, "--add", "--allow-principal", "User:alice", "--producer", "--topic", "orders")
        acls(bs, "--add", "--allow-principal", "User:alice", "--consumer", "--topic", "orders",
             "--group", "readers")  # fmt: skip
        listed = acls(bs, "--list", "--topic", "orders")
        for operation in ("WRITE", "READ", "DESCRIBE", "CREATE"):
            assert f"principal=User:alice, host=*, operation={operation}" in listed, listed
        assert _produce(bs, "alice", "orders", b"one") is None
        refused = _produce(bs, "bob", "orders", b"nope")
        assert refused is not None and "TOPIC_AUTHORIZATION_FAILED" in str(refused), refused
        assert _consume(bs, "alice", "orders", "readers", 1) == [b"one"]
        with pytest.raises(KafkaException, match=r"(?i)authoriz"):
            _consume(bs, "bob", "orders", "readers", 1)
        acls(bs, "--remove", "--force", "--allow-principal", "User:alice", "--operation",
             "Write", "--topic", "orders")  # fmt: skip
        assert _produce(bs, "alice", "orders", b"two") is not None
    with serve(data, overrides=overrides) as server:  # a restart keeps them
        listed = acls(server.bootstrap_servers, "--list", "--topic", "orders")
        assert "operation=READ" in listed and "operation=WRITE" not in listed, listed
    with LogManager(data) as manager:
        assert [r.value for r in manager.get_log("orders", 0).read_records(0, 1 << 20)] == [b"one"]


def _start(data: Path, port: int) -> subprocess.Popen[str]:
    """``kafkalog serve`` in a process of its own, SASL_PLAINTEXT with the authorizer."""
    overrides = {**SECURED, "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}"}
    return start_serve_process(data, port, overrides)


def test_admin_api_acls_survive_a_kill_9_right_after_the_answer(tmp_path: Path) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    from kafka_oracle import free_port

    port = free_port()
    bs = f"127.0.0.1:{port}"
    wanted = [
        AclBinding(
            ResourceType.TOPIC,
            "pay",
            ResourcePatternType.PREFIXED,
            "User:alice",
            "*",
            AclOperation.WRITE,
            AclPermissionType.ALLOW,
        ),
        AclBinding(
            ResourceType.GROUP,
            "*",
            ResourcePatternType.LITERAL,
            "User:bob",
            "*",
            AclOperation.READ,
            AclPermissionType.DENY,
        ),
    ]
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    proc = _start(tmp_path, port)
    try:
        admin = AdminClient({"bootstrap.servers": bs, **_client("admin")})
        for future in admin.create_acls(wanted).values():
            future.result(15)
        os.kill(proc.pid, signal.SIGKILL)  # at once: the answer promised durability
        proc.wait()
        proc = _start(tmp_path, port)
        admin = AdminClient({"bootstrap.servers": bs, **_client("admin")})
        assert sorted(map(str, admin.describe_acls(everything).result(15))) == sorted(
            map(str, wanted)
        )
        bob = AdminClient({"bootstrap.servers": bs, **_client("bob")})
        with pytest.raises(KafkaException, match=r"(?i)authoriz"):
            for future in bob.create_acls(wanted).values():
                future.result(15)
        # WRITE, but no CREATE: the topic is not created for her (auto-creation needs it)
        assert _produce(bs, "alice", "payments", b"x") is not None
        admin.create_topics([NewTopic("payments", 1)])["payments"].result(15)
        assert _produce(bs, "alice", "payments", b"x") is None
        [deleted] = admin.delete_acls([everything]).values()
        assert len(deleted.result(15)) == 2
        assert admin.describe_acls(everything).result(15) == []
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.kafka
@pytest.mark.slow
def test_acls_set_on_kafka_protect_its_data_under_kafkalog(tmp_path: Path) -> None:
    """A KRaft broker with StandardAuthorizer, its metadata log in its data directory: the
    ACLs added there are in force when kafkalog serves the directory, and listed by it."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    from kafka_oracle import KAFKA_VERSIONS, KafkaBroker

    root = tmp_path / "broker"
    broker = KafkaBroker(KAFKA_VERSIONS[-1], root, {"metadata.log.dir": str(root / "data")})
    kafka_bs = broker.add_sasl_listener(SECURED)
    with broker:
        admin = AdminClient({"bootstrap.servers": kafka_bs, **_client("admin")})
        admin.create_topics([NewTopic("ledger", 1)])["ledger"].result(30)
        binding = AclBinding(ResourceType.TOPIC, "ledger", ResourcePatternType.LITERAL,
                             "User:alice", "*", AclOperation.WRITE,
                             AclPermissionType.ALLOW)  # fmt: skip
        for future in admin.create_acls([binding]).values():
            future.result(30)
        # the ACL reaches the broker's authorizer through the metadata log a moment after
        # CreateAcls is answered: alice is refused until then
        deadline = time.monotonic() + 30
        while (refused := _produce(kafka_bs, "alice", "ledger", b"on kafka")) is not None:
            assert time.monotonic() < deadline, refused
            time.sleep(0.5)
        assert _produce(kafka_bs, "bob", "ledger", b"nope") is not None
    with serve(
        root / "data", overrides={**SECURED, "listeners": "SASL_PLAINTEXT://127.0.0.1:0"}
    ) as server:
        bs = server.bootstrap_servers
        assert _produce(bs, "alice", "ledger", b"on kafkalog") is None
        refused = _produce(bs, "bob", "ledger", b"nope")
        assert refused is not None and "TOPIC_AUTHORIZATION_FAILED" in str(refused), refused
        admin = AdminClient({"bootstrap.servers": bs, **_client("admin")})
        from confluent_kafka.admin import AclBindingFilter

        everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None,
                                      None, AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
        assert list(map(str, admin.describe_acls(everything).result(15))) == [str(binding)]


def test_a_tls_client_is_its_mapped_certificate_subject(tmp_path: Path, certs: Path) -> None:
    """On an SSL listener with client certificates, the principal is the certificate's subject
    after ``ssl.principal.mapping.rules`` (``CN=client`` -> ``User:client``), and the ACLs of
    that principal decide; a subject no rule maps is refused its connection."""
    from confluent_kafka import Producer

    from kafkalog.server.acl_store import save_acls
    from kafkalog.server.authorizer import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourceType,
    )

    tls = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs / "server.pem"),
           "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs / "ca.pem"),
           "ssl.client.auth": "required", "listeners": "SSL://127.0.0.1:0",
           "authorizer.class.name": STANDARD_AUTHORIZER}  # fmt: skip
    with LogManager(tmp_path) as manager:
        manager.create_topic("mine", 1)
        manager.create_topic("theirs", 1)
    save_acls(tmp_path, [AclBinding(ResourceType.TOPIC, "mine", PatternType.LITERAL,
                                    "User:client", "*", AclOperation.WRITE,
                                    AclPermissionType.ALLOW)])  # fmt: skip
    client = {"security.protocol": "SSL", "ssl.ca.location": str(certs / "ca.pem"),
              "ssl.certificate.location": str(certs / "client.crt"),
              "ssl.key.location": str(certs / "client.key"),
              "message.timeout.ms": 8000}  # fmt: skip

    def produce(overrides: dict[str, str], topic: str) -> object:
        with serve(tmp_path, overrides={**tls, **overrides}) as server:
            producer = Producer({"bootstrap.servers": server.bootstrap_servers, **client})
            outcome: list[object] = []
            producer.produce(topic, b"x", partition=0, on_delivery=lambda e, _: outcome.append(e))
            producer.flush(15)
            return outcome[0] if outcome else "no delivery report"

    rules = {"ssl.principal.mapping.rules": "RULE:^CN=([^,]*)$/$1/L,DEFAULT"}
    assert produce(rules, "mine") is None
    assert "TOPIC_AUTHORIZATION_FAILED" in str(produce(rules, "theirs"))
    assert produce({}, "mine") is not None  # DEFAULT: User:CN=client has no ACL
    assert produce({"ssl.principal.mapping.rules": "RULE:^CN=nobody$/x/"}, "mine") is not None


def test_authorized_operations_report_the_principals_own(tmp_path: Path) -> None:
    """KIP-430: describeTopics and describeCluster with authorized operations answer what the
    asking principal's ACLs allow it, as Kafka's authorizer computes them."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    with LogManager(tmp_path) as manager:
        manager.create_topic("orders", 1)
    overrides = {**SECURED, "listeners": "SASL_PLAINTEXT://127.0.0.1:0"}
    with serve(tmp_path, overrides=overrides) as server:
        bs = server.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bs, **_client("admin")})
        read = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL,
                          "User:alice", "*", AclOperation.READ,
                          AclPermissionType.ALLOW)  # fmt: skip
        for future in admin.create_acls([read]).values():
            future.result(15)
        alice = AdminClient({"bootstrap.servers": bs, **_client("alice")})
        [topic] = alice.describe_topics(
            TopicCollection(["orders"]), include_authorized_operations=True
        ).values()
        assert sorted(op.name for op in topic.result(15).authorized_operations) == [
            "DESCRIBE", "READ",
        ]  # fmt: skip
        cluster = alice.describe_cluster(include_authorized_operations=True).result(15)
        assert not cluster.authorized_operations  # none: librdkafka says None
        everything = admin.describe_cluster(include_authorized_operations=True).result(15)
        assert len(everything.authorized_operations) == 7


def test_an_open_or_unauthorized_listener_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sasl = {k: v for k, v in SECURED.items() if k not in ("authorizer.class.name", "super.users")}
    cases = [
        ({"listeners": "PLAINTEXT://0.0.0.0:0"}, "from other hosts without authentication"),
        ({"listeners": "PLAINTEXT://127.0.0.1:0"}, None),
        ({**sasl, "listeners": "SASL_PLAINTEXT://127.0.0.1:0"}, "authorizer.class.name="),
        ({**SECURED, "listeners": "SASL_PLAINTEXT://0.0.0.0:0"}, None),
    ]
    for overrides, warned in cases:
        caplog.clear()
        with (
            caplog.at_level("WARNING", logger="kafkalog.server"),
            serve(tmp_path, overrides=overrides),
        ):
            pass
        said = " ".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
        if warned is None:
            assert "listener" not in said, (overrides, said)
        else:
            assert warned in said, (overrides, said)

"""Internal topics under an ordinary client: what the coordinators read back is written only by
them.

A client may not Produce to ``__consumer_offsets`` or ``__transaction_state`` nor delete their
records (Kafka's ``ReplicaManager``: INVALID_TOPIC_EXCEPTION); a Metadata request that
auto-creates one creates it with its coordinator's partition count and configs; FindCoordinator
creates a missing coordinator topic and answers COORDINATOR_NOT_AVAILABLE meanwhile. The same
probe runs against Kafka 4.3.1, whose answers are the spec: it lets an ordinary client add
partitions to and delete an internal topic (authorization is what guards those), and so does
kafkalog. The forged-PrepareCommit attack is refused at the door and the coordinator's
state survives a restart untouched.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions

from kafka_oracle import KafkaBroker
from kafkalog import LogManager
from kafkalog.coordinator.txn_store import transaction_key
from kafkalog.protocol.wire import make as make_body
from kafkalog.server import serve
from server_helpers import decode_response, exchange, frame, request_module

pytestmark = [pytest.mark.one_codec, pytest.mark.timeout(300)]

SETTINGS = {
    "auto.create.topics.enable": "true",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "2",
}


def _error(fn: Any) -> str:
    try:
        fn()
    except KafkaException as err:
        return str(err.args[0].name())
    return "NONE"


def probe(bootstrap: str) -> dict[str, Any]:
    """What an ordinary client gets from each thing it may try on internal topics."""
    out: dict[str, Any] = {}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "probe", "allow.auto.create.topics": True}
    )
    try:
        consumer.list_topics("__transaction_state", timeout=10)  # asks with auto-creation on
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            topics = admin.list_topics(timeout=10).topics
            if "__transaction_state" in topics and topics["__transaction_state"].partitions:
                break
            time.sleep(0.2)
        topics = admin.list_topics(timeout=10).topics
        out["auto-created partitions"] = len(topics["__transaction_state"].partitions)
        resource = ConfigResource("topic", "__transaction_state")
        described = admin.describe_configs([resource])[resource].result(10)
        out["auto-created cleanup.policy"] = described["cleanup.policy"].value
        # the group's coordinator lookup creates __consumer_offsets
        consumer.committed([TopicPartition("any", 0)], timeout=20)
        out["offsets partitions"] = len(
            admin.list_topics(timeout=10).topics["__consumer_offsets"].partitions
        )
    finally:
        consumer.close()
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000})
    for topic in ("__consumer_offsets", "__transaction_state"):
        producer.produce(
            topic, b"forged", key=b"k", partition=0, on_delivery=lambda e, m: errors.append(e)
        )
    producer.flush(15)
    out["produce"] = sorted(e.name() if e else "NONE" for e in errors)
    out["delete records"] = _error(
        lambda: admin.delete_records([TopicPartition("__consumer_offsets", 0, 0)])[
            TopicPartition("__consumer_offsets", 0, 0)
        ].result(10)
    )
    out["create partitions"] = _error(
        lambda: admin.create_partitions([NewPartitions("__transaction_state", 3)])[
            "__transaction_state"
        ].result(10)
    )
    return out


EXPECTED = {
    "auto-created partitions": 2,
    "auto-created cleanup.policy": "compact",
    "offsets partitions": 3,
    "produce": ["TOPIC_EXCEPTION", "TOPIC_EXCEPTION"],
    "delete records": "TOPIC_EXCEPTION",
    "create partitions": "NONE",
}


def test_an_ordinary_client_gets_what_kafka_answers(tmp_path: Path) -> None:
    with serve(tmp_path, overrides=SETTINGS) as server:
        assert probe(server.bootstrap_servers) == EXPECTED


@pytest.mark.kafka
@pytest.mark.slow
def test_kafka_answers_the_same(tmp_path: Path) -> None:
    from kafka_oracle import KAFKA_VERSIONS

    version = KAFKA_VERSIONS[-1]
    with KafkaBroker(version, tmp_path / "broker", SETTINGS) as broker:
        assert probe(broker.bootstrap) == EXPECTED


def test_find_coordinator_creates_the_offsets_topic_and_says_not_yet(tmp_path: Path) -> None:
    with serve(tmp_path, overrides=SETTINGS) as server:
        port = int(server.bootstrap_servers.rsplit(":", 1)[1])
        mod = request_module(10, 4)
        body = make_body(mod, "FindCoordinatorRequest", key_type=0, coordinator_keys=("g",))
        answers = []
        for _ in range(2):
            data = exchange(port, frame(10, 4, body))
            answers.append(decode_response(10, 4, data, header_v1=True).coordinators[0])
        assert answers[0].error_code == 15  # COORDINATOR_NOT_AVAILABLE
        assert answers[0].node_id == -1
        assert answers[1].error_code == 0
        assert answers[1].node_id == 1
    with LogManager(tmp_path) as manager:
        assert manager.topics()["__consumer_offsets"] == 3
        assert manager.topic_config("__consumer_offsets").compact


def test_a_forged_prepare_commit_is_refused_and_the_coordinator_keeps_its_state(
    tmp_path: Path,
) -> None:
    """The attack: a plain Produce of a PrepareCommit record for another producer's open
    transaction to ``__transaction_state``, then a restart."""
    with serve(tmp_path, overrides=SETTINGS) as server:
        bootstrap = server.bootstrap_servers
        victim = Producer({"bootstrap.servers": bootstrap, "transactional.id": "victim"})
        victim.init_transactions(20)
        victim.begin_transaction()
        for i in range(5):
            victim.produce("data", b"uncommitted-%d" % i)
        victim.flush(10)
        attacker = Producer({"bootstrap.servers": bootstrap})
        errors: list[Any] = []
        for p in range(2):
            attacker.produce(
                "__transaction_state",
                b"\x00\x00" + b"forged PrepareCommit",
                key=transaction_key("victim"),
                partition=p,
                on_delivery=lambda e, m: errors.append(e),
            )
        attacker.flush(10)
        assert [e.name() for e in errors] == ["TOPIC_EXCEPTION", "TOPIC_EXCEPTION"]
    with LogManager(tmp_path) as manager:
        for p in range(manager.topics()["__transaction_state"]):
            log = manager.get_log("__transaction_state", p)
            for record in log.read_records(0):
                assert b"forged" not in bytes(record.value or b"")
    with serve(tmp_path, overrides=SETTINGS) as server:
        reader = Consumer(
            {
                "bootstrap.servers": server.bootstrap_servers,
                "group.id": "reader",
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
            }
        )
        reader.assign([TopicPartition("data", 0, 0)])
        seen = [m for m in (reader.poll(0.5) for _ in range(6)) if m is not None and not m.error()]
        reader.close()
        assert seen == []  # the victim never committed


def test_the_cluster_id_is_chosen_once(tmp_path: Path) -> None:
    ids = []
    for _ in range(2):
        with serve(tmp_path) as server:
            ids.append(
                AdminClient({"bootstrap.servers": server.bootstrap_servers})
                .list_topics(timeout=10)
                .cluster_id
            )
    assert ids[0] == ids[1]
    assert (tmp_path / "kafkalog-cluster-id").read_text() == ids[0]
    assert not (tmp_path / "meta.properties").exists()  # that file is kafka-storage format's


@pytest.mark.parametrize(
    ("api_key", "version", "cls", "fields"),
    [
        (2, 7, "ListOffsetsRequest", {"replica_id": -1, "isolation_level": 0}),
        (
            8,
            8,
            "OffsetCommitRequest",
            {
                "group_id": "g",
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "group_instance_id": None,
            },
        ),
    ],
)
def test_a_null_where_kafka_allows_none_closes_only_that_connection(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    api_key: int,
    version: int,
    cls: str,
    fields: dict[str, Any],
) -> None:
    """Kafka's generated readers refuse a non-nullable array sent as null: the request cannot
    be parsed and the connection is closed, with a warning, not a traceback."""
    with serve(tmp_path) as server:
        port = int(server.bootstrap_servers.rsplit(":", 1)[1])
        body = make_body(request_module(api_key, version), cls, topics=None, **fields)
        assert exchange(port, frame(api_key, version, body)) == b""
        assert AdminClient({"bootstrap.servers": server.bootstrap_servers}).list_topics(timeout=10)
    assert "non-nullable field topics was serialized as null" in caplog.text
    assert "Traceback" not in caplog.text and "unexpected error" not in caplog.text

"""Requests whose handlers used to crash their connection, as librdkafka's own suite sends them:
the legacy AlterConfigs (API 33, no operation field), and OffsetForLeaderEpoch version 2 (no
replica id field), which librdkafka sends to check a consumer's position after an error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kafkalog import LogManager, Record
from kafkalog.protocol.wire import make
from kafkalog.server import serve
from server_helpers import decode_response, exchange, frame, request_module

pytestmark = [pytest.mark.one_codec, pytest.mark.timeout(120)]


def _port(server: serve.KafkaServer) -> int:
    return int(server.bootstrap_servers.rsplit(":", 1)[1])


def test_legacy_alter_configs_replaces_a_topics_overrides(tmp_path: Path) -> None:
    with LogManager(tmp_path) as manager:
        manager.create_topic("t", 1, {"retention.ms": "1000", "cleanup.policy": "compact"})
    with serve(tmp_path) as server:
        mod = request_module(33, 2)
        body = make(
            mod,
            "AlterConfigsRequest",
            resources=(
                make(
                    mod,
                    "AlterConfigsResource",
                    resource_type=2,
                    resource_name="t",
                    configs=(make(mod, "AlterableConfig", name="retention.ms", value="5000"),),
                ),
            ),
            validate_only=False,
        )
        data = exchange(_port(server), frame(33, 2, body))
        answer = decode_response(33, 2, data, header_v1=True)
        assert [r.error_code for r in answer.responses] == [0]
    with LogManager(tmp_path) as manager:  # the whole set: cleanup.policy is back to default
        assert manager.topic_overrides("t") == {"retention.ms": "5000"}


@pytest.mark.parametrize("version", [2, 3, 4])
def test_offset_for_leader_epoch_of_every_version(tmp_path: Path, version: int) -> None:
    with LogManager(tmp_path) as manager:
        manager.create_topic("t", 1)[0].append([Record(b"v")] * 3)
    with serve(tmp_path) as server:
        mod = request_module(23, version)
        body = make(
            mod,
            "OffsetForLeaderEpochRequest",
            replica_id=-1,
            topics=(
                make(
                    mod,
                    "OffsetForLeaderTopic",
                    topic="t",
                    partitions=(
                        make(
                            mod,
                            "OffsetForLeaderPartition",
                            partition=0,
                            current_leader_epoch=0,
                            leader_epoch=0,
                        ),
                    ),
                ),
            ),
        )
        data = exchange(_port(server), frame(23, version, body))
        assert data, "the connection was closed"
        answer = decode_response(23, version, data, header_v1=version >= 4)
        part = answer.topics[0].partitions[0]
        assert (part.error_code, part.leader_epoch, part.end_offset) == (0, 0, 3)


def test_authorized_operations_are_every_operation_without_an_authorizer(tmp_path: Path) -> None:
    """KIP-430: asked for, the topic's, cluster's and group's authorized operations are every
    operation of the resource type (8, 7 and 3 of them), as Kafka answers without an
    authorizer; not asked, the "omitted" sentinel."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    with LogManager(tmp_path) as manager:
        manager.create_topic("t", 1)
    with serve(tmp_path) as server:
        admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
        described = admin.describe_topics(
            TopicCollection(["t"]), include_authorized_operations=True
        )
        topic = described["t"].result(10)
        assert len(topic.authorized_operations) == 8
        cluster = admin.describe_cluster(include_authorized_operations=True).result(10)
        assert len(cluster.authorized_operations) == 7
        plain = admin.describe_cluster().result(10)
        assert plain.authorized_operations is None


def test_produce_says_which_records_it_refused(tmp_path: Path) -> None:
    """KIP-467 (Produce v8+): a batch refused for some of its records names each of them in
    ``record_errors``, as Kafka's RecordValidationException does; the client fails those with
    INVALID_RECORD and the rest as their batch's casualties."""
    from kafkalog import MemoryRecords
    from server_helpers import produce_body

    with LogManager(tmp_path) as manager:
        manager.create_topic("c", 1, {"cleanup.policy": "compact"})
    with serve(tmp_path) as server:
        records = [Record(b"v", key=None if i in (1, 3) else b"k") for i in range(5)]
        body = produce_body(9, "c", 0, bytes(MemoryRecords.build(records)))
        data = exchange(_port(server), frame(0, 9, body))
        part = decode_response(0, 9, data, header_v1=True).responses[0].partition_responses[0]
        assert part.error_code == 87  # INVALID_RECORD
        assert [e.batch_index for e in part.record_errors] == [1, 3]
        assert all("without key" in e.batch_index_error_message for e in part.record_errors)
        assert part.error_message and "record 1" in part.error_message


def test_list_groups_by_type_as_kafka_4(tmp_path: Path) -> None:
    """ListGroups v5's type filter (KIP-848; ``kafka-groups.sh --list --type``): every group
    here is a classic one."""
    from confluent_kafka import ConsumerGroupType, Producer
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaConsumer

    with serve(tmp_path) as server:
        bootstrap = server.bootstrap_servers
        Producer({"bootstrap.servers": bootstrap}).produce("t", b"v")
        consumer = KafkaConsumer("t", bootstrap_servers=bootstrap, group_id="classic-g")
        consumer.poll(2000)
        consumer.close()
        admin = AdminClient({"bootstrap.servers": bootstrap})

        def listed(*types: Any) -> list[str]:
            result = admin.list_consumer_groups(types=set(types)).result(10)
            return sorted(g.group_id for g in result.valid)

        assert listed(ConsumerGroupType.CLASSIC) == ["classic-g"]
        assert listed(ConsumerGroupType.CONSUMER) == []

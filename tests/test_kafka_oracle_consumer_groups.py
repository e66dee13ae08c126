"""A KIP-848 consumer group goes on across Apache Kafka 4.3.1 and ``kafkalog serve``: each side
loads the group the other stored in ``__consumer_offsets`` (ConsumerGroupMetadata, member
metadata, target and current assignments) with the same epochs, members and assignments, and
the members go on heartbeating at their epochs (the same KIP-1101 metadata hash: no new epoch),
and Kafka's DumpLogSegments and kafkalog's dump print both brokers' records alike. Both sides
are driven by the same raw ConsumerGroupHeartbeat requests, so what differs can only be the
broker."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from kafka_oracle import KAFKA_VERSIONS, KafkaBroker, dump_log_segments_class, java
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.wire import make
from kafkalog.server import serve
from server_helpers import request_module
from test_server_consumer_groups import Client, describe

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.one_codec, pytest.mark.timeout(300)]


@pytest.fixture
def broker(tmp_path: Path) -> KafkaBroker:
    if "4.3.1" not in KAFKA_VERSIONS:
        pytest.skip("Kafka 4.3.1 is not pinned in interop/kafka-versions.txt")
    return KafkaBroker("4.3.1", tmp_path / "broker", {"log.retention.ms": "-1"})


def _port(bootstrap: str) -> int:
    return int(bootstrap.rsplit(":", 1)[1])


def _settle(c: Client, group: str, members: tuple[str, ...]) -> None:
    """Join ``members`` to ``group`` and heartbeat until the group is Stable, each member
    reporting what it was given as owned (revoking what it is no longer given)."""
    owned: dict[str, dict[Any, set[int]]] = {}
    epochs: dict[str, int] = {}
    for m in members:
        joined = _join(c, group, m)
        assert joined.error_code == ErrorCode.none, joined
        epochs[m] = joined.member_epoch
        owned[m] = _as_owned(joined)
    for _ in range(60):  # Kafka 4.3 computes a target at most once a second (KIP-1263)
        for m in members:
            r = c.heartbeat(group, m, epochs[m], owned=owned[m])
            assert r.error_code == ErrorCode.none, r
            epochs[m] = r.member_epoch
            if r.assignment is not None:
                owned[m] = _as_owned(r)
        if describe(c, group).group_state == "Stable":
            return
        time.sleep(0.25)
    raise AssertionError(f"{group} did not settle: {describe(c, group)}")


def _join(c: Client, group: str, member: str) -> Any:
    """The first heartbeat, after FindCoordinator, while Kafka creates and loads
    ``__consumer_offsets`` (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or _LOAD_IN_PROGRESS)."""
    retry = {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
             ErrorCode.coordinator_load_in_progress}  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        mod = request_module(ApiKey.FIND_COORDINATOR, 4)
        body = make(mod, "FindCoordinatorRequest", key_type=0, coordinator_keys=(group,))
        c.call(ApiKey.FIND_COORDINATOR, 4, body)
        joined = c.join(group, member, ("cg",))
        if joined.error_code not in retry or time.monotonic() > deadline:
            return joined
        time.sleep(0.5)


def _as_owned(response: Any) -> dict[Any, set[int]]:
    from kafkalog.types import uuid_string

    parts = response.assignment.topic_partitions if response.assignment else ()
    return {uuid_string(tp.topic_id.bytes): set(tp.partitions) for tp in parts}


def _loaded_state(c: Client, group: str) -> tuple[Any, ...]:
    """The group's state once Kafka has loaded ``__consumer_offsets`` after its start."""
    deadline = time.monotonic() + 60
    while True:
        state = _state(c, group)
        loading = state[0] in (ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator)
        if not loading or time.monotonic() > deadline:
            return state
        time.sleep(0.5)


def _state(c: Client, group: str) -> tuple[Any, ...]:
    d = describe(c, group)

    def parts(assignment: Any) -> tuple[Any, ...]:
        return tuple((tp.topic_name, tuple(sorted(tp.partitions)))
                     for tp in assignment.topic_partitions)  # fmt: skip

    members = sorted(
        (m.member_id, m.member_epoch, m.client_id, tuple(m.subscribed_topic_names),
         parts(m.assignment), parts(m.target_assignment))
        for m in d.members
    )  # fmt: skip
    return (d.error_code, d.group_state, d.group_epoch, d.assignment_epoch, members)


def test_a_consumer_group_goes_on_across_kafka_and_kafkalog_serve(broker: KafkaBroker) -> None:
    with broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic("cg", 4, 1)]).values():
            future.result(60)
        c = Client(_port(broker.bootstrap))
        _settle(c, "on-kafka", ("a", "b"))
        stored_by_kafka = _state(c, "on-kafka")
        c.close()
    assert stored_by_kafka[1:4] == ("Stable", 3, 3), stored_by_kafka
    overrides = {"auto.create.topics.enable": "false"}
    with serve(broker.log_dir, overrides=overrides) as server:
        c = Client(_port(server.bootstrap_servers))
        assert _state(c, "on-kafka") == stored_by_kafka
        # the members go on at their epochs
        for member_id, epoch, *_ in stored_by_kafka[4]:
            assert c.heartbeat("on-kafka", member_id, epoch).error_code == ErrorCode.none
        _settle(c, "on-kafkalog", ("x", "y"))
        stored_by_kafkalog = _state(c, "on-kafkalog")
        c.close()
    with broker:
        c = Client(_port(broker.bootstrap))
        assert _loaded_state(c, "on-kafkalog") == stored_by_kafkalog
        for member_id, epoch, *_ in stored_by_kafkalog[4]:
            r = c.heartbeat("on-kafkalog", member_id, epoch)
            assert r.error_code == ErrorCode.none, r
            assert r.member_epoch == epoch  # the same metadata hash: no new epoch
        assert _state(c, "on-kafkalog")[2] == stored_by_kafkalog[2]
        c.close()
    # both brokers' records, dumped by Kafka's DumpLogSegments and by kafkalog, line for line
    (segment,) = sorted((broker.log_dir / "__consumer_offsets-0").glob("*.log"))
    flags = ("--files", str(segment), "--offsets-decoder", "--print-data-log")
    theirs = java("4.3.1", dump_log_segments_class("4.3.1"), *flags)
    ours = subprocess.run([sys.executable, "-m", "kafkalog", "dump-log", *flags],
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert ours.rstrip("\n") == theirs.rstrip("\n")
    assert '"type":"5"' in ours and '"type":"8"' in ours


def test_kafkas_group_tools_describe_and_list_a_consumer_group(tmp_path: Path) -> None:
    """kafka-consumer-groups.sh --describe (--members --verbose, --state) and kafka-groups.sh
    --list over a group in the middle of a rebalance: member b waits for a to revoke."""
    with serve(tmp_path) as server:
        assert server.manager is not None
        server.manager.create_topic("t", 4)
        bs = server.bootstrap_servers
        c = Client(_port(bs))
        c.join("g", "a", ("t",))
        c.join("g", "b", ("t",))
        group_tool = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
        members = java("4.3.1", group_tool, "--bootstrap-server", bs, "--describe", "--group", "g",
                       "--members", "--verbose").split("\n")  # fmt: skip
        rows = sorted(line.split() for line in members if line.startswith("g "))
        assert rows == [
            ["g", "a", "/127.0.0.1", "test", "4", "1", "t:0,1,2,3", "2", "t:0,1"],
            ["g", "b", "/127.0.0.1", "test", "0", "2", "-", "2", "t:2,3"],
        ]
        state = java("4.3.1", group_tool, "--bootstrap-server", bs, "--describe", "--group", "g",
                     "--state").split("\n")  # fmt: skip
        (row,) = [line.split() for line in state if line.startswith("g ")]
        assert row[-3:] == ["uniform", "Reconciling", "2"]
        listed = java("4.3.1", "org.apache.kafka.tools.GroupsCommand", "--bootstrap-server", bs,
                      "--list").split("\n")  # fmt: skip
        assert [line.split() for line in listed if line.startswith("g ")] == [
            ["g", "Consumer", "consumer"]
        ]
        c.close()


def _coordinator(c: Client, group: str) -> None:
    """FindCoordinator until the broker has loaded ``__consumer_offsets``."""
    deadline = time.monotonic() + 60
    while True:
        mod = request_module(ApiKey.FIND_COORDINATOR, 4)
        body = make(mod, "FindCoordinatorRequest", key_type=0, coordinator_keys=(group,))
        found = c.call(ApiKey.FIND_COORDINATOR, 4, body).coordinators[0]
        if found.error_code == ErrorCode.none or time.monotonic() > deadline:
            return
        time.sleep(0.5)


def _migrating(c: Any, group: str) -> tuple[tuple[Any, ...], tuple[str, str, int]]:
    """A classic group of two members (a, b) upgraded by a member of the consumer protocol;
    its state, with each member's type, and a classic member's id and generation."""
    from test_server_group_migration import _classic_group

    _coordinator(c, group)
    classic = _classic_group(c, group)
    joined = c.heartbeat(group, "new", 0, topics=("t",), owned={}, rebalance_timeout=30_000)
    assert joined.error_code == ErrorCode.none, joined
    return _migration_state(c, group), (group, str(classic["a_id"]), int(classic["a"]))


def _migration_state(c: Client, group: str) -> tuple[Any, ...]:
    d = describe(c, group)
    types = tuple(sorted((m.member_id, m.member_type) for m in d.members))
    return (*_state(c, group), types)


def test_a_group_migrating_online_goes_on_across_kafka_and_kafkalog_serve(
    broker: KafkaBroker,
) -> None:
    """A classic group upgraded online (classic members and a consumer-protocol member in one
    consumer group, ClassicMemberMetadata in their member records) stored by each broker is
    loaded by the other with the same epochs, members, types and assignments, and its classic
    members' heartbeats are answered alike."""
    from test_server_group_migration import ClassicClient

    with broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic("t", 4, 1)]).values():
            future.result(60)
        c = ClassicClient(_port(broker.bootstrap))
        on_kafka, (group, member, generation) = _migrating(c, "mig-kafka")
        kafka_answer = c.classic_heartbeat(group, member, generation)
        c.close()
    assert sorted(t for _, t in on_kafka[-1]) == [0, 0, 1], on_kafka
    with serve(broker.log_dir, overrides={"auto.create.topics.enable": "false"}) as server:
        c = ClassicClient(_port(server.bootstrap_servers))
        assert _migration_state(c, "mig-kafka") == on_kafka
        assert c.classic_heartbeat(group, member, generation) == kafka_answer
        on_kafkalog, (group, member, generation) = _migrating(c, "mig-kafkalog")
        kafkalog_answer = c.classic_heartbeat(group, member, generation)
        c.close()
    with broker:
        c = ClassicClient(_port(broker.bootstrap))
        _coordinator(c, "mig-kafkalog")
        deadline = time.monotonic() + 60
        while _migration_state(c, "mig-kafkalog")[0] != ErrorCode.none:
            assert time.monotonic() < deadline
            time.sleep(0.5)
        assert _migration_state(c, "mig-kafkalog") == on_kafkalog
        assert c.classic_heartbeat(group, member, generation) == kafkalog_answer
        c.close()

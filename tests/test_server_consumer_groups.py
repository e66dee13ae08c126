"""KIP-848 consumer groups on ``kafkalog serve``, at the protocol: ConsumerGroupHeartbeat's
epochs, revocation before assignment, fencing, session and revocation timeouts, the state
reloaded from ``__consumer_offsets`` after a restart, OffsetCommit v9's member epoch, and the
records in Kafka's formats. (The Java consumer with ``group.protocol=consumer`` is in
test_server_java_consumer_groups.py.)"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafkalog import LogManager
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.wire import make, payload_module
from kafkalog.records.coordinator import decode
from kafkalog.records.memory_records import MemoryRecords
from kafkalog.server import serve
from kafkalog.types import OFFSETS_TOPIC, uuid_string
from server_helpers import MS, decode_response, frame, is_flexible, read_frame, request_module

pytestmark = [pytest.mark.one_codec, pytest.mark.timeout(120)]

HB, DESCRIBE = ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE


class Client:
    """One connection speaking raw requests."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.correlation = 0

    def call(self, api: int, version: int, body: Any) -> Any:
        self.correlation += 1
        self.sock.sendall(frame(api, version, body, self.correlation))
        flexible = is_flexible(api, version)
        return decode_response(api, version, read_frame(self.sock), header_v1=flexible)

    def heartbeat(
        self,
        group: str,
        member: str,
        epoch: int,
        *,
        topics: tuple[str, ...] | None = None,
        owned: dict[str, set[int]] | None = None,
        rebalance_timeout: int = -1,
        regex: str | None = None,
        assignor: str | None = None,
        instance: str | None = None,
        version: int = 1,
    ) -> Any:
        mod = request_module(HB, version)
        parts = None
        if owned is not None:
            parts = tuple(
                make(mod, "TopicPartitions", topic_id=_wire(t), partitions=tuple(sorted(ps)))
                for t, ps in owned.items()
            )
        extra = {"subscribed_topic_regex": regex} if version >= 1 else {}
        body = make(
            mod, "ConsumerGroupHeartbeatRequest", group_id=group, member_id=member,
            member_epoch=epoch, instance_id=instance, rack_id=None,
            rebalance_timeout=rebalance_timeout * MS, subscribed_topic_names=topics,
            server_assignor=assignor, topic_partitions=parts, **extra,
        )  # fmt: skip
        return self.call(HB, version, body)

    def join(self, group: str, member: str, topics: tuple[str, ...], **kw: Any) -> Any:
        return self.heartbeat(group, member, 0, topics=topics, owned={}, rebalance_timeout=30_000,
                              **kw)  # fmt: skip

    def close(self) -> None:
        self.sock.close()


def _wire(topic_id: str) -> uuid.UUID:
    from kafkalog.types import uuid_bytes

    return uuid.UUID(bytes=uuid_bytes(topic_id))


def assigned(response: Any) -> dict[str, set[int]] | None:
    if response.assignment is None:
        return None
    return {
        uuid_string(tp.topic_id.bytes): set(tp.partitions)
        for tp in response.assignment.topic_partitions
    }


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[Any, Client]]:
    overrides = {"group.consumer.heartbeat.interval.ms": "500"}
    with serve(tmp_path, overrides=overrides) as server:
        assert server.manager is not None
        server.manager.create_topic("t", 4)
        client = Client(int(server.bootstrap_servers.rsplit(":", 1)[1]))
        yield server, client
        client.close()


def _tid(server: Any, topic: str = "t") -> str:
    topic_id = server.manager.topic_id(topic)
    assert topic_id is not None
    return str(topic_id)


def test_a_second_member_gets_partitions_only_after_the_first_revokes_them(
    broker: tuple[Any, Client],
) -> None:
    """Kafka's reconciliation: the first member keeps two of its four partitions while it
    revokes the other two (it is never told to drop everything); the second is at the new
    epoch with nothing until they are released, then gets exactly those two."""
    server, c = broker
    t = _tid(server)
    a = c.join("g", "a", ("t",))
    assert (a.error_code, a.member_epoch, assigned(a)) == (ErrorCode.none, 1, {t: {0, 1, 2, 3}})
    assert a.heartbeat_interval == 500 * MS
    b = c.join("g", "b", ("t",))
    assert (b.error_code, b.member_epoch, assigned(b)) == (ErrorCode.none, 2, {})
    # a, still at epoch 1, is told to keep two: the others are pending revocation
    a = c.heartbeat("g", "a", 1, owned={t: {0, 1, 2, 3}})
    assert (a.member_epoch, assigned(a)) == (1, {t: {0, 1}})
    again = c.heartbeat("g", "a", 1, owned={t: {0, 1, 2, 3}})  # not revoked yet: no change
    assert (again.member_epoch, assigned(again)) == (1, None)
    b = c.heartbeat("g", "b", 2, owned={})
    assert (b.member_epoch, assigned(b)) == (2, None)  # still unreleased
    a = c.heartbeat("g", "a", 1, owned={t: {0, 1}})
    assert (a.error_code, a.member_epoch) == (ErrorCode.none, 2)
    b = c.heartbeat("g", "b", 2, owned={})
    assert (b.member_epoch, assigned(b)) == (2, {t: {2, 3}})
    described = describe(c, "g")
    assert (described.group_state, described.group_epoch, described.assignment_epoch) == (
        "Stable", 2, 2,
    )  # fmt: skip
    members = {m.member_id: m for m in described.members}
    assert {m: sorted(p for tp in v.assignment.topic_partitions for p in tp.partitions)
            for m, v in members.items()} == {"a": [0, 1], "b": [2, 3]}  # fmt: skip
    assert described.assignor_name == "uniform"


def describe(c: Client, group: str) -> Any:
    mod = request_module(DESCRIBE, 1)
    body = make(mod, "ConsumerGroupDescribeRequest", group_ids=(group,),
                include_authorized_operations=False)  # fmt: skip
    return c.call(DESCRIBE, 1, body).groups[0]


def test_epochs_are_checked_and_requests_validated(broker: tuple[Any, Client]) -> None:
    server, c = broker
    t = _tid(server)
    assert c.join("g", "a", ("t",)).member_epoch == 1
    ahead = c.heartbeat("g", "a", 5, owned={t: {0}})
    assert ahead.error_code == ErrorCode.fenced_member_epoch and ahead.member_epoch == -1
    assert c.heartbeat("g", "nobody", 1).error_code == ErrorCode.unknown_member_id
    assert c.heartbeat("nothing", "a", 1).error_code == ErrorCode.group_id_not_found
    invalid = {
        "GroupId can't be empty.": c.join("", "a", ("t",)),
        "MemberId can't be empty.": c.join("g", "", ("t",)),
        "RebalanceTimeoutMs must be provided in first request.":
            c.heartbeat("g", "x", 0, topics=("t",), owned={}),
        "TopicPartitions must be empty when (re-)joining.":
            c.heartbeat("g", "x", 0, topics=("t",), owned={t: {1}}, rebalance_timeout=1000),
        "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.":
            c.heartbeat("g", "x", 0, owned={}, rebalance_timeout=1000),
        "MemberEpoch is invalid: -3.": c.heartbeat("g", "a", -3),
    }  # fmt: skip
    for message, response in invalid.items():
        assert (response.error_code, response.error_message) == (ErrorCode.invalid_request, message)
    unknown = c.join("g", "y", ("t",), assignor="sticky")
    assert unknown.error_code == ErrorCode.unsupported_assignor
    # a lost answer: the previous epoch with a subset of the assignment is still accepted
    b = c.join("g", "b", ("t",))
    assert b.member_epoch == 2
    a = c.heartbeat("g", "a", 1, owned={t: {0, 1}})
    assert a.error_code == ErrorCode.none and a.member_epoch == 2
    late = c.heartbeat("g", "a", 1, owned={t: {0, 1}})
    assert late.error_code == ErrorCode.none and late.member_epoch == 2


def test_a_member_that_leaves_is_removed_and_the_rest_take_its_partitions(
    broker: tuple[Any, Client],
) -> None:
    server, c = broker
    t = _tid(server)
    c.join("g", "a", ("t",))
    c.join("g", "b", ("t",))
    c.heartbeat("g", "a", 1, owned={t: {0, 1}})
    left = c.heartbeat("g", "b", -1)
    assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)
    a = c.heartbeat("g", "a", 2, owned={t: {0, 1}})
    assert (a.member_epoch, assigned(a)) == (3, {t: {0, 1, 2, 3}})
    assert [m.member_id for m in describe(c, "g").members] == ["a"]


def test_a_member_silent_past_its_session_is_fenced(tmp_path: Path) -> None:
    overrides = {"group.consumer.session.timeout.ms": "1500"}
    with serve(tmp_path, overrides=overrides) as server:
        assert server.manager is not None
        server.manager.create_topic("t", 2)
        c = Client(int(server.bootstrap_servers.rsplit(":", 1)[1]))
        t = _tid(server)
        c.join("g", "a", ("t",))
        c.join("g", "b", ("t",))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # a keeps heartbeating; b goes quiet
            a = c.heartbeat("g", "a", _epoch(c, "g", "a"), owned=_owned(c, "g", "a"))
            assert a.error_code == ErrorCode.none
            if assigned(a) == {t: {0, 1}}:
                break
            time.sleep(0.3)
        described = describe(c, "g")
        assert [m.member_id for m in described.members] == ["a"]
        assert c.heartbeat("g", "b", 2).error_code == ErrorCode.unknown_member_id
        c.close()


def _epoch(c: Client, group: str, member: str) -> int:
    return next(m.member_epoch for m in describe(c, group).members if m.member_id == member)


def _owned(c: Client, group: str, member: str) -> dict[str, set[int]]:
    m = next(m for m in describe(c, group).members if m.member_id == member)
    return {
        uuid_string(tp.topic_id.bytes): set(tp.partitions) for tp in m.assignment.topic_partitions
    }


def test_a_restart_loads_the_group_from_its_records_in_kafkas_format(tmp_path: Path) -> None:
    """The group's epoch, members and assignments come back from ``__consumer_offsets``; the
    records are Kafka's types, in Kafka's order for a join."""
    with serve(tmp_path) as server:
        assert server.manager is not None
        server.manager.create_topic("t", 4)
        c = Client(int(server.bootstrap_servers.rsplit(":", 1)[1]))
        t = _tid(server)
        c.join("g", "a", ("t",))
        c.join("g", "b", ("t",))
        c.heartbeat("g", "a", 1, owned={t: {0, 1}})
        c.heartbeat("g", "b", 2, owned={})
        before = describe(c, "g")
        c.close()
    with serve(tmp_path) as server:
        c = Client(int(server.bootstrap_servers.rsplit(":", 1)[1]))
        after = describe(c, "g")
        assert after == before
        b = c.heartbeat("g", "b", 2, owned={t: {2, 3}})
        assert (b.error_code, b.member_epoch) == (ErrorCode.none, 2)
        c.close()
    types = [(r.record_type, r.key.get("memberId")) for r in _records(tmp_path) if r.key]
    # a's join: subscription, epoch, target member + metadata, current assignment
    assert types[:5] == [(5, "a"), (3, None), (7, "a"), (6, None), (8, "a")]


def _records(log_dir: Path) -> list[Any]:
    """Every record of ``__consumer_offsets``, decoded, in each partition's order."""
    manager = LogManager(log_dir)
    out = []
    try:
        for log in (manager.get_log(OFFSETS_TOPIC, p) for p in range(50)):
            info = log.read(log.log_start_offset, 1 << 20) if log.log_end_offset else None
            if info is None or info.records is None:
                continue
            for batch in MemoryRecords(info.records.read()).batches():
                out += [decode("offsets", r.key, r.value) for r in batch if r.key is not None]
    finally:
        manager.close()
    return out


def test_offset_commit_v9_checks_the_member_epoch(broker: tuple[Any, Client]) -> None:
    _server, c = broker
    c.join("g", "a", ("t",))

    def commit(member: str, epoch: int, version: int = 9) -> ErrorCode:
        mod = request_module(ApiKey.OFFSET_COMMIT, version)
        part = make(mod, "OffsetCommitRequestPartition", partition_index=0, committed_offset=5,
                    committed_leader_epoch=-1, committed_metadata="")  # fmt: skip
        body = make(
            mod, "OffsetCommitRequest", group_id="g", generation_id_or_member_epoch=epoch,
            member_id=member, group_instance_id=None,
            topics=(make(mod, "OffsetCommitRequestTopic", name="t", partitions=(part,)),),
        )  # fmt: skip
        return c.call(ApiKey.OFFSET_COMMIT, version, body).topics[0].partitions[0].error_code

    assert commit("a", 0) == ErrorCode.stale_member_epoch
    assert commit("z", 1) == ErrorCode.unknown_member_id
    assert commit("a", 1, version=8) == ErrorCode.unsupported_version
    assert commit("a", 1) == ErrorCode.none
    mod = request_module(ApiKey.OFFSET_FETCH, 9)
    group = make(mod, "OffsetFetchRequestGroup", group_id="g", member_id="a", member_epoch=0,
                 topics=None)  # fmt: skip
    body = make(mod, "OffsetFetchRequest", groups=(group,), require_stable=False)
    assert c.call(ApiKey.OFFSET_FETCH, 9, body).groups[0].error_code == ErrorCode.stale_member_epoch
    group = make(mod, "OffsetFetchRequestGroup", group_id="g", member_id="a", member_epoch=1,
                 topics=None)  # fmt: skip
    body = make(mod, "OffsetFetchRequest", groups=(group,), require_stable=False)
    fetched = c.call(ApiKey.OFFSET_FETCH, 9, body).groups[0]
    assert fetched.error_code == ErrorCode.none
    assert fetched.topics[0].partitions[0].committed_offset == 5


def test_list_groups_shows_consumer_and_classic_groups_by_type(broker: tuple[Any, Client]) -> None:
    _server, c = broker
    c.join("modern", "a", ("t",))
    mod = payload_module(ApiKey.LIST_GROUPS, 5, False)
    body = make(mod, "ListGroupsRequest", states_filter=(), types_filter=("consumer",))
    listed = c.call(ApiKey.LIST_GROUPS, 5, body).groups
    assert [(g.group_id, g.group_type, g.group_state, g.protocol_type) for g in listed] == [
        ("modern", "consumer", "Stable", "consumer")
    ]
    body = make(mod, "ListGroupsRequest", states_filter=(), types_filter=("classic",))
    assert c.call(ApiKey.LIST_GROUPS, 5, body).groups == ()


def test_metadata_by_topic_id_with_the_empty_name_the_java_client_sends(
    broker: tuple[Any, Client],
) -> None:
    """A consumer told its assignment by topic ID asks Metadata for that ID with the name
    left "" (not null): the ID is what counts, as in KafkaApis."""
    server, c = broker
    mod = request_module(ApiKey.METADATA, 12)
    ask = make(mod, "MetadataRequestTopic", topic_id=_wire(_tid(server)), name="")
    body = make(mod, "MetadataRequest", topics=(ask,), allow_auto_topic_creation=False,
                include_topic_authorized_operations=False)  # fmt: skip
    (topic,) = c.call(ApiKey.METADATA, 12, body).topics
    assert (topic.error_code, topic.name, len(topic.partitions)) == (ErrorCode.none, "t", 4)


def _commit(c: Client, group: str, topic: str, member: str = "", epoch: int = -1) -> ErrorCode:
    mod = request_module(ApiKey.OFFSET_COMMIT, 9)
    part = make(mod, "OffsetCommitRequestPartition", partition_index=0, committed_offset=1,
                committed_leader_epoch=-1, committed_metadata="")  # fmt: skip
    body = make(
        mod, "OffsetCommitRequest", group_id=group, generation_id_or_member_epoch=epoch,
        member_id=member, group_instance_id=None,
        topics=(make(mod, "OffsetCommitRequestTopic", name=topic, partitions=(part,)),),
    )  # fmt: skip
    return c.call(ApiKey.OFFSET_COMMIT, 9, body).topics[0].partitions[0].error_code


def test_delete_groups_offset_delete_and_join_group_respect_a_live_consumer_group(
    broker: tuple[Any, Client],
) -> None:
    """A consumer group with members is not deleted (NON_EMPTY_GROUP), keeps the offsets of
    the topics it subscribes to (GROUP_SUBSCRIBED_TO_TOPIC) and takes a classic member as
    Kafka takes one (MEMBER_ID_REQUIRED first: online migration) but not one of another
    protocol type (INCONSISTENT_GROUP_PROTOCOL); once empty it is deleted, its records
    tombstoned."""
    server, c = broker
    server.manager.create_topic("u", 1)
    assert c.join("g", "a", ("t",)).member_epoch == 1
    assert _commit(c, "g", "t", "a", 1) == ErrorCode.none
    assert _commit(c, "g", "u", "a", 1) == ErrorCode.none

    def delete_groups() -> ErrorCode:
        mod = request_module(ApiKey.DELETE_GROUPS, 2)
        body = make(mod, "DeleteGroupsRequest", groups_names=("g",))
        return c.call(ApiKey.DELETE_GROUPS, 2, body).results[0].error_code

    def offset_delete(topic: str) -> ErrorCode:
        mod = request_module(ApiKey.OFFSET_DELETE, 0)
        part = make(mod, "OffsetDeleteRequestPartition", partition_index=0)
        ask = make(mod, "OffsetDeleteRequestTopic", name=topic, partitions=(part,))
        body = make(mod, "OffsetDeleteRequest", group_id="g", topics=(ask,))
        response = c.call(ApiKey.OFFSET_DELETE, 0, body)
        return response.error_code or response.topics[0].partitions[0].error_code

    def join_classic(protocol_type: str = "consumer") -> ErrorCode:
        mod = request_module(ApiKey.JOIN_GROUP, 9)
        protocol = make(mod, "JoinGroupRequestProtocol", name="range", metadata=b"")
        body = make(mod, "JoinGroupRequest", group_id="g", session_timeout=10_000 * MS,
                    rebalance_timeout=10_000 * MS, member_id="", group_instance_id=None,
                    protocol_type=protocol_type, protocols=(protocol,), reason=None)  # fmt: skip
        return c.call(ApiKey.JOIN_GROUP, 9, body).error_code

    assert delete_groups() == ErrorCode.non_empty_group
    assert offset_delete("t") == ErrorCode.group_subscribed_to_topic
    assert offset_delete("u") == ErrorCode.none
    assert join_classic() == ErrorCode.member_id_required
    assert join_classic("connect") == ErrorCode.inconsistent_group_protocol
    assert c.heartbeat("g", "a", -1).error_code == ErrorCode.none
    assert delete_groups() == ErrorCode.none
    assert describe(c, "g").error_code == ErrorCode.group_id_not_found
    assert delete_groups() == ErrorCode.group_id_not_found
    # a new group of the same name starts from epoch 1 again
    assert c.join("g", "b", ("t",)).member_epoch == 1


def test_a_hostile_regex_is_answered_in_linear_time_and_a_bad_one_refused(
    broker: tuple[Any, Client],
) -> None:
    """The coordinator runs the client's expression over every topic name: RE2 (Kafka's
    dialect) takes linear time where a backtracking engine would take ages over ``a``*249
    for ``(a|aa)+b``; an expression RE2 cannot parse is INVALID_REGULAR_EXPRESSION."""
    server, c = broker
    server.manager.create_topic("a" * 249, 1)
    started = time.monotonic()
    hostile = c.heartbeat("g", "h", 0, owned={}, rebalance_timeout=1000, regex="(a|aa)+b")
    assert hostile.error_code == ErrorCode.none and assigned(hostile) == {}
    assert time.monotonic() - started < 5
    bad = c.heartbeat("g2", "h", 0, owned={}, rebalance_timeout=1000, regex="(?<=a)b")
    assert bad.error_code == ErrorCode.invalid_regular_expression
    assert bad.error_message.startswith("SubscribedTopicRegex (?<=a)b is invalid")


def test_an_empty_classic_group_becomes_a_consumer_group_and_keeps_its_offsets(
    tmp_path: Path,
) -> None:
    """Kafka's offline migration: a classic group that emptied is taken over by the first
    ConsumerGroupHeartbeat; its GroupMetadata is tombstoned in the same batch, its committed
    offsets stay, and a restart finds only the consumer group."""
    from kafka import KafkaConsumer, TopicPartition

    with serve(tmp_path, overrides={"group.initial.rebalance.delay.ms": "0"}) as server:
        assert server.manager is not None
        server.manager.create_topic("t", 1)
        classic = KafkaConsumer("t", bootstrap_servers=server.bootstrap_servers, group_id="g",
                                enable_auto_commit=False)  # fmt: skip
        classic.poll(2000)
        from kafka.structs import OffsetAndMetadata as Commit

        classic.commit({TopicPartition("t", 0): Commit(7, "", -1)})
        classic.close()
        c = Client(int(server.bootstrap_servers.rsplit(":", 1)[1]))
        joined = c.join("g", "a", ("t",))
        assert (joined.error_code, joined.member_epoch) == (ErrorCode.none, 1)
        c.close()
    with serve(tmp_path) as server:
        c = Client(int(server.bootstrap_servers.rsplit(":", 1)[1]))
        mod = payload_module(ApiKey.LIST_GROUPS, 5, False)
        body = make(mod, "ListGroupsRequest", states_filter=(), types_filter=())
        listed = c.call(ApiKey.LIST_GROUPS, 5, body).groups
        assert [(g.group_id, g.group_type) for g in listed] == [("g", "consumer")]
        assert [m.member_id for m in describe(c, "g").members] == ["a"]
        mod = request_module(ApiKey.OFFSET_FETCH, 9)
        group = make(mod, "OffsetFetchRequestGroup", group_id="g", member_id=None,
                     member_epoch=-1, topics=None)  # fmt: skip
        body = make(mod, "OffsetFetchRequest", groups=(group,), require_stable=False)
        fetched = c.call(ApiKey.OFFSET_FETCH, 9, body).groups[0]
        assert fetched.topics[0].partitions[0].committed_offset == 7
        c.close()
    metadata = [
        (r.record_type, r.value is None) for r in _records(tmp_path) if r.record_type in (2, 5)
    ]
    assert metadata[-3:] == [(2, False), (2, True), (5, False)]  # stored, tombstoned, then a's


def test_a_commit_from_an_older_epoch_counts_for_partitions_given_by_then(
    broker: tuple[Any, Client],
) -> None:
    """KIP-1251: a member whose epoch moved on while its commit was on its way may commit a
    partition given to it at or before the epoch it names (assignmentEpoch <= clientEpoch <=
    memberEpoch); a partition it no longer holds, or got later, is STALE_MEMBER_EPOCH. The
    same rule for a transactional commit (TxnOffsetCommit), which names the member too. The
    epochs are in the current-assignment records, as Kafka 4.3 writes them."""
    server, c = broker
    t = _tid(server)
    c.join("g", "a", ("t",))  # a: epoch 1, all four partitions given at epoch 1
    c.join("g", "b", ("t",))
    c.heartbeat("g", "a", 1, owned={t: {0, 1, 2, 3}})
    assert c.heartbeat("g", "a", 1, owned={t: {0, 1}}).member_epoch == 2  # keeps 0 and 1

    def commit(partition: int, epoch: int) -> ErrorCode:
        mod = request_module(ApiKey.OFFSET_COMMIT, 9)
        part = make(mod, "OffsetCommitRequestPartition", partition_index=partition,
                    committed_offset=1, committed_leader_epoch=-1,
                    committed_metadata="")  # fmt: skip
        body = make(
            mod, "OffsetCommitRequest", group_id="g", generation_id_or_member_epoch=epoch,
            member_id="a", group_instance_id=None,
            topics=(make(mod, "OffsetCommitRequestTopic", name="t", partitions=(part,)),),
        )  # fmt: skip
        return c.call(ApiKey.OFFSET_COMMIT, 9, body).topics[0].partitions[0].error_code

    def txn_commit(partition: int, epoch: int) -> ErrorCode:
        mod = request_module(ApiKey.TXN_OFFSET_COMMIT, 3)
        part = make(mod, "TxnOffsetCommitRequestPartition", partition_index=partition,
                    committed_offset=1, committed_leader_epoch=-1,
                    committed_metadata="")  # fmt: skip
        body = make(
            mod, "TxnOffsetCommitRequest", transactional_id="tx", group_id="g", producer_id=5,
            producer_epoch=0, generation_id=epoch, member_id="a", group_instance_id=None,
            topics=(make(mod, "TxnOffsetCommitRequestTopic", name="t", partitions=(part,)),),
        )  # fmt: skip
        return c.call(ApiKey.TXN_OFFSET_COMMIT, 3, body).topics[0].partitions[0].error_code

    assert commit(0, 1) == ErrorCode.none  # given at 1, named at 1, member now at 2
    assert commit(2, 1) == ErrorCode.stale_member_epoch  # revoked since
    assert commit(0, 0) == ErrorCode.stale_member_epoch  # before it was given
    assert commit(0, 3) == ErrorCode.stale_member_epoch  # ahead of the member
    assert txn_commit(2, 1) == ErrorCode.stale_member_epoch
    # the member's check passes; what refuses it now is the made-up producer, not the group
    assert txn_commit(0, 1) not in (ErrorCode.stale_member_epoch, ErrorCode.unknown_member_id)
    current = [r.value for r in _records_of(server) if r.record_type == 8 and r.value]
    assert current[-1]["assignedPartitions"][0]["assignmentEpochs"] == [1, 1]


def _records_of(server: Any) -> list[Any]:
    """The records of ``__consumer_offsets`` as the running server's logs hold them."""
    out = []
    for tp, log in server.manager.logs().items():
        if tp.topic != OFFSETS_TOPIC or not log.log_end_offset:
            continue
        info = log.read(log.log_start_offset, 1 << 20)
        if info.records is not None:
            for batch in MemoryRecords(info.records.read()).batches():
                out += [decode("offsets", r.key, r.value) for r in batch if r.key is not None]
    return out

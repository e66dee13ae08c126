"""Share groups (KIP-932) on ``kafkalog serve`` at the protocol: ShareGroupHeartbeat's checks
and epochs, the simple assignor's sharing, ShareFetch's sessions, acquisition locks and
acknowledgements, ShareAcknowledge, ShareGroupDescribe and ListGroups, and the records in
Kafka's formats. (Kafka's own KafkaShareConsumer is in test_server_share_groups.py.)"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafkalog import LogManager, Record
from kafkalog.coordinator.share_group import simple_assignment
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.wire import make
from kafkalog.records.coordinator import decode
from kafkalog.records.memory_records import MemoryRecords
from kafkalog.server import serve
from kafkalog.types import OFFSETS_TOPIC, uuid_bytes, uuid_string
from server_helpers import request_module
from test_server_consumer_groups import Client

pytestmark = [pytest.mark.one_codec, pytest.mark.timeout(120)]

HB, DESCRIBE = ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_DESCRIBE
FETCH, ACK = ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE
ACCEPT, RELEASE, REJECT = 1, 2, 3


def _wire(topic_id: str) -> uuid.UUID:
    return uuid.UUID(bytes=uuid_bytes(topic_id))


class ShareClient(Client):
    def heartbeat(  # type: ignore[override]
        self, group: str, member: str, epoch: int, topics: tuple[str, ...] | None = None
    ) -> Any:
        mod = request_module(HB, 1)
        body = make(mod, "ShareGroupHeartbeatRequest", group_id=group, member_id=member,
                    member_epoch=epoch, rack_id=None, subscribed_topic_names=topics)  # fmt: skip
        return self.call(HB, 1, body)

    def fetch(
        self, group: str, member: str, epoch: int, topic_id: str, partitions: list[int],
        acks: dict[int, list[tuple[int, int, list[int]]]] | None = None,
        max_wait_ms: int = 0, max_records: int = 500,
    ) -> Any:  # fmt: skip
        mod = request_module(FETCH, 1)
        acks = acks or {}
        parts = tuple(
            make(mod, "FetchPartition", partition_index=p, acknowledgement_batches=tuple(
                make(mod, "AcknowledgementBatch", first_offset=f, last_offset=last,
                     acknowledge_types=tuple(types))
                for f, last, types in acks.get(p, [])
            ))
            for p in sorted(set(partitions) | set(acks))
        )  # fmt: skip
        body = make(
            mod, "ShareFetchRequest", group_id=group, member_id=member,
            share_session_epoch=epoch, max_wait=datetime.timedelta(milliseconds=max_wait_ms),
            min_bytes=1, max_bytes=1 << 20, max_records=max_records, batch_size=500,
            topics=(make(mod, "FetchTopic", topic_id=_wire(topic_id), partitions=parts),),
            forgotten_topics_data=(),
        )  # fmt: skip
        return self.call(FETCH, 1, body)

    def acknowledge(
        self, group: str, member: str, epoch: int, topic_id: str, partition: int,
        batches: list[tuple[int, int, list[int]]],
    ) -> Any:  # fmt: skip
        mod = request_module(ACK, 1)
        acks = tuple(
            make(mod, "AcknowledgementBatch", first_offset=f, last_offset=last,
                 acknowledge_types=tuple(types))
            for f, last, types in batches
        )  # fmt: skip
        part = make(mod, "AcknowledgePartition", partition_index=partition,
                    acknowledgement_batches=acks)  # fmt: skip
        topic = make(mod, "AcknowledgeTopic", topic_id=_wire(topic_id), partitions=(part,))
        body = make(mod, "ShareAcknowledgeRequest", group_id=group, member_id=member,
                    share_session_epoch=epoch, topics=(topic,))  # fmt: skip
        return self.call(ACK, 1, body)


def _assignment(response: Any) -> dict[str, set[int]] | None:
    if response.assignment is None:
        return None
    return {uuid_string(t.topic_id.bytes): set(t.partitions)
            for t in response.assignment.topic_partitions}  # fmt: skip


def _acquired(response: Any) -> list[tuple[int, int, int]]:
    return [(r.first_offset, r.last_offset, r.delivery_count)
            for t in response.responses for p in t.partitions
            for r in p.acquired_records]  # fmt: skip


def _ack_codes(response: Any) -> list[int]:
    return [int(p.acknowledge_error_code if hasattr(p, "acknowledge_error_code") else p.error_code)
            for t in response.responses for p in t.partitions]  # fmt: skip


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[Any, ShareClient, str]]:
    overrides = {"group.share.heartbeat.interval.ms": "500", "group.share.max.share.sessions": "3",
                 "group.share.min.record.lock.duration.ms": "1000",
                 "group.share.record.lock.duration.ms": "1000"}  # fmt: skip
    with serve(tmp_path, overrides=overrides) as server:
        assert server.manager is not None
        logs = server.manager.create_topic("t", 2)
        server.manager.alter_group_configs("g", {"share.auto.offset.reset": "earliest"})
        for i in range(10):
            logs[0].append([Record(f"r{i}".encode())])
        client = ShareClient(int(server.bootstrap_servers.rsplit(":", 1)[1]))
        topic_id = server.manager.topic_id("t")
        assert topic_id is not None
        yield server, client, topic_id
        client.close()


def test_heartbeat_checks_and_epochs(broker: tuple[Any, ShareClient, str]) -> None:
    _, c, tid = broker
    assert c.heartbeat("", "m", 0, ("t",)).error_code == ErrorCode.invalid_request
    assert c.heartbeat("g", "", 0, ("t",)).error_code == ErrorCode.invalid_request
    r = c.heartbeat("g", "m1", 0, None)
    assert (r.error_code, r.error_message) == (
        ErrorCode.invalid_request,
        "SubscribedTopicNames must be set in first request.",
    )
    assert c.heartbeat("g", "m1", -2).error_code == ErrorCode.invalid_request
    assert c.heartbeat("g", "m1", 3).error_code == ErrorCode.group_id_not_found
    first = c.heartbeat("g", "m1", 0, ("t",))
    assert first.error_code == ErrorCode.none and first.member_epoch == 1
    assert _assignment(first) == {tid: {0, 1}}
    assert c.heartbeat("g", "m1", 7).error_code == ErrorCode.fenced_member_epoch
    assert c.heartbeat("g", "nobody", 1).error_code == ErrorCode.unknown_member_id
    steady = c.heartbeat("g", "m1", 1)
    assert (steady.member_epoch, steady.assignment) == (1, None)
    second = c.heartbeat("g", "m2", 0, ("t",))
    assert second.member_epoch == 2 and sum(len(p) for p in _assignment(second).values()) == 1
    moved = c.heartbeat("g", "m1", 1)  # its previous epoch: it moves on, to one partition
    assert moved.member_epoch == 2 and sum(len(p) for p in _assignment(moved).values()) == 1
    assert _assignment(moved) != _assignment(second)
    left = c.heartbeat("g", "m2", -1)
    assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)
    assert _assignment(c.heartbeat("g", "m1", 2)) == {tid: {0, 1}}


def test_the_simple_assignor_shares_partitions_when_members_outnumber_them() -> None:
    parts = [("a", 0), ("a", 1)]
    three = simple_assignment(["m1", "m2", "m3"], parts, {})
    assert sorted(sum(len(p) for p in a.values()) for a in three.values()) == [1, 1, 2]
    for tp in parts:  # each partition to two members: ceil(3 / 2)
        assert sum(tp[1] in a.get("a", frozenset()) for a in three.values()) == 2
    four = simple_assignment(["m1", "m2", "m3", "m4"], [("a", 0)], {})
    assert all(a == {"a": frozenset({0})} for a in four.values())
    # sticky: a member keeps what it held while the counts allow
    again = simple_assignment(["m1", "m2"], parts, {"m1": {"a": frozenset({1})}})
    assert again == {"m1": {"a": frozenset({1})}, "m2": {"a": frozenset({0})}}


def test_share_fetch_sessions_locks_and_acknowledgements(
    broker: tuple[Any, ShareClient, str],
) -> None:
    _, c, tid = broker
    c.heartbeat("g", "m1", 0, ("t",))
    c.heartbeat("g", "m2", 0, ("t",))
    r = c.fetch("g", "m1", 0, tid, [0], acks={0: [(0, 0, [ACCEPT])]})
    assert r.error_code == ErrorCode.invalid_request  # acks may not open a session
    assert c.fetch("g", "m1", 4, tid, [0]).error_code == ErrorCode.share_session_not_found
    r = c.fetch("g", "m1", 0, tid, [0], max_records=4)
    assert r.error_code == ErrorCode.none
    assert r.acquisition_lock_timeout == datetime.timedelta(milliseconds=1000)
    # whole batches, up to max_records: one record per batch here
    assert _acquired(r) == [(0, 3, 1)]
    records = next(p.records for t in r.responses for p in t.partitions)
    assert [x.value for x in MemoryRecords(records).records()] == [b"r0", b"r1", b"r2", b"r3"]
    assert c.fetch("g", "m1", 5, tid, [0]).error_code == ErrorCode.invalid_share_session_epoch
    # another member does not get what m1 holds
    other = c.fetch("g", "m2", 0, tid, [0], max_records=2)
    assert _acquired(other) == [(4, 5, 1)]
    # m1 settles: 0 accepted, 1 released, 2 rejected, 3 kept; 4 is not its own
    r = c.fetch("g", "m1", 1, tid, [0], acks={0: [(4, 4, [ACCEPT])]}, max_records=1)
    assert _ack_codes(r) == [ErrorCode.invalid_record_state.value]
    assert _acquired(r) == [(6, 6, 1)]
    r = c.fetch("g", "m1", 2, tid, [0], acks={0: [(0, 2, [ACCEPT, RELEASE, REJECT])]},
                max_records=1)  # fmt: skip
    assert _ack_codes(r) == [0]
    assert _acquired(r) == [(1, 1, 2)]  # the released one again, its count up
    ack = c.acknowledge("g", "m1", 3, tid, 0, [(1, 1, [ACCEPT]), (3, 3, [ACCEPT])])
    assert ack.error_code == ErrorCode.none and _ack_codes(ack) == [0]
    assert c.acknowledge("g", "m1", 0, tid, 0, []).error_code == (
        ErrorCode.invalid_share_session_epoch
    )
    # m2's lock runs out (1 s): its records go to whoever fetches next, counted
    time.sleep(1.5)
    r = c.fetch("g", "m1", 4, tid, [0], max_wait_ms=3000, max_records=2)
    assert _acquired(r) == [(4, 5, 2)]
    # a final fetch settles and closes the session
    r = c.fetch("g", "m1", -1, tid, [], acks={0: [(4, 5, [ACCEPT])]})
    assert r.error_code == ErrorCode.none and _ack_codes(r) == [0]
    assert c.fetch("g", "m1", 5, tid, [0]).error_code == ErrorCode.share_session_not_found
    # the broker keeps at most group.share.max.share.sessions (3)
    assert c.fetch("g", "m3", 0, tid, [1]).error_code == ErrorCode.none
    assert c.fetch("g", "m4", 0, tid, [1]).error_code == ErrorCode.none
    assert c.fetch("g", "m5", 0, tid, [1]).error_code == ErrorCode.share_session_limit_reached


def test_a_member_that_leaves_gives_its_records_back_at_once(
    broker: tuple[Any, ShareClient, str],
) -> None:
    _, c, tid = broker
    c.heartbeat("g", "m1", 0, ("t",))
    c.heartbeat("g", "m2", 0, ("t",))
    assert _acquired(c.fetch("g", "m1", 0, tid, [0])) == [(0, 9, 1)]
    assert _acquired(c.fetch("g", "m2", 0, tid, [0])) == []
    assert c.heartbeat("g", "m1", -1).error_code == ErrorCode.none
    assert _acquired(c.fetch("g", "m2", 1, tid, [0], max_wait_ms=500)) == [(0, 9, 2)]


def test_describe_list_and_the_records_kafka_reads(
    broker: tuple[Any, ShareClient, str], tmp_path: Path
) -> None:
    server, c, tid = broker
    c.heartbeat("g", "m1", 0, ("t",))
    c.fetch("g", "m1", 0, tid, [0, 1])
    mod = request_module(DESCRIBE, 1)
    body = make(mod, "ShareGroupDescribeRequest", group_ids=("g", "nope"),
                include_authorized_operations=False)  # fmt: skip
    g, nope = c.call(DESCRIBE, 1, body).groups
    assert (g.error_code, g.group_state, g.group_epoch, g.assignor_name) == (
        ErrorCode.none,
        "Stable",
        1,
        "simple",
    )
    (m,) = g.members
    assert m.member_id == "m1" and m.member_epoch == 1
    assert [(t.topic_name, t.partitions) for t in m.assignment.topic_partitions] == [("t", (0, 1))]
    assert nope.error_code == ErrorCode.group_id_not_found
    lmod = request_module(ApiKey.LIST_GROUPS, 5)
    listed = c.call(ApiKey.LIST_GROUPS, 5, make(lmod, "ListGroupsRequest", states_filter=(),
                                                   types_filter=("share",))).groups  # fmt: skip
    assert [(x.group_id, x.group_type, x.group_state) for x in listed] == [("g", "share", "Stable")]
    # the records, as Kafka's share group records: member, epoch, target, current assignment,
    # and the share-partitions initialized (state written to __share_group_state)
    assert server.manager is not None
    types = []
    for log in (lg for tp, lg in server.manager.logs().items() if tp.topic == OFFSETS_TOPIC):
        for key, value in ((r.key, r.value) for r in log.read_records(0, 1 << 24)):
            assert key is not None
            types.append(decode("offsets", key, value).record_type)
    assert {10, 11, 12, 13, 14, 15} <= set(types)


def test_the_group_is_reloaded_after_a_restart(tmp_path: Path) -> None:
    with serve(tmp_path) as server:
        assert server.manager is not None
        server.manager.create_topic("t", 1)
        c = ShareClient(int(server.bootstrap_servers.rsplit(":", 1)[1]))
        c.heartbeat("g", "m1", 0, ("t",))
        c.heartbeat("g", "m2", 0, ("t",))
        c.close()
    with serve(tmp_path) as server:
        c = ShareClient(int(server.bootstrap_servers.rsplit(":", 1)[1]))
        r = c.heartbeat("g", "m1", 1)  # its previous epoch: known after the reload
        assert (r.error_code, r.member_epoch) == (ErrorCode.none, 2)
        assert c.heartbeat("g", "m2", 2).error_code == ErrorCode.none
        c.close()
    with LogManager([tmp_path]) as manager:
        assert OFFSETS_TOPIC in manager.topics()


def test_offsets_of_a_group_of_another_type_or_none_are_refused(
    broker: tuple[Any, ShareClient, str],
) -> None:
    server, c, _ = broker
    alter, delete = ApiKey.ALTER_SHARE_GROUP_OFFSETS, ApiKey.DELETE_SHARE_GROUP_OFFSETS
    amod, dmod = request_module(alter, 0), request_module(delete, 0)

    def altered(group: str) -> Any:
        part = make(amod, "AlterShareGroupOffsetsRequestPartition", partition_index=0,
                    start_offset=3)  # fmt: skip
        topic = make(amod, "AlterShareGroupOffsetsRequestTopic", topic_name="t",
                     partitions=(part,))  # fmt: skip
        return c.call(alter, 0, make(amod, "AlterShareGroupOffsetsRequest", group_id=group,
                                     topics=(topic,)))  # fmt: skip

    def deleted(group: str) -> Any:
        topic = make(dmod, "DeleteShareGroupOffsetsRequestTopic", topic_name="t")
        return c.call(delete, 0, make(dmod, "DeleteShareGroupOffsetsRequest", group_id=group,
                                      topics=(topic,)))  # fmt: skip

    assert altered("").error_code == ErrorCode.invalid_group_id
    assert (deleted("none").error_code, deleted("none").error_message) == (
        ErrorCode.group_id_not_found,
        "Share group none not found.",
    )
    # a KIP-848 consumer group holds the id
    hb = request_module(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1)
    c.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, make(
        hb, "ConsumerGroupHeartbeatRequest", group_id="cg", member_id="x", member_epoch=0,
        instance_id=None, rack_id=None, rebalance_timeout=datetime.timedelta(seconds=30),
        subscribed_topic_names=("t",), server_assignor=None, topic_partitions=(),
        subscribed_topic_regex=None,
    ))  # fmt: skip
    r = altered("cg")
    assert (r.error_code, r.error_message) == (
        ErrorCode.group_id_not_found,
        "Group cg is not a share group.",
    )
    ok = altered("new")  # created, empty, at offset 3
    assert ok.error_code == ErrorCode.none
    assert [(p.partition_index, p.error_code) for t in ok.responses for p in t.partitions] == [
        (0, ErrorCode.none)
    ]
    assert server.manager.topic_id("t") is not None
    assert "new" in server._groups.share.groups


def test_an_acknowledgement_that_cannot_be_written_is_rolled_back(
    broker: tuple[Any, ShareClient, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk when the settled state is written: the member is answered
    KAFKA_STORAGE_ERROR for the partition, still holds the records (Kafka rolls the change
    back), and acknowledges them once the disk has room; nothing was settled meanwhile."""
    from kafkalog.coordinator import share_partitions
    from kafkalog.errors import KafkaStorageError

    server, c, tid = broker
    c.heartbeat("g", "m1", 0, ("t",))
    assert _acquired(c.fetch("g", "m1", 0, tid, [0], max_records=3)) == [(0, 2, 1)]
    real = share_partitions.append_share_state

    def full(*args: Any) -> None:
        raise KafkaStorageError("No space left on device")

    monkeypatch.setattr(share_partitions, "append_share_state", full)
    r = c.acknowledge("g", "m1", 1, tid, 0, [(0, 2, [ACCEPT])])
    assert _ack_codes(r) == [ErrorCode.kafka_storage_error.value]
    key = ("g", tid, 0)
    assert server._share_partitions.offsets(key)[0] == 0  # nothing settled
    monkeypatch.setattr(share_partitions, "append_share_state", real)
    r = c.acknowledge("g", "m1", 2, tid, 0, [(0, 2, [ACCEPT])])
    assert _ack_codes(r) == [0]  # still its own: the acknowledgement goes through now
    assert server._share_partitions.offsets(key)[0] == 3


@pytest.mark.parametrize("level", ["read_uncommitted", "read_committed"])
def test_control_batches_and_aborted_records_are_never_acquired(
    broker: tuple[Any, ShareClient, str], level: str
) -> None:
    """A transactional producer's markers are gaps, never acquired; under
    share.isolation.level=read_committed the aborted transaction's records are left out too."""
    from confluent_kafka import Producer

    server, c, tid = broker
    producer = Producer({"bootstrap.servers": server.bootstrap_servers,
                         "transactional.id": "share-txn"})  # fmt: skip
    producer.init_transactions(30)
    for values, commit in (([b"a", b"b", b"c"], True), ([b"x", b"y"], False), ([b"d"], True)):
        producer.begin_transaction()
        for v in values:
            producer.produce("t", v, partition=1)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    group = f"g-{level}"
    server.manager.alter_group_configs(group, {"share.auto.offset.reset": "earliest",
                                               "share.isolation.level": level})  # fmt: skip
    c.heartbeat(group, "m1", 0, ("t",))
    got = _acquired(c.fetch(group, "m1", 0, tid, [1], max_wait_ms=1000))
    offsets = sorted(o for first, last, _ in got for o in range(first, last + 1))
    # a, b, c at 0-2 and their marker at 3; x, y at 4-5 and the abort marker at 6; d at 7 and
    # its marker at 8
    expected = [0, 1, 2, 7] if level == "read_committed" else [0, 1, 2, 4, 5, 7]
    assert offsets == expected


def test_a_closed_connection_ends_its_sessions_and_gives_their_records_back(
    broker: tuple[Any, ShareClient, str],
) -> None:
    """As Kafka's ShareSessionCache: the session opened on a connection ends with it, and what
    its member held is offered again at once (before its 1 s lock would run out)."""
    server, c, tid = broker
    c.heartbeat("g", "m1", 0, ("t",))
    c.heartbeat("g", "m2", 0, ("t",))
    other = ShareClient(int(server.bootstrap_servers.rsplit(":", 1)[1]))
    assert _acquired(other.fetch("g", "m1", 0, tid, [0], max_records=3)) == [(0, 2, 1)]
    other.close()
    assert _acquired(c.fetch("g", "m2", 0, tid, [0], max_records=3, max_wait_ms=500)) == [(0, 2, 2)]
    # m1's session is gone with its connection
    assert c.fetch("g", "m1", 1, tid, [0]).error_code == ErrorCode.share_session_not_found

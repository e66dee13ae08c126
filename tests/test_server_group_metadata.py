"""A classic group kept across restarts in its GroupMetadata record, as Kafka keeps it: the
record's bytes (decoded by kafkalog's reader here, by Kafka's DumpLogSegments and broker in
test_server_groups and test_kafka_oracle_serve), the rule that no member hears an assignment
before it is stored, and librdkafka's member riding out a ``kafkalog serve`` restart without a
rebalance."""

from __future__ import annotations

import asyncio
import struct
import time
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from kafka_oracle import free_port
from kafkalog.coordinator.group import Group
from kafkalog.coordinator.group_member import GroupState
from kafkalog.coordinator.group_metadata import restore
from kafkalog.coordinator.offsets_store import (
    StoredGroup,
    StoredGroups,
    StoredMember,
    group_metadata_key,
    group_metadata_value,
    replay,
)
from kafkalog.errors import KafkaStorageError
from kafkalog.records.coordinator import decode
from kafkalog.server import serve
from test_server_groups import _req

pytestmark = [pytest.mark.one_codec, pytest.mark.timeout(300)]

TWO_MEMBERS = StoredGroup(
    protocol_type="consumer",
    generation=7,
    protocol="range",
    leader="a-1",
    current_state_timestamp=1_700_000_000_000,
    members=(
        StoredMember("a-1", None, "app", "/10.0.0.1", 300_000, 45_000, b"sub-a", b"asg-a"),
        StoredMember("b-1", "static-b", "app", "/10.0.0.2", 60_000, 10_000, b"sub-b", b""),
    ),
)


def _loaded(key: bytes, value: bytes | None, groups: StoredGroups | None = None) -> StoredGroups:
    groups = {} if groups is None else groups
    replay({}, {}, key, value, 0, None, groups)
    return groups


def test_group_metadata_value_is_version_3_of_kafkas_schema_and_loads_back() -> None:
    key, value = group_metadata_key("g"), group_metadata_value(TWO_MEMBERS)
    record = decode("offsets", key, value)
    assert record.record_type == 2 and record.key == {"group": "g"}
    assert record.value_version == 3
    assert record.value is not None
    assert {k: record.value[k] for k in ("protocolType", "generation", "protocol", "leader")} == {
        "protocolType": "consumer",
        "generation": 7,
        "protocol": "range",
        "leader": "a-1",
    }
    assert record.value["members"][1] == {
        "memberId": "b-1",
        "groupInstanceId": "static-b",
        "clientId": "app",
        "clientHost": "/10.0.0.2",
        "rebalanceTimeout": 60_000,
        "sessionTimeout": 10_000,
        "subscription": b"sub-b",
        "assignment": b"",
    }
    groups = _loaded(key, value)
    assert groups == {"g": TWO_MEMBERS}
    assert _loaded(key, None, groups) == {"g": None}  # a tombstone: the group was deleted


def _string(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    return struct.pack(">h", len(text)) + text.encode()


def test_a_damaged_group_metadata_record_is_skipped_and_the_rest_loads() -> None:
    """A GroupMetadata value cut short, of an unknown version, or under a key cut short is
    passed over on load (as Kafka's loader skips what it cannot read), leaving the group as
    the records before it left it; nothing but the skip happens."""
    key, value = group_metadata_key("g"), group_metadata_value(TWO_MEMBERS)
    groups = _loaded(key, value)
    for bad_key, bad_value in (
        (key, value[: len(value) // 2]),
        (key, struct.pack(">h", 99) + value[2:]),
        (key[:-1], value),
        (key, b""),
    ):
        assert _loaded(bad_key, bad_value, groups) == {"g": TWO_MEMBERS}


def test_a_version_0_record_of_an_old_broker_loads_with_kafkas_defaults() -> None:
    """Version 0 has no rebalance timeout (the session timeout stands in, as Kafka's replay
    does), no instance id and no state timestamp."""
    value = (
        struct.pack(">h", 0) + _string("consumer") + struct.pack(">i", 3) + _string("range")
        + _string("m") + struct.pack(">i", 1) + _string("m") + _string("c") + _string("/h")
        + struct.pack(">i", 30_000) + struct.pack(">i", 1) + b"s" + struct.pack(">i", 1) + b"a"
    )  # fmt: skip
    stored = _loaded(group_metadata_key("old"), value)["old"]
    assert stored == StoredGroup(
        "consumer",
        3,
        "range",
        "m",
        -1,
        (StoredMember("m", None, "c", "/h", 30_000, 30_000, b"s", b"a"),),
    )


async def _two_joined(group: Group) -> tuple[str, str]:
    """Two members joined (generation 2, leader first), neither synced yet."""
    a = (await group.join(_req())).member_id
    await group.join(_req(a))
    b = (await group.join(_req())).member_id
    b_join = group.join(_req(b))
    await group.join(_req(a))
    assert (await b_join).generation == 2
    return a, b


def test_no_member_hears_an_assignment_before_it_is_stored() -> None:
    async def scenario() -> None:
        stored: list[StoredGroup] = []
        release = asyncio.Event()

        async def store(value: StoredGroup) -> None:
            stored.append(value)
            await release.wait()

        group = Group("g", asyncio.get_running_loop().time, 0, store)
        a, b = await _two_joined(group)
        follower = group.sync(b, 2, None, {})
        leader = group.sync(a, 2, None, {a: b"to-a"})  # b left out: an empty assignment
        await asyncio.sleep(0.05)
        assert not leader.done() and not follower.done()
        assert group.state is GroupState.COMPLETING_REBALANCE
        assert [(m.member_id, m.assignment) for m in stored[-1].members] == [(a, b"to-a"), (b, b"")]
        assert (stored[-1].generation, stored[-1].leader, stored[-1].protocol) == (2, a, "range")
        assert stored[-1].members[0].subscription == b"r"  # its metadata for "range"
        release.set()
        assert (await leader).assignment == b"to-a"
        assert (await follower).error == ErrorCode.none
        assert group.state is GroupState.STABLE

    asyncio.run(scenario())


def test_members_waiting_for_their_assignment_are_not_expired_while_it_is_stored() -> None:
    """Kafka's ClassicGroupMember.hasSatisfiedHeartbeat: a member waiting in a sync counts as
    heard from (clients send no heartbeats then), however long storing the assignment takes
    (a slow fsync); each session starts again when its member gets the assignment."""

    async def scenario() -> None:
        clock = [0.0]
        release = asyncio.Event()

        async def store(value: StoredGroup) -> None:
            await release.wait()

        group = Group("g", lambda: clock[0], 0, store)
        a, b = await _two_joined(group)
        follower = group.sync(b, 2, None, {})
        leader = group.sync(a, 2, None, {a: b"x", b: b"y"})
        clock[0] += 60  # six session timeouts of 10 s
        assert group.expire_sessions() == []
        release.set()
        assert (await leader).assignment == b"x" and (await follower).assignment == b"y"
        assert group.expire_sessions() == []  # their sessions start now
        clock[0] += 10.5
        assert sorted(group.expire_sessions()) == sorted([a, b])  # silent members still go

    asyncio.run(scenario())


def test_a_join_while_the_assignment_is_stored_neither_enters_the_record_nor_gets_it() -> None:
    """The record is the group when the leader synced; a member joining before it is written
    starts a rebalance that the stored assignment does not end."""

    async def scenario() -> None:
        stored: list[StoredGroup] = []

        async def store(value: StoredGroup) -> None:
            stored.append(value)

        group = Group("g", asyncio.get_running_loop().time, 0, store)
        a, b = await _two_joined(group)
        c = (await group.join(_req())).member_id
        leader = group.sync(a, 2, None, {a: b"x", b: b"y"})
        c_join = group.join(_req(c))  # before the store runs
        assert (await leader).error == ErrorCode.rebalance_in_progress
        await asyncio.sleep(0.01)
        assert [m.member_id for m in stored[-1].members] == [a, b]
        assert group.state is GroupState.PREPARING_REBALANCE and not c_join.done()

    asyncio.run(scenario())


def test_an_assignment_that_cannot_be_stored_is_refused_and_the_group_rebalances() -> None:
    async def scenario() -> None:
        async def store(value: StoredGroup) -> None:
            if value.members:
                raise KafkaStorageError("disk full")

        group = Group("g", asyncio.get_running_loop().time, 0, store)
        a, b = await _two_joined(group)
        follower = group.sync(b, 2, None, {})
        leader = await group.sync(a, 2, None, {a: b"x", b: b"y"})
        assert leader.error == (await follower).error == ErrorCode.coordinator_not_available
        assert group.state is GroupState.PREPARING_REBALANCE
        assert all(m.assignment == b"" for m in group.members.values())

    asyncio.run(scenario())


def test_a_group_that_empties_is_stored_without_members() -> None:
    async def scenario() -> None:
        stored: list[StoredGroup] = []

        async def store(value: StoredGroup) -> None:
            stored.append(value)

        group = Group("g", asyncio.get_running_loop().time, 0, store)
        a = (await group.join(_req())).member_id
        await group.join(_req(a))
        await group.sync(a, 1, None, {a: b"p"})
        assert group.leave(a, None) == ErrorCode.none
        await asyncio.sleep(0)
        assert stored[-1] == StoredGroup("consumer", 2, None, None, group.emptied_at_ms or 0, ())

    asyncio.run(scenario())


def test_a_restored_group_is_stable_and_its_members_go_on() -> None:
    async def scenario() -> None:
        group = Group("g", asyncio.get_running_loop().time, 0)
        restore(group, TWO_MEMBERS)
        assert group.state is GroupState.STABLE and group.leader_id == "a-1"
        assert group.static_members == {"static-b": "b-1"}
        assert group.heartbeat("a-1", 7, None) == ErrorCode.none
        assert group.heartbeat("b-1", 6, "static-b") == ErrorCode.illegal_generation
        assert group.commit_error("b-1", 7, "static-b") is None
        assert (await group.sync("a-1", 7, None, {})).assignment == b"asg-a"
        # a member that was gone for its session timeout since the load is expired
        group.members["b-1"].last_heartbeat -= 11
        assert group.expire_sessions() == ["b-1"]
        empty = Group("e", asyncio.get_running_loop().time, 0)
        restore(empty, StoredGroup("consumer", 4, None, None, 123, ()))
        assert (empty.state, empty.generation, empty.emptied_at_ms) == (GroupState.EMPTY, 4, 123)

    asyncio.run(scenario())


def test_a_librdkafka_member_rides_out_a_restart_without_a_rebalance(tmp_path: Path) -> None:
    """Kafka's coordinator loads a Stable group with its members: after ``kafkalog serve``
    restarts, the member's heartbeats and commits are accepted under its old id and
    generation, and it is never assigned again (before, every group came back empty and the
    member had to rejoin)."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient

    port = free_port()
    overrides = {"group.initial.rebalance.delay.ms": "0", "num.partitions": "2"}
    assignments: list[list[int]] = []
    with serve(tmp_path, port=port, overrides=overrides) as server:
        producer = Producer({"bootstrap.servers": server.bootstrap_servers})
        for i in range(4):
            producer.produce("rt", value=b"%d" % i, partition=i % 2)
        producer.flush(30)
        consumer = Consumer(
            {
                "bootstrap.servers": server.bootstrap_servers,
                "group.id": "rider",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 30_000,
                "heartbeat.interval.ms": 300,
                "reconnect.backoff.max.ms": 200,
            }
        )
        consumer.subscribe(
            ["rt"], on_assign=lambda c, ps: assignments.append([p.partition for p in ps])
        )
        seen: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(seen) < 4 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                seen.append(message.value())
        assert sorted(seen) == [b"0", b"1", b"2", b"3"] and assignments == [[0, 1]]
        member_id = consumer.memberid()
    try:
        with serve(tmp_path, port=port, overrides=overrides) as server:
            admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
            described = admin.describe_consumer_groups(["rider"])["rider"].result(30)
            assert str(described.state).endswith("STABLE")
            assert [m.member_id for m in described.members] == [member_id]
            # the member goes on: polls, heartbeats and a commit under its old generation
            end = time.monotonic() + 3
            while time.monotonic() < end:
                consumer.poll(0.2)
            consumer.commit(asynchronous=False)
            assert assignments == [[0, 1]] and consumer.memberid() == member_id
    finally:
        consumer.close()


def test_a_deleted_group_stays_deleted_and_an_emptied_one_stays_empty(tmp_path: Path) -> None:
    """DeleteGroups tombstones the group's GroupMetadata with its offsets; a group whose
    members all left comes back Empty (its record has no members)."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient

    overrides = {"group.initial.rebalance.delay.ms": "0"}
    with serve(tmp_path, overrides=overrides) as server:
        bs = server.bootstrap_servers
        producer = Producer({"bootstrap.servers": bs})
        producer.produce("dg", value=b"v")
        producer.flush(30)
        for group in ("gone", "kept"):
            consumer = Consumer(
                {"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest"}
            )
            consumer.subscribe(["dg"])
            deadline = time.monotonic() + 30
            message = None
            while message is None and time.monotonic() < deadline:
                message = consumer.poll(0.2)
            assert message is not None and message.error() is None
            consumer.commit(message, asynchronous=False)
            consumer.close()
        admin = AdminClient({"bootstrap.servers": bs})
        admin.delete_consumer_groups(["gone"])["gone"].result(30)
    with serve(tmp_path, overrides=overrides) as server:
        admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
        listed = admin.list_consumer_groups().result(30)
        assert sorted(g.group_id for g in listed.valid) == ["kept"]
        kept = admin.describe_consumer_groups(["kept"])["kept"].result(30)
        assert str(kept.state).endswith("EMPTY") and kept.members == []
        assert server.queued_requests >= 0
        assert server._groups.groups["kept"].protocol_type == "consumer"

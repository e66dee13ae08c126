"""Consumer groups on ``kafkalog serve``: the classic group state machine on its own, the
``__consumer_offsets`` records (checked with Kafka's own DumpLogSegments), and groups of
kafka-python, librdkafka and Kafka's Java tools joining, rebalancing, committing and resuming
after a restart."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import struct
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from kafka import KafkaConsumer
from kafka.errors import KafkaError
from kio.schema.errors import ErrorCode

from kafka_oracle import JVM_FLAGS, KAFKA_VERSIONS, TOOL_LOG, classpath, dump_log_segments_class
from kafkalog import LogManager
from kafkalog.cli.main import cli
from kafkalog.coordinator.group import Group
from kafkalog.coordinator.group_member import GroupState, JoinRequest
from kafkalog.coordinator.offsets_store import (
    OffsetAndMetadata,
    java_string_hash,
    offset_commit_key,
    offset_commit_value,
    partition_for,
)
from kafkalog.records.coordinator import decode
from kafkalog.server import serve

pytestmark = [pytest.mark.one_codec, pytest.mark.timeout(300)]
FAST_GROUPS = {"group.initial.rebalance.delay.ms": "0"}


# --- the state machine ---------------------------------------------------------------------------


def _req(member_id: str = "", instance: str | None = None, protocols=None) -> JoinRequest:  # type: ignore[no-untyped-def]
    return JoinRequest(
        member_id=member_id,
        group_instance_id=instance,
        client_id="c",
        client_host="/127.0.0.1",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=300,
        protocol_type="consumer",
        protocols=protocols or [("range", b"r"), ("roundrobin", b"rr")],
        require_known_member_id=True,
    )


def _group() -> Group:
    return Group("g", asyncio.get_running_loop().time, 0)


def test_a_rebalance_waits_for_a_member_told_to_rejoin_with_its_id() -> None:
    """Kafka's ClassicGroup.hasAllMembersJoined: no rebalance completes while a member that
    got MEMBER_ID_REQUIRED has yet to rejoin (the first consumer of a group took every
    partition while the second was on its way); one that never comes back stops counting
    after its session timeout."""

    async def scenario() -> None:
        group = _group()
        a_id = (await group.join(_req())).member_id
        b_id = (await group.join(_req())).member_id  # both told to rejoin with their ids
        a = group.join(_req(a_id))
        await asyncio.sleep(0.05)
        assert not a.done(), "the rebalance completed with a member still on its way"
        b = group.join(_req(b_id))
        a_done, b_done = await asyncio.wait_for(asyncio.gather(a, b), 5)
        assert a_done.generation == b_done.generation == 1
        assert sorted(m[0] for m in a_done.members or b_done.members) == sorted([a_id, b_id])
        # a pending member that never rejoins: the rebalance goes on after its session timeout
        lone = Group("h", asyncio.get_running_loop().time, 0)
        c_id = (await lone.join(_req())).member_id
        await lone.join(dataclasses.replace(_req(), session_timeout_ms=200))
        c = await asyncio.wait_for(lone.join(_req(c_id)), 5)
        assert c.error == ErrorCode.none and [m[0] for m in c.members] == [c_id]

    asyncio.run(scenario())


def test_two_members_join_sync_and_rebalance_when_one_leaves() -> None:
    async def scenario() -> None:
        group = _group()
        first = await group.join(_req())
        assert first.error == ErrorCode.member_id_required  # KIP-394
        a = await group.join(_req(first.member_id))
        assert a.error == ErrorCode.none and a.leader == a.member_id and a.generation == 1
        assert [m[0] for m in a.members] == [a.member_id] and a.protocol_name == "range"
        # a second member: the leader must rejoin before the rebalance completes
        b_id = (await group.join(_req())).member_id
        b_join = group.join(_req(b_id))
        await asyncio.sleep(0)
        assert group.state is GroupState.PREPARING_REBALANCE and not b_join.done()
        assert group.heartbeat(a.member_id, 1, None) == ErrorCode.rebalance_in_progress
        a2 = await group.join(_req(a.member_id))
        b = await b_join
        assert a2.generation == b.generation == 2
        assert len(a2.members) == 2 and b.members == ()  # only the leader sees subscriptions
        b_sync = group.sync(b.member_id, 2, None, {})
        await asyncio.sleep(0)
        assert not b_sync.done()  # a follower waits for the leader's assignment
        a_sync = await group.sync(a.member_id, 2, None, {a.member_id: b"A", b.member_id: b"B"})
        assert a_sync.assignment == b"A" and (await b_sync).assignment == b"B"
        assert group.state is GroupState.STABLE
        assert group.heartbeat(b.member_id, 1, None) == ErrorCode.illegal_generation
        assert group.heartbeat("nobody", 2, None) == ErrorCode.unknown_member_id
        assert group.commit_error(b.member_id, 2, None) is None
        assert group.leave(b.member_id, None) == ErrorCode.none
        assert group.state is GroupState.PREPARING_REBALANCE
        assert (await group.join(_req(a.member_id))).generation == 3
        assert group.commit_error(a.member_id, 3, None) == ErrorCode.rebalance_in_progress
        assert group.leave(a.member_id, None) == ErrorCode.none
        assert group.state is GroupState.EMPTY
        assert group.commit_error("", -1, None) is None  # a standalone (assign()) commit

    asyncio.run(scenario())


def test_a_member_that_does_not_rejoin_is_removed_after_the_rebalance_timeout() -> None:
    async def scenario() -> None:
        group = _group()
        a = await group.join(_req((await group.join(_req())).member_id))
        b_id = (await group.join(_req())).member_id
        b = await group.join(_req(b_id))  # a never rejoins: after 300 ms it is out
        assert b.error == ErrorCode.none and [m[0] for m in b.members] == [b_id]
        assert a.member_id not in group.members and b.leader == b_id

    asyncio.run(scenario())


def test_the_initial_delay_grows_while_members_keep_arriving() -> None:
    """Kafka's tryCompleteInitialRebalanceElseSchedule: an empty group's first rebalance waits
    ``group.initial.rebalance.delay.ms``, another delay each time one passed with a new
    member, until the rebalance timeout is used up; one generation takes them all."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        group = Group("g", loop.time, 400)
        joining = dataclasses.replace(_req(), rebalance_timeout_ms=1000)
        start = loop.time()
        joins = [group.join(dataclasses.replace(joining, group_instance_id="a"))]
        for at, name in ((0.2, "b"), (0.6, "c"), (0.9, "d")):  # each after the last delay
            await asyncio.sleep(at - (loop.time() - start))
            assert group.state is GroupState.PREPARING_REBALANCE, name
            joins.append(group.join(dataclasses.replace(joining, group_instance_id=name)))
        done = await asyncio.wait_for(asyncio.gather(*joins), 5)
        took = loop.time() - start
        assert {r.generation for r in done} == {1} and len(group.members) == 4
        assert 0.95 <= took < 1.4, took  # the rebalance timeout bounds it
        # no newcomer during the delay: it completes when the first delay passes
        lone = Group("h", loop.time, 300)
        start = loop.time()
        await asyncio.wait_for(lone.join(dataclasses.replace(joining, group_instance_id="a")), 5)
        assert 0.29 <= loop.time() - start < 0.6

    asyncio.run(scenario())


def test_a_rebalance_waits_one_rebalance_timeout_and_keeps_static_members_that_did_not_rejoin() -> (
    None
):
    """Kafka's completeClassicGroupJoin: after the rebalance timeout the dynamic members that
    did not rejoin are out, the static ones stay (their session decides), and the leader is
    one that rejoined."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        group = _group()
        static = await group.join(_req(instance="s"))  # the leader: the first member
        a = await group.join(_req((await group.join(_req())).member_id))
        assert a.leader == a.member_id  # the static member did not rejoin: it cannot lead
        d_id = (await group.join(_req())).member_id
        start = loop.time()
        new_join = group.join(_req(d_id))  # neither the static member nor a rejoins
        d = await asyncio.wait_for(new_join, 5)
        took = loop.time() - start
        assert 0.29 <= took < 0.5, took  # one rebalance timeout (300 ms), not two
        assert a.member_id not in group.members and static.member_id in group.members
        assert d.leader == d_id and sorted(m[0] for m in d.members) == sorted(
            [static.member_id, d_id]
        )

    asyncio.run(scenario())


def test_silent_members_expire_and_static_members_fence_their_old_incarnation() -> None:
    async def scenario() -> None:
        group = _group()
        old = await group.join(_req(instance="i-1"))  # static members skip MEMBER_ID_REQUIRED
        assert old.error == ErrorCode.none
        new = await group.join(_req(instance="i-1"))
        assert new.member_id != old.member_id and list(group.members) == [new.member_id]
        # ClassicGroup.validateMember: the replaced incarnation is fenced (fatal to it), where
        # UNKNOWN_MEMBER_ID would send it to join again and fence the new one in turn
        assert group.heartbeat(old.member_id, new.generation, "i-1") == ErrorCode.fenced_instance_id
        assert (await group.join(_req(old.member_id, "i-1"))).error == ErrorCode.fenced_instance_id
        assert group.heartbeat(old.member_id, new.generation, "i-2") == ErrorCode.unknown_member_id
        member = group.members[new.member_id]
        member.join = dataclasses.replace(member.join, session_timeout_ms=1)
        await asyncio.sleep(0.01)
        assert group.expire_sessions() == [new.member_id]
        assert group.state is GroupState.EMPTY

    asyncio.run(scenario())


def test_joins_that_cannot_share_a_protocol_are_refused() -> None:
    async def scenario() -> None:
        group = _group()
        await group.join(_req((await group.join(_req())).member_id))
        other = await group.join(_req(protocols=[("sticky", b"s")]))
        assert other.error == ErrorCode.inconsistent_group_protocol

    asyncio.run(scenario())


# --- __consumer_offsets records ------------------------------------------------------------------


def test_group_placement_is_kafkas() -> None:
    # java.lang.String.hashCode values printed by jshell, and Utils.abs(MIN_VALUE) == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("jgroup") == -1161648043
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert partition_for("polygenelubricants", 50) == 0
    assert java_string_hash("é") == 233 and java_string_hash("😀") == 1772899  # a surrogate pair
    assert partition_for("hello", 50) == 99162322 % 50


def test_offset_commit_records_decode_as_kafkas() -> None:
    key = offset_commit_key("grp", "clicks", 3)
    value = offset_commit_value(OffsetAndMetadata(42, 5, "meta", 1700000000000))
    record = decode("offsets", key, value)
    assert record.record_type == 1 and record.value_version == 3
    assert record.key == {"group": "grp", "topic": "clicks", "partition": 3}
    assert record.value == {
        "offset": 42,
        "leaderEpoch": 5,
        "metadata": "meta",
        "commitTimestamp": 1700000000000,
    }


# --- with real clients ---------------------------------------------------------------------------


def _produce(bootstrap: str, topic: str, n: int, start: int = 0) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(start, start + n):
        producer.send(topic, key=b"%d" % i, value=b"%d" % i)
    producer.flush()
    producer.close()


class _Member(threading.Thread):
    """A consumer polling on its own thread, as applications run them (kafka-python completes
    a rebalance inside ``poll``; members polled in turn with short timeouts stall each other)."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        from kafka import KafkaConsumer

        self.consumer = KafkaConsumer(
            "events",
            bootstrap_servers=bootstrap,
            group_id="trio",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=1000,
        )
        self.seen: list[bytes] = []
        self.assigned: set[object] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for records in self.consumer.poll(500).values():
                self.seen.extend(r.value for r in records)
            with contextlib.suppress(KafkaError):  # lost to a rebalance: read again
                self.consumer.commit()
            self.assigned = set(self.consumer.assignment())
        self.consumer.close()


def _until(predicate, what: str, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_three_kafka_python_members_rebalance_commit_and_resume_after_a_restart(
    tmp_path: Path,
) -> None:
    props = {**FAST_GROUPS, "num.partitions": "6"}
    with serve(tmp_path, overrides=props) as server:
        bs = server.bootstrap_servers
        _produce(bs, "events", 60)
        members = [_Member(bs) for _ in range(3)]
        for m in members:
            m.start()
        _until(lambda: sorted(len(m.assigned) for m in members) == [2, 2, 2], "three members")
        _until(lambda: len({v for m in members for v in m.seen}) == 60, "every record")
        assert not set.intersection(*(m.assigned for m in members))
        leaving = members.pop()
        leaving.stop.set()  # a member leaves: the other two take over its partitions
        leaving.join(30)
        _until(lambda: sorted(len(m.assigned) for m in members) == [3, 3], "two members")
        _produce(bs, "events", 6, start=60)
        everyone = [*members, leaving]
        _until(lambda: len({v for m in everyone for v in m.seen}) == 66, "the new records")
        for m in members:
            m.stop.set()
        for m in members:
            m.join(30)
        # at least once: a commit that lost to a rebalance lets the next owner read again
        assert {v for m in everyone for v in m.seen} == {b"%d" % i for i in range(66)}
    # a restart: committed offsets are loaded back, so only new records are read
    with serve(tmp_path, overrides=props) as server:
        _produce(server.bootstrap_servers, "events", 6, start=66)
        consumer = KafkaConsumer(
            "events",
            bootstrap_servers=server.bootstrap_servers,
            group_id="trio",
            auto_offset_reset="earliest",
            consumer_timeout_ms=8000,
        )
        resumed = []
        for record in consumer:
            resumed.append(record.value)
            if len(resumed) == 6:
                break
        consumer.close()
    assert sorted(resumed) == sorted(b"%d" % i for i in range(66, 72))


def test_librdkafka_group_resumes_from_committed_offsets(tmp_path: Path) -> None:
    from confluent_kafka import Consumer

    def consume(bootstrap: str, want: int) -> list[bytes]:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "rd",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe(["rdt"])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < want and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
                consumer.commit(message, asynchronous=False)
        consumer.close()
        return got

    with serve(tmp_path, overrides=FAST_GROUPS) as server:
        _produce(server.bootstrap_servers, "rdt", 10)
        assert consume(server.bootstrap_servers, 10) == [b"%d" % i for i in range(10)]
        _produce(server.bootstrap_servers, "rdt", 3, start=10)
        assert consume(server.bootstrap_servers, 3) == [b"10", b"11", b"12"]


@pytest.mark.parametrize("version", KAFKA_VERSIONS)
def test_kafka_consumer_groups_tool_and_the_console_consumer_group(
    tmp_path: Path, version: str
) -> None:
    cp = classpath(version)

    def tool(main: str, *args: str) -> str:
        cmd = ["java", *JVM_FLAGS, *TOOL_LOG, "-cp", cp, main, *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, f"{main} {args}: {proc.stdout}{proc.stderr[-3000:]}"
        return proc.stdout

    def groups(bs: str, args: str) -> str:
        main = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
        return tool(main, "--bootstrap-server", bs, *args.split())

    def console(bs: str, args: str) -> list[str]:
        main = "org.apache.kafka.tools.consumer.ConsoleConsumer"
        return tool(main, "--bootstrap-server", bs, "--topic", "jg", *args.split()).split()

    with serve(tmp_path, overrides=FAST_GROUPS) as server:
        bs = server.bootstrap_servers
        _produce(bs, "jg", 10)
        out = console(bs, "--group jgroup --from-beginning --max-messages 10")
        assert out == [str(i) for i in range(10)]
        assert groups(bs, "--list").split() == ["jgroup"]
        described = groups(bs, "--describe --group jgroup")
        row = next(line.split() for line in described.splitlines() if line.startswith("jgroup"))
        assert row[:6] == ["jgroup", "jg", "0", "10", "10", "0"]
        reset = groups(bs, "--reset-offsets --group jgroup --topic jg --to-offset 3 --execute")
        assert reset.split()[-4:] == ["jgroup", "jg", "0", "3"]
        assert "Empty" in groups(bs, "--describe --group jgroup --state")
        again = console(bs, "--group jgroup --max-messages 7")
        assert again == [str(i) for i in range(3, 10)]
        deleted = groups(bs, "--delete-offsets --group jgroup --topic jg")
        assert deleted.split()[-3:] == ["jg", "0", "Successful"]
        assert "jg" not in groups(bs, "--describe --group jgroup")
        groups(bs, "--delete --group jgroup")
        assert groups(bs, "--list").split() == []
    # Kafka's own decoder reads the commits, the group's metadata (each console consumer's
    # assignment, then the group emptied) and the deletion's tombstones, as kafkalog's does
    with LogManager([tmp_path]) as manager:
        partition = partition_for("jgroup", manager.topics()["__consumer_offsets"])
    segment = tmp_path / f"__consumer_offsets-{partition}" / "00000000000000000000.log"
    dumped = tool(dump_log_segments_class(version), "--files", str(segment), "--offsets-decoder")
    assert '"group":"jgroup","topic":"jg","partition":0' in dumped
    assert '"offset":3,' in dumped and "<DELETE>" in dumped
    assert '"protocolType":"consumer","generation":1,"protocol":"range"' in dumped
    assert '"members":[]' in dumped and '"assignedPartitions":[{"topic":"jg"' in dumped
    ours = CliRunner().invoke(cli, ["dump-log", "--files", str(segment), "--offsets-decoder"])
    assert ours.exit_code == 0, ours.output
    theirs = [line.split("payload")[1] for line in dumped.splitlines() if "payload" in line]
    mine = [line.split("payload")[1] for line in ours.output.splitlines() if "payload" in line]
    assert len(mine) >= 6 and mine == theirs


def test_offset_delete_spares_the_topics_a_live_consumer_group_subscribes_to(
    tmp_path: Path,
) -> None:
    """KIP-496: with a member subscribed to ``live``, its offsets stay
    (GROUP_SUBSCRIBED_TO_TOPIC) while those of ``idle`` go, durably."""
    from kafka.structs import OffsetAndMetadata as CommitOffset
    from kafka.structs import TopicPartition

    from kafkalog.protocol.wire import make
    from server_helpers import decode_response, exchange, frame, request_module

    def offset_delete(port: int, group: str, topics: dict[str, list[int]]) -> object:
        mod = request_module(47, 0)
        body = make(
            mod,
            "OffsetDeleteRequest",
            group_id=group,
            topics=tuple(
                make(
                    mod,
                    "OffsetDeleteRequestTopic",
                    name=name,
                    partitions=tuple(
                        make(mod, "OffsetDeleteRequestPartition", partition_index=p) for p in parts
                    ),
                )
                for name, parts in topics.items()
            ),
        )
        return decode_response(47, 0, exchange(port, frame(47, 0, body)), header_v1=False)

    with serve(tmp_path, overrides=FAST_GROUPS) as server:
        bs = server.bootstrap_servers
        _produce(bs, "live", 3)
        _produce(bs, "idle", 3)
        consumer = KafkaConsumer(
            "live", bootstrap_servers=bs, group_id="od", auto_offset_reset="earliest",
            enable_auto_commit=False,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(200)
        consumer.commit(
            {
                TopicPartition("live", 0): CommitOffset(2, "", -1),
                TopicPartition("idle", 0): CommitOffset(1, "", -1),
            }
        )
        port = int(bs.rsplit(":", 1)[1])
        answer: Any = offset_delete(port, "od", {"live": [0], "idle": [0], "ghost": [0]})
        codes = {t.name: t.partitions[0].error_code for t in answer.topics}
        assert answer.error_code == ErrorCode.none
        assert codes == {
            "live": ErrorCode.group_subscribed_to_topic,
            "idle": ErrorCode.none,
            "ghost": ErrorCode.unknown_topic_or_partition,
        }
        assert offset_delete(port, "nobody", {"idle": [0]}).error_code == (  # type: ignore[attr-defined]
            ErrorCode.group_id_not_found
        )
        consumer.close()
    with serve(tmp_path, overrides=FAST_GROUPS) as server:  # the deletion was durable
        consumer = KafkaConsumer(bootstrap_servers=server.bootstrap_servers, group_id="od")
        assert consumer.committed(TopicPartition("live", 0)) == 2
        assert consumer.committed(TopicPartition("idle", 0)) is None
        consumer.close()


# --- expiry of committed offsets (KIP-211) --------------------------------------------------------


def _subscription(*topics: str) -> bytes:
    """A ConsumerProtocol Subscription v0: version, topics, null user data."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


def test_which_offsets_expire_follows_kip_211() -> None:
    from kafkalog.coordinator.offsets_retention import expired_offsets

    day = 86_400_000

    def committed(at: int) -> OffsetAndMetadata:
        return OffsetAndMetadata(5, -1, "", at)

    async def scenario() -> None:
        # a group that only stores offsets (assign + commit): each by its own commit time
        standalone = _group()
        standalone.offsets = {("a", 0): committed(0), ("b", 0): committed(5 * day)}
        assert expired_offsets(standalone, 7 * day, 7 * day) == [("a", 0)]
        # a stable consumer group: only topics no member subscribes to
        group = _group()
        protocols = [("range", _subscription("a"))]
        first = await group.join(_req(protocols=protocols))
        joined = await group.join(_req(first.member_id, protocols=protocols))
        await group.sync(joined.member_id, joined.generation, None, {joined.member_id: b""})
        assert group.state is GroupState.STABLE
        group.offsets = {("a", 0): committed(0), ("b", 0): committed(0)}
        assert expired_offsets(group, 30 * day, 7 * day) == [("b", 0)]
        # once it is empty: everything, counted from when it became empty
        assert group.leave(joined.member_id, None) == ErrorCode.none
        assert group.state is GroupState.EMPTY and group.emptied_at_ms is not None
        emptied = group.emptied_at_ms
        assert expired_offsets(group, emptied + 7 * day - 1, 7 * day) == []
        assert expired_offsets(group, emptied + 7 * day, 7 * day) == [("a", 0), ("b", 0)]
        # a KIP-848 consumer group: by commit time, never a topic its members subscribe to
        holder = _group()
        holder.offsets = {("a", 0): committed(0), ("b", 0): committed(0), ("c", 0): committed(day)}
        assert expired_offsets(holder, 7 * day, 7 * day, {"a"}) == [("b", 0)]
        assert expired_offsets(holder, 8 * day, 7 * day, set()) == [("a", 0), ("b", 0), ("c", 0)]

    asyncio.run(scenario())


def test_expired_offsets_are_tombstoned_and_stay_gone_after_a_restart(tmp_path: Path) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata as CommitOffset

    with serve(tmp_path, overrides=FAST_GROUPS) as server:
        bs = server.bootstrap_servers
        _produce(bs, "e", 3)
        consumer = KafkaConsumer(bootstrap_servers=bs, group_id="old")
        consumer.commit({TopicPartition("e", 0): CommitOffset(2, "", -1)})
        consumer.close()
        other = KafkaConsumer(bootstrap_servers=bs, group_id="recent")
        other.commit({TopicPartition("e", 0): CommitOffset(1, "", -1)})
        other.close()
        assert server.loop is not None
        coordinator = server._groups
        old = coordinator.groups["old"].offsets[("e", 0)].commit_timestamp
        coordinator.groups["recent"].offsets[("e", 0)] = dataclasses.replace(
            coordinator.groups["recent"].offsets[("e", 0)], commit_timestamp=old + 8 * 86_400_000
        )
        week = 7 * 86_400_000
        run = asyncio.run_coroutine_threadsafe(coordinator.expire_offsets(old + week), server.loop)
        assert run.result(30) == 1
        assert "old" not in coordinator.groups and "recent" in coordinator.groups
    with serve(tmp_path, overrides=FAST_GROUPS) as server:
        consumer = KafkaConsumer(bootstrap_servers=server.bootstrap_servers, group_id="old")
        assert consumer.committed(TopicPartition("e", 0)) is None
        consumer.close()
        recent = KafkaConsumer(bootstrap_servers=server.bootstrap_servers, group_id="recent")
        assert recent.committed(TopicPartition("e", 0)) == 1
        recent.close()


def test_a_static_member_restarting_into_a_stable_group_takes_its_place_without_a_rebalance() -> (
    None
):
    """KIP-345: the returning member (its group.instance.id, no member id) gets a new member id
    and its old assignment at the current generation; the other member goes on undisturbed."""

    async def scenario() -> None:
        group = Group("g", asyncio.get_running_loop().time, 100)  # both join in the delay
        a = group.join(_req(instance="a"))
        b = group.join(_req(instance="b"))
        a_res, b_res = await asyncio.wait_for(asyncio.gather(a, b), 5)
        leader = a_res if a_res.members else b_res
        plan = {m[0]: m[0].encode() for m in leader.members}
        syncs = [
            group.sync(r.member_id, r.generation, i, plan if r is leader else {})
            for r, i in ((a_res, "a"), (b_res, "b"))
        ]
        await asyncio.wait_for(asyncio.gather(*syncs), 5)
        generation = group.generation
        again = await asyncio.wait_for(group.join(_req(instance="a")), 5)
        assert again.error == ErrorCode.none and again.generation == generation
        assert again.member_id != a_res.member_id
        assert group.state is GroupState.STABLE
        assert group.heartbeat(b_res.member_id, generation, "b") == ErrorCode.none
        synced = await group.sync(again.member_id, generation, "a", {})
        assert synced.assignment == a_res.member_id.encode()  # what it had
        old = await group.sync(a_res.member_id, generation, "a", {})
        assert old.error == ErrorCode.fenced_instance_id  # the old incarnation is fenced

    asyncio.run(scenario())


async def _stable_static_pair(group: Group) -> tuple[Any, Any]:
    """Static members a and b joined and synced; (the leader's result, the other's)."""
    a = group.join(_req(instance="a"))
    b = group.join(_req(instance="b"))
    a_res, b_res = await asyncio.wait_for(asyncio.gather(a, b), 5)
    leader, follower = (a_res, b_res) if a_res.members else (b_res, a_res)
    plan = {m[0]: m[0].encode() for m in leader.members}
    syncs = [
        group.sync(r.member_id, r.generation, i, plan if r is leader else {})
        for r, i in ((a_res, "a"), (b_res, "b"))
    ]
    await asyncio.wait_for(asyncio.gather(*syncs), 5)
    return leader, follower


def _instance_of(group: Group, member_id: str) -> str:
    instance = group.members[member_id].group_instance_id
    assert instance is not None
    return instance


def test_a_static_member_returning_with_another_subscription_does_not_rebalance_the_group() -> None:
    """Kafka's updateStaticMemberThenRebalanceOrCompleteJoin looks only at the protocol the
    group would select: new metadata under the same protocols (a regex subscription that
    matched more topics) replaces the member without a rebalance, the new metadata kept; a
    protocol list that changes the selection rebalances."""

    async def scenario() -> None:
        group = Group("g", asyncio.get_running_loop().time, 100)
        leader, follower = await _stable_static_pair(group)
        generation = group.generation
        instance = _instance_of(group, follower.member_id)
        moved = [("range", b"more topics"), ("roundrobin", b"more topics")]
        again = await asyncio.wait_for(group.join(_req(instance=instance, protocols=moved)), 5)
        assert (again.error, again.generation) == (ErrorCode.none, generation)
        assert group.state is GroupState.STABLE
        assert group.members[again.member_id].metadata("range") == b"more topics"
        assert group.heartbeat(leader.member_id, generation, None) == ErrorCode.none
        only_rr = [("roundrobin", b"x")]  # range no longer common: the selection changes
        changed = group.join(_req(instance=instance, protocols=only_rr))
        await asyncio.sleep(0.05)
        assert group.state is GroupState.PREPARING_REBALANCE
        assert group.heartbeat(leader.member_id, generation, None) == (
            ErrorCode.rebalance_in_progress
        )
        changed.cancel()

    asyncio.run(scenario())


def test_a_static_replacement_that_cannot_be_stored_keeps_the_old_member() -> None:
    """A full disk while storing the new incarnation: it is told COORDINATOR_NOT_AVAILABLE with
    no member id, and the group keeps the old member id, its assignment and its leadership
    (Kafka reverts the replacement); once the disk has room the rejoin succeeds."""
    from kafkalog.errors import KafkaStorageError

    full = True

    async def store(stored: object) -> None:
        if full:
            raise KafkaStorageError("No space left on device")

    async def scenario() -> None:
        nonlocal full
        full = False
        group = Group("g", asyncio.get_running_loop().time, 100, store)
        leader, _ = await _stable_static_pair(group)
        instance = _instance_of(group, leader.member_id)
        before = (dict(group.static_members), group.leader_id, set(group.members))
        full = True
        refused = await asyncio.wait_for(group.join(_req(instance=instance)), 5)
        assert (refused.error, refused.member_id) == (ErrorCode.coordinator_not_available, "")
        assert (dict(group.static_members), group.leader_id, set(group.members)) == before
        assert group.members[leader.member_id].assignment == leader.member_id.encode()
        full = False
        again = await asyncio.wait_for(group.join(_req(instance=instance)), 5)
        assert again.error == ErrorCode.none and group.leader_id == again.member_id

    asyncio.run(scenario())


@pytest.mark.parametrize("skips", [False, True], ids=["JoinGroup v5-8", "JoinGroup v9+"])
def test_a_returning_static_leader_is_not_asked_to_assign_again(skips: bool) -> None:
    """The leader's new incarnation must not run the assignor over a group it does not lead
    through a rebalance: before JoinGroup v9 it is told the old leader id (so it acts as a
    follower), from v9 it is told it leads, with the members, and skip_assignment (KIP-814)."""

    async def scenario() -> None:
        group = Group("g", asyncio.get_running_loop().time, 100)
        leader, _ = await _stable_static_pair(group)
        instance = _instance_of(group, leader.member_id)
        returning = dataclasses.replace(_req(instance=instance), supports_skip_assignment=skips)
        again = await asyncio.wait_for(group.join(returning), 5)
        assert again.error == ErrorCode.none and group.state is GroupState.STABLE
        assert group.leader_id == again.member_id
        if skips:
            assert again.skip_assignment and again.leader == again.member_id
            assert {m[0] for m in again.members} == set(group.members)
        else:
            assert not again.skip_assignment and not again.members
            assert again.leader == leader.member_id  # the old id: not this incarnation

    asyncio.run(scenario())


def test_a_silent_members_session_ends_on_time(tmp_path: Path) -> None:
    """Each session is timed on its own (it was polled every half second, so a member went
    0.7-1.2 s late): a static member silent for its 400 ms session is gone within ~50 ms of
    it."""
    from kafkalog.protocol.wire import make
    from server_helpers import decode_response, exchange, frame, request_module

    overrides = {**FAST_GROUPS, "group.min.session.timeout.ms": "100"}
    with serve(tmp_path, overrides=overrides) as server:
        port = int(server.bootstrap_servers.rsplit(":", 1)[1])
        mod = request_module(11, 5)
        join = make(
            mod,
            "JoinGroupRequest",
            group_id="timed",
            session_timeout=datetime.timedelta(milliseconds=400),
            rebalance_timeout=datetime.timedelta(milliseconds=400),
            member_id="",
            group_instance_id="static-1",
            protocol_type="consumer",
            protocols=(make(mod, "JoinGroupRequestProtocol", name="range", metadata=b""),),
        )
        joined = decode_response(11, 5, exchange(port, frame(11, 5, join)), header_v1=False)
        assert joined.error_code == 0
        sync_mod = request_module(14, 3)
        sync = make(
            sync_mod,
            "SyncGroupRequest",
            group_id="timed",
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            group_instance_id="static-1",
            assignments=(),
        )
        assert decode_response(14, 3, exchange(port, frame(14, 3, sync)), header_v1=False)
        heard = time.monotonic()
        coordinator = server._groups
        assert coordinator is not None
        while coordinator.groups["timed"].members and time.monotonic() - heard < 5:
            time.sleep(0.005)
        late = time.monotonic() - heard - 0.4
        print(f"the session ended {late * 1000:.0f} ms after its timeout")
        assert -0.05 < late < 0.15

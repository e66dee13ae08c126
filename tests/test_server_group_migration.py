"""Online migration between a classic group and a KIP-848 consumer group with members, at the
protocol (Kafka 4's ``group.consumer.migration.policy``): the first ConsumerGroupHeartbeat of a
classic group of consumers turns it into a consumer group, its classic members going on with
JoinGroup, SyncGroup, Heartbeat and OffsetCommit answered by it; the last consumer-protocol
member's leave turns it back into a classic group. (Kafka's Java consumers doing it in a
rolling restart are in test_server_java_consumer_groups.py.)"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.wire import make
from kafkalog.records.coordinator import consumer_protocol, decode
from kafkalog.records.schema_writer import encode_versioned
from kafkalog.server import serve
from kafkalog.types import OFFSETS_TOPIC
from server_helpers import request_module
from test_server_consumer_groups import Client

pytestmark = [pytest.mark.one_codec, pytest.mark.timeout(120)]

MS = datetime.timedelta(milliseconds=1)


def _subscription(owned: dict[str, list[int]] | None = None) -> bytes:
    return encode_versioned("ConsumerProtocolSubscription", 1, {
        "topics": ["t"], "userData": None,
        "ownedPartitions": [{"topic": t, "partitions": ps} for t, ps in (owned or {}).items()],
    })  # fmt: skip


def _assignment(partitions: list[int]) -> bytes:
    rows = [{"topic": "t", "partitions": partitions}] if partitions else []
    return encode_versioned("ConsumerProtocolAssignment", 1,
                            {"assignedPartitions": rows, "userData": None})  # fmt: skip


class ClassicClient(Client):
    def join(self, group: str, member: str, owned: dict[str, list[int]] | None = None,  # type: ignore[override]
             protocol_type: str = "consumer") -> Any:  # fmt: skip
        mod = request_module(ApiKey.JOIN_GROUP, 7)
        body = make(mod, "JoinGroupRequest", group_id=group, session_timeout=30_000 * MS,
                    rebalance_timeout=30_000 * MS, member_id=member, group_instance_id=None,
                    protocol_type=protocol_type, protocols=(make(
                        mod, "JoinGroupRequestProtocol", name="range",
                        metadata=_subscription(owned)),))  # fmt: skip
        return self.call(ApiKey.JOIN_GROUP, 7, body)

    def sync(self, group: str, member: str, generation: int,
             assignments: dict[str, bytes] | None = None) -> Any:  # fmt: skip
        mod = request_module(ApiKey.SYNC_GROUP, 5)
        body = make(mod, "SyncGroupRequest", group_id=group, generation_id=generation,
                    member_id=member, group_instance_id=None, protocol_type="consumer",
                    protocol_name="range", assignments=tuple(
                        make(mod, "SyncGroupRequestAssignment", member_id=m, assignment=a)
                        for m, a in (assignments or {}).items()))  # fmt: skip
        return self.call(ApiKey.SYNC_GROUP, 5, body)

    def classic_heartbeat(self, group: str, member: str, generation: int) -> Any:
        mod = request_module(ApiKey.HEARTBEAT, 4)
        body = make(mod, "HeartbeatRequest", group_id=group, generation_id=generation,
                    member_id=member, group_instance_id=None)  # fmt: skip
        return self.call(ApiKey.HEARTBEAT, 4, body).error_code

    def leave(self, group: str, member: str) -> Any:
        mod = request_module(ApiKey.LEAVE_GROUP, 4)
        body = make(mod, "LeaveGroupRequest", group_id=group, members=(
            make(mod, "MemberIdentity", member_id=member, group_instance_id=None),))  # fmt: skip
        return self.call(ApiKey.LEAVE_GROUP, 4, body)


def _assigned(sync: Any) -> list[int]:
    decoded = consumer_protocol(bytes(sync.assignment), "ConsumerProtocolAssignment")
    assert decoded is not None
    return sorted(p for row in decoded[1]["assignedPartitions"] for p in row["partitions"])


def _classic_group(c: ClassicClient, group: str = "g") -> dict[str, int]:
    """Two classic members, a and b, Stable with two partitions each; their generation."""
    a = c.join(group, "")
    a = c.join(group, a.member_id)  # MEMBER_ID_REQUIRED first
    assert a.error_code == ErrorCode.none, a
    generation = a.generation_id
    c.sync(group, a.member_id, generation, {a.member_id: _assignment([0, 1, 2, 3])})
    c2 = ClassicClient(c.sock.getpeername()[1])
    b = c2.join(group, "")
    # the rebalance waits for a's rejoin, which comes from another connection of its own
    import threading

    out: dict[str, Any] = {}
    t = threading.Thread(target=lambda: out.setdefault("b", c2.join(group, b.member_id)))
    t.start()
    a2 = c.join(group, a.member_id, {"t": [0, 1, 2, 3]})
    t.join(30)
    b2 = out["b"]
    assert a2.error_code == b2.error_code == ErrorCode.none
    generation = a2.generation_id
    leader = a2 if a2.leader == a2.member_id else b2
    follower = b2 if leader is a2 else a2
    assignments = {a2.member_id: _assignment([0, 1]), b2.member_id: _assignment([2, 3])}
    t = threading.Thread(target=lambda: out.setdefault("s", c2.sync(
        group, follower.member_id, generation) if follower is b2 else None))  # fmt: skip
    t.start()
    if follower is a2:
        c.sync(group, a2.member_id, generation)
    else:
        c.sync(group, a2.member_id, generation, assignments)
    t.join(30)
    if follower is a2:
        c2.sync(group, b2.member_id, generation, assignments)
    c2.close()
    return {"a": generation, "a_id": a2.member_id, "b_id": b2.member_id}  # type: ignore[dict-item]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[Any, ClassicClient]]:
    overrides = {
        "group.initial.rebalance.delay.ms": "0",
        "group.consumer.heartbeat.interval.ms": "500",
    }
    with serve(tmp_path, overrides=overrides) as server:
        assert server.manager is not None
        server.manager.create_topic("t", 4)
        client = ClassicClient(int(server.bootstrap_servers.rsplit(":", 1)[1]))
        yield server, client
        client.close()


def test_a_consumer_heartbeat_upgrades_a_classic_group_and_its_members_go_on(
    broker: tuple[Any, ClassicClient],
) -> None:
    server, c = broker
    classic = _classic_group(c)
    generation, a, b = classic["a"], str(classic["a_id"]), str(classic["b_id"])
    joined = c.heartbeat("g", "new", 0, topics=("t",), owned={}, rebalance_timeout=30_000)
    assert joined.error_code == ErrorCode.none, joined
    coord = server._groups
    group = coord.consumer.groups["g"]
    # each classic member kept its id, assignment and session, at the generation as epoch
    assert {m.member_id: m.member_epoch for m in group.members.values()} == {
        a: generation,
        b: generation,
        "new": generation + 1,
    }
    assert group.members[a].classic_member_metadata["sessionTimeoutMs"] == 30_000
    assert "g" not in coord.groups or not coord.groups["g"].members
    # the classic members learn of the new epoch from their heartbeat and rejoin
    assert c.classic_heartbeat("g", a, generation) == ErrorCode.rebalance_in_progress
    assert c.classic_heartbeat("g", a, generation + 5) == ErrorCode.illegal_generation
    assert c.classic_heartbeat("g", "nobody", generation) == ErrorCode.unknown_member_id
    again = c.join("g", a, {"t": [0, 1]})
    assert again.error_code == ErrorCode.none
    assert (again.protocol_type, again.protocol_name, again.leader) == ("consumer", "range", "")
    synced = c.sync("g", a, again.generation_id)
    assert synced.error_code == ErrorCode.none
    kept = _assigned(synced)
    assert set(kept) <= {0, 1}
    assert c.sync("g", a, again.generation_id + 1).error_code == ErrorCode.illegal_generation
    # its offsets commit with its generation, as a classic member's do (OffsetCommit v8)
    mod = request_module(ApiKey.OFFSET_COMMIT, 8)

    def commit(gen: int) -> Any:
        body = make(mod, "OffsetCommitRequest", group_id="g", generation_id_or_member_epoch=gen,
                    member_id=a, group_instance_id=None, topics=(make(
                        mod, "OffsetCommitRequestTopic", name="t", partitions=(make(
                            mod, "OffsetCommitRequestPartition", partition_index=0,
                            committed_offset=5, committed_leader_epoch=-1,
                            committed_metadata=""),)),))  # fmt: skip
        return c.call(ApiKey.OFFSET_COMMIT, 8, body).topics[0].partitions[0].error_code

    assert commit(again.generation_id) == ErrorCode.none
    assert commit(again.generation_id + 1) == ErrorCode.illegal_generation
    # the records: the classic group's GroupMetadata tombstoned, the consumer group's written
    kinds = []
    for tp, log in server.manager.logs().items():
        if tp.topic == OFFSETS_TOPIC:
            for r in log.read_records(0, 1 << 24):
                assert r.key is not None
                decoded = decode("offsets", r.key, r.value)
                kinds.append((decoded.record_type, decoded.value is None))
    assert (2, True) in kinds  # GroupMetadata tombstone
    assert {3, 5, 6, 7, 8} <= {k for k, tomb in kinds if not tomb}


def test_the_last_consumer_member_leaving_downgrades_to_a_classic_group(
    broker: tuple[Any, ClassicClient],
) -> None:
    server, c = broker
    classic = _classic_group(c)
    a, b = str(classic["a_id"]), str(classic["b_id"])
    joined = c.heartbeat("g", "new", 0, topics=("t",), owned={}, rebalance_timeout=30_000)
    assert joined.error_code == ErrorCode.none
    left = c.heartbeat("g", "new", -1)
    assert left.error_code == ErrorCode.none
    coord = server._groups
    assert "g" not in coord.consumer.groups
    group = coord.groups["g"]
    assert set(group.members) == {a, b} and group.protocol_type == "consumer"
    assert group.state.value == "PreparingRebalance"
    assert group.generation == joined.member_epoch  # the group epoch, not bumped (as Kafka)


@pytest.mark.parametrize("policy", ["disabled", "downgrade"])
def test_the_migration_policy_can_refuse_the_upgrade(tmp_path: Path, policy: str) -> None:
    overrides = {"group.initial.rebalance.delay.ms": "0", "group.consumer.migration.policy": policy}
    with serve(tmp_path, overrides=overrides) as server:
        assert server.manager is not None
        server.manager.create_topic("t", 4)
        c = ClassicClient(int(server.bootstrap_servers.rsplit(":", 1)[1]))
        _classic_group(c)
        r = c.heartbeat("g", "new", 0, topics=("t",), owned={}, rebalance_timeout=30_000)
        assert (r.error_code, r.error_message) == (
            ErrorCode.group_id_not_found,
            "Cannot upgrade classic group g to consumer group because online upgrade is disabled.",
        )
        c.close()


def test_a_group_of_another_protocol_type_is_not_upgraded(
    broker: tuple[Any, ClassicClient],
) -> None:
    _, c = broker
    first = c.join("connect", "", protocol_type="connect")
    joined = c.join("connect", first.member_id, protocol_type="connect")
    c.sync("connect", joined.member_id, joined.generation_id, {joined.member_id: b""})
    r = c.heartbeat("connect", "new", 0, topics=("t",), owned={}, rebalance_timeout=30_000)
    assert (r.error_code, r.error_message) == (
        ErrorCode.group_id_not_found,
        "Cannot upgrade classic group connect to consumer group because the group does not "
        "use the consumer embedded protocol.",
    )

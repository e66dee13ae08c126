"""Online migration between a classic group and a KIP-848 consumer group that has members
(Kafka's ConsumerGroup.fromClassicGroup and ClassicGroup.fromConsumerGroup).

Why: Kafka 4 lets a group's consumers move from the classic protocol to the consumer one in a
rolling restart, and back (``group.consumer.migration.policy``, bidirectional by default).
The first ConsumerGroupHeartbeat for a classic group of consumers turns it into a consumer
group: each member keeps its id, its subscription (from its embedded ConsumerProtocol
subscription), its assignment and its session timeout, at the classic generation as member
and group epoch, and goes on with JoinGroup, SyncGroup and Heartbeat answered by the
consumer group. When the last member speaking the consumer protocol leaves, the remaining
classic members are a classic group again, at the group epoch as generation, and rebalance.
This module builds the records of each conversion; ``consumer_groups`` and the group
coordinator decide when and write them.

Refuses: a classic group whose protocol type is not "consumer", whose members' metadata do
not parse as the consumer protocol, or whose assignments carry user data (a custom
assignor's, which would be lost), in Kafka's words (GROUP_ID_NOT_FOUND).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from kafkalog.coordinator.consumer_group import (
    ConsumerGroup,
    ConsumerGroupMember,
    Record,
    current_assignment_record,
    epoch_record,
    member_record,
    target_member_record,
    target_metadata_record,
)
from kafkalog.coordinator.consumer_subscriptions import metadata_hash
from kafkalog.coordinator.group import Group
from kafkalog.coordinator.group_protocols import select_protocol
from kafkalog.coordinator.offsets_store import StoredGroup, StoredMember
from kafkalog.records.coordinator import consumer_protocol
from kafkalog.records.schema_writer import encode_versioned

CONSUMER_PROTOCOL_TYPE = "consumer"
POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")


class MigrationError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def upgrade_allowed(policy: str) -> bool:
    return policy in ("upgrade", "bidirectional")


def downgrade_allowed(policy: str) -> bool:
    return policy in ("downgrade", "bidirectional")


def subscription_of(metadata: bytes) -> dict[str, Any] | None:
    decoded = consumer_protocol(metadata, "ConsumerProtocolSubscription")
    return None if decoded is None else decoded[1]


def owned_partitions(
    subscription: Mapping[str, Any], topic_id: Callable[[str], str | None]
) -> dict[str, frozenset[int]]:
    """A classic member's owned partitions (its subscription's, by topic name) by topic id."""
    out: dict[str, frozenset[int]] = {}
    for entry in subscription.get("ownedPartitions") or ():
        tid = topic_id(entry["topic"])
        if tid is not None and entry["partitions"]:
            out[tid] = out.get(tid, frozenset()) | frozenset(entry["partitions"])
    return out


def assignment_bytes(
    assigned: Mapping[str, frozenset[int]], names: Mapping[str, str], metadata: bytes
) -> bytes:
    """A ConsumerProtocolAssignment of ``assigned`` (topic id -> partitions) at the version
    of the member's subscription ``metadata`` (Kafka's prepareAssignment)."""
    version = max(0, min(3, int.from_bytes(metadata[:2], "big", signed=True))) if metadata else 0
    rows = [
        {"topic": names[t], "partitions": sorted(ps)}
        for t, ps in sorted(assigned.items())
        if t in names and ps
    ]
    return encode_versioned(
        "ConsumerProtocolAssignment", version, {"assignedPartitions": rows, "userData": None}
    )


def consumer_records_from_classic(
    group: Group,
    topic_id: Callable[[str], str | None],
    partitions_of: Mapping[str, int],
    max_size: int,
) -> list[Record]:
    """The records of the consumer group ``group`` becomes (Kafka's fromClassicGroup, then
    createConsumerGroupRecords): each member at the generation as its epoch, its assignment
    as its target, the group epoch and the assignment epoch the generation."""
    gid, generation = group.group_id, group.generation
    prefix = f"Cannot upgrade classic group {gid} to consumer group because"
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE or group.protocol_name is None:
        raise MigrationError(
            ErrorCode.group_id_not_found,
            f"{prefix} the group does not use the consumer embedded protocol.",
        )
    if len(group.members) > max_size:
        raise MigrationError(
            ErrorCode.group_id_not_found,
            f"{prefix} the group size exceeds the consumer group maximum size.",
        )
    members = []
    for m in group.members.values():
        subscription = subscription_of(m.metadata(group.protocol_name))
        assigned: dict[str, frozenset[int]] = {}
        if m.assignment:
            decoded = consumer_protocol(m.assignment, "ConsumerProtocolAssignment")
            if subscription is None or decoded is None:
                raise MigrationError(
                    ErrorCode.group_id_not_found,
                    f"{prefix} the embedded consumer protocol is malformed.",
                )
            if decoded[1].get("userData"):
                raise MigrationError(
                    ErrorCode.group_id_not_found,
                    f"{prefix} an unsupported custom assignor is in use. Please refer to the "
                    "documentation or switch to a default assignor before re-attempting the "
                    "upgrade.",
                )
            for entry in decoded[1]["assignedPartitions"]:
                tid = topic_id(entry["topic"])
                if tid is not None and entry["partitions"]:
                    assigned[tid] = assigned.get(tid, frozenset()) | frozenset(entry["partitions"])
        if subscription is None:
            raise MigrationError(
                ErrorCode.group_id_not_found,
                f"{prefix} the embedded consumer protocol is malformed.",
            )
        members.append(ConsumerGroupMember(
            m.member_id, instance_id=m.group_instance_id, rack_id=subscription.get("rackId"),
            client_id=m.join.client_id, client_host=m.join.client_host,
            subscribed_topic_names=tuple(subscription.get("topics") or ()),
            rebalance_timeout_ms=m.join.rebalance_timeout_ms,
            classic_member_metadata=classic_metadata(m.join.session_timeout_ms, m.protocols),
            member_epoch=generation, previous_member_epoch=generation, assigned=assigned,
            assignment_epochs={(t, p): generation for t, ps in assigned.items() for p in ps},
        ))  # fmt: skip
    topics = {
        name: (tid, partitions_of[name])
        for name in sorted({t for m in members for t in m.subscribed_topic_names})
        if name in partitions_of and (tid := topic_id(name)) is not None
    }
    records: list[Record] = [member_record(gid, m) for m in members]
    records.append(epoch_record(gid, generation, metadata_hash(topics)))
    records += [target_member_record(gid, m.member_id, m.assigned) for m in members]
    records.append(target_metadata_record(gid, generation, 0))
    records += [current_assignment_record(gid, m) for m in members]
    return records


def classic_metadata(session_timeout_ms: int, protocols: list[tuple[str, bytes]]) -> dict[str, Any]:
    """A member's ClassicMemberMetadata: its session timeout and the protocols it joined with."""
    return {
        "sessionTimeoutMs": session_timeout_ms,
        "supportedProtocols": [{"name": n, "metadata": md} for n, md in protocols],
    }


def protocols_of(member: ConsumerGroupMember) -> list[tuple[str, bytes]]:
    meta = member.classic_member_metadata or {}
    return [(p["name"], bytes(p["metadata"])) for p in meta.get("supportedProtocols", ())]


def stored_classic_from_consumer(
    group: ConsumerGroup, leaving: set[str], names: Mapping[str, str]
) -> StoredGroup:
    """The classic group the remaining (classic) members of ``group`` become (Kafka's
    fromConsumerGroup, then createClassicGroupRecords): Stable at the group epoch as its
    generation, the protocol they all support, each member's target assignment as its
    classic assignment; no leader until the rebalance that follows elects one."""
    rest = [m for m in group.members.values() if m.member_id not in leaving]
    protocol = select_protocol([protocols_of(m) for m in rest])
    members = []
    for m in rest:
        metadata = dict(protocols_of(m))[protocol]
        session = int((m.classic_member_metadata or {}).get("sessionTimeoutMs", 45_000))
        target = group.target.get(m.member_id, {})
        members.append(StoredMember(
            m.member_id, m.instance_id, m.client_id, m.client_host,
            max(m.rebalance_timeout_ms, 0), session, metadata,
            assignment_bytes(target, names, metadata),
        ))  # fmt: skip
    return StoredGroup(
        CONSUMER_PROTOCOL_TYPE, group.group_epoch, protocol, None, int(time.time() * 1000),
        tuple(members),
    )  # fmt: skip

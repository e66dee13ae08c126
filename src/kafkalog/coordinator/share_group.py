"""A share group (KIP-932) as its records in ``__consumer_offsets`` describe it, the records
that change it, and the assignor that shares partitions among its members (Kafka's
ShareGroup, ShareGroupMember, SimpleAssignor).

Why: a share group is stored as a consumer group is, with its own record types: the group
epoch (ShareGroupMetadata), each member's subscription (ShareGroupMemberMetadata), the target
assignment (ShareGroupTargetAssignmentMetadata/Member), each member's current assignment
(ShareGroupCurrentMemberAssignment), and which share-partitions have state in
``__share_group_state`` (ShareGroupStatePartitionMetadata). Replaying them rebuilds the group
exactly, whoever wrote them (Kafka 4.3.1 or kafkalog). Unlike a consumer group, a partition
may be given to several members at once, so a member moves to its target in one step: there
is nothing to revoke first (Kafka's ShareGroupAssignmentBuilder).

Refuses: the heartbeat's rules and timers (``share_groups``), the records' fate
(``share_partition``) and the wire.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# record types (the keys' api keys) of a share group in __consumer_offsets
MEMBER_METADATA, GROUP_METADATA, TARGET_METADATA, TARGET_MEMBER = 10, 11, 12, 13
CURRENT_ASSIGNMENT, STATE_PARTITION_METADATA = 14, 15
SHARE_RECORD_NAMES = {
    MEMBER_METADATA: "ShareGroupMemberMetadata",
    GROUP_METADATA: "ShareGroupMetadata",
    TARGET_METADATA: "ShareGroupTargetAssignmentMetadata",
    TARGET_MEMBER: "ShareGroupTargetAssignmentMember",
    CURRENT_ASSIGNMENT: "ShareGroupCurrentMemberAssignment",
    STATE_PARTITION_METADATA: "ShareGroupStatePartitionMetadata",
}
STABLE = 0  # a share group member's only state (Kafka's MemberState.STABLE)

Assignment = Mapping[str, frozenset[int]]  # topic id -> partitions
Record = tuple[int, dict[str, Any], dict[str, Any] | None]


@dataclass(frozen=True, slots=True)
class ShareGroupMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: Assignment = field(default_factory=dict)


@dataclass
class ShareGroup:
    """A share group's replayed state; the coordinator's event loop owns it. ``initialized``
    holds the share-partitions whose state exists in ``__share_group_state``, by topic id:
    (topic name, partitions)."""

    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    assignment_timestamp: int = 0
    members: dict[str, ShareGroupMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    initializing: dict[str, tuple[str, frozenset[int]]] = field(default_factory=dict)
    initialized: dict[str, tuple[str, frozenset[int]]] = field(default_factory=dict)
    deleting: dict[str, str] = field(default_factory=dict)

    @property
    def state(self) -> str:
        """Kafka's ShareGroup.ShareGroupState: Empty or Stable (a member moves to its target
        in one step, so a share group never reconciles)."""
        return "Stable" if self.members else "Empty"

    def subscribed_topic_names(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}

    def replay(self, record_type: int, key: Mapping[str, Any], value: Any) -> None:
        """One record of this group (Kafka's GroupMetadataManager.replay for share groups)."""
        if record_type == GROUP_METADATA:
            self.group_epoch = value["epoch"]
            self.metadata_hash = value.get("metadataHash", 0)
        elif record_type == MEMBER_METADATA:
            self._replay_member(key["memberId"], value)
        elif record_type == TARGET_METADATA:
            if value is not None:
                self.assignment_epoch = value["assignmentEpoch"]
                self.assignment_timestamp = value.get("assignmentTimestamp", 0)
        elif record_type == TARGET_MEMBER:
            if value is None:
                self.target.pop(key["memberId"], None)
            else:
                self.target[key["memberId"]] = _assignment(value["topicPartitions"])
        elif record_type == CURRENT_ASSIGNMENT:
            self._replay_current(key["memberId"], value)
        elif record_type == STATE_PARTITION_METADATA:
            value = value or {}
            self.initializing = _topics(value.get("initializingTopics", []))
            self.initialized = _topics(value.get("initializedTopics", []))
            self.deleting = {t["topicId"]: t["topicName"] for t in value.get("deletingTopics", [])}

    def _replay_member(self, member_id: str, value: Mapping[str, Any] | None) -> None:
        if value is None:
            self.members.pop(member_id, None)
            return
        old = self.members.get(member_id, ShareGroupMember(member_id))
        self.members[member_id] = dataclasses.replace(
            old,
            rack_id=value.get("rackId"),
            client_id=value.get("clientId", ""),
            client_host=value.get("clientHost", ""),
            subscribed_topic_names=tuple(value.get("subscribedTopicNames", [])),
        )

    def _replay_current(self, member_id: str, value: Mapping[str, Any] | None) -> None:
        old = self.members.get(member_id)
        if value is None:
            if old is not None:
                self.members[member_id] = dataclasses.replace(
                    old, member_epoch=0, previous_member_epoch=0, assigned={}
                )
            return
        self.members[member_id] = dataclasses.replace(
            old or ShareGroupMember(member_id),
            member_epoch=value["memberEpoch"],
            previous_member_epoch=value["previousMemberEpoch"],
            assigned=_assignment(value["assignedPartitions"]),
        )

    def initialized_partitions(self) -> set[tuple[str, int]]:
        return {(t, p) for t, (_, parts) in self.initialized.items() for p in parts}


def _assignment(topics: Iterable[Mapping[str, Any]]) -> dict[str, frozenset[int]]:
    return {t["topicId"]: frozenset(t["partitions"]) for t in topics if t["partitions"]}


def _topics(rows: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, frozenset[int]]]:
    return {r["topicId"]: (r["topicName"], frozenset(r["partitions"])) for r in rows}


# -- records -------------------------------------------------------------------------------------


def _topic_partitions(assignment: Assignment) -> list[dict[str, Any]]:
    return [{"topicId": t, "partitions": sorted(ps)} for t, ps in sorted(assignment.items()) if ps]


def epoch_record(group_id: str, epoch: int, metadata_hash: int) -> Record:
    return (GROUP_METADATA, {"groupId": group_id}, {"epoch": epoch, "metadataHash": metadata_hash})


def member_record(group_id: str, m: ShareGroupMember) -> Record:
    return (MEMBER_METADATA, {"groupId": group_id, "memberId": m.member_id}, {
        "rackId": m.rack_id, "clientId": m.client_id, "clientHost": m.client_host,
        "subscribedTopicNames": list(m.subscribed_topic_names),
    })  # fmt: skip


def target_member_record(group_id: str, member_id: str, assignment: Assignment) -> Record:
    key = {"groupId": group_id, "memberId": member_id}
    return (TARGET_MEMBER, key, {"topicPartitions": _topic_partitions(assignment)})


def target_metadata_record(group_id: str, epoch: int, timestamp: int) -> Record:
    value = {"assignmentEpoch": epoch, "assignmentTimestamp": timestamp}
    return (TARGET_METADATA, {"groupId": group_id}, value)


def current_assignment_record(group_id: str, m: ShareGroupMember) -> Record:
    return (CURRENT_ASSIGNMENT, {"groupId": group_id, "memberId": m.member_id}, {
        "memberEpoch": m.member_epoch, "previousMemberEpoch": m.previous_member_epoch,
        "state": STABLE, "assignedPartitions": _topic_partitions(m.assigned),
    })  # fmt: skip


def member_removal_records(group_id: str, member_id: str) -> list[Record]:
    """Kafka's removeMember: the current assignment, the target and the subscription go."""
    key = {"groupId": group_id, "memberId": member_id}
    return [
        (CURRENT_ASSIGNMENT, key, None),
        (TARGET_MEMBER, key, None),
        (MEMBER_METADATA, key, None),
    ]


def state_partition_metadata_record(
    group_id: str,
    initializing: Mapping[str, tuple[str, frozenset[int]]],
    initialized: Mapping[str, tuple[str, frozenset[int]]],
    deleting: Mapping[str, str],
) -> Record:
    def rows(topics: Mapping[str, tuple[str, frozenset[int]]]) -> list[dict[str, Any]]:
        return [
            {"topicId": t, "topicName": name, "partitions": sorted(parts)}
            for t, (name, parts) in sorted(topics.items())
        ]

    return (STATE_PARTITION_METADATA, {"groupId": group_id}, {
        "initializingTopics": rows(initializing), "initializedTopics": rows(initialized),
        "deletingTopics": [{"topicId": t, "topicName": n} for t, n in sorted(deleting.items())],
    })  # fmt: skip


def group_removal_records(group_id: str) -> list[Record]:
    """The tombstones that delete an empty share group (Kafka's ShareGroup
    createGroupTombstoneRecords): its share-partition metadata, target metadata and epoch."""
    key = {"groupId": group_id}
    return [
        (STATE_PARTITION_METADATA, key, None),
        (TARGET_METADATA, key, None),
        (GROUP_METADATA, key, None),
    ]


# -- the assignor: Kafka's SimpleAssignor for members with one subscription ---------------------


def simple_assignment(
    members: list[str],
    partitions: list[tuple[str, int]],
    previous: Mapping[str, Assignment],
) -> dict[str, dict[str, frozenset[int]]]:
    """Kafka's SimpleHomogeneousAssignmentBuilder: each partition goes to ``sharing`` =
    ceil(members / partitions) members, each member to about sharing x partitions / members
    partitions (member i gets ceil(q(i+1)) - ceil(q i)); a member keeps what it held while
    that stays within both counts, and the rest is dealt out partition by partition to the
    members still short. Where Kafka walks its hash sets, this walks sorted ones, so the
    result is deterministic (and may differ from Kafka's in which member gets which
    partition, never in the counts)."""
    members = sorted(members)
    targets = sorted(partitions)
    if not members:
        return {}
    if not targets:
        return {m: {} for m in members}
    sharing = (len(members) + len(targets) - 1) // len(targets)
    q = sharing * len(targets) / len(members)
    desired = {m: _ceil(q * (i + 1)) - _ceil(q * i) for i, m in enumerate(members)}
    target_set = set(targets)
    held: dict[str, list[tuple[str, int]]] = {}
    by_partition: dict[tuple[str, int], list[str]] = {tp: [] for tp in targets}
    for m in members:
        kept = [
            (t, p)
            for t, ps in sorted(previous.get(m, {}).items())
            for p in sorted(ps)
            if (t, p) in target_set
        ][: desired[m]]
        held[m] = []
        for tp in kept:
            if len(by_partition[tp]) < sharing:
                by_partition[tp].append(m)
                held[m].append(tp)
    short = [m for m in members if len(held[m]) < desired[m]]
    for tp in targets:
        for m in list(short):
            if len(by_partition[tp]) >= sharing:
                break
            if m in by_partition[tp]:
                continue
            by_partition[tp].append(m)
            held[m].append(tp)
            if len(held[m]) >= desired[m]:
                short.remove(m)
    out: dict[str, dict[str, frozenset[int]]] = {}
    for m in members:
        assignment: dict[str, set[int]] = {}
        for t, p in held[m]:
            assignment.setdefault(t, set()).add(p)
        out[m] = {t: frozenset(ps) for t, ps in assignment.items()}
    return out


def _ceil(x: float) -> int:
    n = int(x)
    return n + 1 if x > n else n

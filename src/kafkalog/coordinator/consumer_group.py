"""A KIP-848 consumer group's state, as Kafka's ConsumerGroup and ConsumerGroupMember keep it,
and the one way it changes: replaying the group's records of ``__consumer_offsets``.

Why: a consumer group is its records. The group epoch (ConsumerGroupMetadata), each member's
subscription (ConsumerGroupMemberMetadata), the target assignment (TargetAssignmentMetadata and
one TargetAssignmentMember per member) and each member's current assignment and epoch
(CurrentMemberAssignment) are written first and then replayed here, at start-up from the log
and live after each append, so memory is always what a restart would load, and what Kafka
4.3.1 would load from the same directory. ``reconcile`` is Kafka's CurrentAssignmentBuilder: a
member moves toward the target only by revoking first, and takes a partition only once its
previous owner has released it. Refuses: I/O, clocks and the wire (``consumer_groups``
decides, writes and times).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafkalog.coordinator.assignors import NO_PARTITIONS, Assignment
from kafkalog.records.schema_writer import encode_key, encode_versioned

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
# record types (the keys' api keys) of a consumer group in __consumer_offsets
GROUP_METADATA, PARTITION_METADATA, MEMBER_METADATA = 3, 4, 5
TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT, REGULAR_EXPRESSION = 6, 7, 8, 16
RECORD_NAMES = {
    GROUP_METADATA: "ConsumerGroupMetadata",
    PARTITION_METADATA: "ConsumerGroupPartitionMetadata",
    MEMBER_METADATA: "ConsumerGroupMemberMetadata",
    TARGET_METADATA: "ConsumerGroupTargetAssignmentMetadata",
    TARGET_MEMBER: "ConsumerGroupTargetAssignmentMember",
    CURRENT_ASSIGNMENT: "ConsumerGroupCurrentMemberAssignment",
    REGULAR_EXPRESSION: "ConsumerGroupRegularExpression",
}


class MemberState(enum.IntEnum):
    """A member's reconciliation state, by the byte Kafka's MemberState stores."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class GroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """One member: what it subscribed to (its member metadata record) and where it stands
    (its current assignment record). ``assigned`` holds the partitions it may read now;
    ``pending_revocation`` those it must give up before it moves to the next epoch."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str = ""  # "": none, as Kafka keeps it
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    classic_member_metadata: Mapping[str, Any] | None = None  # kept as read, for Kafka
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # KIP-1251: the member epoch at which each held partition was given (a commit from an
    # epoch at or after it, up to the member's, is the member's own)
    assignment_epochs: Mapping[tuple[str, int], int] = field(default_factory=dict)

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == epoch


@dataclass
class ConsumerGroup:
    """A consumer group's replayed state. ``partition_epochs`` maps each partition some
    member holds (assigned or pending revocation) to that member's epoch: a partition in it is
    not free for another member yet. Not thread-safe: the coordinator's event loop owns it."""

    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    assignment_timestamp: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    partition_epochs: dict[tuple[str, int], int] = field(default_factory=dict)
    # resolved regular expressions: regex -> (topic names, version, timestamp)
    regexes: dict[str, tuple[tuple[str, ...], int, int]] = field(default_factory=dict)

    @property
    def state(self) -> GroupState:
        """Kafka's ConsumerGroup.maybeUpdateGroupState, derived rather than stored."""
        if not self.members:
            return GroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return GroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return GroupState.RECONCILING
        return GroupState.STABLE

    def static_member(self, instance_id: str) -> ConsumerGroupMember | None:
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def current_partition_epoch(self, topic_id: str, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), -1)

    def subscribed_topic_names(self) -> set[str]:
        """Every topic some member subscribes to, by name or by a resolved expression."""
        out: set[str] = set()
        for m in self.members.values():
            out |= self.member_topics(m)
        return out

    def member_topics(self, member: ConsumerGroupMember) -> set[str]:
        """A member's topics: its names, and what its expression last resolved to."""
        out = set(member.subscribed_topic_names)
        regex = member.subscribed_topic_regex
        if regex and regex in self.regexes:
            out.update(self.regexes[regex][0])
        return out

    def put_member(self, member: ConsumerGroupMember) -> None:
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
        self.members[member.member_id] = member
        for topic, parts in (*member.assigned.items(), *member.pending_revocation.items()):
            for p in parts:
                self.partition_epochs[(topic, p)] = member.member_epoch

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        if old is not None:
            self._release(old)

    def _release(self, member: ConsumerGroupMember) -> None:
        for topic, parts in (*member.assigned.items(), *member.pending_revocation.items()):
            for p in parts:
                if self.partition_epochs.get((topic, p)) == member.member_epoch:
                    del self.partition_epochs[(topic, p)]

    # -- replay: one method per record type, as GroupMetadataManager.replay -----------------

    def replay(
        self, record_type: int, key: Mapping[str, Any], value: Mapping[str, Any] | None
    ) -> None:
        if record_type == GROUP_METADATA:
            if value is not None:
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
        elif record_type == REGULAR_EXPRESSION:
            if value is None:
                self.regexes.pop(key["regularExpression"], None)
            else:
                topics = tuple(value["topics"] or ())
                self.regexes[key["regularExpression"]] = (
                    topics,
                    value["version"],
                    value["timestamp"],
                )

    def _replay_member(self, member_id: str, value: Mapping[str, Any] | None) -> None:
        if value is None:
            self.remove_member(member_id)
            return
        old = self.members.get(member_id) or ConsumerGroupMember(member_id)
        self.put_member(
            dataclasses.replace(
                old,
                instance_id=value["instanceId"],
                rack_id=value["rackId"],
                client_id=value["clientId"],
                client_host=value["clientHost"],
                subscribed_topic_names=tuple(value["subscribedTopicNames"] or ()),
                subscribed_topic_regex=value["subscribedTopicRegex"] or "",
                rebalance_timeout_ms=value["rebalanceTimeoutMs"],
                server_assignor=value["serverAssignor"],
                classic_member_metadata=value.get("classicMemberMetadata"),
            )
        )

    def _replay_current(self, member_id: str, value: Mapping[str, Any] | None) -> None:
        old = self.members.get(member_id)
        if value is None:
            if old is not None:
                self.put_member(dataclasses.replace(
                    old, member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                    previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH, state=MemberState.STABLE,
                    assigned=NO_PARTITIONS, pending_revocation=NO_PARTITIONS,
                    assignment_epochs={},
                ))  # fmt: skip
            return
        state = value["state"]
        epoch = value["memberEpoch"]
        held = [*(value["assignedPartitions"] or ()), *(value["partitionsPendingRevocation"] or ())]
        self.put_member(
            dataclasses.replace(
                old or ConsumerGroupMember(member_id),
                member_epoch=epoch,
                previous_member_epoch=value["previousMemberEpoch"],
                state=MemberState(state)
                if state in MemberState._value2member_map_
                else MemberState.UNKNOWN,
                assigned=_assignment(value["assignedPartitions"]),
                pending_revocation=_assignment(value["partitionsPendingRevocation"]),
                assignment_epochs=_assignment_epochs(held, epoch),
            )
        )


def _assignment_epochs(topics: list[Any], member_epoch: int) -> dict[tuple[str, int], int]:
    """Each held partition's assignment epoch; a record written before KIP-1251 (none, or not
    one per partition) gives the member's epoch, as Kafka 4.3 reads it."""
    out = {}
    for t in topics:
        epochs = t.get("assignmentEpochs") or []
        if len(epochs) != len(t["partitions"]):
            epochs = [member_epoch] * len(t["partitions"])
        out.update({(t["topicId"], p): e for p, e in zip(t["partitions"], epochs, strict=True)})
    return out


def _assignment(topics: Any) -> dict[str, frozenset[int]]:
    return {t["topicId"]: frozenset(t["partitions"]) for t in topics or () if t["partitions"]}


# -- records, as the values the schemas encode ------------------------------------------------

Record = tuple[int, dict[str, Any], dict[str, Any] | None]  # (type, key, value or tombstone)


def record_rows(
    records: list[Record], names: Mapping[int, str] = RECORD_NAMES
) -> list[tuple[bytes, bytes | None]]:
    """The records as ``__consumer_offsets`` keeps them (value version 0 of each schema);
    ``names``: each record type's schema name (a share group's are its own)."""
    rows: list[tuple[bytes, bytes | None]] = []
    for record_type, key, value in records:
        name = names[record_type]
        encoded = None if value is None else encode_versioned(f"{name}Value", 0, value)
        rows.append((encode_key(f"{name}Key", key), encoded))
    return rows


def topic_partitions(
    assignment: Assignment, epochs: Mapping[tuple[str, int], int] | None = None
) -> list[dict[str, Any]]:
    """An assignment as the records hold it; with ``epochs``, each partition's assignment
    epoch beside it (KIP-1251's AssignmentEpochs, in the current assignment only)."""
    out = []
    for topic, parts in sorted(assignment.items()):
        if parts:
            entry: dict[str, Any] = {"topicId": topic, "partitions": sorted(parts)}
            if epochs is not None:
                entry["assignmentEpochs"] = [epochs[(topic, p)] for p in sorted(parts)]
            out.append(entry)
    return out


def epoch_record(group_id: str, epoch: int, metadata_hash: int) -> Record:
    return (GROUP_METADATA, {"groupId": group_id}, {"epoch": epoch, "metadataHash": metadata_hash})


def member_record(group_id: str, m: ConsumerGroupMember) -> Record:
    return (MEMBER_METADATA, {"groupId": group_id, "memberId": m.member_id}, {
        "instanceId": m.instance_id, "rackId": m.rack_id, "clientId": m.client_id,
        "clientHost": m.client_host, "subscribedTopicNames": list(m.subscribed_topic_names),
        "subscribedTopicRegex": m.subscribed_topic_regex,
        "rebalanceTimeoutMs": m.rebalance_timeout_ms, "serverAssignor": m.server_assignor,
        "classicMemberMetadata": m.classic_member_metadata,
    })  # fmt: skip


def target_member_record(group_id: str, member_id: str, assignment: Assignment) -> Record:
    key = {"groupId": group_id, "memberId": member_id}
    return (TARGET_MEMBER, key, {"topicPartitions": topic_partitions(assignment)})


def target_metadata_record(group_id: str, epoch: int, timestamp: int) -> Record:
    value = {"assignmentEpoch": epoch, "assignmentTimestamp": timestamp}
    return (TARGET_METADATA, {"groupId": group_id}, value)


def current_assignment_record(group_id: str, m: ConsumerGroupMember) -> Record:
    return (CURRENT_ASSIGNMENT, {"groupId": group_id, "memberId": m.member_id}, {
        "memberEpoch": m.member_epoch, "previousMemberEpoch": m.previous_member_epoch,
        "state": int(m.state),
        "assignedPartitions": topic_partitions(m.assigned, m.assignment_epochs),
        "partitionsPendingRevocation": topic_partitions(m.pending_revocation, m.assignment_epochs),
    })  # fmt: skip


def member_removal_records(group_id: str, member_id: str) -> list[Record]:
    """Kafka's removeMember: the current assignment, the target and the subscription go."""
    key = {"groupId": group_id, "memberId": member_id}
    return [
        (CURRENT_ASSIGNMENT, key, None),
        (TARGET_MEMBER, key, None),
        (MEMBER_METADATA, key, None),
    ]


def group_removal_records(group_id: str) -> list[Record]:
    """The tombstones that delete an empty group: target metadata, partition metadata, epoch."""
    key = {"groupId": group_id}
    return [
        (TARGET_METADATA, key, None),
        (PARTITION_METADATA, key, None),
        (GROUP_METADATA, key, None),
    ]


# -- reconciliation: Kafka's CurrentAssignmentBuilder -----------------------------------------

OwnedPartitions = Mapping[str, frozenset[int]] | None  # None: the heartbeat did not say


def _owns_any(owned: OwnedPartitions, partitions: Assignment) -> bool:
    if owned is None:
        return True
    return any(owned.get(topic, frozenset()) & parts for topic, parts in partitions.items())


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Assignment,
    partition_epoch: Callable[[str, int], int],
    owned: OwnedPartitions,
) -> ConsumerGroupMember:
    """The member's next state toward ``target`` at ``target_epoch``. A member with
    partitions to revoke stays in its epoch (UNREVOKED_PARTITIONS) until its heartbeat no
    longer reports them; a partition another member still holds is not given yet
    (UNRELEASED_PARTITIONS); otherwise it moves to the target epoch."""
    if member.state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned)
    if member.state is MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if owned is None or any(owned.values()):
        raise UnknownStateError(member.member_id)
    return _next(member, target_epoch, target_epoch, target, partition_epoch, owned)


class UnknownStateError(Exception):
    """A member in a state this coordinator does not know: it must rejoin with nothing."""


def _with_epoch(member: ConsumerGroupMember, epoch: int, **changes: Any) -> ConsumerGroupMember:
    # Kafka's Builder.updateMemberEpoch: the previous epoch is the one being left
    return dataclasses.replace(
        member, member_epoch=epoch, previous_member_epoch=member.member_epoch, **changes
    )


def _next(
    member: ConsumerGroupMember,
    member_epoch: int,
    target_epoch: int,
    target: Assignment,
    partition_epoch: Callable[[str, int], int],
    owned: OwnedPartitions,
) -> ConsumerGroupMember:
    unreleased = False
    assigned: dict[str, frozenset[int]] = {}
    revoking: dict[str, frozenset[int]] = {}
    adding: dict[str, frozenset[int]] = {}
    for topic in set(target) | set(member.assigned):
        want = target.get(topic, frozenset())
        have = member.assigned.get(topic, frozenset())
        keep, drop = have & want, have - want
        free = frozenset(p for p in want - keep if partition_epoch(topic, p) == -1)
        unreleased = unreleased or len(free) < len(want - keep)
        if keep:
            assigned[topic] = keep
        if drop:
            revoking[topic] = drop
        if free:
            adding[topic] = free

    def epochs_of(new_epoch: int, *held: Assignment) -> dict[tuple[str, int], int]:
        # what is kept keeps the epoch it was given at; what is added takes the new one
        return {(t, p): member.assignment_epochs.get((t, p), new_epoch)
                for a in held for t, ps in a.items() for p in ps}  # fmt: skip

    if revoking and _owns_any(owned, revoking):
        return _with_epoch(
            member, member_epoch, state=MemberState.UNREVOKED_PARTITIONS,
            assigned=assigned, pending_revocation=revoking,
            assignment_epochs=epochs_of(member_epoch, assigned, revoking),
        )  # fmt: skip
    for topic, parts in adding.items():
        assigned[topic] = assigned.get(topic, frozenset()) | parts
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _with_epoch(
        member, target_epoch, state=state, assigned=assigned, pending_revocation=NO_PARTITIONS,
        assignment_epochs=epochs_of(target_epoch, assigned),
    )  # fmt: skip

"""JoinGroup, SyncGroup, Heartbeat and LeaveGroup of classic consumers in a KIP-848 consumer
group (Kafka's classicGroupJoinToConsumerGroup and its siblings).

Why: during a rolling upgrade (or downgrade) a consumer group has members of both protocols.
A classic member's JoinGroup is a heartbeat of the consumer protocol in disguise: its
subscription (the embedded ConsumerProtocol subscription, with the partitions it still owns)
goes through the same rule, the answer's generation is its member epoch, and no member is
leader: SyncGroup hands each its assignment, computed by the broker. Its Heartbeat says
REBALANCE_IN_PROGRESS while its epoch is behind the group's assignment or it holds
partitions it must give up, and it rejoins. Its LeaveGroup and its silence (its own session
timeout) fence it; when only classic members are left, the group is a classic group again.

Refuses: classic members when ``group.consumer.migration.policy`` is disabled, a protocol
type other than "consumer", and protocols the group's other classic members do not all
support (INCONSISTENT_GROUP_PROTOCOL, as Kafka). A static member's rejoin under a new member
id is answered as the consumer protocol answers it.
"""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from kafkalog.coordinator.consumer_group import ConsumerGroup, ConsumerGroupMember, MemberState
from kafkalog.coordinator.consumer_groups import ConsumerGroups, Heartbeat
from kafkalog.coordinator.group_member import JoinRequest, JoinResult, SyncResult
from kafkalog.coordinator.group_migration import (
    CONSUMER_PROTOCOL_TYPE,
    assignment_bytes,
    classic_metadata,
    owned_partitions,
    protocols_of,
    subscription_of,
)


class ClassicMembers:
    """The classic protocol's requests for the consumer groups of ``groups``."""

    def __init__(self, groups: ConsumerGroups) -> None:
        self.groups = groups

    def _supported(self, group: ConsumerGroup, protocols: list[tuple[str, bytes]]) -> bool:
        """ConsumerGroup.supportsClassicProtocols: a protocol every classic member has."""
        classic = [m for m in group.members.values() if m.classic_member_metadata is not None]
        names = {n for n, _ in protocols}
        if not names:
            return False
        return any(all(n in dict(protocols_of(m)) for m in classic) for n in names)

    async def join(self, group: ConsumerGroup, req: JoinRequest) -> JoinResult:
        groups = self.groups
        if groups.limits.migration_policy == "disabled":
            return JoinResult(ErrorCode.inconsistent_group_protocol, req.member_id)
        member_id = req.member_id or str(uuid.uuid4())
        if member_id not in group.members and len(group.members) >= groups.limits.max_size:
            return JoinResult(ErrorCode.group_max_size_reached, member_id)
        if req.protocol_type != CONSUMER_PROTOCOL_TYPE or not self._supported(group, req.protocols):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        if req.require_known_member_id and not req.member_id and req.group_instance_id is None:
            return JoinResult(ErrorCode.member_id_required, member_id)
        subscription = subscription_of(req.protocols[0][1])
        if subscription is None:
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        answer = await groups.heartbeat(Heartbeat(
            group_id=group.group_id, member_id=member_id, member_epoch=0,
            instance_id=req.group_instance_id, rack_id=subscription.get("rackId"),
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            subscribed_topic_names=tuple(subscription.get("topics") or ()),
            subscribed_topic_regex="", server_assignor=None,
            owned=owned_partitions(subscription, groups.ctx.manager.topic_id),
            client_id=req.client_id, client_host=req.client_host,
            classic_member_metadata=classic_metadata(req.session_timeout_ms, req.protocols),
        ))  # fmt: skip
        if answer.error is not ErrorCode.none:
            return JoinResult(answer.error, member_id)
        return JoinResult(
            ErrorCode.none, answer.member_id or member_id, answer.member_epoch,
            CONSUMER_PROTOCOL_TYPE, req.protocols[0][0],
        )  # fmt: skip

    def _member(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None
    ) -> tuple[ErrorCode | None, ConsumerGroupMember | None]:
        """Kafka's validateConsumerGroupMember, then throwIfMemberDoesNotUseClassicProtocol."""
        if instance_id is None:
            member = group.members.get(member_id)
        else:
            member = group.static_member(instance_id)
            if member is not None and member.member_id != member_id:
                return ErrorCode.fenced_instance_id, None
        if member is None or member.classic_member_metadata is None:
            return ErrorCode.unknown_member_id, None
        return None, member

    async def sync(
        self, group: ConsumerGroup, member_id: str, generation: int, instance_id: str | None,
        protocol_type: str | None, protocol_name: str | None,
    ) -> SyncResult:  # fmt: skip
        async with self.groups.lock(group.group_id):
            error, member = self._member(group, member_id, instance_id)
            if member is None:
                return SyncResult(error or ErrorCode.unknown_member_id)
            if generation != member.member_epoch:
                return SyncResult(ErrorCode.illegal_generation)
            protocols = protocols_of(member)
            name = protocols[0][0] if protocols else ""
            if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
                protocol_name is not None and protocol_name != name
            ):
                return SyncResult(ErrorCode.inconsistent_group_protocol)
            unrevoked = member.state is MemberState.UNREVOKED_PARTITIONS
            if group.assignment_epoch > member.member_epoch and not unrevoked:
                return SyncResult(ErrorCode.rebalance_in_progress)
            self.groups.time_member(group.group_id, member)
            assignment = assignment_bytes(
                member.assigned, self.groups.ctx.manager.topic_names_by_id(), protocols[0][1]
            )
            return SyncResult(ErrorCode.none, protocol_type, protocol_name, assignment)

    def heartbeat(
        self, group: ConsumerGroup, member_id: str, generation: int, instance_id: str | None
    ) -> ErrorCode:
        error, member = self._member(group, member_id, instance_id)
        if member is None:
            return error or ErrorCode.unknown_member_id
        if generation != member.member_epoch:
            return ErrorCode.illegal_generation
        self.groups.time_member(group.group_id, member)
        if (
            member.member_epoch < group.assignment_epoch
            or member.state is MemberState.UNREVOKED_PARTITIONS
            or (
                member.state is MemberState.UNRELEASED_PARTITIONS
                and not _waiting_on_unreleased(group, member)
            )
        ):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    async def leave(
        self, group: ConsumerGroup, leaving: list[tuple[str, str | None]]
    ) -> list[ErrorCode]:
        """Each leaving member's code; the valid ones are fenced together."""
        codes, fenced = [], set()
        async with self.groups.lock(group.group_id):
            for member_id, instance_id in leaving:
                if instance_id is None:
                    member = group.members.get(member_id)
                else:
                    member = group.static_member(instance_id)
                    if member is not None and member_id and member.member_id != member_id:
                        codes.append(ErrorCode.fenced_instance_id)
                        continue
                if member is None:
                    codes.append(ErrorCode.unknown_member_id)
                    continue
                codes.append(ErrorCode.none)
                fenced.add(member.member_id)
            if fenced:
                await self.groups.fence_members(group, fenced)
        return codes


def _waiting_on_unreleased(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
    """Kafka's waitingOnUnreleasedPartition: a partition of its target still held by another."""
    for topic_id, partitions in group.target.get(member.member_id, {}).items():
        for p in partitions - member.assigned.get(topic_id, frozenset()):
            if group.current_partition_epoch(topic_id, p) != -1:
                return True
    return False

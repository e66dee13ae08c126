"""KIP-848 consumer groups on the wire: ConsumerGroupHeartbeat and ConsumerGroupDescribe.

Why: a consumer with ``group.protocol=consumer`` speaks only these two (with OffsetCommit and
OffsetFetch v9, which carry its member epoch). This module checks each request as Kafka's
GroupCoordinatorService does before the group is touched (an empty group id, a first
heartbeat without a rebalance timeout or a subscription, an epoch below -2: INVALID_REQUEST),
authorizes it as KafkaApis does (READ on the group; DESCRIBE on each topic named in a
subscription, TOPIC_AUTHORIZATION_FAILED otherwise), turns topic IDs to and from the wire's
UUIDs and builds each version's response. Refuses: state (``coordinator.consumer_groups``).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kafkalog.coordinator.consumer_group import ConsumerGroup, ConsumerGroupMember
from kafkalog.coordinator.consumer_groups import Heartbeat, HeartbeatAnswer
from kafkalog.errors import KafkaLogError
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.wire import Request, make, payload_module
from kafkalog.server.authorizer import AclOperation, ResourceType
from kafkalog.server.context import NO_THROTTLE, BrokerContext
from kafkalog.types import uuid_bytes, uuid_string

if TYPE_CHECKING:
    from kafkalog.coordinator.group_coordinator import GroupCoordinator


def topic_names(ctx: BrokerContext) -> Mapping[str, str]:
    """Every topic's name by its ID."""
    return ctx.manager.topic_names_by_id()


def refused_topics(ctx: BrokerContext, request: Request, names: Any) -> str | None:
    """KafkaApis' check of a group heartbeat's subscription: the message naming the topics
    the principal may not DESCRIBE, or None."""
    refused = sorted(
        n for n in names or () if not ctx.allowed(request, AclOperation.DESCRIBE,
                                                  ResourceType.TOPIC, n)
    )  # fmt: skip
    if not refused:
        return None
    return f"The group has subscribed to topics that it is not authorized to: {refused}."


def _wire_id(topic_id: str) -> uuid.UUID:
    return uuid.UUID(bytes=uuid_bytes(topic_id))


def _topic_id(value: uuid.UUID | None) -> str:
    return uuid_string((value or uuid.UUID(int=0)).bytes)


def _invalid(body: Any, version: int) -> str | None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid, message for message."""
    epoch = body.member_epoch
    if not body.group_id:
        return "GroupId can't be empty."
    if body.instance_id is not None and not body.instance_id:
        return "InstanceId can't be empty."
    if body.rack_id is not None and not body.rack_id:
        return "RackId can't be empty."
    if version >= 1 and not body.member_id:
        return "MemberId can't be empty."
    if epoch > 0 and not body.member_id:
        return "MemberId can't be empty."
    if epoch == 0:
        if _ms(body.rebalance_timeout) == -1:
            return "RebalanceTimeoutMs must be provided in first request."
        if body.topic_partitions is None or body.topic_partitions:
            return "TopicPartitions must be empty when (re-)joining."
        regex = getattr(body, "subscribed_topic_regex", None)  # v1 on
        if body.subscribed_topic_names is None and regex is None:
            return "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
    elif epoch in (-1, -2):
        if not body.member_id:
            return "MemberId can't be empty."
        if epoch == -2 and body.instance_id is None:
            return "InstanceId can't be null."
    elif epoch < -2:
        return f"MemberEpoch is invalid: {epoch}."
    return None


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000)


def _heartbeat_response(mod: Any, answer: HeartbeatAnswer) -> Any:
    assignment = None
    if answer.assignment is not None and answer.error is ErrorCode.none:
        assignment = make(mod, "Assignment", topic_partitions=tuple(
            make(mod, "TopicPartitions", topic_id=_wire_id(t), partitions=tuple(sorted(ps)))
            for t, ps in sorted(answer.assignment.items())
        ))  # fmt: skip
    return make(
        mod, "ConsumerGroupHeartbeatResponse", throttle_time=NO_THROTTLE,
        error_code=answer.error, error_message=answer.message, member_id=answer.member_id,
        member_epoch=answer.member_epoch if answer.error is ErrorCode.none else -1,
        heartbeat_interval=datetime.timedelta(milliseconds=answer.heartbeat_interval_ms),
        assignment=assignment,
    )  # fmt: skip


async def consumer_group_heartbeat(
    coord: GroupCoordinator, ctx: BrokerContext, request: Request
) -> Any:
    body, version = request.body, request.api_version
    mod = payload_module(ApiKey.CONSUMER_GROUP_HEARTBEAT, version, True)
    if not ctx.allowed(request, AclOperation.READ, ResourceType.GROUP, body.group_id):
        return _heartbeat_response(mod, HeartbeatAnswer(ErrorCode.group_authorization_failed))
    names = body.subscribed_topic_names
    message = refused_topics(ctx, request, names)
    if message is not None:
        return _heartbeat_response(
            mod, HeartbeatAnswer(ErrorCode.topic_authorization_failed, message)
        )
    problem = _invalid(body, version)
    if problem is not None:
        return _heartbeat_response(mod, HeartbeatAnswer(ErrorCode.invalid_request, problem))
    owned = None
    if body.topic_partitions is not None:
        owned = {}
        for tp in body.topic_partitions:
            owned[_topic_id(tp.topic_id)] = frozenset(tp.partitions)
    heartbeat = Heartbeat(
        group_id=body.group_id,
        member_id=body.member_id,
        member_epoch=body.member_epoch,
        instance_id=body.instance_id,
        rack_id=body.rack_id,
        rebalance_timeout_ms=_ms(body.rebalance_timeout),
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=getattr(body, "subscribed_topic_regex", None),
        server_assignor=body.server_assignor,
        owned=owned,
        client_id=request.client_id or "",
        client_host=f"/{request.client_host or '127.0.0.1'}",
    )
    try:
        answer = await coord.consumer.heartbeat(heartbeat)
    except KafkaLogError:
        answer = HeartbeatAnswer(ErrorCode.coordinator_not_available)
    return _heartbeat_response(mod, answer)


def _assignment(
    mod: Any, assignment: Mapping[str, frozenset[int]], names: Mapping[str, str]
) -> Any:
    return make(mod, "Assignment", topic_partitions=tuple(
        make(mod, "TopicPartitions", topic_id=_wire_id(t), topic_name=names.get(t, ""),
             partitions=tuple(sorted(ps)))
        for t, ps in sorted(assignment.items()) if t in names
    ))  # fmt: skip


def _described_member(
    mod: Any, group: ConsumerGroup, m: ConsumerGroupMember, names: Mapping[str, str], version: int
) -> Any:
    # v1: 1, a member of the consumer protocol; 0, of the classic one (migrated online)
    extra = {"member_type": 0 if m.classic_member_metadata else 1} if version >= 1 else {}
    return make(
        mod, "Member", member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
        member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
        subscribed_topic_names=tuple(m.subscribed_topic_names),
        subscribed_topic_regex=m.subscribed_topic_regex,
        assignment=_assignment(mod, m.assigned, names),
        target_assignment=_assignment(mod, group.target.get(m.member_id, {}), names),
        **extra,
    )  # fmt: skip


async def consumer_group_describe(
    coord: GroupCoordinator, ctx: BrokerContext, request: Request
) -> Any:
    body, version = request.body, request.api_version
    mod = payload_module(ApiKey.CONSUMER_GROUP_DESCRIBE, version, True)
    names = topic_names(ctx)

    def empty(group_id: str, code: ErrorCode, message: str | None = None) -> Any:
        return make(
            mod, "DescribedGroup", error_code=code, error_message=message, group_id=group_id,
            group_state="", group_epoch=-1, assignment_epoch=-1, assignor_name="", members=(),
            authorized_operations=-2147483648,
        )  # fmt: skip

    described = []
    for group_id in body.group_ids:
        if not ctx.allowed(request, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            described.append(empty(group_id, ErrorCode.group_authorization_failed))
            continue
        group = coord.consumer.groups.get(group_id)
        if group is None:
            message = (
                f"Group {group_id} is not a consumer group." if group_id in coord.groups
                else f"Group {group_id} not found."
            )  # fmt: skip
            described.append(empty(group_id, ErrorCode.group_id_not_found, message))
            continue
        members = tuple(
            _described_member(mod, group, m, names, version)
            for _, m in sorted(group.members.items())
        )
        described.append(make(
            mod, "DescribedGroup", error_code=ErrorCode.none, error_message=None,
            group_id=group_id, group_state=group.state.value, group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=coord.consumer.assignor_of(group), members=members,
            authorized_operations=-2147483648,
        ))  # fmt: skip
    return make(
        mod, "ConsumerGroupDescribeResponse", throttle_time=NO_THROTTLE, groups=tuple(described)
    )

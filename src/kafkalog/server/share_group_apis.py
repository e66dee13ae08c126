"""Share groups on the wire, beside the records' own APIs: ShareGroupHeartbeat,
ShareGroupDescribe, and Describe/Alter/DeleteShareGroupOffsets (KIP-932).

Why: a KafkaShareConsumer joins, stays and leaves with ShareGroupHeartbeat alone;
``kafka-share-groups`` reads the share-partitions' start offsets and lag with
DescribeShareGroupOffsets, and resets or deletes them (Alter/DeleteShareGroupOffsets) while
the group is empty. This module
checks each request as Kafka's GroupCoordinatorService does before the group is touched
(an empty group or member id, a first heartbeat without topics, an epoch below -1:
INVALID_REQUEST), authorizes it as KafkaApis does (READ on the group; DESCRIBE on each
subscribed topic), turns topic IDs to and from the wire's UUIDs and builds the responses.
Refuses: state (``coordinator.share_groups``).
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kafkalog.coordinator.share_group import ShareGroup
from kafkalog.coordinator.share_groups import (
    ShareHeartbeat,
    ShareHeartbeatAnswer,
    ShareHeartbeatError,
)
from kafkalog.errors import KafkaLogError
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.wire import Request, make, payload_module
from kafkalog.server.authorizer import AclOperation, ResourceType
from kafkalog.server.consumer_group_apis import _wire_id, refused_topics, topic_names
from kafkalog.server.context import NO_THROTTLE, BrokerContext

if TYPE_CHECKING:
    from kafkalog.coordinator.group_coordinator import GroupCoordinator
    from kafkalog.coordinator.share_partitions import SharePartitions


def _invalid(body: Any) -> str | None:
    """Kafka's throwIfShareGroupHeartbeatRequestIsInvalid, message for message."""
    if not body.group_id:
        return "GroupId can't be empty."
    if body.rack_id is not None and not body.rack_id:
        return "RackId can't be empty."
    if not body.member_id:
        return "MemberId can't be empty."
    if body.member_epoch == 0 and not body.subscribed_topic_names:
        return "SubscribedTopicNames must be set in first request."
    if body.member_epoch < -1:
        return f"MemberEpoch is invalid: {body.member_epoch}."
    return None


def _response(mod: Any, answer: ShareHeartbeatAnswer) -> Any:
    assignment = None
    if answer.assignment is not None and answer.error is ErrorCode.none:
        assignment = make(mod, "Assignment", topic_partitions=tuple(
            make(mod, "TopicPartitions", topic_id=_wire_id(t), partitions=tuple(sorted(ps)))
            for t, ps in sorted(answer.assignment.items())
        ))  # fmt: skip
    return make(
        mod, "ShareGroupHeartbeatResponse", throttle_time=NO_THROTTLE, error_code=answer.error,
        error_message=answer.message, member_id=answer.member_id,
        member_epoch=answer.member_epoch if answer.error is ErrorCode.none else -1,
        heartbeat_interval=datetime.timedelta(milliseconds=answer.heartbeat_interval_ms),
        assignment=assignment,
    )  # fmt: skip


async def share_group_heartbeat(
    coord: GroupCoordinator, ctx: BrokerContext, request: Request
) -> Any:
    body = request.body
    mod = payload_module(ApiKey.SHARE_GROUP_HEARTBEAT, request.api_version, True)
    if not ctx.allowed(request, AclOperation.READ, ResourceType.GROUP, body.group_id):
        return _response(mod, ShareHeartbeatAnswer(ErrorCode.group_authorization_failed))
    names = body.subscribed_topic_names
    message = refused_topics(ctx, request, names)
    if message is not None:
        return _response(mod, ShareHeartbeatAnswer(ErrorCode.topic_authorization_failed, message))
    problem = _invalid(body)
    if problem is not None:
        return _response(mod, ShareHeartbeatAnswer(ErrorCode.invalid_request, problem))
    heartbeat = ShareHeartbeat(
        group_id=body.group_id,
        member_id=body.member_id,
        member_epoch=body.member_epoch,
        rack_id=body.rack_id,
        subscribed_topic_names=None if names is None else tuple(names),
        client_id=request.client_id or "",
        client_host=f"/{request.client_host or '127.0.0.1'}",
    )
    try:
        answer = await coord.share.heartbeat(heartbeat)
    except KafkaLogError:
        answer = ShareHeartbeatAnswer(ErrorCode.coordinator_not_available)
    return _response(mod, answer)


async def share_group_describe(
    coord: GroupCoordinator, ctx: BrokerContext, request: Request
) -> Any:
    mod = payload_module(ApiKey.SHARE_GROUP_DESCRIBE, request.api_version, True)
    names = topic_names(ctx)

    def empty(group_id: str, code: ErrorCode, message: str | None = None) -> Any:
        return make(
            mod, "DescribedGroup", error_code=code, error_message=message, group_id=group_id,
            group_state="", group_epoch=-1, assignment_epoch=-1, assignor_name="", members=(),
            authorized_operations=-2147483648,
        )  # fmt: skip

    def described(group: ShareGroup) -> Any:
        members = tuple(
            make(
                mod, "Member", member_id=m.member_id, rack_id=m.rack_id,
                member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=tuple(m.subscribed_topic_names),
                assignment=make(mod, "Assignment", topic_partitions=tuple(
                    make(mod, "TopicPartitions", topic_id=_wire_id(t), topic_name=names[t],
                         partitions=tuple(sorted(ps)))
                    for t, ps in sorted(m.assigned.items()) if t in names
                )),
            )
            for _, m in sorted(group.members.items())
        )  # fmt: skip
        return make(
            mod, "DescribedGroup", error_code=ErrorCode.none, error_message=None,
            group_id=group.group_id, group_state=group.state,
            group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
            assignor_name="simple", members=members, authorized_operations=-2147483648,
        )  # fmt: skip

    out = []
    for group_id in request.body.group_ids:
        if not ctx.allowed(request, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            out.append(empty(group_id, ErrorCode.group_authorization_failed))
            continue
        group = coord.share.groups.get(group_id)
        if group is None:
            other = group_id in coord.groups or group_id in coord.consumer.groups
            message = (
                f"Group {group_id} is not a share group." if other
                else f"Group {group_id} not found."
            )  # fmt: skip
            out.append(empty(group_id, ErrorCode.group_id_not_found, message))
            continue
        out.append(described(group))
    return make(mod, "ShareGroupDescribeResponse", throttle_time=NO_THROTTLE, groups=tuple(out))


async def describe_share_group_offsets(
    coord: GroupCoordinator, partitions: SharePartitions, ctx: BrokerContext, request: Request
) -> Any:
    """``kafka-share-groups --describe``: each share-partition's start offset, its leader
    epoch and (v1, KIP-1226) its lag: the records from the start offset to the high
    watermark not yet settled. A partition without state answers start offset -1; topics
    left null mean every share-partition with state."""
    version = request.api_version
    mod = payload_module(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, version, True)
    names = topic_names(ctx)
    ids = {name: topic_id for topic_id, name in names.items()}

    def partition(topic: str, index: int, key: tuple[str, str, int] | None) -> Any:
        extra: dict[str, Any] = {}
        code = ErrorCode.none
        found = None if key is None else partitions.offsets(key)
        if topic not in ids or index >= ctx.manager.topics().get(topic, 0):
            code = ErrorCode.unknown_topic_or_partition
        elif not ctx.allowed(request, AclOperation.DESCRIBE, ResourceType.TOPIC, topic):
            code = ErrorCode.topic_authorization_failed
        start, epoch, settled = found if found is not None else (-1, -1, 0)
        if version >= 1:
            lag = -1
            if found is not None and code is ErrorCode.none:
                high = ctx.manager.get_log(topic, index).high_watermark
                lag = max(0, high - start - settled)
            extra["lag"] = lag
        if code is not ErrorCode.none:
            start, epoch = -1, -1
        return make(mod, "DescribeShareGroupOffsetsResponsePartition", partition_index=index,
                    start_offset=start, leader_epoch=epoch, error_code=code, error_message=None,
                    **extra)  # fmt: skip

    out = []
    for asked in request.body.groups:
        group_id = asked.group_id
        group = coord.share.groups.get(group_id)
        code, message = ErrorCode.none, None
        if not ctx.allowed(request, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            code = ErrorCode.group_authorization_failed
        elif group is None:
            code, message = ErrorCode.group_id_not_found, f"Group {group_id} not found."
        topics = []
        if code is ErrorCode.none and asked.topics is None:
            by_topic: dict[str, list[int]] = {}
            for _, topic_id, index in partitions.keys_of(group_id):
                if topic_id in names:
                    by_topic.setdefault(names[topic_id], []).append(index)
            wanted = sorted(by_topic.items())
        elif code is ErrorCode.none:
            wanted = [(t.topic_name, list(t.partitions)) for t in asked.topics or ()]
        else:
            wanted = []
        for topic, indexes in wanted:
            tid = ids.get(topic)
            rows = tuple(
                partition(topic, i, None if tid is None else (group_id, tid, i)) for i in indexes
            )
            topics.append(make(
                mod, "DescribeShareGroupOffsetsResponseTopic", topic_name=topic,
                topic_id=None if tid is None else _wire_id(tid), partitions=rows,
            ))  # fmt: skip
        out.append(make(
            mod, "DescribeShareGroupOffsetsResponseGroup", group_id=group_id,
            topics=tuple(topics), error_code=code, error_message=message,
        ))  # fmt: skip
    return make(
        mod, "DescribeShareGroupOffsetsResponse", throttle_time=NO_THROTTLE, groups=tuple(out)
    )


# Kafka's Errors.message() of the per-partition and per-topic codes these answers carry
_MESSAGES = {
    ErrorCode.unknown_topic_or_partition: "This server does not host this topic-partition.",
    ErrorCode.topic_authorization_failed: "Topic authorization failed.",
}


async def alter_share_group_offsets(
    coord: GroupCoordinator, partitions: SharePartitions, ctx: BrokerContext, request: Request
) -> Any:
    """``kafka-share-groups --reset-offsets --execute``: an empty share group's
    share-partitions start at the given offsets (a group that does not exist is created,
    as Kafka's alterShareGroupOffsets creates it); NON_EMPTY_GROUP while it has members."""
    body = request.body
    mod = payload_module(ApiKey.ALTER_SHARE_GROUP_OFFSETS, request.api_version, True)
    names = topic_names(ctx)
    ids = {name: topic_id for topic_id, name in names.items()}
    counts = ctx.manager.topics()

    def answer(code: ErrorCode, message: str | None = None, responses: Any = ()) -> Any:
        return make(mod, "AlterShareGroupOffsetsResponse", throttle_time=NO_THROTTLE,
                    error_code=code, error_message=message, responses=tuple(responses))  # fmt: skip

    if not body.group_id:
        return answer(ErrorCode.invalid_group_id)
    if not ctx.allowed(request, AclOperation.READ, ResourceType.GROUP, body.group_id):
        return answer(ErrorCode.group_authorization_failed)
    offsets: dict[str, tuple[str, dict[int, int]]] = {}
    responses = []
    for topic in body.topics:
        tid = ids.get(topic.topic_name)
        allowed = ctx.allowed(request, AclOperation.READ, ResourceType.TOPIC, topic.topic_name)
        rows = []
        for p in topic.partitions:
            code = ErrorCode.none
            if not allowed:
                code = ErrorCode.topic_authorization_failed
            elif tid is None or p.partition_index >= counts.get(topic.topic_name, 0):
                code = ErrorCode.unknown_topic_or_partition
            else:
                offsets.setdefault(tid, (topic.topic_name, {}))[1][p.partition_index] = (
                    p.start_offset
                )
            rows.append(make(mod, "AlterShareGroupOffsetsResponsePartition",
                             partition_index=p.partition_index, error_code=code,
                             error_message=_MESSAGES.get(code)))  # fmt: skip
        responses.append(make(
            mod, "AlterShareGroupOffsetsResponseTopic", topic_name=topic.topic_name,
            topic_id=None if tid is None else _wire_id(tid), partitions=tuple(rows),
        ))  # fmt: skip
    try:
        await coord.share.alter_offsets(body.group_id, offsets, partitions.set_start_offsets)
    except ShareHeartbeatError as err:
        return answer(err.code, str(err))
    except KafkaLogError:
        return answer(ErrorCode.coordinator_not_available)
    return answer(ErrorCode.none, None, responses)


async def delete_share_group_offsets(
    coord: GroupCoordinator, partitions: SharePartitions, ctx: BrokerContext, request: Request
) -> Any:
    """``kafka-share-groups --delete-offsets``: an empty share group forgets its state of
    the given topics (Kafka's initiate/completeDeleteShareGroupOffsets)."""
    body = request.body
    mod = payload_module(ApiKey.DELETE_SHARE_GROUP_OFFSETS, request.api_version, True)
    ids = {name: topic_id for topic_id, name in topic_names(ctx).items()}

    def answer(code: ErrorCode, message: str | None = None, responses: Any = ()) -> Any:
        return make(mod, "DeleteShareGroupOffsetsResponse", throttle_time=NO_THROTTLE,
                    error_code=code, error_message=message, responses=tuple(responses))  # fmt: skip

    def topic(name: str, tid: str | None, code: ErrorCode, message: str | None) -> Any:
        return make(mod, "DeleteShareGroupOffsetsResponseTopic", topic_name=name,
                    topic_id=None if tid is None else _wire_id(tid), error_code=code,
                    error_message=message)  # fmt: skip

    if not body.group_id:
        return answer(ErrorCode.invalid_group_id)
    if not ctx.allowed(request, AclOperation.DELETE, ResourceType.GROUP, body.group_id):
        return answer(ErrorCode.group_authorization_failed)
    group = coord.share.groups.get(body.group_id)
    initialized = {} if group is None else group.initialized
    chosen: set[str] = set()
    responses, done = [], []  # Kafka answers the refused topics first
    for t in body.topics:
        tid = ids.get(t.topic_name)
        if not ctx.allowed(request, AclOperation.READ, ResourceType.TOPIC, t.topic_name):
            code = ErrorCode.topic_authorization_failed
            responses.append(topic(t.topic_name, tid, code, _MESSAGES[code]))
        elif tid is None:
            code = ErrorCode.unknown_topic_or_partition
            responses.append(topic(t.topic_name, None, code, _MESSAGES[code]))
        elif tid not in initialized:
            responses.append(topic(t.topic_name, tid, ErrorCode.unknown_topic_or_partition,
                                   "There is no offset information to delete."))  # fmt: skip
        else:
            chosen.add(tid)
            done.append(topic(t.topic_name, tid, ErrorCode.none, None))
    try:
        await coord.share.delete_offsets(body.group_id, frozenset(chosen), partitions.delete_state)
    except ShareHeartbeatError as err:
        return answer(err.code, str(err))
    except KafkaLogError:
        return answer(ErrorCode.coordinator_not_available)
    return answer(ErrorCode.none, None, responses + done)

"""The group coordinator's membership APIs on the wire: FindCoordinator, JoinGroup, SyncGroup,
Heartbeat and LeaveGroup (classic protocol).

Why: consumers that ``subscribe()`` (and every tool that names a ``--group``) need a
coordinator; this module parses each request version, applies Kafka's checks (session
timeout bounds), calls the coordinator's groups and builds each version's response.
FindCoordinator answers for both coordinators (key type 0, groups; 1, transactional ids):
this one broker is both, and it creates a missing coordinator topic first. A JoinGroup for an
empty KIP-848 consumer group turns it into a classic group, as Kafka's offline migration does;
for a consumer group with members, the classic consumer joins it, and its SyncGroup,
Heartbeat and LeaveGroup go to it too (online migration, ``consumer_group_classic``).
Refuses: other key types (the share coordinator's, 2, which brokers use among themselves),
and, as KafkaApis does, a group the
principal may not READ (DESCRIBE for FindCoordinator; a transactional id likewise) with
GROUP_AUTHORIZATION_FAILED (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), before the group is
touched.
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from kafkalog.coordinator.group_coordinator import GroupCoordinator
from kafkalog.coordinator.group_member import JoinRequest, JoinResult
from kafkalog.errors import KafkaLogError
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.wire import Request, make, payload_module
from kafkalog.server.authorizer import AclOperation, ResourceType
from kafkalog.server.context import NO_THROTTLE, BrokerContext
from kafkalog.server.internal_topics import ensure_internal_topic
from kafkalog.types import OFFSETS_TOPIC, TRANSACTION_TOPIC

logger = logging.getLogger("kafkalog.server")


def _may_read(ctx: BrokerContext, request: Request, group_id: str) -> bool:
    return ctx.allowed(request, AclOperation.READ, ResourceType.GROUP, group_id)


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000)


async def find_coordinator(coord: GroupCoordinator, ctx: BrokerContext, request: Request) -> Any:
    body, version = request.body, request.api_version
    mod = payload_module(ApiKey.FIND_COORDINATOR, version, True)
    node, where = ctx.settings.node_id, ctx.advertised_for(request.listener)
    keys = list(body.coordinator_keys) if version >= 4 else [body.key]
    key_type = getattr(body, "key_type", 0)
    code = ErrorCode.none if key_type in (0, 1) else ErrorCode.invalid_request
    message = None if code is ErrorCode.none else f"unknown coordinator key type {key_type}"
    refusal = (
        (ResourceType.GROUP, ErrorCode.group_authorization_failed)
        if key_type == 0
        else (ResourceType.TRANSACTIONAL_ID, ErrorCode.transactional_id_authorization_failed)
    )
    refused = {
        k
        for k in keys
        if code is ErrorCode.none and not ctx.allowed(request, AclOperation.DESCRIBE, refusal[0], k)
    }
    if code is ErrorCode.none and len(refused) < len(keys):
        # the coordinator's topic is created at the first lookup a principal may make, and
        # the client asks again meanwhile (Kafka's KafkaApis.getCoordinator)
        topic = OFFSETS_TOPIC if key_type == 0 else TRANSACTION_TOPIC
        if topic not in ctx.manager.topics():
            try:
                await coord.run(ensure_internal_topic, ctx, topic)
            except KafkaLogError:
                logger.exception("could not create the internal topic %s", topic)
            code = ErrorCode.coordinator_not_available
    if code is not ErrorCode.none:  # Kafka's Node.noNode
        node, host, port = -1, "", -1
    else:
        host, port = where.host, where.port

    def answer(key: str) -> tuple[int, str, int, ErrorCode, str | None]:
        if key in refused:
            return -1, "", -1, refusal[1], None
        return node, host, port, code, message

    if version >= 4:
        return make(
            mod,
            "FindCoordinatorResponse",
            throttle_time=NO_THROTTLE,
            coordinators=tuple(
                make(
                    mod,
                    "Coordinator",
                    key=k,
                    node_id=n,
                    host=h,
                    port=p,
                    error_code=c,
                    error_message=m,
                )
                for k in keys
                for n, h, p, c, m in (answer(k),)
            ),
        )
    n, h, p, c, m = answer(body.key)
    return make(
        mod, "FindCoordinatorResponse", throttle_time=NO_THROTTLE, error_code=c,
        error_message=m, node_id=n, host=h, port=p,
    )  # fmt: skip


async def join_group(coord: GroupCoordinator, ctx: BrokerContext, request: Request) -> Any:
    body, version = request.body, request.api_version
    mod = payload_module(ApiKey.JOIN_GROUP, version, True)
    session = _ms(body.session_timeout)
    rebalance = _ms(body.rebalance_timeout) if version >= 1 else session
    settings = ctx.settings
    if not _may_read(ctx, request, body.group_id):
        result_error: ErrorCode | None = ErrorCode.group_authorization_failed
    elif not body.group_id:
        result_error = ErrorCode.invalid_group_id
    elif not settings.min_session_timeout_ms <= session <= settings.max_session_timeout_ms:
        result_error = ErrorCode.invalid_session_timeout
    else:
        result_error = None
    join = JoinRequest(
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        client_id=request.client_id or "",
        client_host=f"/{request.client_host or '127.0.0.1'}",
        session_timeout_ms=session,
        rebalance_timeout_ms=rebalance,
        protocol_type=body.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in body.protocols],
        require_known_member_id=version >= 4,
        supports_skip_assignment=version >= 9,
    )
    consumer_group = coord.consumer.groups.get(body.group_id)
    if result_error is None and consumer_group is not None and consumer_group.members:
        # a classic consumer joins a consumer group (a group migrated online)
        return _join_response(mod, version, await coord.classic_members.join(consumer_group, join))
    empty_consumer_group = consumer_group
    if result_error is None and empty_consumer_group is not None:
        # an empty consumer group becomes a classic one (Kafka's offline migration): its
        # records are tombstoned, its offsets stay
        try:
            if not await coord.consumer.delete(empty_consumer_group):
                result_error = ErrorCode.inconsistent_group_protocol  # a member came first
        except KafkaLogError:
            result_error = ErrorCode.coordinator_not_available
    if result_error is not None:
        return make(
            mod,
            "JoinGroupResponse",
            throttle_time=NO_THROTTLE,
            error_code=result_error,
            generation_id=-1,
            protocol_type=None,
            protocol_name=None if version >= 7 else "",  # nullable from v7, as Kafka
            leader="",
            member_id=body.member_id,
            members=(),
        )
    return _join_response(mod, version, await coord.group(body.group_id).join(join))


def _join_response(mod: Any, version: int, result: JoinResult) -> Any:
    return make(
        mod,
        "JoinGroupResponse",
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        generation_id=result.generation,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name if version >= 7 else (result.protocol_name or ""),
        leader=result.leader,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=tuple(
            make(mod, "JoinGroupResponseMember", member_id=m, group_instance_id=i, metadata=md)
            for m, i, md in result.members
        ),
    )


async def sync_group(coord: GroupCoordinator, ctx: BrokerContext, request: Request) -> Any:
    body, version = request.body, request.api_version
    mod = payload_module(ApiKey.SYNC_GROUP, version, True)
    group = coord.groups.get(body.group_id)
    consumer_group = coord.consumer.groups.get(body.group_id)
    if consumer_group is not None and _may_read(ctx, request, body.group_id):
        synced = await coord.classic_members.sync(
            consumer_group, body.member_id, body.generation_id,
            getattr(body, "group_instance_id", None), getattr(body, "protocol_type", None),
            getattr(body, "protocol_name", None),
        )  # fmt: skip
        return make(mod, "SyncGroupResponse", throttle_time=NO_THROTTLE, error_code=synced.error,
                    protocol_type=synced.protocol_type, protocol_name=synced.protocol_name,
                    assignment=synced.assignment)  # fmt: skip
    if group is None or not _may_read(ctx, request, body.group_id):
        return make(
            mod,
            "SyncGroupResponse",
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.unknown_member_id
            if _may_read(ctx, request, body.group_id)
            else ErrorCode.group_authorization_failed,
            assignment=b"",
        )
    result = await group.sync(
        body.member_id,
        body.generation_id,
        getattr(body, "group_instance_id", None),
        {a.member_id: bytes(a.assignment) for a in body.assignments},
    )
    return make(
        mod,
        "SyncGroupResponse",
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


async def heartbeat(coord: GroupCoordinator, ctx: BrokerContext, request: Request) -> Any:
    body = request.body
    mod = payload_module(ApiKey.HEARTBEAT, request.api_version, True)
    group = coord.groups.get(body.group_id)
    consumer_group = coord.consumer.groups.get(body.group_id)
    instance = getattr(body, "group_instance_id", None)
    if not _may_read(ctx, request, body.group_id):
        code = ErrorCode.group_authorization_failed
    elif consumer_group is not None:
        code = coord.classic_members.heartbeat(
            consumer_group, body.member_id, body.generation_id, instance
        )
    elif group is None:
        code = ErrorCode.unknown_member_id
    else:
        code = group.heartbeat(body.member_id, body.generation_id, instance)
    return make(mod, "HeartbeatResponse", throttle_time=NO_THROTTLE, error_code=code)


async def leave_group(coord: GroupCoordinator, ctx: BrokerContext, request: Request) -> Any:
    body, version = request.body, request.api_version
    mod = payload_module(ApiKey.LEAVE_GROUP, version, True)
    leaving: list[tuple[str, str | None]] = (
        [(m.member_id, m.group_instance_id) for m in body.members]
        if version >= 3
        else [(body.member_id, None)]
    )
    if not _may_read(ctx, request, body.group_id):
        return make(
            mod, "LeaveGroupResponse", throttle_time=NO_THROTTLE,
            error_code=ErrorCode.group_authorization_failed, members=(),
        )  # fmt: skip
    group = coord.groups.get(body.group_id)
    consumer_group = coord.consumer.groups.get(body.group_id)
    if consumer_group is not None:
        try:
            codes = await coord.classic_members.leave(consumer_group, leaving)
        except KafkaLogError:
            codes = [ErrorCode.coordinator_not_available for _ in leaving]
    else:
        codes = [
            ErrorCode.unknown_member_id if group is None else group.leave(m, i) for m, i in leaving
        ]
    top = codes[0] if version < 3 and codes else ErrorCode.none
    return make(
        mod,
        "LeaveGroupResponse",
        throttle_time=NO_THROTTLE,
        error_code=top,
        members=tuple(
            make(mod, "MemberResponse", member_id=m, group_instance_id=i, error_code=c)
            for (m, i), c in zip(leaving, codes, strict=True)
        )
        if version >= 3
        else (),
    )

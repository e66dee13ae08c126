"""The group coordinator's offset and administration APIs: OffsetCommit, OffsetFetch,
DescribeGroups, ListGroups, DeleteGroups, OffsetDelete.

Why: a commit is acknowledged only once its records are in ``__consumer_offsets`` (created on
first use, as Kafka does, with ``offsets.topic.num.partitions`` partitions), so a restart finds
every offset it acknowledged. Fetching and describing read the coordinator's memory. Offsets
expire as KIP-211 says: an empty group's ``offsets.retention.minutes`` after it became empty.
Refuses: commits that break Kafka's rules (a member of another generation, a group completing
a rebalance, metadata over ``offset.metadata.max.bytes``, a partition that does not exist),
each with Kafka's per-partition code, deleting a group that still has members, deleting
the offsets of a topic a live consumer group is subscribed to (GROUP_SUBSCRIBED_TO_TOPIC), and,
as KafkaApis does, what the principal's ACLs do not allow: READ on the group to commit (and on
each topic), DESCRIBE to fetch offsets or describe, DELETE to delete (GROUP_ or
TOPIC_AUTHORIZATION_FAILED); ListGroups shows only the groups it may describe, unless it may
describe the cluster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kafkalog.coordinator.consumer_group_offsets import commit_check, fetch_error
from kafkalog.coordinator.group import Group
from kafkalog.coordinator.group_member import GroupState
from kafkalog.coordinator.offsets_retention import CONSUMER_PROTOCOL, subscribed_topics
from kafkalog.errors import KafkaLogError
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.wire import Request, make, payload_module
from kafkalog.server.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from kafkalog.server.context import NO_THROTTLE, BrokerContext
from kafkalog.server.offset_commit import commit_response, commit_rows, placed

if TYPE_CHECKING:
    from kafkalog.coordinator.group_coordinator import GroupCoordinator


def _may(ctx: BrokerContext, request: Request, op: AclOperation, kind: ResourceType) -> Any:
    return lambda name: ctx.allowed(request, op, kind, name)


async def offset_commit(coord: GroupCoordinator, ctx: BrokerContext, request: Request) -> Any:
    body, version = request.body, request.api_version
    mod = payload_module(ApiKey.OFFSET_COMMIT, version, True)
    group_id = body.group_id
    if not ctx.allowed(request, AclOperation.READ, ResourceType.GROUP, group_id):
        refused = {(t.name, p.partition_index): ErrorCode.group_authorization_failed
                   for t in body.topics for p in t.partitions}  # fmt: skip
        return commit_response(mod, "OffsetCommit", body.topics, refused)
    group = coord.groups.get(group_id)
    generation = body.generation_id_or_member_epoch
    instance = getattr(body, "group_instance_id", None)
    error: ErrorCode | None = ErrorCode.invalid_group_id if not group_id else None
    consumer_group = coord.consumer.groups.get(group_id)
    member_check = None
    if error is None and consumer_group is not None:
        error, member_check = commit_check(
            consumer_group, body.member_id, generation, version, ctx.manager.topic_id
        )
    elif error is None and group is not None:
        error = group.commit_error(body.member_id, generation, instance)
    elif error is None and (generation >= 0 or body.member_id):
        error = ErrorCode.unknown_member_id  # a member of a group the coordinator does not know
    may_read = _may(ctx, request, AclOperation.READ, ResourceType.TOPIC)
    codes, rows, commits = commit_rows(
        coord.ctx, group_id, body.topics, error, may_read, member_check
    )
    if rows:
        async with coord.commit_lock(group_id):
            try:
                first = await coord.run(coord.append_offsets, group_id, rows)
            except KafkaLogError:
                for tp, _ in commits:
                    codes[tp] = ErrorCode.coordinator_not_available
            else:
                coord.group(group_id).offsets.update(placed(commits, first))
    return commit_response(mod, "OffsetCommit", body.topics, codes)


def _fetch_group(
    coord: GroupCoordinator,
    mod: Any,
    group_id: str,
    topics: Any,
    v8: bool,
    may_describe: Any = lambda topic: True,
) -> Any:
    """The group's offsets of ``topics`` (None: all it has): a topic the principal may not
    describe is TOPIC_AUTHORIZATION_FAILED when named, and left out of "all"."""
    group = coord.groups.get(group_id)
    offsets = group.offsets if group is not None else {}
    if topics is None:
        wanted: dict[str, list[int]] = {}
        for topic, partition in sorted(offsets):
            if may_describe(topic):
                wanted.setdefault(topic, []).append(partition)
    else:
        wanted = {t.name: list(t.partition_indexes) for t in topics}
    names = (
        ("OffsetFetchResponseTopics", "OffsetFetchResponsePartitions")
        if v8
        else ("OffsetFetchResponseTopic", "OffsetFetchResponsePartition")
    )

    def entry(topic: str, index: int) -> Any:
        if not may_describe(topic):
            return make(
                mod, names[1], partition_index=index, committed_offset=-1,
                committed_leader_epoch=-1, metadata="",
                error_code=ErrorCode.topic_authorization_failed,
            )  # fmt: skip
        found = offsets.get((topic, index))
        return make(
            mod,
            names[1],
            partition_index=index,
            committed_offset=found.offset if found else -1,
            committed_leader_epoch=found.leader_epoch if found else -1,
            metadata=found.metadata if found else "",
            error_code=ErrorCode.none,
        )

    return tuple(
        make(mod, names[0], name=t, partitions=tuple(entry(t, i) for i in parts))
        for t, parts in wanted.items()
    )


async def offset_fetch(coord: GroupCoordinator, ctx: BrokerContext, request: Request) -> Any:
    body, version = request.body, request.api_version
    mod = payload_module(ApiKey.OFFSET_FETCH, version, True)
    may_describe = _may(ctx, request, AclOperation.DESCRIBE, ResourceType.TOPIC)
    group_ok = _may(ctx, request, AclOperation.DESCRIBE, ResourceType.GROUP)
    refused = ErrorCode.group_authorization_failed
    if version >= 8:

        def member_error(g: Any) -> ErrorCode | None:
            # v9: a consumer group's member names itself and its epoch (KIP-848)
            consumer_group = coord.consumer.groups.get(g.group_id)
            if version < 9 or consumer_group is None:
                return None
            return fetch_error(consumer_group, g.member_id, g.member_epoch)

        def one(g: Any) -> Any:
            error = refused if not group_ok(g.group_id) else member_error(g)
            if error is not None:
                return make(mod, "OffsetFetchResponseGroup", group_id=g.group_id,
                            error_code=error, topics=())  # fmt: skip
            return make(
                mod, "OffsetFetchResponseGroup", group_id=g.group_id, error_code=ErrorCode.none,
                topics=_fetch_group(coord, mod, g.group_id, g.topics, True, may_describe),
            )  # fmt: skip

        groups = tuple(one(g) for g in body.groups)
        return make(mod, "OffsetFetchResponse", throttle_time=NO_THROTTLE, groups=groups)
    if not group_ok(body.group_id):
        return make(
            mod, "OffsetFetchResponse", throttle_time=NO_THROTTLE, error_code=refused,
            topics=(),
        )  # fmt: skip
    topics = _fetch_group(coord, mod, body.group_id, body.topics, False, may_describe)
    return make(
        mod,
        "OffsetFetchResponse",
        throttle_time=NO_THROTTLE,
        topics=topics,
        error_code=ErrorCode.none,
    )


async def describe_groups(coord: GroupCoordinator, ctx: BrokerContext, request: Request) -> Any:
    mod = payload_module(ApiKey.DESCRIBE_GROUPS, request.api_version, True)
    asked = getattr(request.body, "include_authorized_operations", False)

    def authorized_operations(group_id: str) -> int:
        return ctx.authorized_operations(request, asked, ResourceType.GROUP, group_id)

    def described(group_id: str) -> Any:
        group = coord.groups.get(group_id)
        if not ctx.allowed(request, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            return make(
                mod, "DescribedGroup", error_code=ErrorCode.group_authorization_failed,
                group_id=group_id, group_state="", protocol_type="", protocol_data="",
                members=(), authorized_operations=-(2**31),
            )  # fmt: skip
        consumer_group = coord.consumer.groups.get(group_id)
        if consumer_group is not None:  # a KIP-848 group, in the classic shape
            members = tuple(
                make(mod, "DescribedGroupMember", member_id=m.member_id,
                     group_instance_id=m.instance_id, client_id=m.client_id,
                     client_host=m.client_host, member_metadata=b"", member_assignment=b"")
                for _, m in sorted(consumer_group.members.items())
            )  # fmt: skip
            return make(
                mod, "DescribedGroup", error_code=ErrorCode.none, group_id=group_id,
                group_state=consumer_group.state.value, protocol_type="consumer",
                protocol_data=coord.consumer.assignor_of(consumer_group), members=members,
                authorized_operations=authorized_operations(group_id),
            )  # fmt: skip
        if group is None:
            return make(
                mod,
                "DescribedGroup",
                error_code=ErrorCode.none,
                group_id=group_id,
                group_state=GroupState.DEAD.value,
                protocol_type="",
                protocol_data="",
                members=(),
                authorized_operations=authorized_operations(group_id),
            )
        stable = group.state is GroupState.STABLE
        protocol = group.protocol_name or ""
        members = tuple(
            make(
                mod,
                "DescribedGroupMember",
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.join.client_id,
                client_host=m.join.client_host,
                member_metadata=m.metadata(protocol) if stable else b"",
                member_assignment=m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return make(
            mod,
            "DescribedGroup",
            error_code=ErrorCode.none,
            group_id=group_id,
            group_state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_data=protocol if stable else "",
            members=members,
            authorized_operations=authorized_operations(group_id),
        )

    groups = tuple(described(g) for g in request.body.groups)
    return make(mod, "DescribeGroupsResponse", throttle_time=NO_THROTTLE, groups=groups)


async def list_groups(coord: GroupCoordinator, ctx: BrokerContext, request: Request) -> Any:
    mod = payload_module(ApiKey.LIST_GROUPS, request.api_version, True)
    every = ctx.allowed(request, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
    may_describe = _may(ctx, request, AclOperation.DESCRIBE, ResourceType.GROUP)
    states = {s.lower() for s in getattr(request.body, "states_filter", ())}
    # v5 (KIP-848's kafka-groups.sh --list --type): "classic", "consumer" or "share"
    types = {t.lower() for t in getattr(request.body, "types_filter", ())}
    found = [
        (g.group_id, g.protocol_type or "", g.state.value, "classic")
        for g in coord.groups.values()
        if g.group_id not in coord.consumer.groups
    ]
    found += [(g.group_id, "consumer", g.state.value, "consumer")
              for g in coord.consumer.groups.values()]  # fmt: skip
    found += [(g.group_id, "share", g.state, "share") for g in coord.share.groups.values()]
    listed = [
        make(
            mod,
            "ListedGroup",
            group_id=group_id,
            protocol_type=protocol_type,
            group_state=state,
            group_type=kind,
        )
        for group_id, protocol_type, state, kind in sorted(found)
        if (not states or state.lower() in states)
        and (not types or kind in types)
        and (every or may_describe(group_id))
    ]
    return make(
        mod,
        "ListGroupsResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        groups=tuple(listed),
    )


def _all_offsets(coord: GroupCoordinator, group: Group) -> list[tuple[str, int]]:
    """The partitions a deleted group's tombstones cover: its committed offsets, and those of
    its open transactions (Kafka's OffsetMetadataManager.deleteAllOffsets), each once."""
    tps = dict.fromkeys(group.offsets)
    for staged in coord.pending_transactions.values():
        tps.update(dict.fromkeys(staged.get(group.group_id, {})))
    return list(tps)


async def delete_groups(coord: GroupCoordinator, ctx: BrokerContext, request: Request) -> Any:
    mod = payload_module(ApiKey.DELETE_GROUPS, request.api_version, True)
    results = []
    for group_id in request.body.groups_names:
        group: Group | None = coord.groups.get(group_id)
        consumer_group = coord.consumer.groups.get(group_id)
        share_group = coord.share.groups.get(group_id)
        if not ctx.allowed(request, AclOperation.DELETE, ResourceType.GROUP, group_id):
            code = ErrorCode.group_authorization_failed
        elif share_group is not None:  # its share-partitions' state goes with it
            deleted = await coord.share.delete(share_group)
            code = ErrorCode.none if deleted else ErrorCode.non_empty_group
        elif group is None and consumer_group is None:
            code = ErrorCode.group_id_not_found
        elif (group is not None and group.members) or (
            consumer_group is not None and consumer_group.members
        ):
            code = ErrorCode.non_empty_group
        elif consumer_group is not None and not await coord.consumer.delete(consumer_group):
            code = ErrorCode.non_empty_group  # a member joined while this waited its turn
        else:
            code = ErrorCode.none
            if group is not None:
                await coord.delete_offsets(group, _all_offsets(coord, group), whole_group=True)
                group.state = GroupState.DEAD
                coord.groups.pop(group_id, None)
        results.append(make(mod, "DeletableGroupResult", group_id=group_id, error_code=code))
    return make(mod, "DeleteGroupsResponse", throttle_time=NO_THROTTLE, results=tuple(results))


async def offset_delete(coord: GroupCoordinator, ctx: BrokerContext, request: Request) -> Any:
    """``kafka-consumer-groups --delete-offsets`` (KIP-496): an empty group loses the given
    offsets; a live consumer group only those of topics no member subscribes to; a live group
    of another protocol none (NON_EMPTY_GROUP)."""
    body = request.body
    mod = payload_module(ApiKey.OFFSET_DELETE, request.api_version, True)
    group: Group | None = coord.groups.get(body.group_id)
    consumer_group = coord.consumer.groups.get(body.group_id)
    top = ErrorCode.none
    may_read = _may(ctx, request, AclOperation.READ, ResourceType.TOPIC)
    if not ctx.allowed(request, AclOperation.DELETE, ResourceType.GROUP, body.group_id):
        top = ErrorCode.group_authorization_failed
    elif not body.group_id:
        top = ErrorCode.invalid_group_id
    elif (group is None or group.state is GroupState.DEAD) and consumer_group is None:
        top = ErrorCode.group_id_not_found
    elif group is not None and group.members and group.protocol_type != CONSUMER_PROTOCOL:
        top = ErrorCode.non_empty_group
    if top is not ErrorCode.none:
        return make(mod, "OffsetDeleteResponse", error_code=top, throttle_time=NO_THROTTLE,
                    topics=())  # fmt: skip
    subscribed: set[str] | None = set()
    if consumer_group is not None:  # a KIP-848 group: what its members subscribe to
        subscribed = consumer_group.subscribed_topic_names()
    elif group is not None and group.members:
        subscribed = subscribed_topics(group)
    offsets = group.offsets if group is not None else {}
    known = coord.ctx.manager.topics()
    codes: dict[tuple[str, int], ErrorCode] = {}
    for topic in body.topics:
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if not may_read(topic.name):
                codes[tp] = ErrorCode.topic_authorization_failed
            elif not 0 <= p.partition_index < known.get(topic.name, 0):
                codes[tp] = ErrorCode.unknown_topic_or_partition
            elif subscribed is None or topic.name in subscribed:
                codes[tp] = ErrorCode.group_subscribed_to_topic
            else:
                codes[tp] = ErrorCode.none
    doomed = [tp for tp, code in codes.items() if code is ErrorCode.none and tp in offsets]
    if group is not None:
        await coord.delete_offsets(group, doomed)
    topics = tuple(
        make(
            mod,
            "OffsetDeleteResponseTopic",
            name=topic.name,
            partitions=tuple(
                make(
                    mod,
                    "OffsetDeleteResponsePartition",
                    partition_index=p.partition_index,
                    error_code=codes[(topic.name, p.partition_index)],
                )
                for p in topic.partitions
            ),
        )
        for topic in body.topics
    )
    return make(mod, "OffsetDeleteResponse", error_code=top, throttle_time=NO_THROTTLE,
                topics=topics)  # fmt: skip

"""Metadata, CreateTopics, CreatePartitions and DeleteTopics: the topics a client sees and
changes, each topic authorized as KafkaApis and ControllerApis authorize it.

Why: every client starts with Metadata to learn the partitions and their leader; on a single
node the answer is this broker for every partition, leader epoch 0, itself the one replica and
the whole ISR. A Metadata request for a missing topic creates it when
``auto.create.topics.enable`` is on and the client allows it, as Kafka's broker does.

Refuses: a replication factor other than 1 (or -1, the default) and replica assignments naming
another broker, with Kafka's INVALID_REPLICATION_FACTOR / INVALID_REPLICA_ASSIGNMENT; a topic
the principal may not DESCRIBE (Metadata leaves it out of "every topic" and answers
TOPIC_AUTHORIZATION_FAILED for it by name, whether it exists or not), create (CREATE on the
cluster or the topic), ALTER (new partitions) or DELETE, with TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections import Counter
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from kafkalog.errors import (
    KafkaLogError,
    KafkaStorageError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from kafkalog.log.leader_epoch import epoch_changes
from kafkalog.manager.topic_creation import NewTopic, new_topic
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.error_codes import error_code
from kafkalog.protocol.metadata_response import MAX_CACHED_TOPICS
from kafkalog.protocol.wire import Request, make, payload_module
from kafkalog.server.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from kafkalog.server.context import (
    AUTHORIZED_OPERATIONS_OMITTED,
    NO_THROTTLE,
    ZERO_UUID,
    BrokerContext,
)
from kafkalog.server.internal_topics import (
    ensure_internal_topic,
    owned_by_a_coordinator,
)
from kafkalog.types import (
    CLUSTER_METADATA_TOPIC,
    is_internal_topic,
    uuid_bytes,
    validate_new_topic_name,
)

logger = logging.getLogger("kafkalog.server")

_topic_entries: dict[tuple[Any, ...], Any] = {}  # see _build_topic_entry
# (mod, topic, operations, node) -> (the manager's topics view, epoch changes, entry): _topic_entry
_last_entries: dict[tuple[Any, ...], tuple[Mapping[str, int], int, Any]] = {}


def topic_uuid(ctx: BrokerContext, topic: str) -> uuid.UUID:
    topic_id = ctx.manager.topic_id(topic)
    return ZERO_UUID if topic_id is None else _as_uuid(topic_id)


@functools.lru_cache(maxsize=1 << 16)
def _as_uuid(topic_id: str) -> uuid.UUID:
    return uuid.UUID(bytes=uuid_bytes(topic_id))


def leader_epoch(ctx: BrokerContext, topic: str, partition: int) -> int:
    """The partition's leader epoch: the latest in its epoch cache (a directory a Kafka broker
    wrote keeps its epochs; ours stay at 0). Clients that saw a later epoch (a committed
    offset's) take metadata with an older one for stale and wait for a newer."""
    try:
        return ctx.manager.get_log(topic, partition).latest_leader_epoch()
    except (UnknownTopicOrPartitionError, KafkaStorageError):
        return 0


@functools.lru_cache(maxsize=1 << 16)
def _online_partition(mod: Any, node: int, p: int, epoch: int) -> Any:
    """One partition's entry (immutable, so shared by every answer that lists it): building
    it anew for each partition of each request was most of a Metadata request's time."""
    return make(
        mod,
        "MetadataResponsePartition",
        error_code=ErrorCode.none,
        partition_index=p,
        leader_id=node,
        leader_epoch=epoch,
        replica_nodes=(node,),
        isr_nodes=(node,),
        offline_replicas=(),
    )


def _partition_entry(ctx: BrokerContext, mod: Any, topic: str, p: int) -> Any:
    node = ctx.settings.node_id
    if ctx.manager.offline_log_dirs and ctx.manager.is_offline(topic, p):
        # its log directory failed: no leader, this broker's replica offline (Kafka's
        # KRaftMetadataCache for a partition whose only replica's directory is lost)
        return make(
            mod,
            "MetadataResponsePartition",
            error_code=ErrorCode.leader_not_available,
            partition_index=p,
            leader_id=-1,
            leader_epoch=0,
            replica_nodes=(node,),
            isr_nodes=(),
            offline_replicas=(node,),
        )
    return _online_partition(mod, node, p, leader_epoch(ctx, topic, p))


def _topic_entry(
    ctx: BrokerContext, request: Request, mod: Any, topic: str, known: Mapping[str, int]
) -> Any:
    """The topic's entry: the one answered last while no topic or partition came or went
    (``known``, the manager's view, is the same object) and no partition's leader epoch moved,
    so an answer costs O(topics) rather than O(partitions); else built again, the same object
    as before if nothing in it changed."""
    asked = getattr(request.body, "include_topic_authorized_operations", False)
    operations = ctx.authorized_operations(request, asked, ResourceType.TOPIC, topic)
    fast_key = (mod, topic, operations, ctx.settings.node_id)
    changes = epoch_changes()
    last = _last_entries.get(fast_key)
    if last is not None and last[0] is known and last[1] == changes:
        return last[2]
    entry = _build_topic_entry(ctx, mod, topic, known[topic], operations)
    if len(_last_entries) >= MAX_CACHED_TOPICS:
        _last_entries.clear()
    _last_entries[fast_key] = (known, changes, entry)
    return entry


def _build_topic_entry(
    ctx: BrokerContext, mod: Any, topic: str, partitions: int, operations: int
) -> Any:
    entries = tuple(_partition_entry(ctx, mod, topic, p) for p in range(partitions))
    topic_id = topic_uuid(ctx, topic)
    # the same entry object while nothing in it changed, so its encoding is reused too
    # (protocol.metadata_response); the key holds the partition entries' identities, and the
    # cached entry holds them alive, so an identity is never another entry's
    key = (mod, topic, topic_id, operations, tuple(map(id, entries)))
    found = _topic_entries.get(key)
    if found is not None:
        return found
    entry = make(
        mod,
        "MetadataResponseTopic",
        error_code=ErrorCode.none,
        name=topic,
        topic_id=topic_id,
        is_internal=is_internal_topic(topic),
        partitions=entries,
        topic_authorized_operations=operations,
    )
    if len(_topic_entries) >= MAX_CACHED_TOPICS:
        _topic_entries.clear()
    _topic_entries[key] = entry
    return entry


def _missing(mod: Any, name: str | None, code: ErrorCode) -> Any:
    return make(
        mod,
        "MetadataResponseTopic",
        error_code=code,
        name=name,
        topic_id=ZERO_UUID,
        is_internal=False,
        partitions=(),
        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


# Metadata the event loop answers itself (answers_on_the_loop): request size and partitions
ANSWER_ON_THE_LOOP_BYTES = 4096
ANSWER_ON_THE_LOOP_PARTITIONS = 64


def answers_on_the_loop(ctx: BrokerContext, request: Request) -> bool:
    """Whether a decoded Metadata request is one the event loop answers in its own iteration:
    it names its topics (neither all of them nor IDs), each exists, they hold at most
    ANSWER_ON_THE_LOOP_PARTITIONS partitions, and no log directory is offline. Such an answer
    is a few microseconds of cached entries (a topic's first, after a start, reads its
    partition.metadata once for the topic ID), where the trip to a handler thread and back costs
    two thread wake-ups and tens of microseconds of GIL; a topic to create, an offline
    directory (its partition.metadata is read each time) or a long answer goes to a handler
    thread."""
    wanted = request.body.topics
    if not wanted or ctx.manager.offline_log_dirs:
        return False
    known = ctx.manager.topics()
    listed = 0
    for item in wanted:
        if item.name is None or item.name not in known:
            return False
        listed += known[item.name]
    return listed <= ANSWER_ON_THE_LOOP_PARTITIONS


def handle_metadata(ctx: BrokerContext, request: Request) -> Any:
    body, version = request.body, request.api_version
    mod = payload_module(ApiKey.METADATA, version, True)
    known = ctx.manager.topics()
    wanted = body.topics
    topics: list[Any] = []
    describe, topic = AclOperation.DESCRIBE, ResourceType.TOPIC
    if wanted is None or (version == 0 and not wanted):
        topics = [
            _topic_entry(ctx, request, mod, t, known)
            for t in known  # in name order already
            if ctx.allowed(request, describe, topic, t)
        ]
    else:
        by_id = None
        allow_create = getattr(body, "allow_auto_topic_creation", True)
        for item in wanted:
            name = item.name
            # v10+: by topic id; a non-zero ID wins over the name, which the Java client
            # leaves empty (KafkaApis looks a request with topic IDs up by them)
            if name is None or getattr(item, "topic_id", None) not in (None, ZERO_UUID):
                by_id = by_id or {topic_uuid(ctx, t): t for t in known}
                name = by_id.get(item.topic_id)
                if name is None:
                    topics.append(_missing(mod, None, ErrorCode.unknown_topic_id))
                    continue
                if not ctx.allowed(request, describe, topic, name):
                    topics.append(_missing(mod, None, ErrorCode.topic_authorization_failed))
                    continue
            if not ctx.allowed(request, describe, topic, name):
                topics.append(_missing(mod, name, ErrorCode.topic_authorization_failed))
                continue
            if name not in known and allow_create and ctx.settings.auto_create_topics:
                if not _may_create(ctx, request, name):
                    topics.append(_missing(mod, name, ErrorCode.topic_authorization_failed))
                    continue
                code = _auto_create(ctx, name)
                if code is not ErrorCode.none:
                    topics.append(_missing(mod, name, code))
                    continue
                known = ctx.manager.topics()
            if name in known:
                topics.append(_topic_entry(ctx, request, mod, name, known))
            else:
                topics.append(_missing(mod, name, ErrorCode.unknown_topic_or_partition))
    advertised = ctx.advertised_for(request.listener)
    return make(
        mod,
        "MetadataResponse",
        throttle_time=NO_THROTTLE,
        brokers=(
            make(
                mod,
                "MetadataResponseBroker",
                node_id=ctx.settings.node_id,
                host=advertised.host,
                port=advertised.port,
                rack=None,
            ),
        ),
        cluster_id=ctx.cluster_id,
        controller_id=ctx.settings.node_id,
        topics=tuple(topics),
        cluster_authorized_operations=ctx.authorized_operations(
            request,
            getattr(body, "include_cluster_authorized_operations", False),
            ResourceType.CLUSTER,
            CLUSTER_NAME,
        ),
    )


def _may_create(ctx: BrokerContext, request: Request, topic: str) -> bool:
    """CREATE on the cluster, or on the topic (KafkaApis' auto-creation and CreateTopics)."""
    return ctx.allowed(
        request, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME
    ) or ctx.allowed(request, AclOperation.CREATE, ResourceType.TOPIC, topic)


def _auto_create(ctx: BrokerContext, topic: str) -> ErrorCode:
    if is_internal_topic(topic):  # only with its coordinator's partitions and configs, as Kafka
        if not owned_by_a_coordinator(topic):
            return ErrorCode.unknown_topic_or_partition
        try:
            if ensure_internal_topic(ctx, topic):
                logger.info("auto-created internal topic %r", topic)
        except KafkaLogError as err:
            return error_code(err)
        return ErrorCode.none
    try:
        validate_new_topic_name(topic)
        ctx.manager.create_topic(topic, ctx.settings.num_partitions)
        logger.info("auto-created topic %r with %d partitions", topic, ctx.settings.num_partitions)
    except TopicExistsError:
        pass  # another request created it first
    except KafkaLogError as err:
        return error_code(err)
    return ErrorCode.none


def handle_create_topics(ctx: BrokerContext, request: Request) -> Any:
    """Every topic checked on its own; those that pass are created as one batch (one intent
    and one round of fsyncs, as Kafka's controller writes one request's records together).
    A name given twice is refused, once, as Kafka's ControllerApis refuses it."""
    body, version = request.body, request.api_version
    mod = payload_module(ApiKey.CREATE_TOPICS, version, True)
    named = Counter(topic.name for topic in body.topics)
    outcomes: dict[str, tuple[ErrorCode, str | None, int]] = {}
    batch: list[NewTopic] = []
    for topic in body.topics:
        if named[topic.name] > 1:
            outcomes[topic.name] = (ErrorCode.invalid_request, "Duplicate topic name.", -1)
        elif not _may_create(ctx, request, topic.name):
            outcomes[topic.name] = (ErrorCode.topic_authorization_failed, None, -1)
        else:
            checked = _check_one(ctx, topic, validate_only=body.validate_only)
            if isinstance(checked, NewTopic):
                batch.append(checked)
            else:
                outcomes[topic.name] = checked
    outcomes.update(_create_batch(ctx, batch))
    results = []
    for name in named:
        code, message, partitions = outcomes[name]
        results.append(
            make(
                mod,
                "CreatableTopicResult",
                name=name,
                topic_id=topic_uuid(ctx, name)
                if code is ErrorCode.none and not body.validate_only
                else ZERO_UUID,
                error_code=code,
                error_message=message,
                num_partitions=partitions if code is ErrorCode.none else -1,
                replication_factor=1 if code is ErrorCode.none else -1,
                configs=None if code is not ErrorCode.none else (),
                topic_config_error_code=ErrorCode.none
                if ctx.allowed(request, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, name)
                else ErrorCode.topic_authorization_failed,
            )
        )
    return make(mod, "CreateTopicsResponse", throttle_time=NO_THROTTLE, topics=tuple(results))


def _create_batch(
    ctx: BrokerContext, batch: list[NewTopic]
) -> dict[str, tuple[ErrorCode, str | None, int]]:
    if not batch:
        return {}
    try:
        created = ctx.manager.create_topics(batch, settle=False)  # as Kafka's controller
    except KafkaLogError as err:  # the disk: the whole batch was rolled back
        return {new.name: (error_code(err), str(err), -1) for new in batch}
    outcomes: dict[str, tuple[ErrorCode, str | None, int]] = {}
    for new in batch:
        result = created[new.name]
        if isinstance(result, TopicExistsError):  # created by another request meanwhile
            outcomes[new.name] = (
                ErrorCode.topic_already_exists,
                f"Topic '{new.name}' already exists.",
                -1,
            )
        elif isinstance(result, KafkaLogError):
            outcomes[new.name] = (error_code(result), str(result), -1)
        else:
            outcomes[new.name] = (ErrorCode.none, None, new.partitions)
    return outcomes


def _check_one(
    ctx: BrokerContext, topic: Any, *, validate_only: bool
) -> tuple[ErrorCode, str | None, int] | NewTopic:
    """The topic to create; or its answer, an error or (``validate_only``) a success."""
    name = topic.name
    if name == CLUSTER_METADATA_TOPIC:  # as Kafka's handleCreateTopicsRequest answers
        return ErrorCode.invalid_request, f"Creation of internal topic {name} is prohibited.", -1
    count = topic.num_partitions if topic.num_partitions != -1 else ctx.settings.num_partitions
    if topic.assignments:
        if any(tuple(a.broker_ids) != (ctx.settings.node_id,) for a in topic.assignments):
            return (
                ErrorCode.invalid_replica_assignment,
                f"kafkalog is one broker (id {ctx.settings.node_id}): every partition's "
                "replicas must be that broker alone",
                -1,
            )
        count = len(topic.assignments)
    if topic.replication_factor not in (-1, 1):
        return (
            ErrorCode.invalid_replication_factor,
            f"Replication factor: {topic.replication_factor} larger than available brokers: 1.",
            -1,
        )
    if count < 1:
        return ErrorCode.invalid_partitions, "Number of partitions must be larger than 0.", -1
    configs = {c.name: c.value for c in topic.configs}
    if name in ctx.manager.topics():
        return ErrorCode.topic_already_exists, f"Topic '{name}' already exists.", -1
    try:
        overrides = {k: v for k, v in configs.items() if v is not None}
        checked = new_topic(name, count, overrides, None, ctx.manager.default_config)
    except KafkaLogError as err:
        return error_code(err), str(err), -1
    return (ErrorCode.none, None, count) if validate_only else checked


def handle_delete_topics(ctx: BrokerContext, request: Request) -> Any:
    body, version = request.body, request.api_version
    mod = payload_module(ApiKey.DELETE_TOPICS, version, True)
    names: list[Any] = (
        list(body.topic_names)
        if hasattr(body, "topic_names") and version < 6
        else [t.name for t in body.topics]
    )
    results = []
    for name in names:
        code, message = ErrorCode.none, None
        try:
            if name is None:
                raise UnknownTopicOrPartitionError("deleting a topic by id is not supported")
            if not ctx.allowed(request, AclOperation.DELETE, ResourceType.TOPIC, name):
                results.append(_not_deleted(mod, name))
                continue
            partitions = ctx.manager.topics().get(name, 0)
            ctx.manager.delete_topic(name)
            logger.info("deleted topic %r", name)
            # its parked fetches answer now, UNKNOWN_TOPIC_OR_PARTITION, not at their max wait
            # (Kafka's ReplicaManager.completeDelayedOperationsWhenNotPartitionLeader)
            ctx.on_append((name, p) for p in range(partitions))
        except KafkaLogError as err:
            code, message = error_code(err), str(err)
        results.append(
            make(
                mod,
                "DeletableTopicResult",
                name=name,
                topic_id=ZERO_UUID,
                error_code=code,
                error_message=message,
            )
        )
    return make(mod, "DeleteTopicsResponse", throttle_time=NO_THROTTLE, responses=tuple(results))


def _not_deleted(mod: Any, name: str) -> Any:
    return make(
        mod, "DeletableTopicResult", name=name, topic_id=ZERO_UUID,
        error_code=ErrorCode.topic_authorization_failed, error_message=None,
    )  # fmt: skip


def handle_create_partitions(ctx: BrokerContext, request: Request) -> Any:
    """Grow topics to ``count`` partitions (``kafka-topics --alter --partitions``)."""
    body = request.body
    mod = payload_module(ApiKey.CREATE_PARTITIONS, request.api_version, True)
    results = []
    for topic in body.topics:
        code, message = ErrorCode.none, None
        current = ctx.manager.topics().get(topic.name, 0)
        node = (ctx.settings.node_id,)
        if not ctx.allowed(request, AclOperation.ALTER, ResourceType.TOPIC, topic.name):
            code = ErrorCode.topic_authorization_failed
        elif current == 0:
            code, message = ErrorCode.unknown_topic_or_partition, f"Topic {topic.name} not found."
        elif topic.count <= current:
            code = ErrorCode.invalid_partitions
            message = (
                f"Topic currently has {current} partitions, which is higher than or equal to "
                f"the requested {topic.count}."
            )
        elif topic.assignments and any(tuple(a.broker_ids) != node for a in topic.assignments):
            code = ErrorCode.invalid_replica_assignment
            message = f"kafkalog is one broker (id {node[0]}): replicas must be that broker"
        elif not body.validate_only:
            try:
                ctx.manager.create_partitions(topic.name, topic.count)
                logger.info("topic %r now has %d partitions", topic.name, topic.count)
            except KafkaLogError as err:
                code, message = error_code(err), str(err)
        results.append(
            make(
                mod,
                "CreatePartitionsTopicResult",
                name=topic.name,
                error_code=code,
                error_message=message,
            )
        )
    return make(mod, "CreatePartitionsResponse", throttle_time=NO_THROTTLE, results=tuple(results))

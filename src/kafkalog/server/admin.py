"""DescribeCluster, DescribeLogDirs, DeleteRecords and OffsetForLeaderEpoch: the admin and
consumer-validation APIs that read or trim the logs.

Why: ``kafka-log-dirs``, ``kafka-delete-records`` and AdminClient's describeCluster ask these,
and a Java consumer validates its position with OffsetForLeaderEpoch after a metadata change
(KIP-320). Each is a thin call into the LogManager or a Log. Refuses: replica fetchers'
OffsetForLeaderEpoch (``replica_id`` >= 0: there are no followers), DeleteRecords past the
high watermark (OFFSET_OUT_OF_RANGE, as Kafka), and what the principal's ACLs do not allow
(DESCRIBE on the cluster for the log directories, DELETE on a topic to trim it, DESCRIBE on a
topic for its epochs), with Kafka's codes.
"""

from __future__ import annotations

import shutil
from typing import Any

from kio.schema.errors import ErrorCode

from kafkalog.errors import KafkaLogError
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.error_codes import error_code
from kafkalog.protocol.wire import Request, make, payload_module
from kafkalog.server.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from kafkalog.server.context import NO_THROTTLE, BrokerContext
from kafkalog.server.internal_topics import check_delete_records_allowed


def handle_describe_cluster(ctx: BrokerContext, request: Request) -> Any:
    mod = payload_module(ApiKey.DESCRIBE_CLUSTER, request.api_version, True)
    where = ctx.advertised_for(request.listener)
    return make(
        mod,
        "DescribeClusterResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=1,  # brokers
        cluster_id=ctx.cluster_id,
        controller_id=ctx.settings.node_id,
        brokers=(
            make(
                mod,
                "DescribeClusterBroker",
                broker_id=ctx.settings.node_id,
                host=where.host,
                port=where.port,
                rack=None,
            ),
        ),
        cluster_authorized_operations=ctx.authorized_operations(
            request,
            getattr(request.body, "include_cluster_authorized_operations", False),
            ResourceType.CLUSTER,
            CLUSTER_NAME,
        ),
    )


def handle_describe_log_dirs(ctx: BrokerContext, request: Request) -> Any:
    mod = payload_module(ApiKey.DESCRIBE_LOG_DIRS, request.api_version, True)
    if not ctx.allowed(request, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return make(
            mod, "DescribeLogDirsResponse", throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed, results=(),
        )  # fmt: skip
    wanted = request.body.topics
    chosen = None if wanted is None else {(t.topic, p) for t in wanted for p in t.partitions}
    by_dir: dict[str, dict[str, list[Any]]] = {str(d): {} for d in ctx.manager.log_dirs}
    for tp, log in ctx.manager.logs().items():
        if chosen is not None and (tp.topic, tp.partition) not in chosen:
            continue
        directory = str(ctx.manager.log_dir_of(tp.topic, tp.partition))
        by_dir.setdefault(directory, {}).setdefault(tp.topic, []).append(
            make(
                mod,
                "DescribeLogDirsPartition",
                partition_index=tp.partition,
                partition_size=log.size_in_bytes,
                offset_lag=0,
                is_future_key=False,
            )
        )
    results = [
        make(  # as Kafka's ReplicaManager.describeLogDirs answers for an offline directory
            mod,
            "DescribeLogDirsResult",
            error_code=ErrorCode.kafka_storage_error,
            log_dir=str(directory),
            topics=(),
            total_bytes=-1,
            usable_bytes=-1,
        )
        for directory in ctx.manager.offline_log_dirs
    ]
    for directory, topics in by_dir.items():
        try:
            usage = shutil.disk_usage(directory)
            total, usable = usage.total, usage.free
        except OSError:
            total = usable = -1
        results.append(
            make(
                mod,
                "DescribeLogDirsResult",
                error_code=ErrorCode.none,
                log_dir=directory,
                topics=tuple(
                    make(mod, "DescribeLogDirsTopic", name=name, partitions=tuple(parts))
                    for name, parts in sorted(topics.items())
                ),
                total_bytes=total,
                usable_bytes=usable,
            )
        )
    return make(
        mod,
        "DescribeLogDirsResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        results=tuple(results),
    )


class _Refused(Exception):
    """A partition the principal may not touch: its answer is already set."""


def handle_delete_records(ctx: BrokerContext, request: Request) -> Any:
    """Move each partition's log start offset up (-1: to the high watermark); the segments
    wholly below it go with the next retention pass, as in Kafka."""
    mod = payload_module(ApiKey.DELETE_RECORDS, request.api_version, True)
    topics = []
    for topic in request.body.topics:
        parts = []
        may = ctx.allowed(request, AclOperation.DELETE, ResourceType.TOPIC, topic.name)
        for p in topic.partitions:
            code, low = ErrorCode.none, -1
            try:
                if not may:
                    code = ErrorCode.topic_authorization_failed
                    raise _Refused
                check_delete_records_allowed(topic.name)
                log = ctx.manager.get_log(topic.name, p.partition_index)
                target = log.high_watermark if p.offset == -1 else p.offset
                if target < 0:
                    code = ErrorCode.offset_out_of_range
                else:
                    log.maybe_increment_log_start_offset(target)
                    low = log.log_start_offset
            except KafkaLogError as err:
                code = error_code(err)
            except _Refused:
                pass
            parts.append(
                make(
                    mod,
                    "DeleteRecordsPartitionResult",
                    partition_index=p.partition_index,
                    low_watermark=low,
                    error_code=code,
                )
            )
        topics.append(
            make(mod, "DeleteRecordsTopicResult", name=topic.name, partitions=tuple(parts))
        )
    return make(mod, "DeleteRecordsResponse", throttle_time=NO_THROTTLE, topics=tuple(topics))


def handle_offset_for_leader_epoch(ctx: BrokerContext, request: Request) -> Any:
    mod = payload_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, request.api_version, True)
    # ReplicaId exists from version 3 (a client's v2 request, librdkafka's, has none: Kafka
    # takes it for the debugging replica id -2, never a follower)
    follower = getattr(request.body, "replica_id", -2) >= 0
    # a follower's request needs CLUSTER_ACTION (KafkaApis), a consumer's DESCRIBE on the topic
    follower_refused = follower and not ctx.allowed(
        request, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME
    )
    topics = []
    for topic in request.body.topics:
        parts = []
        may = ctx.allowed(request, AclOperation.DESCRIBE, ResourceType.TOPIC, topic.topic)
        for p in topic.partitions:
            code, epoch, end = ErrorCode.none, -1, -1
            try:
                if follower_refused:
                    code = ErrorCode.cluster_authorization_failed
                elif not may and not follower:
                    code = ErrorCode.topic_authorization_failed
                elif follower:
                    code = ErrorCode.not_leader_or_follower
                else:
                    log = ctx.manager.get_log(topic.topic, p.partition)
                    epoch, end = log.end_offset_for_epoch(p.leader_epoch)
            except KafkaLogError as err:
                code = error_code(err)
            parts.append(
                make(
                    mod,
                    "EpochEndOffset",
                    error_code=code,
                    partition=p.partition,
                    leader_epoch=epoch,
                    end_offset=end,
                )
            )
        topics.append(
            make(mod, "OffsetForLeaderTopicResult", topic=topic.topic, partitions=tuple(parts))
        )
    return make(
        mod, "OffsetForLeaderEpochResponse", throttle_time=NO_THROTTLE, topics=tuple(topics)
    )

"""The partition leader's side of transactions: DescribeProducers and WriteTxnMarkers.

Why: ``kafka-transactions.sh find-hanging`` and ``describe-producers`` read each partition's
producer state (DescribeProducers), and ``kafka-transactions.sh abort`` ends a hanging
transaction, one whose coordinator will never write its marker, by sending the partition
leader an ABORT marker itself (WriteTxnMarkers, KIP-664). Both are storage operations of one
partition, so they run on worker threads beside Produce.

Refuses: markers for a partition this broker does not have (UNKNOWN_TOPIC_OR_PARTITION),
anything the log refuses (a stale coordinator epoch: TRANSACTION_COORDINATOR_FENCED), and, as
KafkaApis does, producers of a topic the principal may not READ (TOPIC_AUTHORIZATION_FAILED)
and markers from a principal without CLUSTER_ACTION (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kafkalog.errors import KafkaLogError
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.error_codes import error_code
from kafkalog.protocol.wire import Request, make, payload_module
from kafkalog.server.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from kafkalog.server.context import NO_THROTTLE, BrokerContext


def handle_describe_producers(ctx: BrokerContext, request: Request) -> Any:
    mod = payload_module(ApiKey.DESCRIBE_PRODUCERS, request.api_version, True)

    def partition(topic: str, index: int) -> Any:
        if not ctx.allowed(request, AclOperation.READ, ResourceType.TOPIC, topic):
            return make(
                mod, "PartitionResponse", partition_index=index,
                error_code=ErrorCode.topic_authorization_failed, error_message=None,
                active_producers=(),
            )  # fmt: skip
        try:
            log = ctx.manager.get_log(topic, index)
        except KafkaLogError as err:
            return make(
                mod,
                "PartitionResponse",
                partition_index=index,
                error_code=error_code(err),
                error_message=str(err),
                active_producers=(),
            )
        entries = list(log.producers().values())  # a copy: appends go on meanwhile
        return make(
            mod,
            "PartitionResponse",
            partition_index=index,
            error_code=ErrorCode.none,
            error_message=None,
            active_producers=tuple(
                make(
                    mod,
                    "ProducerState",
                    producer_id=e.producer_id,
                    producer_epoch=e.producer_epoch,
                    last_sequence=e.last_seq,
                    last_timestamp=e.last_timestamp,
                    coordinator_epoch=e.coordinator_epoch,
                    current_txn_start_offset=(
                        -1 if e.current_txn_first_offset is None else e.current_txn_first_offset
                    ),
                )
                for e in sorted(entries, key=lambda e: e.producer_id)
            ),
        )

    return make(
        mod,
        "DescribeProducersResponse",
        throttle_time=NO_THROTTLE,
        topics=tuple(
            make(
                mod,
                "TopicResponse",
                name=t.name,
                partitions=tuple(partition(t.name, int(p)) for p in t.partition_indexes),
            )
            for t in request.body.topics
        ),
    )


def handle_write_txn_markers(ctx: BrokerContext, request: Request) -> Any:
    mod = payload_module(ApiKey.WRITE_TXN_MARKERS, request.api_version, True)
    results = []
    wrote: list[tuple[str, int]] = []
    may = ctx.allowed(request, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
    for marker in request.body.markers:
        kind = "COMMIT" if marker.transaction_result else "ABORT"
        topics = []
        for topic in marker.topics:
            partitions = []
            for index in topic.partition_indexes:
                if not may:
                    partitions.append(
                        make(
                            mod,
                            "WritableTxnMarkerPartitionResult",
                            partition_index=index,
                            error_code=ErrorCode.cluster_authorization_failed,
                        )
                    )
                    continue
                try:
                    ctx.manager.get_log(topic.name, index).append_end_txn_marker(
                        marker.producer_id, marker.producer_epoch, kind, marker.coordinator_epoch
                    )
                    code = ErrorCode.none
                    wrote.append((topic.name, index))
                except KafkaLogError as err:
                    code = error_code(err)
                partitions.append(
                    make(
                        mod,
                        "WritableTxnMarkerPartitionResult",
                        partition_index=index,
                        error_code=code,
                    )
                )
            topics.append(
                make(
                    mod,
                    "WritableTxnMarkerTopicResult",
                    name=topic.name,
                    partitions=tuple(partitions),
                )
            )
        results.append(
            make(
                mod,
                "WritableTxnMarkerResult",
                producer_id=marker.producer_id,
                topics=tuple(topics),
            )
        )
    if wrote:
        ctx.on_append(wrote)
    return make(mod, "WriteTxnMarkersResponse", markers=tuple(results))

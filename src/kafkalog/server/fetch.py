"""Fetch and ListOffsets: consumers read whole batches by offset, and find offsets by time.

Why: "the on-disk format is the wire format": a fetch answers with the segment's bytes as they
are, never decoded or re-encoded, bounded by the partition's and the response's max bytes
(KIP-74: the first batch is sent whole even when larger, so a consumer never stalls). Each
partition's bytes stay in the segment file: the answer holds a descriptor and a range, which the
transport sends with ``sendfile`` (``fetch_response.py``). A fetch that finds fewer than
``min_bytes`` says so, and the transport waits for an append or for ``max_wait_ms`` and asks
again (Kafka's DelayedFetch).

Fetch sessions (KIP-227) are the purgatory's (``fetch_sessions.py``): what reaches this module
is a fetch of the partitions to read, and its answer is cut down to what changed there.

Refuses: replica fetches (``replica_id`` >= 0: there are no followers); and a topic the
principal may not READ (Fetch) or DESCRIBE (ListOffsets), with TOPIC_AUTHORIZATION_FAILED
before the topic is looked up, as KafkaApis answers.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kafkalog.errors import KafkaLogError, OffsetOutOfRangeError
from kafkalog.log.log import Log
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.error_codes import error_code
from kafkalog.protocol.fetch_frame import (
    FetchResponseData,
    OpenSlice,
    PartitionResponse,
    TopicResponse,
)
from kafkalog.protocol.wire import Request, make, payload_module
from kafkalog.server.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from kafkalog.server.context import NO_THROTTLE, BrokerContext
from kafkalog.server.remote_reads import RemoteReadRejectedError
from kafkalog.storage.file_records import FileSlice
from kafkalog.types import IsolationLevel

logger = logging.getLogger("kafkalog.server")

# records up to this size are copied into the answer rather than sent from their file: a copy
# costs less than a descriptor of its own and a sendfile call, and a Fetch across thousands of
# partitions, each with a little new data, holds no descriptor per partition until it is sent;
# at most COPY_BUDGET_BYTES of an answer are copies (past it, slices), so a Fetch of many
# partitions with a large max_bytes holds a bounded amount of memory until it is sent
COPY_AT_MOST_BYTES = 64 * 1024
COPY_BUDGET_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class FetchResult:
    """A fetch's response and whether it may be sent now (enough bytes, an error, or no
    more waiting). The response holds descriptors: ``close()`` it if it is not sent."""

    response: FetchResponseData
    satisfied: bool
    max_wait_ms: int

    def close(self) -> None:
        self.response.close()


def isolation_of(request: Request) -> IsolationLevel:
    return _isolation(getattr(request.body, "isolation_level", 0))


def _isolation(level: int) -> IsolationLevel:
    return IsolationLevel.READ_COMMITTED if level == 1 else IsolationLevel.READ_UNCOMMITTED


class RemoteReadOffTheLoop(Exception):
    """A partition's fetch offset lies in remote storage (tiered storage): the event loop must
    not wait for the store, so the fetch is made again on a request handler thread (Kafka
    reads remote data on its own reader threads, not its network threads)."""


def handle_fetch(
    ctx: BrokerContext, request: Request, *, final: bool = False, remote_reads: bool = True
) -> FetchResult:
    body, version = request.body, request.api_version
    isolation = _isolation(getattr(body, "isolation_level", 0))
    max_wait_ms = int(body.max_wait.total_seconds() * 1000)
    if body.replica_id >= 0:  # a follower's: CLUSTER_ACTION first, as KafkaApis asks
        allowed = ctx.allowed(
            request, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME
        )
        code = (
            ErrorCode.not_leader_or_follower if allowed else ErrorCode.cluster_authorization_failed
        )
        return FetchResult(FetchResponseData(code.value), True, 0)
    remaining = body.max_bytes if version >= 3 else 2**31 - 1
    total = copied = 0
    errors = False
    response = FetchResponseData(ErrorCode.none.value)
    try:
        for topic in body.topics:
            out = TopicResponse(topic.topic)
            if not ctx.allowed(request, AclOperation.READ, ResourceType.TOPIC, topic.topic):
                refused = ErrorCode.topic_authorization_failed.value
                out.partitions.extend(
                    PartitionResponse(p.partition, refused) for p in topic.partitions
                )
                errors = errors or bool(topic.partitions)
                response.topics.append(out)
                continue
            response.topics.append(out)  # first: a failure below closes what it holds
            for part in topic.partitions:
                data = _fetch_partition(
                    ctx,
                    topic.topic,
                    part,
                    isolation,
                    remaining,
                    first=total == 0,
                    may_copy=COPY_BUDGET_BYTES - copied,
                    remote_reads=remote_reads,
                )
                out.partitions.append(data)
                total += data.records_size
                if isinstance(data.records, bytes):
                    copied += len(data.records)
                remaining = max(0, remaining - data.records_size)
                errors = errors or data.error_code != ErrorCode.none.value
    except BaseException:
        response.close()
        raise
    satisfied = final or errors or max_wait_ms <= 0 or total >= body.min_bytes or not body.topics
    return FetchResult(response, satisfied, max_wait_ms)


def available_bytes(
    ctx: BrokerContext, topic: str, part: Any, isolation: IsolationLevel
) -> int | None:
    """The bytes one partition of a parked fetch has for it now, read as the fetch reads it
    but taking no descriptor; None when it has an error to answer with instead (Kafka's
    DelayedFetch.tryComplete, which sizes what changed before reading anything whole)."""
    try:
        log = ctx.manager.get_log(topic, part.partition)
        if log.tiering.enabled and part.fetch_offset < log.local_log_start_offset:
            return None  # remote records: the fetch reads them (off the loop), not the sizing
        info = log.read(part.fetch_offset, part.partition_max_bytes, isolation=isolation)
    except KafkaLogError:
        return None
    return 0 if info.records is None else info.records.size


def _fetch_partition(
    ctx: BrokerContext,
    topic: str,
    part: Any,
    isolation: IsolationLevel,
    remaining: int,
    *,
    first: bool,
    may_copy: int = COPY_BUDGET_BYTES,
    remote_reads: bool = True,
) -> PartitionResponse:
    """One partition's answer; its records are a slice of the segment file with a descriptor
    of its own, sent later with ``sendfile``, or, up to ``COPY_AT_MOST_BYTES`` and the
    ``may_copy`` bytes the answer may still copy, a copy."""
    index = part.partition
    try:
        log = ctx.manager.get_log(topic, index)
    except KafkaLogError as err:
        return PartitionResponse(index, error_code(err).value)
    remote = log.tiering.enabled and part.fetch_offset < log.local_log_start_offset
    if remote and not remote_reads:
        raise RemoteReadOffTheLoop
    read = functools.partial(
        log.read,
        part.fetch_offset,
        min(part.partition_max_bytes, remaining),
        min_one_message=first,
        isolation=isolation,
    )
    try:
        if remote and ctx.remote_reader is not None:
            # Kafka's DelayedRemoteFetch: the remote read runs on the remote reader threads
            # for at most remote.fetch.max.wait.ms; a read not done by then answers the
            # partition with no records (the client fetches again), and finishes unheard
            try:
                future = ctx.remote_reader.submit(read)
            except RemoteReadRejectedError as err:
                logger.warning("Unable to fetch data from remote storage for %s-%d: %s",
                               topic, index, err)  # fmt: skip
                return _partition(index, ErrorCode.unknown_server_error, log)
            try:
                info = future.result(ctx.manager.config.remote.remote_fetch_max_wait_ms / 1000)
            except concurrent.futures.TimeoutError:
                return _partition(index, ErrorCode.none, log)
        else:
            info = read()
        records: bytes | OpenSlice = b""
        if info.records is not None and info.records.size:
            s = info.records
            if not isinstance(s, FileSlice) or s.size <= min(COPY_AT_MOST_BYTES, may_copy):
                records = s.read()  # small, or read from remote storage into memory already
            else:
                records = OpenSlice(s.dup_descriptor(), s.position, s.size)
    except OffsetOutOfRangeError:
        return _partition(index, ErrorCode.offset_out_of_range, log)
    except KafkaLogError as err:
        return _partition(index, error_code(err), log)
    aborted = None
    if isolation is IsolationLevel.READ_COMMITTED:
        aborted = [(t.producer_id, t.first_offset) for t in info.aborted_transactions or ()]
    return _partition(index, ErrorCode.none, log, records, aborted)


def _partition(
    index: int,
    code: ErrorCode,
    log: Log,
    records: bytes | OpenSlice = b"",
    aborted: list[tuple[int, int]] | None = None,
) -> PartitionResponse:
    return PartitionResponse(
        index,
        code.value,
        high_watermark=log.high_watermark,
        last_stable_offset=log.last_stable_offset,
        log_start_offset=log.log_start_offset,
        aborted=aborted,
        records=records,
    )


def handle_list_offsets(ctx: BrokerContext, request: Request) -> Any:
    body, version = request.body, request.api_version
    mod = payload_module(ApiKey.LIST_OFFSETS, version, True)
    isolation = _isolation(body.isolation_level) if version >= 2 else None
    topics = []
    for topic in body.topics:
        partitions = []
        may = ctx.allowed(request, AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name)
        for part in topic.partitions:
            code, ts, offset, epoch = ErrorCode.none, -1, -1, -1
            try:
                found = None
                if may:
                    found = ctx.manager.get_log(topic.name, part.partition_index).list_offsets(
                        part.timestamp, isolation or IsolationLevel.READ_UNCOMMITTED
                    )
                else:
                    code = ErrorCode.topic_authorization_failed
            except KafkaLogError as err:
                code, found = error_code(err), None
            if found is not None:
                ts, offset = found.timestamp, found.offset
                epoch = found.leader_epoch if found.leader_epoch is not None else -1
            partitions.append(
                make(
                    mod,
                    "ListOffsetsPartitionResponse",
                    partition_index=part.partition_index,
                    error_code=code,
                    timestamp=ts,
                    offset=offset,
                    leader_epoch=epoch,
                )
            )
        topics.append(
            make(mod, "ListOffsetsTopicResponse", name=topic.name, partitions=tuple(partitions))
        )
    return make(mod, "ListOffsetsResponse", throttle_time=NO_THROTTLE, topics=tuple(topics))

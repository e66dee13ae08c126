"""Fetch and ListOffsets: consumers read whole batches by offset, and find offsets by time.

Why: "the on-disk format is the wire format": a fetch answers with the segment's bytes as they
are, never decoded or re-encoded, bounded by the partition's and the response's max bytes
(KIP-74: the first batch is sent whole even when larger, so a consumer never stalls). A fetch
that finds fewer than ``min_bytes`` says so, and the transport waits for an append or for
``max_wait_ms`` and asks again (Kafka's DelayedFetch).

Refuses: replica fetches (``replica_id`` >= 0: there are no followers), and fetch sessions
(KIP-227): it answers every fetch in full with session id 0, which every client takes as
"sessions unsupported" and keeps sending full requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kafkalog.errors import KafkaLogError, OffsetOutOfRangeError
from kafkalog.log.log import Log
from kafkalog.server.context import NO_THROTTLE, BrokerContext
from kafkalog.server.error_codes import error_code
from kafkalog.server.wire import Request, make, payload_module
from kafkalog.types import IsolationLevel

FETCH, LIST_OFFSETS = 1, 2


@dataclass(frozen=True, slots=True)
class FetchResult:
    """A fetch's response and whether it may be sent now (enough bytes, an error, or no
    more waiting)."""

    body: Any
    satisfied: bool
    max_wait_ms: int


def _isolation(level: int) -> IsolationLevel:
    return IsolationLevel.READ_COMMITTED if level == 1 else IsolationLevel.READ_UNCOMMITTED


def handle_fetch(ctx: BrokerContext, request: Request, *, final: bool = False) -> FetchResult:
    body, version = request.body, request.api_version
    mod = payload_module(FETCH, version, True)
    isolation = _isolation(getattr(body, "isolation_level", 0))
    max_wait_ms = int(body.max_wait.total_seconds() * 1000)
    if body.replica_id >= 0:
        return FetchResult(_top(mod, ErrorCode.not_leader_or_follower, ()), True, 0)
    remaining = body.max_bytes if version >= 3 else 2**31 - 1
    total = 0
    errors = False
    topics = []
    for topic in body.topics:
        partitions = []
        for part in topic.partitions:
            data, size, failed = _fetch_partition(
                ctx, mod, topic.topic, part, isolation, remaining, first=total == 0
            )
            partitions.append(data)
            total += size
            remaining = max(0, remaining - size)
            errors = errors or failed
        topics.append(
            make(mod, "FetchableTopicResponse", topic=topic.topic, partitions=tuple(partitions))
        )
    satisfied = final or errors or max_wait_ms <= 0 or total >= body.min_bytes or not topics
    return FetchResult(_top(mod, ErrorCode.none, tuple(topics)), satisfied, max_wait_ms)


def _top(mod: Any, code: ErrorCode, topics: tuple[Any, ...]) -> Any:
    return make(
        mod,
        "FetchResponse",
        throttle_time=NO_THROTTLE,
        error_code=code,
        session_id=0,
        responses=topics,
    )


def _fetch_partition(
    ctx: BrokerContext,
    mod: Any,
    topic: str,
    part: Any,
    isolation: IsolationLevel,
    remaining: int,
    *,
    first: bool,
) -> tuple[Any, int, bool]:
    """One partition's data, its record bytes, and whether it failed."""
    try:
        log = ctx.manager.get_log(topic, part.partition)
    except KafkaLogError as err:
        return _partition(mod, part.partition, error_code(err)), 0, True
    committed = isolation is IsolationLevel.READ_COMMITTED
    try:
        info = log.read(
            part.fetch_offset,
            min(part.partition_max_bytes, remaining),
            min_one_message=first,
            isolation=isolation,
        )
    except OffsetOutOfRangeError:
        return _partition(mod, part.partition, ErrorCode.offset_out_of_range, log), 0, True
    except KafkaLogError as err:
        return _partition(mod, part.partition, error_code(err), log), 0, True
    records = info.records.read() if info.records is not None else b""
    aborted = None
    if committed:
        aborted = tuple(
            make(mod, "AbortedTransaction", producer_id=t.producer_id, first_offset=t.first_offset)
            for t in info.aborted_transactions or ()
        )
    return (
        _partition(mod, part.partition, ErrorCode.none, log, records, aborted),
        len(records),
        False,
    )


def _partition(
    mod: Any,
    index: int,
    code: ErrorCode,
    log: Log | None = None,
    records: bytes = b"",
    aborted: tuple[Any, ...] | None = None,
) -> Any:
    return make(
        mod,
        "PartitionData",
        partition_index=index,
        error_code=code,
        high_watermark=log.high_watermark if log is not None else -1,
        last_stable_offset=log.last_stable_offset if log is not None else -1,
        log_start_offset=log.log_start_offset if log is not None else -1,
        aborted_transactions=aborted,
        preferred_read_replica=-1,
        records=records,
    )


def handle_list_offsets(ctx: BrokerContext, request: Request) -> Any:
    body, version = request.body, request.api_version
    mod = payload_module(LIST_OFFSETS, version, True)
    isolation = _isolation(body.isolation_level) if version >= 2 else None
    topics = []
    for topic in body.topics:
        partitions = []
        for part in topic.partitions:
            code, ts, offset, epoch = ErrorCode.none, -1, -1, -1
            try:
                found = ctx.manager.get_log(topic.name, part.partition_index).list_offsets(
                    part.timestamp, isolation or IsolationLevel.READ_UNCOMMITTED
                )
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
                    old_style_offsets=(offset,) if offset >= 0 else (),
                    timestamp=ts,
                    offset=offset,
                    leader_epoch=epoch,
                )
            )
        topics.append(
            make(mod, "ListOffsetsTopicResponse", name=topic.name, partitions=tuple(partitions))
        )
    return make(mod, "ListOffsetsResponse", throttle_time=NO_THROTTLE, topics=tuple(topics))

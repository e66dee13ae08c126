"""Produce: a client's record batches appended to partition logs as the leader.

Why: the leader path (``Log.append_records``) already validates the batches, assigns offsets,
checks idempotent producers' sequences and epochs and writes; this module only maps a
request's partitions to it and each outcome to Kafka's per-partition answer. An idempotent
retry of a batch already written answers NONE with the original offsets, as Kafka does.

A transactional batch is let in only if the transaction coordinator says its partition is in
the producer's ongoing transaction, and its append happens under the coordinator's decision
lock (KIP-890 part 1), so it cannot land after its transaction's marker.

Refuses: ``acks`` other than 0, 1 and -1 (INVALID_REQUIRED_ACKS), transactional batches
without a transactional id, or with one no coordinator of this broker knows, and, as KafkaApis
does, a topic the principal may not WRITE (TOPIC_AUTHORIZATION_FAILED, before it is looked
up, so a missing topic is not told from a forbidden one) and a transactional id it may not
WRITE (every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import datetime
import logging
import struct
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from kafkalog.errors import InvalidRecordError, KafkaLogError, UnsupportedCompressionTypeError
from kafkalog.log.append_info import LogAppendInfo
from kafkalog.protocol.error_codes import error_code
from kafkalog.protocol.produce_response import (
    PartitionAnswer,
    ProduceAnswer,
    RecordErrorAnswer,
    TopicAnswer,
)
from kafkalog.protocol.wire import Request
from kafkalog.records import MemoryRecords, RecordBatch
from kafkalog.records.scanner import AnyBatch
from kafkalog.records.v2_layout import (
    ATTRIBUTES_OFFSET,
    BATCH_LENGTH_OFFSET,
    COMPRESSION_MASK,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    RECORD_BATCH_OVERHEAD,
)
from kafkalog.server.authorizer import AclOperation, ResourceType
from kafkalog.server.context import NO_THROTTLE, BrokerContext
from kafkalog.server.internal_topics import check_produce_allowed
from kafkalog.types import INT64_MAX, CompressionType

logger = logging.getLogger("kafkalog.server")

MAGIC_V2 = 2
ZSTD = int(CompressionType.ZSTD)
_BATCH_LENGTH = struct.Struct(">i")
TRANSACTIONAL_FLAG = 0x10  # the low attributes byte's bit 4
_NONE: Mapping[tuple[str, int], ErrorCode] = {}


def _partition(
    index: int,
    code: ErrorCode,
    base_offset: int = -1,
    append_time: int = -1,
    log_start: int = -1,
    message: str | None = None,
    record_errors: tuple[tuple[int, str], ...] = (),
) -> PartitionAnswer:
    return PartitionAnswer(
        index,
        code,
        base_offset,
        (
            None
            if append_time < 0
            else datetime.datetime.fromtimestamp(append_time / 1000, datetime.UTC)
        ),
        log_start,
        tuple(RecordErrorAnswer(i, why) for i, why in record_errors),
        message,
    )


def check_produce_records(records: bytes, version: int) -> AnyBatch | None:
    """Kafka's ProduceRequest.validateRecords: from version 3, exactly one batch of magic 2
    per partition, and zstd only from version 7 (KIP-110). Returns the batch if it is
    transactional (its producer is checked against the coordinator), else None."""
    if (
        len(records) >= RECORD_BATCH_OVERHEAD
        and records[MAGIC_OFFSET] == MAGIC_V2
        and _BATCH_LENGTH.unpack_from(records, BATCH_LENGTH_OFFSET)[0] + LOG_OVERHEAD
        == len(records)
        and (version >= 7 or records[ATTRIBUTES_OFFSET + 1] & COMPRESSION_MASK != ZSTD)
    ):
        # the one whole batch a producer sends: no scanner, and no header read unless needed
        if records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG:
            return RecordBatch(records)
        return None
    batches = MemoryRecords(records).batches(verify_crc=False)
    first = next(batches, None)
    if first is None:
        raise InvalidRecordError(
            f"Produce requests with version {version} must have at least one record batch "
            "per partition"
        )
    if first.magic != MAGIC_V2:
        raise InvalidRecordError(
            f"Produce requests with version {version} are only allowed to contain record "
            "batches with magic version 2"
        )
    if version < 7 and first.compression is CompressionType.ZSTD:
        raise UnsupportedCompressionTypeError(
            f"Produce requests with version {version} are not allowed to use ZStandard compression"
        )
    if next(batches, None) is not None:
        raise InvalidRecordError(
            f"Produce requests with version {version} are only allowed to contain exactly "
            "one record batch per partition"
        )
    return first if first.is_transactional else None


def _append_transactional(
    ctx: BrokerContext,
    transactional_id: str | None,
    tp: tuple[str, int],
    first: AnyBatch,
    data: bytes,
) -> tuple[ErrorCode, LogAppendInfo | None]:
    if transactional_id is None or ctx.transactions is None:
        return ErrorCode.transactional_id_authorization_failed, None
    with ctx.transactions.verified(
        transactional_id, first.producer_id, first.producer_epoch, tp
    ) as code:
        if code is not ErrorCode.none:
            return code, None
        return code, ctx.manager.get_log(*tp).append_records(data)


# A Produce frame up to this size to partitions that never fsync on append is handled on the
# event loop: measured under one 1 KiB producer, the hand-off to a request handler thread and
# back cost a third of the broker's throughput, and with the GIL the thread ran no Python in
# parallel anyway (its pwrite and CRC release the GIL on the loop thread just the same).
APPEND_ON_THE_LOOP_BYTES = 1 << 20


def appends_on_the_loop(ctx: BrokerContext, request: Request) -> bool:
    """Whether ``request`` (a Produce) is one to handle on the event loop: no transaction (its
    coordinator's lock may be held by a handler thread), every partition already open (no
    topic to create), and none that may fsync in the append (``flush.messages``/``flush.ms``
    set: a sync can take milliseconds, and everybody else's requests would wait)."""
    body = request.body
    if body.transactional_id is not None or body.acks not in (0, 1, -1):
        return False
    for topic in body.topic_data:
        for part in topic.partition_data:
            try:
                config = ctx.manager.get_log(topic.name, part.index).config
            except KafkaLogError:  # missing, offline, deleted: the handler thread answers it
                return False
            if config.flush_messages != INT64_MAX or config.flush_ms != INT64_MAX:
                return False
    return True


def _has_transactional_records(body: Any) -> bool:
    """Whether any partition's first batch is transactional (Kafka's
    RequestUtils.hasTransactionalRecords, which decides whether the transactional id is
    authorized)."""
    for topic in body.topic_data:
        for part in topic.partition_data:
            records = part.records
            if (
                records is not None
                and len(records) >= RECORD_BATCH_OVERHEAD
                and records[MAGIC_OFFSET] == MAGIC_V2
                and records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG
            ):
                return True
    return False


def handle_produce(
    ctx: BrokerContext, request: Request, adds: Mapping[tuple[str, int], ErrorCode] = _NONE
) -> Any | None:
    """The ProduceResponse, or None for ``acks=0`` (Kafka sends no response then). ``adds``:
    the partitions a transaction version 2 producer's batches could not be added to its
    transaction for (txn_implicit), answered with that code and not appended."""
    body, version = request.body, request.api_version
    acks = body.acks
    wrote: list[tuple[str, int]] = []  # the partitions appended to, for the waiting fetches
    topics = []
    checked = ctx.authorizer is not None
    refused_all = (
        checked
        and body.transactional_id is not None
        and _has_transactional_records(body)
        and not ctx.allowed(
            request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id
        )
    )
    for topic in body.topic_data:
        partitions = []
        refused = (
            ErrorCode.transactional_id_authorization_failed
            if refused_all
            else ErrorCode.topic_authorization_failed
            if checked
            and not ctx.allowed(request, AclOperation.WRITE, ResourceType.TOPIC, topic.name)
            else None
        )
        for part in topic.partition_data:
            if acks not in (0, 1, -1):
                partitions.append(_partition(part.index, ErrorCode.invalid_required_acks))
                continue
            if refused is not None:
                partitions.append(_partition(part.index, refused))
                continue
            not_added = adds.get((topic.name, part.index)) if adds else None
            if not_added is not None:
                partitions.append(_partition(part.index, not_added))
                continue
            try:
                check_produce_allowed(topic.name, request.client_id)
                log = ctx.manager.get_log(topic.name, part.index)
                if part.records is None:
                    raise KafkaLogError("the partition's records are null")
                first = check_produce_records(part.records, version)
                if first is not None:
                    code, info = _append_transactional(
                        ctx, body.transactional_id, (topic.name, part.index), first, part.records
                    )
                    if info is None:
                        partitions.append(_partition(part.index, code))
                        continue
                else:
                    info = log.append_records(part.records)
            except KafkaLogError as err:
                code = error_code(err)
                if code is ErrorCode.unknown_server_error:
                    code = ErrorCode.corrupt_message
                logger.debug("produce to %s-%d failed: %s", topic.name, part.index, err)
                per_record = getattr(err, "record_errors", ())  # KIP-467: which records
                partitions.append(
                    _partition(part.index, code, message=str(err), record_errors=per_record)
                )
                continue
            if not info.duplicate:
                wrote.append((topic.name, part.index))
            partitions.append(
                _partition(
                    part.index,
                    ErrorCode.none,
                    info.first_offset,
                    info.log_append_time,
                    info.log_start_offset,
                )
            )
        topics.append(TopicAnswer(topic.name, tuple(partitions)))
    if wrote:
        ctx.on_append(wrote)
    if acks == 0:
        return None
    return ProduceAnswer(tuple(topics), NO_THROTTLE)

"""The transaction coordinator's APIs on the wire: InitProducerId with a transactional id,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit, ListTransactions and
DescribeTransactions.

Why: the coordinator (txn_coordinator) speaks in ids, partitions and error codes; this module
parses each request version and words each answer, including Kafka's downgrades for old
clients (PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below AddPartitionsToTxn / AddOffsetsToTxn /
EndTxn v2 and InitProducerId v4, as KafkaApis does). A transactional offset commit is written
to ``__consumer_offsets`` as a transactional batch of the producer, and counts once its
marker is written (group_coordinator.complete_transaction).

Refuses: AddPartitionsToTxn v4+ (broker-to-broker verification; this broker verifies in
process), TxnOffsetCommit for a partition the transaction has not added (AddOffsetsToTxn
first, as Kafka's verification requires), and, as KafkaApis does, a transactional id the
principal may not WRITE (DESCRIBE to describe or list it), a group it may not READ and a topic
it may not WRITE (READ for offsets), with Kafka's authorization codes.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kafkalog import records
from kafkalog.coordinator.consumer_group_offsets import commit_check
from kafkalog.coordinator.group_member import wall_clock_ms
from kafkalog.coordinator.offsets_store import (
    OFFSETS_TOPIC_CONFIG,
    OffsetRows,
    create_if_missing,
    partition_for,
)
from kafkalog.coordinator.txn_coordinator import TRANSACTION_VERSION_2
from kafkalog.coordinator.txn_store import COMPLETE_ABORT, COMPLETE_COMMIT, EMPTY
from kafkalog.errors import KafkaLogError
from kafkalog.log.producer_batches import ProducerFields
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.error_codes import error_code
from kafkalog.protocol.wire import Request, make, payload_module
from kafkalog.server.authorizer import AclOperation, ResourceType
from kafkalog.server.context import NO_THROTTLE, BrokerContext
from kafkalog.server.offset_commit import commit_response, commit_rows, placed
from kafkalog.server.txn_implicit import RETRIABLE_ADD_ERRORS, client_transaction_version
from kafkalog.types import OFFSETS_TOPIC

if TYPE_CHECKING:
    from kafkalog.coordinator.group_coordinator import GroupCoordinator
    from kafkalog.coordinator.txn_coordinator import TransactionCoordinator


def _fenced(code: ErrorCode, version: int, first_version: int) -> ErrorCode:
    if code is ErrorCode.producer_fenced and version < first_version:
        return ErrorCode.invalid_producer_epoch
    return code


def _may_write_txn(ctx: BrokerContext, request: Request, transactional_id: str) -> bool:
    return ctx.allowed(request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


_TXN_REFUSED = ErrorCode.transactional_id_authorization_failed


async def init_producer_id(
    txns: TransactionCoordinator, ctx: BrokerContext, request: Request
) -> Any:
    body, version = request.body, request.api_version
    mod = payload_module(ApiKey.INIT_PRODUCER_ID, version, True)
    if not _may_write_txn(ctx, request, body.transactional_id):
        return make(
            mod, "InitProducerIdResponse", throttle_time=NO_THROTTLE, error_code=_TXN_REFUSED,
            producer_id=-1, producer_epoch=-1,
        )  # fmt: skip
    code, pid, epoch = await txns.init_producer_id(
        body.transactional_id,
        int(body.transaction_timeout.total_seconds() * 1000),
        getattr(body, "producer_id", -1),
        getattr(body, "producer_epoch", -1),
    )
    return make(
        mod,
        "InitProducerIdResponse",
        throttle_time=NO_THROTTLE,
        error_code=_fenced(code, version, 4),
        producer_id=pid,
        producer_epoch=epoch,
    )


async def add_partitions_to_txn(
    txns: TransactionCoordinator, ctx: BrokerContext, request: Request
) -> Any:
    body, version = request.body, request.api_version
    mod = payload_module(ApiKey.ADD_PARTITIONS_TO_TXN, version, True)
    wanted = [(t.name, int(p)) for t in body.v3_and_below_topics for p in t.partitions]
    if not _may_write_txn(ctx, request, body.v3_and_below_transactional_id):
        codes = dict.fromkeys(wanted, _TXN_REFUSED)
    else:
        refused = {
            t.name
            for t in body.v3_and_below_topics
            if not ctx.allowed(request, AclOperation.WRITE, ResourceType.TOPIC, t.name)
        }
        if refused:  # none is added; the others were not attempted (KafkaApis)
            codes = {
                tp: ErrorCode.topic_authorization_failed
                if tp[0] in refused
                else ErrorCode.operation_not_attempted
                for tp in wanted
            }
        else:
            codes = await txns.add_partitions(
                body.v3_and_below_transactional_id,
                body.v3_and_below_producer_id,
                body.v3_and_below_producer_epoch,
                wanted,
            )
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), code in codes.items():
        by_topic.setdefault(topic, []).append(
            make(
                mod,
                "AddPartitionsToTxnPartitionResult",
                partition_index=partition,
                partition_error_code=_fenced(code, version, 2),
            )
        )
    return make(
        mod,
        "AddPartitionsToTxnResponse",
        throttle_time=NO_THROTTLE,
        results_by_topic_v3_and_below=tuple(
            make(mod, "AddPartitionsToTxnTopicResult", name=t, results_by_partition=tuple(rs))
            for t, rs in by_topic.items()
        ),
    )


def _offsets_partition(txns: TransactionCoordinator, group_id: str) -> int:
    """The group's ``__consumer_offsets`` partition, creating the topic if this is its first
    use (a transaction may commit offsets before any group did)."""
    manager = txns.ctx.manager
    partitions = txns.ctx.settings.offsets_partitions
    create_if_missing(manager, OFFSETS_TOPIC, partitions, OFFSETS_TOPIC_CONFIG)
    return partition_for(group_id, manager.topics()[OFFSETS_TOPIC])


async def add_offsets_to_txn(
    txns: TransactionCoordinator, ctx: BrokerContext, request: Request
) -> Any:
    body, version = request.body, request.api_version
    mod = payload_module(ApiKey.ADD_OFFSETS_TO_TXN, version, True)
    if not _may_write_txn(ctx, request, body.transactional_id):
        code = _TXN_REFUSED
    elif not ctx.allowed(request, AclOperation.READ, ResourceType.GROUP, body.group_id):
        code = ErrorCode.group_authorization_failed
    elif not body.group_id:
        code = ErrorCode.invalid_group_id
    else:
        try:
            partition = await txns.run(_offsets_partition, txns, body.group_id)
        except KafkaLogError:
            code = ErrorCode.coordinator_not_available
        else:
            codes = await txns.add_partitions(
                body.transactional_id,
                body.producer_id,
                body.producer_epoch,
                [(OFFSETS_TOPIC, partition)],
            )
            code = _fenced(next(iter(codes.values())), version, 2)
    return make(mod, "AddOffsetsToTxnResponse", throttle_time=NO_THROTTLE, error_code=code)


async def end_txn(txns: TransactionCoordinator, ctx: BrokerContext, request: Request) -> Any:
    body, version = request.body, request.api_version
    mod = payload_module(ApiKey.END_TXN, version, True)
    pid, epoch = -1, -1
    if not _may_write_txn(ctx, request, body.transactional_id):
        code = _TXN_REFUSED
    else:
        code, pid, epoch = await txns.end_transaction(
            body.transactional_id,
            body.producer_id,
            body.producer_epoch,
            body.committed,
            client_transaction_version(ApiKey.END_TXN, version),
        )
    ids = {"producer_id": pid, "producer_epoch": epoch} if version >= 5 else {}
    return make(
        mod,
        "EndTxnResponse",
        throttle_time=NO_THROTTLE,
        error_code=_fenced(code, version, 2),
        **ids,
    )


def _write_txn_offsets(
    txns: TransactionCoordinator, body: Any, partition: int, rows: OffsetRows
) -> tuple[ErrorCode, int]:
    """Append the rows as the producer's transactional batch, if the transaction has added the
    group's partition; continues the producer's sequence in that partition. The code, and the
    first record's offset."""
    tp = (OFFSETS_TOPIC, partition)
    with txns.verified(body.transactional_id, body.producer_id, body.producer_epoch, tp) as code:
        if code is not ErrorCode.none:
            return code, -1
        log = txns.ctx.manager.get_log(*tp)
        position = log.producer_position(body.producer_id)
        sequence = (
            position.next_sequence
            if position is not None and position.producer_epoch == body.producer_epoch
            else 0
        )
        producer = ProducerFields(body.producer_id, body.producer_epoch, sequence, True)
        info = log.append([records.Record(v, k) for k, v in rows], producer=producer)
        return ErrorCode.none, info.first_offset


async def _add_offsets_partition(
    txns: TransactionCoordinator, body: Any, partition: int, version: int
) -> ErrorCode:
    """TxnOffsetCommit v5 on (transaction version 2): the group's ``__consumer_offsets``
    partition joins the transaction here, not by AddOffsetsToTxn. The retriable errors of the
    add come back as COORDINATOR_NOT_AVAILABLE, on which the client finds the coordinator
    and retries (Kafka answers an append it could not verify with NOT_ENOUGH_REPLICAS, and
    its group coordinator words that so)."""
    tv = client_transaction_version(ApiKey.TXN_OFFSET_COMMIT, version)
    if tv < TRANSACTION_VERSION_2:
        return ErrorCode.none
    codes = await txns.add_partitions(
        body.transactional_id,
        body.producer_id,
        body.producer_epoch,
        [(OFFSETS_TOPIC, partition)],
        tv,
    )
    code = next(iter(codes.values()))
    return ErrorCode.coordinator_not_available if code in RETRIABLE_ADD_ERRORS else code


async def txn_offset_commit(
    groups: GroupCoordinator, txns: TransactionCoordinator, ctx: BrokerContext, request: Request
) -> Any:
    body, version = request.body, request.api_version
    mod = payload_module(ApiKey.TXN_OFFSET_COMMIT, version, True)
    group_id = body.group_id
    whole = (
        _TXN_REFUSED
        if not _may_write_txn(ctx, request, body.transactional_id)
        else ErrorCode.group_authorization_failed
        if not ctx.allowed(request, AclOperation.READ, ResourceType.GROUP, group_id)
        else None
    )
    if whole is not None:
        refused = {(t.name, p.partition_index): whole for t in body.topics for p in t.partitions}
        return commit_response(mod, "TxnOffsetCommit", body.topics, refused)
    generation = getattr(body, "generation_id", -1)
    member_id = getattr(body, "member_id", "")
    instance = getattr(body, "group_instance_id", None)
    group = groups.groups.get(group_id)
    consumer_group = groups.consumer.groups.get(group_id)
    error: ErrorCode | None = ErrorCode.invalid_group_id if not group_id else None
    member_check = None
    if error is None and consumer_group is not None:  # a KIP-848 group's member, or none
        error, member_check = commit_check(
            consumer_group, member_id, generation, request.api_version, ctx.manager.topic_id,
            transactional=True,
        )  # fmt: skip
    elif error is None and (member_id or generation >= 0):  # a member: Kafka checks it
        error = (
            ErrorCode.unknown_member_id
            if group is None
            else group.commit_error(member_id, generation, instance)
        )
    may_read = lambda topic: ctx.allowed(  # noqa: E731
        request, AclOperation.READ, ResourceType.TOPIC, topic
    )
    codes, rows, commits = commit_rows(
        groups.ctx, group_id, body.topics, error, may_read, member_check
    )
    if rows:
        async with groups.commit_lock(group_id):
            try:
                partition = await txns.run(_offsets_partition, txns, group_id)
                code = await _add_offsets_partition(txns, body, partition, version)
                if code is ErrorCode.none:
                    code, first = await txns.run(_write_txn_offsets, txns, body, partition, rows)
            except KafkaLogError as err:
                code = error_code(err)
                if code is ErrorCode.unknown_server_error:
                    code = ErrorCode.coordinator_not_available
            if code is ErrorCode.none:
                staged = groups.pending_transactions.setdefault((body.producer_id, partition), {})
                staged.setdefault(group_id, {}).update(placed(commits, first))
            else:
                codes = {tp: code if c is ErrorCode.none else c for tp, c in codes.items()}
    return commit_response(mod, "TxnOffsetCommit", body.topics, codes)


async def list_transactions(
    txns: TransactionCoordinator, ctx: BrokerContext, request: Request
) -> Any:
    body, version = request.body, request.api_version
    mod = payload_module(ApiKey.LIST_TRANSACTIONS, version, True)
    states = set(body.state_filters)
    producers = set(body.producer_id_filters)
    longer_than = getattr(body, "duration_filter", -1)
    now = wall_clock_ms()
    listed = [
        meta
        for meta in list(txns.transactions.values())  # one C call: workers may add ids
        if (not states or meta.state_name in states)
        and (not producers or meta.producer_id in producers)
        and (longer_than < 0 or (meta.start_ms >= 0 and now - meta.start_ms > longer_than))
        and ctx.allowed(
            request, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, meta.transactional_id
        )
    ]
    return make(
        mod,
        "ListTransactionsResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        unknown_state_filters=tuple(s for s in body.state_filters if s not in _STATE_NAMES),
        transaction_states=tuple(
            make(
                mod,
                "TransactionState",
                transactional_id=m.transactional_id,
                producer_id=m.producer_id,
                transaction_state=m.state_name,
            )
            for m in sorted(listed, key=lambda m: m.transactional_id)
        ),
    )


_STATE_NAMES = {
    "Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
    "Dead", "PrepareEpochFence",
}  # fmt: skip


async def describe_transactions(
    txns: TransactionCoordinator, ctx: BrokerContext, request: Request
) -> Any:
    mod = payload_module(ApiKey.DESCRIBE_TRANSACTIONS, request.api_version, True)

    def described(transactional_id: str) -> Any:
        if not ctx.allowed(
            request, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id
        ):
            return make(
                mod, "TransactionState", error_code=_TXN_REFUSED,
                transactional_id=transactional_id, transaction_state="",
                transaction_timeout=datetime.timedelta(0),
                transaction_start_time=datetime.datetime.fromtimestamp(-1 / 1000, datetime.UTC),
                producer_id=-1, producer_epoch=-1, topics=(),
            )  # fmt: skip
        meta = txns.transactions.get(transactional_id)
        by_topic: dict[str, list[int]] = {}
        if meta is not None and meta.state not in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT):
            for topic, partition in sorted(meta.partitions):
                # partitions of topics the principal may not describe are left out (KafkaApis)
                if ctx.allowed(request, AclOperation.DESCRIBE, ResourceType.TOPIC, topic):
                    by_topic.setdefault(topic, []).append(partition)
        start = -1 if meta is None else meta.start_ms
        return make(
            mod,
            "TransactionState",
            error_code=ErrorCode.none if meta is not None else ErrorCode.transactional_id_not_found,
            transactional_id=transactional_id,
            transaction_state="" if meta is None else meta.state_name,
            transaction_timeout=datetime.timedelta(
                milliseconds=0 if meta is None else meta.timeout_ms
            ),
            transaction_start_time=datetime.datetime.fromtimestamp(start / 1000, datetime.UTC),
            producer_id=-1 if meta is None else meta.producer_id,
            producer_epoch=-1 if meta is None else meta.producer_epoch,
            topics=tuple(
                make(mod, "TopicData", topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()
            ),
        )

    return make(
        mod,
        "DescribeTransactionsResponse",
        throttle_time=NO_THROTTLE,
        transaction_states=tuple(described(t) for t in request.body.transactional_ids),
    )

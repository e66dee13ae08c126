"""Transaction version 2 on the wire (KIP-890 part 2): the ``transaction.version`` feature in
ApiVersions, and the partitions a client of that version adds by producing.

Why: a Kafka 4 client ends its transactions with the epoch bump only when the broker finalizes
``transaction.version`` 2, and it then sends no AddPartitionsToTxn: a transactional Produce of
version 12 or more adds its partitions to the transaction itself, as a TxnOffsetCommit of
version 5 adds the group's offsets partition (txn_apis). Kafka's ReplicaManager asks the
coordinator to add them before the append, which the coordinator's decision lock then checks,
as it checks a version 1 client's partitions; this module is that first step.

Refuses: adding a partition the request may not write to (its transactional id or topic
not authorized, a topic that does not exist, an internal topic a client may not produce to):
those partitions are answered by the produce handler, whose checks refuse them anyway.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kafkalog.coordinator.txn_coordinator import TRANSACTION_VERSION_2
from kafkalog.errors import KafkaLogError
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.wire import Features, Request
from kafkalog.records.scanner import AnyBatch
from kafkalog.server.authorizer import AclOperation, ResourceType
from kafkalog.server.context import BrokerContext
from kafkalog.server.internal_topics import check_produce_allowed
from kafkalog.server.produce import check_produce_records

if TYPE_CHECKING:
    from kafkalog.coordinator.txn_coordinator import TransactionCoordinator

TopicPartition = tuple[str, int]

# Features this broker finalizes, as (name, lowest supported, highest supported, finalized):
# the two whose protocols it serves, at Kafka 4.3.1's levels for a new cluster. A client reads
# them from ApiVersions v3+; Kafka's producer turns transaction version 2 on from it.
FEATURES = (
    ("group.version", 0, 1, 1),  # KIP-848 consumer groups
    ("transaction.version", 0, 2, TRANSACTION_VERSION_2),
)
# Kafka's finalized-features epoch is its metadata offset; these never change while a broker
# runs, and a client only needs to see one at or above 0 to read them.
FINALIZED_FEATURES_EPOCH = 0

# the first version of each request a transaction version 2 client sends (Kafka's
# TransactionVersion.transactionVersionForEndTxn, and the produce and offset-commit versions
# from which the partition is added rather than verified)
_FIRST_V2_VERSION = {ApiKey.END_TXN: 5, ApiKey.PRODUCE: 12, ApiKey.TXN_OFFSET_COMMIT: 5}

# errors of an implicit add the client retries rather than fails on. Kafka's ReplicaManager
# answers a produce it could not verify for these with NOT_ENOUGH_REPLICAS (retried without a
# metadata refresh); its group coordinator words that COORDINATOR_NOT_AVAILABLE.
RETRIABLE_ADD_ERRORS = frozenset(
    {ErrorCode.concurrent_transactions, ErrorCode.coordinator_not_available,
     ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator}
)  # fmt: skip


def client_transaction_version(api: ApiKey, version: int) -> int:
    """The transaction version the client of a request of ``api`` at ``version`` speaks: 2
    from the first version such clients send, else 0 (Kafka's TV_0)."""
    return TRANSACTION_VERSION_2 if version >= _FIRST_V2_VERSION[api] else 0


def _transactional_batches(ctx: BrokerContext, request: Request) -> dict[TopicPartition, AnyBatch]:
    """The partitions of a Produce whose first batch is transactional, that exist, and that
    the principal may write to."""
    found: dict[TopicPartition, AnyBatch] = {}
    known = ctx.manager.topics()
    for topic in request.body.topic_data:
        if not ctx.allowed(request, AclOperation.WRITE, ResourceType.TOPIC, topic.name):
            continue
        try:
            check_produce_allowed(topic.name, request.client_id)
        except KafkaLogError:
            continue
        for part in topic.partition_data:
            if part.records is None or not 0 <= part.index < known.get(topic.name, 0):
                continue
            try:
                first = check_produce_records(part.records, request.api_version)
            except KafkaLogError:
                continue  # the handler answers the malformed batch
            if first is not None:
                found[(topic.name, part.index)] = first
    return found


async def add_produced_partitions(
    txns: TransactionCoordinator, ctx: BrokerContext, request: Request
) -> dict[TopicPartition, ErrorCode]:
    """Add to its transaction each partition a transaction version 2 Produce writes a
    transactional batch to; the partitions whose add failed, with the code to answer them
    with. Partitions of another producer than the first batch's are left to the check at
    append, which refuses them."""
    body = request.body
    if (
        client_transaction_version(ApiKey.PRODUCE, request.api_version) < TRANSACTION_VERSION_2
        or body.transactional_id is None
        or not ctx.allowed(
            request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id
        )
    ):
        return {}
    batches = await txns.run(_transactional_batches, ctx, request)
    if not batches:
        return {}
    first = next(iter(batches.values()))
    ours = [
        tp
        for tp, batch in batches.items()
        if (batch.producer_id, batch.producer_epoch) == (first.producer_id, first.producer_epoch)
    ]
    codes = await txns.add_partitions(
        body.transactional_id,
        first.producer_id,
        first.producer_epoch,
        ours,
        TRANSACTION_VERSION_2,
    )
    return {tp: _produce_code(code) for tp, code in codes.items() if code is not ErrorCode.none}


def _produce_code(code: ErrorCode) -> ErrorCode:
    if code in RETRIABLE_ADD_ERRORS:
        return ErrorCode.not_enough_replicas
    if code is ErrorCode.producer_fenced:  # a produce answers a stale epoch so (the log does)
        return ErrorCode.invalid_producer_epoch
    return code


# what ApiVersions v3+ answers with
API_VERSIONS_FEATURES: Features = (
    tuple((name, lo, hi) for name, lo, hi, _ in FEATURES),
    tuple((name, level) for name, _, _, level in FEATURES),
    FINALIZED_FEATURES_EPOCH,
)

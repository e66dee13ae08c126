"""The transaction coordinator's state in ``__transaction_state``, in Kafka's own record format.

Why: a transaction's state must survive a restart (a commit decided before a crash must still
reach every partition), and it must live where Kafka keeps it, so ``kafka-dump-log
--transaction-log-decoder`` (Kafka's or kafkalog's) reads it. Each state change is one record:
key TransactionLogKey version 0 (the transactional id), value TransactionLogValue version 1,
the version Kafka writes once ``transaction.version`` 1 or more is finalized (this broker
finalizes 2): producer id and epoch, timeout, state, the partitions of the transaction (null
while Empty), two timestamps, and as tagged fields the previous and next producer ids and the
transaction version of the client that began the transaction (Kafka's
TransactionLog.keyToBytes / valueToBytes). Version 0 records (older brokers) are read too. A
transactional id's records go to partition
``abs(transactionalId.hashCode()) % transaction.state.log.num.partitions``.

Refuses: value versions it cannot read (skipped on load, as Kafka's loader skips unknown keys),
and compression: Kafka writes this topic uncompressed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kafkalog import records
from kafkalog.coordinator.offsets_store import create_if_missing, keyed_records, partition_for
from kafkalog.errors import KafkaLogError
from kafkalog.log.log import Log
from kafkalog.manager.log_manager import LogManager
from kafkalog.records.coordinator import TRANSACTION_STATES, decode
from kafkalog.records.schema_writer import encode_key, encode_versioned
from kafkalog.types import TRANSACTION_TOPIC

TRANSACTION_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "compression.type": "uncompressed",
    "segment.bytes": "104857600",
}
EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD = range(7)
PREPARE_EPOCH_FENCE = 7
_KEY_VERSION, _VALUE_VERSION = 0, 1
NO_PRODUCER_ID = -1


@dataclass(slots=True)
class TransactionMetadata:
    """One transactional id's state (Kafka's TransactionMetadata). The coordinator mutates it
    only while it holds the id's lock; produce requests read it under ``verify_lock``."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: int = EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_epoch: int = -1
    previous_producer_id: int = NO_PRODUCER_ID
    # the id a transaction version 2 commit or abort moves to once its markers are written,
    # when the epoch bump exhausted the current id's epochs (Kafka's nextProducerId)
    next_producer_id: int = NO_PRODUCER_ID
    # 2 when the transaction was begun by a transaction version 2 client (KIP-890), else 0
    client_transaction_version: int = 0

    @property
    def state_name(self) -> str:
        return TRANSACTION_STATES[self.state]


def transaction_key(transactional_id: str) -> bytes:
    return encode_key("TransactionLogKey", {"transactionalId": transactional_id})


def transaction_value(meta: TransactionMetadata) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(meta.partitions):
        by_topic.setdefault(topic, []).append(partition)
    fields = {
        "producerId": meta.producer_id,
        "producerEpoch": meta.producer_epoch,
        "transactionTimeoutMs": meta.timeout_ms,
        "transactionStatus": meta.state,
        # Kafka writes null partitions while Empty
        "transactionPartitions": None
        if meta.state == EMPTY
        else [{"topic": t, "partitionIds": ids} for t, ids in by_topic.items()],
        "transactionLastUpdateTimestampMs": meta.last_update_ms,
        "transactionStartTimestampMs": meta.start_ms,
        "previousProducerId": meta.previous_producer_id,
        "nextProducerId": meta.next_producer_id,
        "clientTransactionVersion": meta.client_transaction_version,
    }
    return encode_versioned("TransactionLogValue", _VALUE_VERSION, fields)


def load_transactions(logs: Iterable[Log]) -> dict[str, TransactionMetadata]:
    """Every transactional id's last state from the ``__transaction_state`` partitions: the
    last record of each key wins, a tombstone removes it."""
    out: dict[str, TransactionMetadata] = {}
    for log in logs:
        for key, value in keyed_records(log):
            _apply(out, key, value)
    return out


def _apply(out: dict[str, TransactionMetadata], key: bytes, value: bytes | None) -> None:
    try:
        decoded = decode("transactions", key, value)
    except KafkaLogError:
        return
    if decoded.record_type != _KEY_VERSION or decoded.key is None:
        return
    transactional_id = decoded.key["transactionalId"]
    v = decoded.value
    if v is None:
        out.pop(transactional_id, None)
        return
    out[transactional_id] = TransactionMetadata(
        transactional_id,
        v["producerId"],
        v["producerEpoch"],
        v["transactionTimeoutMs"],
        v["transactionStatus"],
        {(p["topic"], pid) for p in v["transactionPartitions"] or () for pid in p["partitionIds"]},
        v["transactionStartTimestampMs"],
        v["transactionLastUpdateTimestampMs"],
        previous_producer_id=v.get("previousProducerId", NO_PRODUCER_ID),
        next_producer_id=v.get("nextProducerId", NO_PRODUCER_ID),
        client_transaction_version=v.get("clientTransactionVersion", 0),
    )


def coordinator_epoch(manager: LogManager, transactional_id: str) -> int:
    """The epoch our markers for ``transactional_id`` carry: the leader epoch of its
    ``__transaction_state`` partition, as Kafka's TransactionStateManager takes the epoch at
    which it loaded the partition. A partition refuses markers of an epoch below the last it
    saw for the producer, so a directory a Kafka broker left at epoch 2 needs 2, not 0."""
    partitions = manager.topics().get(TRANSACTION_TOPIC, 0)
    if not partitions:
        return 0
    log = manager.get_log(TRANSACTION_TOPIC, partition_for(transactional_id, partitions))
    return log.latest_leader_epoch()


def append_transaction_record(
    manager: LogManager, meta: TransactionMetadata, partitions_if_new: int
) -> None:
    """Write ``meta`` as the transactional id's latest state, creating the topic
    (``transaction.state.log.num.partitions``) on first use."""
    create_if_missing(manager, TRANSACTION_TOPIC, partitions_if_new, TRANSACTION_TOPIC_CONFIG)
    partitions = manager.topics()[TRANSACTION_TOPIC]
    log = manager.get_log(TRANSACTION_TOPIC, partition_for(meta.transactional_id, partitions))
    log.append([records.Record(transaction_value(meta), transaction_key(meta.transactional_id))])

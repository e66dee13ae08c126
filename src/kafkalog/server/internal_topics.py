"""The internal topics and who may touch them (Kafka's ``Topic.INTERNAL_TOPICS`` and the rules
``ReplicaManager`` and ``AutoTopicCreationManager`` apply to them).

Why: ``__consumer_offsets`` and ``__transaction_state`` hold what the coordinators believe; a
record a client writes there is read back as coordinator state at the next load (a forged
PrepareCommit commits another producer's transaction). Kafka lets no client Produce to them
nor delete their records, and creates them only with their coordinator's partition count and
configs, whoever asked first. Refuses: anything about their record formats (the coordinators'
modules) and authorization (the request door decides who may ask at all).
"""

from __future__ import annotations

from kafkalog.coordinator.offsets_store import OFFSETS_TOPIC_CONFIG, create_if_missing
from kafkalog.coordinator.txn_store import TRANSACTION_TOPIC_CONFIG
from kafkalog.errors import InvalidTopicError
from kafkalog.server.context import BrokerContext
from kafkalog.types import OFFSETS_TOPIC, TRANSACTION_TOPIC, is_internal_topic

# the client id with which Kafka's own tools may write internal topics (AdminUtils)
ADMIN_CLIENT_ID = "__admin_client"


def check_produce_allowed(topic: str, client_id: str | None) -> None:
    """Kafka's ReplicaManager.appendToLocalLog guard: INVALID_TOPIC_EXCEPTION."""
    if is_internal_topic(topic) and client_id != ADMIN_CLIENT_ID:
        raise InvalidTopicError(f"Cannot append to internal topic {topic}")


def check_delete_records_allowed(topic: str) -> None:
    """Kafka's ReplicaManager.deleteRecordsOnLocalLog guard: INVALID_TOPIC_EXCEPTION."""
    if is_internal_topic(topic):
        raise InvalidTopicError(f"Cannot delete records of internal topic {topic}")


def owned_by_a_coordinator(topic: str) -> bool:
    """Whether kafkalog runs the coordinator that creates ``topic``: share groups' state topic
    is left to a Kafka broker, which has a share coordinator."""
    return topic in (OFFSETS_TOPIC, TRANSACTION_TOPIC)


def ensure_internal_topic(ctx: BrokerContext, topic: str) -> bool:
    """Create a coordinator's topic with its partition count and configs if it is missing
    (Kafka's AutoTopicCreationManager.creatableTopic); True if this call created it."""
    if topic == OFFSETS_TOPIC:
        partitions, config = ctx.settings.offsets_partitions, OFFSETS_TOPIC_CONFIG
    elif topic == TRANSACTION_TOPIC:
        partitions, config = ctx.settings.transaction_partitions, TRANSACTION_TOPIC_CONFIG
    else:
        raise InvalidTopicError(f"kafkalog runs no coordinator that owns {topic}")
    return create_if_missing(ctx.manager, topic, partitions, config)

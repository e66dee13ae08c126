"""The protocol core: a decoded request in, the response body out (or a fetch that must wait).

Why: one table names every API the broker serves and its versions, so ApiVersions advertises
exactly what the dispatch runs (a client picks versions from that answer). Everything here is
sans-IO: the tests drive it with kio request objects, and the transport with bytes.

Refuses: to let a handler's unexpected exception escape as anything but a closed connection of
that request's client: the broker logs it and stays up for everyone else.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from kafkalog.server.admin import (
    ADMIN_VERSIONS,
    DELETE_RECORDS,
    DESCRIBE_CLUSTER,
    DESCRIBE_LOG_DIRS,
    OFFSET_FOR_LEADER_EPOCH,
    handle_delete_records,
    handle_describe_cluster,
    handle_describe_log_dirs,
    handle_offset_for_leader_epoch,
)
from kafkalog.server.configs import (
    ALTER_CONFIGS,
    DESCRIBE_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
    handle_alter_configs,
    handle_describe_configs,
    handle_incremental_alter_configs,
)
from kafkalog.server.context import NO_THROTTLE, BrokerContext
from kafkalog.server.fetch import (
    FETCH,
    LIST_OFFSETS,
    FetchResult,
    handle_fetch,
    handle_list_offsets,
)
from kafkalog.server.group_coordinator import GROUP_VERSIONS
from kafkalog.server.metadata import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    METADATA,
    handle_create_partitions,
    handle_create_topics,
    handle_delete_topics,
    handle_metadata,
)
from kafkalog.server.produce import PRODUCE, handle_produce
from kafkalog.server.sasl import SASL_VERSIONS
from kafkalog.server.txn_apis import TRANSACTION_VERSIONS
from kafkalog.server.txn_partitions import (
    DESCRIBE_PRODUCERS,
    PARTITION_TXN_VERSIONS,
    WRITE_TXN_MARKERS,
    handle_describe_producers,
    handle_write_txn_markers,
)
from kafkalog.server.wire import (
    API_VERSIONS_KEY,
    Request,
    api_versions_body,
    make,
    payload_module,
)

logger = logging.getLogger("kafkalog.server")

INIT_PRODUCER_ID = 22

Handler = Callable[[BrokerContext, Request], Any]

# API key -> (lowest, highest) version served
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    PRODUCE: (3, 11),
    FETCH: (4, 12),
    LIST_OFFSETS: (1, 7),
    METADATA: (0, 12),
    API_VERSIONS_KEY: (0, 4),
    CREATE_TOPICS: (2, 7),
    CREATE_PARTITIONS: (0, 3),
    DELETE_TOPICS: (1, 6),
    INIT_PRODUCER_ID: (0, 4),
    DESCRIBE_CONFIGS: (1, 4),
    ALTER_CONFIGS: (0, 2),
    INCREMENTAL_ALTER_CONFIGS: (0, 1),
    **ADMIN_VERSIONS,
    **PARTITION_TXN_VERSIONS,
    **GROUP_VERSIONS,  # served by the group coordinator on the event loop
    **TRANSACTION_VERSIONS,  # served by the transaction coordinator on the event loop
    **SASL_VERSIONS,  # answered by the connection's SASL session in the transport
}


def handle_api_versions(ctx: BrokerContext, request: Request) -> Any:
    return api_versions_body(
        request.api_version, ErrorCode.none, SUPPORTED_VERSIONS, throttle_time=NO_THROTTLE
    )


def handle_init_producer_id(ctx: BrokerContext, request: Request) -> Any:
    """An idempotent producer's id (epoch 0), fresh on every call as Kafka's coordinator does
    for a producer without ``transactional.id``. With one, the transport asks the transaction
    coordinator instead; a Broker driven without a transport has none to ask."""
    mod = payload_module(INIT_PRODUCER_ID, request.api_version, True)
    if request.body.transactional_id is not None:
        return make(
            mod,
            "InitProducerIdResponse",
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.coordinator_not_available,
            producer_id=-1,
            producer_epoch=-1,
        )
    return make(
        mod,
        "InitProducerIdResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        producer_id=ctx.producer_ids.generate(),
        producer_epoch=0,
    )


HANDLERS: dict[int, Handler] = {
    PRODUCE: handle_produce,
    LIST_OFFSETS: handle_list_offsets,
    METADATA: handle_metadata,
    API_VERSIONS_KEY: handle_api_versions,
    CREATE_TOPICS: handle_create_topics,
    CREATE_PARTITIONS: handle_create_partitions,
    DELETE_TOPICS: handle_delete_topics,
    INIT_PRODUCER_ID: handle_init_producer_id,
    DESCRIBE_CONFIGS: handle_describe_configs,
    ALTER_CONFIGS: handle_alter_configs,
    INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
    DELETE_RECORDS: handle_delete_records,
    OFFSET_FOR_LEADER_EPOCH: handle_offset_for_leader_epoch,
    DESCRIBE_LOG_DIRS: handle_describe_log_dirs,
    DESCRIBE_CLUSTER: handle_describe_cluster,
    DESCRIBE_PRODUCERS: handle_describe_producers,
    WRITE_TXN_MARKERS: handle_write_txn_markers,
}
_ELSEWHERE = {FETCH, *GROUP_VERSIONS, *TRANSACTION_VERSIONS, *SASL_VERSIONS}  # the transport's
assert set(HANDLERS) | _ELSEWHERE == set(SUPPORTED_VERSIONS), "every served API has a handler"


class Broker:
    """Runs requests against the logs. Thread-safe: handlers share only the LogManager (which
    is) and the producer-id allocator (which locks)."""

    def __init__(self, context: BrokerContext) -> None:
        self.context = context

    def handle(self, request: Request) -> Any | None:
        """The response body; None when the request takes no response (Produce with acks=0).
        Fetch goes through ``fetch``."""
        return HANDLERS[request.api_key](self.context, request)

    def fetch(self, request: Request, *, final: bool = False) -> FetchResult:
        return handle_fetch(self.context, request, final=final)

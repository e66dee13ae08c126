"""The one door of ``kafkalog serve``: every API it answers, its versions, where its handler
runs, and the dispatch every request goes through (Kafka's ``KafkaApis``).

Why: a request is routed once, from one table; ApiVersions advertises exactly that table (a
client picks versions from it), and the checks every request must pass -- the SASL state of
its connection now, authorization later -- sit in ``KafkaApis.handle``, where no API can go
around them. Handlers stay plain functions of (context, request), or coroutines of a
coordinator, testable without a socket.

Refuses: a second dispatch table anywhere (the transport only moves bytes, the coordinators
only keep state), and letting a handler's unexpected exception out as anything but the close
of that request's connection.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.fetch_frame import FetchFrame
from kafkalog.protocol.wire import (
    InvalidRequestError,
    Request,
    api_versions_body,
    decode_request,
    encode_response,
    make,
    payload_module,
    unsupported_api_versions,
)
from kafkalog.server import (
    consumer_group_apis,
    group_apis,
    group_offsets,
    share_group_apis,
    txn_apis,
)
from kafkalog.server.acl_apis import handle_create_acls, handle_delete_acls, handle_describe_acls
from kafkalog.server.admin import (
    handle_delete_records,
    handle_describe_cluster,
    handle_describe_log_dirs,
    handle_offset_for_leader_epoch,
)
from kafkalog.server.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from kafkalog.server.configs import (
    handle_alter_configs,
    handle_describe_configs,
    handle_incremental_alter_configs,
)
from kafkalog.server.context import NO_THROTTLE, BrokerContext
from kafkalog.server.fetch import FetchResult, handle_fetch, handle_list_offsets
from kafkalog.server.metadata import (
    ANSWER_ON_THE_LOOP_BYTES,
    answers_on_the_loop,
    handle_create_partitions,
    handle_create_topics,
    handle_delete_topics,
    handle_metadata,
)
from kafkalog.server.principal import Peer
from kafkalog.server.produce import APPEND_ON_THE_LOOP_BYTES, appends_on_the_loop, handle_produce
from kafkalog.server.purgatory import FETCH_ON_THE_LOOP_BYTES, FetchPurgatory
from kafkalog.server.quota_apis import handle_alter_client_quotas, handle_describe_client_quotas
from kafkalog.server.quotas import throttle_request
from kafkalog.server.sasl import SaslSession, illegal_state
from kafkalog.server.scram_apis import (
    handle_alter_user_scram_credentials,
    handle_describe_user_scram_credentials,
)
from kafkalog.server.txn_implicit import (
    API_VERSIONS_FEATURES,
    add_produced_partitions,
    client_transaction_version,
)
from kafkalog.server.txn_partitions import handle_describe_producers, handle_write_txn_markers

if TYPE_CHECKING:
    from kafkalog.coordinator.group_coordinator import GroupCoordinator
    from kafkalog.coordinator.txn_coordinator import TransactionCoordinator
    from kafkalog.server.share_fetch import ShareFetchHandler

logger = logging.getLogger("kafkalog.server")


class RunsOn(enum.Enum):
    """Where an API's handler runs."""

    WORKER = "worker"  # a function of (context, request) on a num.io.threads worker
    LOOP = "loop"  # a coroutine on the event loop (the coordinators' state lives there)
    CONNECTION = "connection"  # the connection's SASL session answers it
    PURGATORY = "purgatory"  # Fetch: on a worker, parked on the loop while it waits for data


@dataclass(frozen=True, slots=True)
class Api:
    key: ApiKey
    versions: tuple[int, int]  # lowest and highest served
    runs_on: RunsOn
    # WORKER: (context, request) -> body or None; LOOP: (apis, request) -> awaitable body
    handler: Callable[..., Any] | None = None


def handle_api_versions(ctx: BrokerContext, request: Request) -> Any:
    return api_versions_body(
        request.api_version,
        ErrorCode.none,
        SUPPORTED_VERSIONS,
        API_VERSIONS_FEATURES,
        throttle_time=NO_THROTTLE,
    )


def handle_init_producer_id(ctx: BrokerContext, request: Request) -> Any:
    """An idempotent producer's id (epoch 0), fresh on every call as Kafka's coordinator does
    for a producer without ``transactional.id`` (one with it goes to the coordinator), for a
    principal with IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679)."""
    mod = payload_module(ApiKey.INIT_PRODUCER_ID, request.api_version, True)
    if not ctx.allowed(
        request, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME
    ) and not ctx.allowed_on_some(request, AclOperation.WRITE, ResourceType.TOPIC):
        return make(
            mod, "InitProducerIdResponse", throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed, producer_id=-1, producer_epoch=-1,
        )  # fmt: skip
    return make(
        mod,
        "InitProducerIdResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        producer_id=ctx.producer_ids.generate(),
        producer_epoch=0,
    )


async def _init_producer_id(apis: KafkaApis, request: Request) -> Any:
    if request.body.transactional_id is not None:
        return await txn_apis.init_producer_id(apis.transactions, apis.context, request)
    return await apis.run(handle_init_producer_id, apis.context, request)


_W, _L = RunsOn.WORKER, RunsOn.LOOP
API_TABLE: tuple[Api, ...] = (
    Api(ApiKey.PRODUCE, (3, 12), _W, handle_produce),
    Api(ApiKey.FETCH, (4, 12), RunsOn.PURGATORY),
    Api(ApiKey.LIST_OFFSETS, (1, 11), _W, handle_list_offsets),
    Api(ApiKey.METADATA, (0, 12), _W, handle_metadata),
    Api(ApiKey.API_VERSIONS, (0, 4), _W, handle_api_versions),
    Api(ApiKey.CREATE_TOPICS, (2, 7), _W, handle_create_topics),
    Api(ApiKey.CREATE_PARTITIONS, (0, 3), _W, handle_create_partitions),
    Api(ApiKey.DELETE_TOPICS, (1, 6), _W, handle_delete_topics),
    Api(ApiKey.DELETE_RECORDS, (0, 2), _W, handle_delete_records),
    Api(ApiKey.OFFSET_FOR_LEADER_EPOCH, (2, 4), _W, handle_offset_for_leader_epoch),
    Api(ApiKey.DESCRIBE_LOG_DIRS, (1, 4), _W, handle_describe_log_dirs),
    Api(ApiKey.DESCRIBE_CLUSTER, (0, 1), _W, handle_describe_cluster),
    Api(ApiKey.DESCRIBE_CONFIGS, (1, 4), _W, handle_describe_configs),
    Api(ApiKey.ALTER_CONFIGS, (0, 2), _W, handle_alter_configs),
    Api(ApiKey.INCREMENTAL_ALTER_CONFIGS, (0, 1), _W, handle_incremental_alter_configs),
    Api(ApiKey.DESCRIBE_PRODUCERS, (0, 0), _W, handle_describe_producers),
    Api(ApiKey.WRITE_TXN_MARKERS, (1, 1), _W, handle_write_txn_markers),
    Api(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, (0, 0), _W, handle_describe_user_scram_credentials),
    Api(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, (0, 0), _W, handle_alter_user_scram_credentials),
    Api(ApiKey.DESCRIBE_ACLS, (1, 3), _W, handle_describe_acls),
    Api(ApiKey.CREATE_ACLS, (1, 3), _W, handle_create_acls),
    Api(ApiKey.DELETE_ACLS, (1, 3), _W, handle_delete_acls),
    Api(ApiKey.DESCRIBE_CLIENT_QUOTAS, (0, 1), _W, handle_describe_client_quotas),
    Api(ApiKey.ALTER_CLIENT_QUOTAS, (0, 1), _W, handle_alter_client_quotas),
    Api(ApiKey.INIT_PRODUCER_ID, (0, 4), _L, _init_producer_id),
    # the group coordinator
    Api(
        ApiKey.FIND_COORDINATOR,
        (0, 4),
        _L,
        lambda a, r: group_apis.find_coordinator(a.groups, a.context, r),
    ),
    Api(ApiKey.JOIN_GROUP, (0, 9), _L, lambda a, r: group_apis.join_group(a.groups, a.context, r)),
    Api(ApiKey.SYNC_GROUP, (0, 5), _L, lambda a, r: group_apis.sync_group(a.groups, a.context, r)),
    Api(ApiKey.HEARTBEAT, (0, 4), _L, lambda a, r: group_apis.heartbeat(a.groups, a.context, r)),
    Api(
        ApiKey.LEAVE_GROUP, (0, 5), _L, lambda a, r: group_apis.leave_group(a.groups, a.context, r)
    ),
    Api(
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
        (0, 1),
        _L,
        lambda a, r: consumer_group_apis.consumer_group_heartbeat(a.groups, a.context, r),
    ),
    Api(
        ApiKey.CONSUMER_GROUP_DESCRIBE,
        (0, 1),
        _L,
        lambda a, r: consumer_group_apis.consumer_group_describe(a.groups, a.context, r),
    ),
    Api(
        ApiKey.SHARE_GROUP_HEARTBEAT,
        (1, 1),
        _L,
        lambda a, r: share_group_apis.share_group_heartbeat(a.groups, a.context, r),
    ),
    Api(
        ApiKey.SHARE_GROUP_DESCRIBE,
        (1, 1),
        _L,
        lambda a, r: share_group_apis.share_group_describe(a.groups, a.context, r),
    ),
    Api(
        ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
        (0, 1),
        _L,
        lambda a, r: share_group_apis.describe_share_group_offsets(
            a.groups, a.share_fetch.partitions, a.context, r
        ),
    ),
    Api(
        ApiKey.ALTER_SHARE_GROUP_OFFSETS,
        (0, 0),
        _L,
        lambda a, r: share_group_apis.alter_share_group_offsets(
            a.groups, a.share_fetch.partitions, a.context, r
        ),
    ),
    Api(
        ApiKey.DELETE_SHARE_GROUP_OFFSETS,
        (0, 0),
        _L,
        lambda a, r: share_group_apis.delete_share_group_offsets(
            a.groups, a.share_fetch.partitions, a.context, r
        ),
    ),
    Api(ApiKey.SHARE_FETCH, (1, 1), _L, lambda a, r: a.share_fetch.share_fetch(r)),
    Api(ApiKey.SHARE_ACKNOWLEDGE, (1, 1), _L, lambda a, r: a.share_fetch.share_acknowledge(r)),
    Api(
        ApiKey.OFFSET_COMMIT,
        (2, 9),
        _L,
        lambda a, r: group_offsets.offset_commit(a.groups, a.context, r),
    ),
    Api(
        ApiKey.OFFSET_FETCH,
        (1, 9),
        _L,
        lambda a, r: group_offsets.offset_fetch(a.groups, a.context, r),
    ),
    Api(
        ApiKey.DESCRIBE_GROUPS,
        (0, 5),
        _L,
        lambda a, r: group_offsets.describe_groups(a.groups, a.context, r),
    ),
    Api(
        ApiKey.LIST_GROUPS,
        (0, 5),
        _L,
        lambda a, r: group_offsets.list_groups(a.groups, a.context, r),
    ),
    Api(
        ApiKey.DELETE_GROUPS,
        (0, 2),
        _L,
        lambda a, r: group_offsets.delete_groups(a.groups, a.context, r),
    ),
    Api(
        ApiKey.OFFSET_DELETE,
        (0, 0),
        _L,
        lambda a, r: group_offsets.offset_delete(a.groups, a.context, r),
    ),
    # the transaction coordinator
    Api(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        (0, 3),
        _L,
        lambda a, r: txn_apis.add_partitions_to_txn(a.transactions, a.context, r),
    ),
    Api(
        ApiKey.ADD_OFFSETS_TO_TXN,
        (0, 3),
        _L,
        lambda a, r: txn_apis.add_offsets_to_txn(a.transactions, a.context, r),
    ),
    Api(ApiKey.END_TXN, (0, 5), _L, lambda a, r: txn_apis.end_txn(a.transactions, a.context, r)),
    Api(
        ApiKey.TXN_OFFSET_COMMIT,
        (0, 5),
        _L,
        lambda a, r: txn_apis.txn_offset_commit(a.groups, a.transactions, a.context, r),
    ),
    Api(
        ApiKey.LIST_TRANSACTIONS,
        (0, 1),
        _L,
        lambda a, r: txn_apis.list_transactions(a.transactions, a.context, r),
    ),
    Api(
        ApiKey.DESCRIBE_TRANSACTIONS,
        (0, 0),
        _L,
        lambda a, r: txn_apis.describe_transactions(a.transactions, a.context, r),
    ),
    # the connection's SASL session
    Api(ApiKey.SASL_HANDSHAKE, (1, 1), RunsOn.CONNECTION),
    Api(ApiKey.SASL_AUTHENTICATE, (0, 2), RunsOn.CONNECTION),
)
APIS: dict[int, Api] = {api.key: api for api in API_TABLE}
# API key -> (lowest, highest) version served: what ApiVersions answers
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {api.key: api.versions for api in API_TABLE}
assert len(APIS) == len(API_TABLE), "an API is declared twice"


class Broker:
    """The WORKER and PURGATORY handlers over one context, without a loop (tests, and the
    workers of KafkaApis). Thread-safe: handlers share only the LogManager (which is) and the
    producer-id allocator (which locks)."""

    def __init__(self, context: BrokerContext) -> None:
        self.context = context

    def handle(self, request: Request) -> Any | None:
        """The response body; None when the request takes no response (Produce with acks=0)."""
        api = APIS[request.api_key]
        if api.runs_on is not RunsOn.WORKER or api.handler is None:
            raise ValueError(f"API {api.key.name} runs on {api.runs_on.value}, not a worker")
        return api.handler(self.context, request)

    def fetch(self, request: Request, *, final: bool = False) -> FetchResult:
        return handle_fetch(self.context, request, final=final)


def _adds_partitions(api: Api, frame: bytes) -> bool:
    """Whether ``frame`` is a Produce of a version whose transactional batches add their
    partitions to the transaction (it is then decoded before it goes to a worker)."""
    if api.key is not ApiKey.PRODUCE or not client_transaction_version(
        ApiKey.PRODUCE, int.from_bytes(frame[2:4], "big")
    ):
        return False
    # header v2: key, version, correlation id, client id (int16-sized), tagged fields; then
    # the transactional id, a compact nullable string (0: null). Unsure: decode and see.
    client_id = int.from_bytes(frame[8:10], "big", signed=True)
    at = 10 + max(client_id, 0)
    return len(frame) <= at + 1 or frame[at] != 0 or frame[at + 1] != 0


class AuthenticationFailedError(ConnectionError):
    """A client failed SASL: its connection is closed once ``response`` is sent."""

    def __init__(self, response: bytes) -> None:
        super().__init__("SASL authentication failed")
        self.response = response


_NO_PEER = Peer()


def _api_of(frame: bytes) -> Api | None:
    """The API a frame's header names, if this broker serves it."""
    return APIS.get(int.from_bytes(frame[:2], "big", signed=True)) if len(frame) > 2 else None


class AnswerLater:
    """A request the event loop cannot answer at once: its connection awaits
    ``KafkaApis.handle`` for it, in turn (with ``request`` if it is already decoded)."""

    __slots__ = ("request",)

    def __init__(self, request: Request | None = None) -> None:
        self.request = request


_LATER = AnswerLater()


def _not_muted(ms: int) -> None:
    """A caller outside a connection: nothing to mute."""


class KafkaApis:
    """Every request enters here once its frame is cut: decoded, checked against its
    connection's state, run where its API runs, encoded. ``run`` runs a function on a
    ``num.io.threads`` worker."""

    def __init__(
        self,
        broker: Broker,
        groups: GroupCoordinator,
        transactions: TransactionCoordinator,
        purgatory: FetchPurgatory,
        run: Callable[..., Awaitable[Any]],
        share_fetch: ShareFetchHandler,
    ) -> None:
        self.broker = broker
        self.share_fetch = share_fetch
        self.context = broker.context
        self.groups = groups
        self.transactions = transactions
        self.purgatory = purgatory
        self.run = run

    def answer_now(
        self,
        frame: bytes,
        session: SaslSession | None,
        peer: Peer = _NO_PEER,
        throttled: Callable[[int], None] = _not_muted,
    ) -> bytes | AnswerLater | None:
        """The answer to a request the event loop answers without waiting (a Produce that
        appends on the loop, ``appends_on_the_loop``; a short Metadata of known topics,
        ``answers_on_the_loop``), here and now: its response frame, or
        None when it takes none (``acks=0``). Any other request: AnswerLater, for ``handle``
        to be awaited with it. Raises as ``handle`` does."""
        api = _api_of(frame)
        if api is not None and session is not None and not session.allows(api.key):
            state = "after" if session.authenticated else "before"
            raise InvalidRequestError(
                f"unexpected request of API {int(api.key)} {state} SASL authentication"
            )
        if api is None:
            return _LATER
        if api.key is ApiKey.PRODUCE and len(frame) <= APPEND_ON_THE_LOOP_BYTES:
            on_the_loop = appends_on_the_loop
        elif api.key is ApiKey.METADATA and len(frame) <= ANSWER_ON_THE_LOOP_BYTES:
            on_the_loop = answers_on_the_loop
        else:
            return _LATER
        request = decode_request(frame, SUPPORTED_VERSIONS, *self._who(session, peer))
        if not on_the_loop(self.context, request):
            return AnswerLater(request)
        return self._answer(request, len(frame), throttled)

    async def handle(
        self,
        frame: bytes,
        session: SaslSession | None,
        park: Callable[[], None],
        peer: Peer = _NO_PEER,
        throttled: Callable[[int], None] = _not_muted,
        request: Request | None = None,
    ) -> bytes | FetchFrame | None:
        """The response frame for one request frame from ``peer`` (None: the request takes
        none); its principal is the SASL login's once there is one. ``throttled`` is told how
        long (ms) the connection is to be muted when a client quota throttles the request.
        ``session`` is the connection's SASL state (None on a listener without SASL); ``park``
        tells the connection its request waits without a request slot; ``request`` is the
        frame already decoded, if ``answer_now`` decoded it. Raises InvalidRequestError for a
        request that must close the connection, and AuthenticationFailedError once a failed
        login's answer is ready."""
        if request is None:  # not seen by answer_now yet: the SASL check and the loop's Produce
            now = self.answer_now(frame, session, peer, throttled)
            if not isinstance(now, AnswerLater):
                return now
            request = now.request
        api = _api_of(frame)
        who = self._who(session, peer)
        if request is None and api is not None and _adds_partitions(api, frame):
            request = await self.run(decode_request, frame, SUPPORTED_VERSIONS, *who)
        if request is not None:  # decoded by answer_now (not for the loop), or above
            adds = None
            if request.api_key == ApiKey.PRODUCE and request.body is not None:
                adds = await add_produced_partitions(self.transactions, self.context, request)
            answer: bytes | None = await self.run(
                self._answer, request, len(frame), throttled, adds
            )
            return answer
        if api is not None and api.runs_on is RunsOn.WORKER:
            # decoded, handled and encoded in one trip to a worker: each trip costs the GIL a
            # thread hand-off in both directions, a large share of a small request's time
            response: bytes | None = await self.run(self._on_worker, frame, who, throttled)
            return response
        if api is not None and api.runs_on is RunsOn.PURGATORY:
            return await self.purgatory.fetch(
                functools.partial(decode_request, frame, SUPPORTED_VERSIONS, *who),
                park,
                throttled,
                on_the_loop=len(frame) <= FETCH_ON_THE_LOOP_BYTES,
            )
        request = await self.run(decode_request, frame, SUPPORTED_VERSIONS, *who)
        api = APIS[request.api_key]
        if api.runs_on is RunsOn.CONNECTION:
            if session is None:
                return encode_response(request, illegal_state(request))
            outcome = session.handle(request)
            answer = encode_response(request, outcome.body)
            if outcome.close:
                raise AuthenticationFailedError(answer)
            return answer
        assert api.handler is not None
        body = await api.handler(self, request)
        return encode_response(request, self._throttle(request, body, 0, 0, throttled))

    @staticmethod
    def _who(session: SaslSession | None, peer: Peer) -> tuple[str, str, str, str]:
        if session is not None and session.principal is not None:
            return (peer.listener, f"User:{session.principal}", peer.host, peer.connection_id)
        return (peer.listener, peer.principal, peer.host, peer.connection_id)

    def connection_closed(self, connection_id: str) -> None:
        """A client's connection went: its share sessions end with it (Kafka's
        ShareSessionCache disconnect listener)."""
        self.share_fetch.connection_closed(connection_id)

    def _on_worker(
        self, frame: bytes, who: tuple[str, str, str], throttled: Callable[[int], None]
    ) -> bytes | None:
        request = decode_request(frame, SUPPORTED_VERSIONS, *who)
        if request.body is None:  # an ApiVersions request of a version this broker lacks
            return unsupported_api_versions(request, SUPPORTED_VERSIONS)
        return self._answer(request, len(frame), throttled)

    def _answer(
        self,
        request: Request,
        size: int,
        throttled: Callable[[int], None],
        adds: dict[tuple[str, int], ErrorCode] | None = None,
    ) -> bytes | None:
        """Handle and encode ``request`` on this thread; ``adds``: a transaction version 2
        Produce's partitions whose implicit add to the transaction failed, and how."""
        handle: Callable[[Request], Any] = (
            self.broker.handle
            if not adds
            else functools.partial(handle_produce, self.context, adds=adds)
        )
        if not self.context.quotas.enabled:  # the common case: no clock reads
            body = handle(request)
        else:
            started = time.perf_counter_ns()
            body = handle(request)
            spent = time.perf_counter_ns() - started
            body = self._throttle(request, body, size, spent, throttled)
        return None if body is None else encode_response(request, body)

    def _throttle(
        self,
        request: Request,
        body: Any,
        size: int,
        spent_ns: int,
        throttled: Callable[[int], None],
    ) -> Any:
        """The body with the throttle time the client's quotas ask for (Kafka's
        ClientQuotaManager: request time against ``request_percentage``, a Produce's bytes
        against ``producer_byte_rate``), and the connection muted that long."""
        ms = throttle_request(self.context, request, size, spent_ns)
        if ms > 0:
            throttled(ms)
            if body is not None and hasattr(body, "throttle_time"):
                body = dataclasses.replace(body, throttle_time=datetime.timedelta(milliseconds=ms))
        return body

"""What every request handler may use: the logs, the broker's settings, the producer-id
allocator, and what it tells the transport after an append.

Why: handlers are plain functions of (context, request), testable without a socket or a loop;
this object is the one thing they share. Refuses: I/O of its own (the handlers call the
LogManager, which owns the files) and any notion of connections.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kafkalog.coordinator.assignors import RANGE, UNIFORM
from kafkalog.coordinator.consumer_groups import assignor_names
from kafkalog.errors import InvalidConfigError
from kafkalog.manager.server_config import ServerConfig
from kafkalog.server.authorizer import (
    SUPPORTED_OPERATIONS,
    AclOperation,
    ResourceType,
    StandardAuthorizer,
)
from kafkalog.server.quotas import QuotaManager
from kafkalog.server.security import SECURITY_PROTOCOLS, ListenerSecurity, listener_security

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from kio.schema.errors import ErrorCode

    from kafkalog.manager import LogManager
    from kafkalog.protocol.wire import Request
    from kafkalog.server.producer_ids import ProducerIdManager
    from kafkalog.server.remote_reads import RemoteReaderPool

NO_THROTTLE = datetime.timedelta(0)
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)  # Kafka's "not requested" for authorized operations
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


ZERO_UUID = uuid.UUID(int=0)


@dataclass(frozen=True, slots=True)
class Listener:
    """One ``listeners`` entry: ``PLAINTEXT://host:port``."""

    security_protocol: str
    host: str
    port: int
    name: str = ""  # the listener's name (listener.name.<name>.* keys); the protocol if unnamed

    @classmethod
    def parse(cls, key: str, text: str, protocols: Mapping[str, str] | None = None) -> Listener:
        """``NAME://host:port``; the name's security protocol comes from
        ``listener.security.protocol.map`` (a name that is a protocol maps to itself)."""
        name, sep, address = text.partition("://")
        name = name.strip().upper()
        protocol = (protocols or {}).get(name, name)
        if not sep or not name:
            raise InvalidConfigError(key, f"{text!r} is not NAME://host:port")
        if protocol not in SECURITY_PROTOCOLS:
            raise InvalidConfigError(
                key, f"{text!r}: {protocol!r} is not one of {', '.join(SECURITY_PROTOCOLS)}"
            )
        host, colon, port = address.rpartition(":")
        if not colon or not port.isdigit() or int(port) > 65535:
            raise InvalidConfigError(key, f"{text!r} has no valid port (PLAINTEXT://host:port)")
        return cls(protocol, host.strip("[]"), int(port), name)

    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name or self.security_protocol}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class ServedListener:
    """One broker listener: the address it binds, the one it advertises (None: the bound
    one), and what its clients must do to be served."""

    bind: Listener
    advertised: Listener | None
    security: ListenerSecurity

    @property
    def name(self) -> str:
        return self.bind.name or self.bind.security_protocol


def _served_listeners(
    listeners: tuple[str, ...],
    advertised: tuple[str, ...],
    controller: set[str],
    protocols: Mapping[str, str],
    props: Mapping[str, Any],
) -> tuple[ServedListener, ...]:
    """``listeners`` less the controller's (kafkalog runs no KRaft controller), each with its
    ``advertised.listeners`` entry matched by name, as Kafka's KafkaConfig checks them: names
    unique, ports unique (but 0), and every advertised name a listener's."""
    served = [
        Listener.parse("listeners", text, protocols)
        for text in listeners
        if text.partition("://")[0].strip().upper() not in controller
    ]
    if not served:
        raise InvalidConfigError("listeners", "names no broker listener (only controller ones)")
    names = [listener.name for listener in served]
    if len(set(names)) != len(names):
        raise InvalidConfigError("listeners", f"each listener needs a name of its own: {names}")
    ports = [listener.port for listener in served if listener.port]
    if len(set(ports)) != len(ports):
        raise InvalidConfigError("listeners", f"each listener needs a port of its own: {ports}")
    shown = {
        entry.name: entry
        for entry in (Listener.parse("advertised.listeners", t, protocols) for t in advertised)
    }
    unknown = sorted(set(shown) - set(names))
    if unknown:
        raise InvalidConfigError(
            "advertised.listeners", f"names listeners that listeners does not: {unknown}"
        )
    return tuple(
        ServedListener(
            listener,
            shown.get(listener.name),
            listener_security(listener.security_protocol, listener.name, props),
        )
        for listener in served
    )


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    """The broker keys the protocol needs, parsed once from a ServerConfig."""

    node_id: int
    listeners: tuple[ServedListener, ...]  # the first is the one ``bootstrap_servers`` names
    auto_create_topics: bool
    num_partitions: int
    default_replication_factor: int
    max_request_bytes: int
    queued_max_requests: int
    io_threads: int
    offsets_partitions: int
    initial_rebalance_delay_ms: int
    min_session_timeout_ms: int
    max_session_timeout_ms: int
    offset_metadata_max_bytes: int
    offsets_retention_ms: int
    offsets_retention_check_interval_ms: int
    transaction_partitions: int = 50
    sasl_max_receive_size: int = 524288
    connections_max_idle_ms: int = 600_000
    fetch_session_cache_slots: int = 1000
    max_connections: int = 2**31 - 1
    max_connections_per_ip: int = 2**31 - 1
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    failed_authentication_delay_ms: int = 100
    transaction_max_timeout_ms: int = 900_000
    transaction_abort_interval_ms: int = 10_000
    authorizer: bool = False  # authorizer.class.name is Kafka's StandardAuthorizer
    super_users: tuple[str, ...] = ()
    allow_everyone_if_no_acl_found: bool = False
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5_000
    consumer_assignors: tuple[str, ...] = ("uniform", "range")
    consumer_max_size: int = 2**31 - 1
    consumer_migration_policy: str = "bidirectional"
    share_session_timeout_ms: int = 45_000
    share_heartbeat_interval_ms: int = 5_000
    share_max_size: int = 200
    share_max_sessions: int = 2000
    share_state_partitions: int = 50
    share_updates_per_snapshot: int = 500

    @classmethod
    def from_server_config(cls, config: ServerConfig) -> BrokerSettings:
        b = config.broker
        protocols = dict(
            item.split(":", 1) for item in b.listener_security_protocol_map if ":" in item
        )
        controller = {n.upper() for n in b.controller_listener_names} or {"CONTROLLER"}
        listeners = _served_listeners(
            b.listeners, b.advertised_listeners, controller, protocols, config.properties
        )
        authorizer = b.authorizer_class_name.strip()
        if authorizer not in ("", STANDARD_AUTHORIZER):
            raise InvalidConfigError(
                "authorizer.class.name",
                f"{authorizer!r}: kafkalog serve has {STANDARD_AUTHORIZER} (or none)",
            )
        return cls(
            node_id=b.node_id,
            listeners=listeners,
            auto_create_topics=b.auto_create_topics_enable,
            num_partitions=b.num_partitions,
            default_replication_factor=b.default_replication_factor,
            max_request_bytes=b.socket_request_max_bytes,
            queued_max_requests=b.queued_max_requests,
            io_threads=b.num_io_threads,
            offsets_partitions=b.offsets_topic_num_partitions,
            initial_rebalance_delay_ms=b.group_initial_rebalance_delay_ms,
            min_session_timeout_ms=b.group_min_session_timeout_ms,
            max_session_timeout_ms=b.group_max_session_timeout_ms,
            offset_metadata_max_bytes=b.offset_metadata_max_bytes,
            offsets_retention_ms=b.offsets_retention_minutes * 60_000,
            offsets_retention_check_interval_ms=b.offsets_retention_check_interval_ms,
            transaction_partitions=b.transaction_state_log_num_partitions,
            sasl_max_receive_size=b.sasl_server_max_receive_size,
            connections_max_idle_ms=b.connections_max_idle_ms,
            fetch_session_cache_slots=b.max_incremental_fetch_session_cache_slots,
            max_connections=b.max_connections,
            max_connections_per_ip=b.max_connections_per_ip,
            max_connections_per_ip_overrides=_per_ip_overrides(b.max_connections_per_ip_overrides),
            failed_authentication_delay_ms=b.connection_failed_authentication_delay_ms,
            transaction_max_timeout_ms=config.manager.producer_state.transaction_max_timeout_ms,
            transaction_abort_interval_ms=(
                config.manager.transaction_abort_timed_out_transaction_cleanup_interval_ms
            ),
            authorizer=bool(authorizer),
            super_users=tuple(u.strip() for u in b.super_users.split(";") if u.strip()),
            allow_everyone_if_no_acl_found=b.allow_everyone_if_no_acl_found,
            quota_window_num=b.quota_window_num,
            quota_window_size_seconds=b.quota_window_size_seconds,
            consumer_session_timeout_ms=b.group_consumer_session_timeout_ms,
            consumer_heartbeat_interval_ms=b.group_consumer_heartbeat_interval_ms,
            consumer_assignors=_assignors(b.group_consumer_assignors),
            consumer_max_size=b.group_consumer_max_size,
            consumer_migration_policy=b.group_consumer_migration_policy.lower(),
            share_session_timeout_ms=b.group_share_session_timeout_ms,
            share_heartbeat_interval_ms=b.group_share_heartbeat_interval_ms,
            share_max_size=b.group_share_max_size,
            share_max_sessions=b.group_share_max_share_sessions,
            share_state_partitions=b.share_coordinator_state_topic_num_partitions,
            share_updates_per_snapshot=b.share_coordinator_snapshot_update_records_per_snapshot,
        )


def _assignors(values: tuple[str, ...]) -> tuple[str, ...]:
    """``group.consumer.assignors`` by short name; one kafkalog does not have is refused."""
    names = assignor_names(values)
    unknown = [n for n in names if n not in (UNIFORM, RANGE)]
    if unknown or not names:
        raise InvalidConfigError(
            "group.consumer.assignors",
            f"{', '.join(unknown) or 'none'}: kafkalog has uniform and range",
        )
    return names


def _per_ip_overrides(items: tuple[str, ...]) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count`` items (the count after the last
    colon, so an IPv6 address keeps its own)."""
    out = {}
    for item in items:
        host, colon, count = item.strip().rpartition(":")
        if not colon or not host or not count.isdigit():
            raise InvalidConfigError(
                "max.connections.per.ip.overrides", f"{item!r} is not host:count"
            )
        out[host.strip("[]")] = int(count)
    return out


class TransactionVerifier(Protocol):
    """The transaction coordinator, as Produce sees it (txn_coordinator.verified)."""

    def verified(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: tuple[str, int]
    ) -> AbstractContextManager[ErrorCode]: ...


class BrokerContext:
    """The state request handlers share. ``advertised`` holds each listener's advertised
    address, completed once its socket is bound (port 0 becomes the port the OS chose).
    ``on_append`` is called, from whichever thread appended, with the (topic, partition)
    pairs a produce or a transaction marker wrote to, so the fetches waiting on them wake
    (and with a deleted topic's, so that they answer its error at once)."""

    def __init__(
        self,
        manager: LogManager,
        settings: BrokerSettings,
        producer_ids: ProducerIdManager,
        cluster_id: str,
    ) -> None:
        self.manager = manager
        self.settings = settings
        self.broker_properties: Mapping[str, Any] = {}  # server.properties and overrides
        self.producer_ids = producer_ids
        self.cluster_id = cluster_id
        # by listener name; a port 0 becomes the bound port once the transport listens
        self.advertised: dict[str, Listener] = {
            served.name: served.advertised or served.bind for served in settings.listeners
        }
        self.on_append: Callable[[Iterable[tuple[str, int]]], None] = lambda partitions: None
        self.transactions: TransactionVerifier | None = None  # set when a coordinator runs
        self.scram_credentials: Mapping[tuple[str, str], Any] = {}  # scram_store's, at start
        # authorizer.class.name's: None authorizes everything, as Kafka without an authorizer
        self.authorizer: StandardAuthorizer | None = None
        # tiered storage's remote reads (remote.log.reader.threads), when it is on
        self.remote_reader: RemoteReaderPool | None = None
        self.quotas = QuotaManager(
            samples=settings.quota_window_num, window_seconds=settings.quota_window_size_seconds
        )  # the client quotas (quotas.py); serve loads them at start

    def allowed(
        self, request: Request, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        """Whether the request's principal, from its host, may do ``operation`` on the
        resource (Kafka's AuthHelper.authorize)."""
        authorizer = self.authorizer
        return authorizer is None or authorizer.authorize(
            request.principal, request.client_host, operation, resource_type, name
        )

    def allowed_on_some(
        self, request: Request, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether the principal may do ``operation`` on some resource of the type
        (AuthHelper.authorizeByResourceType)."""
        authorizer = self.authorizer
        return authorizer is None or authorizer.authorize_by_resource_type(
            request.principal, request.client_host, operation, resource_type
        )

    def authorized_operations(
        self, request: Request, requested: bool, resource_type: ResourceType, name: str
    ) -> int:
        """The KIP-430 ``*_authorized_operations`` bit field of the request's principal on
        the resource, or Kafka's "omitted" sentinel when the request did not ask; without an
        authorizer, everything the resource type offers."""
        if not requested:
            return AUTHORIZED_OPERATIONS_OMITTED
        authorizer = self.authorizer
        if authorizer is None:
            return sum(1 << op for op in SUPPORTED_OPERATIONS[resource_type])
        return authorizer.authorized_operations(
            request.principal, request.client_host, resource_type, name
        )

    def advertised_for(self, listener: str) -> Listener:
        """The address a client that came in through ``listener`` is told to use (Kafka
        answers Metadata and FindCoordinator with the endpoints of the request's listener);
        the first listener's for a request that names none (a handler called in a test)."""
        found = self.advertised.get(listener)
        return found if found is not None else next(iter(self.advertised.values()))

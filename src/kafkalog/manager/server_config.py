"""ServerConfig: a broker's ``server.properties``, read for the keys that concern logs (Kafka's
KafkaConfig, ServerLogConfigs and ServerTopicConfigSynonyms).

Why: a team moving from a Kafka broker brings its ``server.properties``: ``log.dirs``, the broker
defaults for every topic (``log.retention.hours``, ``log.segment.bytes``, ...),
``num.partitions``, ``log.cleaner.*``. Each topic key takes its broker default from the first of
its synonyms that is set (``log.retention.ms``, else ``.minutes``, else ``.hours``), a topic's own
override beats that default, and an ``--override key=value`` (as ``kafka-server-start.sh``
takes) beats the file. Refuses: acting on keys that concern a cluster kafkalog is not
(``process.roles``, ``controller.quorum.voters``, ...): Kafka logs "supplied but not
used" for such keys, and so does this, naming them; a malformed value of a key it does use is
an error naming that key.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafkalog.cleaner.config import CLEANER_CONFIG
from kafkalog.config_def import (
    ConfigDef,
    ConfigKey,
    Type,
    at_least,
    check_mapping,
    define,
    load_properties,
    one_of,
)
from kafkalog.log.config import TOPIC_CONFIG, LogConfig
from kafkalog.log.producer_state_manager import PRODUCER_STATE_CONFIG
from kafkalog.manager.config import MANAGER_CONFIG, ManagerConfig
from kafkalog.manager.remote_log_config import REMOTE_LOG_MANAGER_CONFIG

logger = logging.getLogger("kafkalog.manager")

_HOURS, _MINUTES = 3_600_000, 60_000

# topic key -> its broker synonyms, first set wins, with the factor that makes milliseconds
# (ServerTopicConfigSynonyms.ALL_TOPIC_CONFIG_SYNONYMS)
TOPIC_CONFIG_SYNONYMS: dict[str, tuple[tuple[str, int], ...]] = {
    "segment.bytes": (("log.segment.bytes", 1),),
    "segment.ms": (("log.roll.ms", 1), ("log.roll.hours", _HOURS)),
    "segment.jitter.ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", _HOURS)),
    "segment.index.bytes": (("log.index.size.max.bytes", 1),),
    "flush.messages": (("log.flush.interval.messages", 1),),
    "flush.ms": (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
    "retention.bytes": (("log.retention.bytes", 1),),
    "retention.ms": (
        ("log.retention.ms", 1),
        ("log.retention.minutes", _MINUTES),
        ("log.retention.hours", _HOURS),
    ),
    "max.message.bytes": (("message.max.bytes", 1),),
    "index.interval.bytes": (("log.index.interval.bytes", 1),),
    "delete.retention.ms": (("log.cleaner.delete.retention.ms", 1),),
    "min.compaction.lag.ms": (("log.cleaner.min.compaction.lag.ms", 1),),
    "max.compaction.lag.ms": (("log.cleaner.max.compaction.lag.ms", 1),),
    "file.delete.delay.ms": (("log.segment.delete.delay.ms", 1),),
    "min.cleanable.dirty.ratio": (("log.cleaner.min.cleanable.ratio", 1),),
    "cleanup.policy": (("log.cleanup.policy", 1),),
    "unclean.leader.election.enable": (("unclean.leader.election.enable", 1),),
    "min.insync.replicas": (("min.insync.replicas", 1),),
    "compression.type": (("compression.type", 1),),
    "compression.gzip.level": (("compression.gzip.level", 1),),
    "compression.lz4.level": (("compression.lz4.level", 1),),
    "compression.zstd.level": (("compression.zstd.level", 1),),
    "preallocate": (("log.preallocate", 1),),
    "message.format.version": (("log.message.format.version", 1),),
    "message.timestamp.type": (("log.message.timestamp.type", 1),),
    "message.timestamp.before.max.ms": (("log.message.timestamp.before.max.ms", 1),),
    "message.timestamp.after.max.ms": (("log.message.timestamp.after.max.ms", 1),),
    "message.timestamp.difference.max.ms": (("log.message.timestamp.difference.max.ms", 1),),
    "message.downconversion.enable": (("log.message.downconversion.enable", 1),),
    "local.retention.ms": (("log.local.retention.ms", 1),),
    "local.retention.bytes": (("log.local.retention.bytes", 1),),
}
_SYNONYMS = {broker for synonyms in TOPIC_CONFIG_SYNONYMS.values() for broker, _ in synonyms}
# the broker keys a Kafka broker takes at run time as topic defaults (DynamicLogConfig's
# ReconfigurableConfigs): each topic key's first synonym (log.retention.ms, not .hours), but
# log.message.format.version's
DYNAMIC_TOPIC_DEFAULTS = frozenset(
    synonyms[0][0]
    for topic_key, synonyms in TOPIC_CONFIG_SYNONYMS.items()
    if topic_key != "message.format.version"
)


@dataclass(frozen=True)
class BrokerKeys:
    """The broker's own keys that are neither a topic default nor the log manager's."""

    log_dirs: tuple[str, ...] = define(
        "log.dirs", Type.LIST, (), "The log directories; log.dir when empty."
    )
    log_dir: str = define("log.dir", Type.STRING, "/tmp/kafka-logs", "The one log directory.")
    num_partitions: int = define(
        "num.partitions", Type.INT, 1, "Partitions of a topic created without a count.",
        at_least(1),
    )  # fmt: skip
    auto_create_topics_enable: bool = define(
        "auto.create.topics.enable", Type.BOOLEAN, True,
        "Create a topic on its first write (Spark sink) or metadata request (serve).",
    )  # fmt: skip
    default_replication_factor: int = define(
        "default.replication.factor", Type.INT, 1, "Kept; kafkalog keeps one replica.",
        at_least(1),
    )  # fmt: skip
    node_id: int = define(
        "node.id", Type.INT, 1, "The broker's id in Metadata responses (kafkalog serve).",
        at_least(0),
    )  # fmt: skip
    listeners: tuple[str, ...] = define(
        "listeners", Type.LIST, ("PLAINTEXT://127.0.0.1:9092",),
        "Where kafkalog serve listens: PLAINTEXT://host:port (port 0: any free port).",
    )  # fmt: skip
    controller_listener_names: tuple[str, ...] = define(
        "controller.listener.names", Type.LIST, (),
        "Listeners kafkalog serve skips (KRaft controllers'); CONTROLLER when empty.",
    )  # fmt: skip
    listener_security_protocol_map: tuple[str, ...] = define(
        "listener.security.protocol.map", Type.LIST, (),
        "NAME:PROTOCOL pairs; a listener named as a protocol needs none.",
    )  # fmt: skip
    advertised_listeners: tuple[str, ...] = define(
        "advertised.listeners", Type.LIST, (),
        "What Metadata tells clients to connect to; the listeners when empty.",
    )  # fmt: skip
    socket_request_max_bytes: int = define(
        "socket.request.max.bytes", Type.INT, 104857600,
        "The largest request frame; a larger one closes the connection.", at_least(1),
    )  # fmt: skip
    sasl_server_max_receive_size: int = define(
        "sasl.server.max.receive.size", Type.INT, 524288,
        "The largest frame a SASL listener reads before the client has authenticated.",
        at_least(1),
    )  # fmt: skip
    connections_max_idle_ms: int = define(
        "connections.max.idle.ms", Type.LONG, 600000,
        "A connection with no bytes in or out for this long is closed.", at_least(1),
    )  # fmt: skip
    max_incremental_fetch_session_cache_slots: int = define(
        "max.incremental.fetch.session.cache.slots", Type.INT, 1000,
        "Fetch sessions (KIP-227) kept at once; past it a new one may replace an idle or a "
        "smaller one, or the fetch goes on without a session.", at_least(0),
    )  # fmt: skip
    max_connections: int = define(
        "max.connections", Type.INT, 2147483647,
        "Connections kafkalog serve keeps open at once; one more is closed at once.",
        at_least(0),
    )  # fmt: skip
    max_connections_per_ip: int = define(
        "max.connections.per.ip", Type.INT, 2147483647,
        "Connections from one address at once; one more is closed at once.", at_least(0),
    )  # fmt: skip
    max_connections_per_ip_overrides: tuple[str, ...] = define(
        "max.connections.per.ip.overrides", Type.LIST, (),
        "host:count pairs that replace max.connections.per.ip for those addresses.",
    )  # fmt: skip
    connection_failed_authentication_delay_ms: int = define(
        "connection.failed.authentication.delay.ms", Type.INT, 100,
        "How long a connection that failed authentication waits before it is closed.",
        at_least(0),
    )  # fmt: skip
    queued_max_requests: int = define(
        "queued.max.requests", Type.INT, 500,
        "Requests read and not yet answered, across all connections, before reading pauses.",
        at_least(1),
    )  # fmt: skip
    offsets_topic_num_partitions: int = define(
        "offsets.topic.num.partitions", Type.INT, 50,
        "Partitions of __consumer_offsets (fixed once the topic exists).", at_least(1),
    )  # fmt: skip
    group_initial_rebalance_delay_ms: int = define(
        "group.initial.rebalance.delay.ms", Type.INT, 3000,
        "How long an empty group's first rebalance waits for more members.", at_least(0),
    )  # fmt: skip
    group_min_session_timeout_ms: int = define(
        "group.min.session.timeout.ms", Type.INT, 6000, "The shortest session timeout allowed.",
    )  # fmt: skip
    group_max_session_timeout_ms: int = define(
        "group.max.session.timeout.ms", Type.INT, 1800000, "The longest session timeout allowed.",
    )  # fmt: skip
    group_consumer_session_timeout_ms: int = define(
        "group.consumer.session.timeout.ms", Type.INT, 45000,
        "How long a consumer group member may go without a heartbeat (KIP-848).", at_least(1),
    )  # fmt: skip
    group_consumer_heartbeat_interval_ms: int = define(
        "group.consumer.heartbeat.interval.ms", Type.INT, 5000,
        "How often a consumer group member heartbeats (KIP-848).", at_least(1),
    )  # fmt: skip
    group_consumer_assignors: tuple[str, ...] = define(
        "group.consumer.assignors", Type.LIST, ("uniform", "range"),
        "The server-side assignors of consumer groups, the first the default (uniform, range;"
        " Kafka's class names are taken too).",
    )  # fmt: skip
    group_consumer_max_size: int = define(
        "group.consumer.max.size", Type.INT, 2**31 - 1,
        "The most members a consumer group may have.", at_least(1),
    )  # fmt: skip
    group_consumer_migration_policy: str = define(
        "group.consumer.migration.policy", Type.STRING, "bidirectional",
        "Whether a classic group with members may become a consumer group online (upgrade),"
        " the other way (downgrade), both, or neither (disabled).",
        one_of("disabled", "upgrade", "downgrade", "bidirectional", "DISABLED", "UPGRADE",
               "DOWNGRADE", "BIDIRECTIONAL"),
    )  # fmt: skip
    group_share_session_timeout_ms: int = define(
        "group.share.session.timeout.ms", Type.INT, 45000,
        "How long a share group member may go without a heartbeat (KIP-932).", at_least(1),
    )  # fmt: skip
    group_share_heartbeat_interval_ms: int = define(
        "group.share.heartbeat.interval.ms", Type.INT, 5000,
        "How often a share group member heartbeats (KIP-932).", at_least(1),
    )  # fmt: skip
    group_share_max_size: int = define(
        "group.share.max.size", Type.INT, 200,
        "The most members a share group may have.", at_least(1),
    )  # fmt: skip
    group_share_record_lock_duration_ms: int = define(
        "group.share.record.lock.duration.ms", Type.INT, 30000,
        "How long a share group member holds the records it acquired (KIP-932).", at_least(1000),
    )  # fmt: skip
    group_share_min_record_lock_duration_ms: int = define(
        "group.share.min.record.lock.duration.ms", Type.INT, 15000,
        "The shortest record lock a share group may set for itself.", at_least(1000),
    )  # fmt: skip
    group_share_max_record_lock_duration_ms: int = define(
        "group.share.max.record.lock.duration.ms", Type.INT, 60000,
        "The longest record lock a share group may set for itself.", at_least(1000),
    )  # fmt: skip
    group_share_delivery_count_limit: int = define(
        "group.share.delivery.count.limit", Type.INT, 5,
        "Deliveries of a record to a share group before it is archived.", at_least(2),
    )  # fmt: skip
    group_share_partition_max_record_locks: int = define(
        "group.share.partition.max.record.locks", Type.INT, 2000,
        "Records a share-partition may have in flight.", at_least(100),
    )  # fmt: skip
    group_share_max_share_sessions: int = define(
        "group.share.max.share.sessions", Type.INT, 2000,
        "The most share sessions the broker keeps.", at_least(1),
    )  # fmt: skip
    share_coordinator_state_topic_num_partitions: int = define(
        "share.coordinator.state.topic.num.partitions", Type.INT, 50,
        "Partitions of __share_group_state (fixed once the topic exists).", at_least(1),
    )  # fmt: skip
    share_coordinator_snapshot_update_records_per_snapshot: int = define(
        "share.coordinator.snapshot.update.records.per.snapshot", Type.INT, 500,
        "ShareUpdate records written for a share-partition before a new ShareSnapshot.",
        at_least(0),
    )  # fmt: skip
    offsets_retention_minutes: int = define(
        "offsets.retention.minutes", Type.INT, 10080,
        "How long an empty group's committed offsets are kept (KIP-211).", at_least(1),
    )  # fmt: skip
    offsets_retention_check_interval_ms: int = define(
        "offsets.retention.check.interval.ms", Type.LONG, 600000,
        "How often committed offsets are checked for expiry.", at_least(1),
    )  # fmt: skip
    offset_metadata_max_bytes: int = define(
        "offset.metadata.max.bytes", Type.INT, 4096,
        "The longest metadata string of a committed offset.", at_least(0),
    )  # fmt: skip
    transaction_state_log_num_partitions: int = define(
        "transaction.state.log.num.partitions", Type.INT, 50,
        "Partitions of __transaction_state (fixed once the topic exists).", at_least(1),
    )  # fmt: skip
    num_io_threads: int = define(
        "num.io.threads", Type.INT, 8, "Threads that run storage work for kafkalog serve.",
        at_least(1),
    )  # fmt: skip
    authorizer_class_name: str = define(
        "authorizer.class.name", Type.STRING, "",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer checks ACLs; empty: none.",
    )  # fmt: skip
    super_users: str = define(
        "super.users", Type.STRING, "",
        "Principals the authorizer allows everything, separated by ';' (User:admin;User:ops).",
    )  # fmt: skip
    quota_window_num: int = define(
        "quota.window.num", Type.INT, 11, "Samples a client quota's rate is measured over.",
        at_least(1),
    )  # fmt: skip
    quota_window_size_seconds: int = define(
        "quota.window.size.seconds", Type.INT, 1, "Seconds each client quota sample spans.",
        at_least(1),
    )  # fmt: skip
    allow_everyone_if_no_acl_found: bool = define(
        "allow.everyone.if.no.acl.found", Type.BOOLEAN, False,
        "Whether a resource no ACL names is open to every principal.",
    )  # fmt: skip


BROKER_KEYS = ConfigDef.of(BrokerKeys)
# read by kafkalog serve's listener security from the raw properties (server.security)
_SECURITY_PREFIXES = ("ssl.", "sasl.", "listener.name.")


@dataclass(frozen=True)
class ServerConfig:
    """What a ``server.properties`` says about logs: where they live, the defaults of every
    topic, the log manager's tasks and cleaner, and the keys it did not use."""

    broker: BrokerKeys = field(default_factory=BrokerKeys)
    log_defaults: LogConfig = field(default_factory=LogConfig)
    manager: ManagerConfig = field(default_factory=ManagerConfig)
    unused: tuple[str, ...] = ()
    properties: Mapping[str, Any] = field(default_factory=dict, compare=False)  # as given

    @property
    def log_dirs(self) -> list[Path]:
        return [Path(d) for d in (self.broker.log_dirs or [self.broker.log_dir])]

    @classmethod
    def from_properties(
        cls, props: Mapping[str, Any] | str | Path, overrides: Mapping[str, Any] | None = None
    ) -> ServerConfig:
        """From a ``server.properties`` file (or a mapping), then ``overrides`` on top."""
        if not isinstance(props, str | Path):
            check_mapping("server properties", props)
        check_mapping("overrides", overrides or {})
        merged = dict(load_properties(props) if isinstance(props, str | Path) else props)
        merged.update(overrides or {})
        broker, manager, unused = {}, {}, []
        for key, value in merged.items():
            if key in BROKER_KEYS.keys:
                broker[key] = value
            elif (
                key in MANAGER_CONFIG.keys
                or key in CLEANER_CONFIG.keys
                or key in PRODUCER_STATE_CONFIG.keys
                or key in REMOTE_LOG_MANAGER_CONFIG.keys
            ):
                manager[key] = value
            elif key not in _SYNONYMS and not key.startswith(_SECURITY_PREFIXES):
                unused.append(key)
        if unused:
            logger.warning(
                "these configs were supplied but are not used by kafkalog: %s", ", ".join(unused)
            )
        return cls(
            broker=BrokerKeys(**BROKER_KEYS.parse(broker, unknown="unknown broker key")),
            log_defaults=topic_defaults(merged),
            manager=ManagerConfig.from_properties(manager),
            unused=tuple(unused),
            properties=merged,
        )


def topic_defaults(broker_props: Mapping[str, Any]) -> LogConfig:
    """Every topic key's broker default: the first of its synonyms that is set, converted to
    the topic key's unit; Kafka's own default where none is. Not overrides of any topic."""
    return dataclasses.replace(LogConfig.from_properties(_topic_values(broker_props)), overrides={})


def under_dynamic_broker_configs(defaults: LogConfig, *layers: Mapping[str, Any]) -> LogConfig:
    """``defaults`` (``server.properties``' or the caller's) under dynamic broker configs,
    lowest layer first: the cluster-wide default, then the broker's own, as Kafka's
    DynamicBrokerConfig stacks them. A dynamic key replaces its synonyms below it, so a topic
    key takes its value from the highest layer that sets any of its synonyms. Keys outside
    DYNAMIC_TOPIC_DEFAULTS are not taken."""
    values: dict[str, Any] = {}
    for layer in layers:
        values.update(
            _topic_values({k: v for k, v in layer.items() if k in DYNAMIC_TOPIC_DEFAULTS})
        )
    if not values:
        return defaults
    return dataclasses.replace(LogConfig.from_properties(values, defaults=defaults), overrides={})


def _topic_values(broker_props: Mapping[str, Any]) -> dict[str, Any]:
    """Topic key -> its value in the topic key's unit, for each topic key one of whose broker
    synonyms ``broker_props`` sets (the first set wins)."""
    values: dict[str, Any] = {}
    for topic_key, synonyms in TOPIC_CONFIG_SYNONYMS.items():
        for broker_key, factor in synonyms:
            if broker_key not in broker_props:
                continue
            value: Any = broker_props[broker_key]
            if factor != 1:
                number = _long(broker_key, value)
                # a negative retention in minutes or hours means "forever", as -1 ms does
                value = -1 if number < 0 and topic_key == "retention.ms" else number * factor
            # parsed under the broker key's name, so an error names what the file says
            dataclasses.replace(TOPIC_CONFIG.keys[topic_key], name=broker_key).parse(value)
            values[topic_key] = value
            break
    return values


def _long(key: str, value: Any) -> int:
    return int(ConfigKey(key, Type.LONG, 0, None, "").parse(value))

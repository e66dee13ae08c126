"""The per-group configs a Kafka 4 broker describes (Kafka's GroupConfig, KIP-848, KIP-932,
KIP-1071): each key, the broker key that gives its default, and that default.

Why: ``kafka-configs --entity-type groups --describe --all`` and DescribeConfigs on a GROUP
resource answer every group with these keys, whether or not the group exists, each taken from
its broker key (``consumer.session.timeout.ms`` from ``group.consumer.session.timeout.ms``).
The table is Kafka 4.3.1's, as its broker describes a group. Refuses: storing per-group
values (Kafka keeps them in its metadata log; kafkalog runs the classic protocol, which reads
none of them) and any wire type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafkalog.config_def import ConfigKey, Type

INT, STRING, BOOLEAN = Type.INT, Type.STRING, Type.BOOLEAN


def _key(name: str, type_: Type, default: Any, doc: str) -> ConfigKey:
    return ConfigKey(name, type_, default, None, doc)


# group key -> (the broker key of its default, the key); the broker key is the group key's
# own name where Kafka has no group.-prefixed broker key for it
GROUP_CONFIG: dict[str, tuple[str, ConfigKey]] = {
    key.name: (broker, key)
    for broker, key in (
        ("group.consumer.assignment.interval.ms",
         _key("consumer.assignment.interval.ms", INT, 1000,
              "How often a consumer group's assignment is recomputed.")),
        ("group.consumer.heartbeat.interval.ms",
         _key("consumer.heartbeat.interval.ms", INT, 5000,
              "The heartbeat interval given to a consumer group's members.")),
        ("group.consumer.session.timeout.ms",
         _key("consumer.session.timeout.ms", INT, 45000,
              "How long a consumer group member may go without a heartbeat.")),
        ("group.share.assignment.interval.ms",
         _key("share.assignment.interval.ms", INT, 1000,
              "How often a share group's assignment is recomputed.")),
        ("share.auto.offset.reset",
         _key("share.auto.offset.reset", STRING, "latest",
              "Where a share group starts on a partition without a position.")),
        ("group.share.delivery.count.limit",
         _key("share.delivery.count.limit", INT, 5,
              "Deliveries of a record to a share group before it is archived.")),
        ("group.share.heartbeat.interval.ms",
         _key("share.heartbeat.interval.ms", INT, 5000,
              "The heartbeat interval given to a share group's members.")),
        ("share.isolation.level",
         _key("share.isolation.level", STRING, "read_uncommitted",
              "Whether a share group reads transactional records before their commit.")),
        ("group.share.partition.max.record.locks",
         _key("share.partition.max.record.locks", INT, 2000,
              "Records of a partition a share group may hold acquired at once.")),
        ("group.share.record.lock.duration.ms",
         _key("share.record.lock.duration.ms", INT, 30000,
              "How long a share group member holds a record it acquired.")),
        ("share.renew.acknowledge.enable",
         _key("share.renew.acknowledge.enable", BOOLEAN, True,
              "Whether a share group member may renew its acquisition of a record.")),
        ("group.share.session.timeout.ms",
         _key("share.session.timeout.ms", INT, 45000,
              "How long a share group member may go without a heartbeat.")),
        ("group.streams.assignment.interval.ms",
         _key("streams.assignment.interval.ms", INT, 1000,
              "How often a streams group's assignment is recomputed.")),
        ("group.streams.heartbeat.interval.ms",
         _key("streams.heartbeat.interval.ms", INT, 5000,
              "The heartbeat interval given to a streams group's members.")),
        ("group.streams.initial.rebalance.delay.ms",
         _key("streams.initial.rebalance.delay.ms", INT, 3000,
              "How long a new streams group waits for members before its first assignment.")),
        ("group.streams.num.standby.replicas",
         _key("streams.num.standby.replicas", INT, 0,
              "Standby replicas of each task of a streams group.")),
        ("group.streams.session.timeout.ms",
         _key("streams.session.timeout.ms", INT, 45000,
              "How long a streams group member may go without a heartbeat.")),
    )
}  # fmt: skip


def group_config_default(name: str, broker_properties: Mapping[str, Any]) -> tuple[str, str]:
    """(broker key, value) that gives group key ``name`` its value: the broker's setting of
    that key, else Kafka's default, written as Kafka writes it."""
    broker, key = GROUP_CONFIG[name]
    value = broker_properties.get(broker, key.default)
    if isinstance(value, bool):
        return broker, str(value).lower()
    return broker, str(value)

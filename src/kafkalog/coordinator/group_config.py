"""The per-group configs a Kafka 4 broker describes (Kafka's GroupConfig, KIP-848, KIP-932,
KIP-1071): each key, the broker key that gives its default, and that default.

Why: ``kafka-configs --entity-type groups --describe --all`` and DescribeConfigs on a GROUP
resource answer every group with these keys, whether or not the group exists, each taken from
its broker key (``consumer.session.timeout.ms`` from ``group.consumer.session.timeout.ms``).
The table is Kafka 4.3.1's, as its broker describes a group.

A group's own values (``kafka-configs --entity-type groups --alter``) are checked here as
Kafka's GroupConfig checks them: known keys, each value of its type and range, the intervals
and timeouts within the broker's ``group.*.min/max`` bounds, a session longer than its
heartbeat. Refuses: storing them (the LogManager does) and any wire type.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from kafkalog.config_def import ConfigKey, Type, at_least, one_of
from kafkalog.errors import InvalidConfigError
from kafkalog.manager.config_ops import AlterConfigOp, AlterConfigOpType

INT, STRING, BOOLEAN = Type.INT, Type.STRING, Type.BOOLEAN


def _key(name: str, type_: Type, default: Any, doc: str) -> ConfigKey:
    return ConfigKey(name, type_, default, None, doc)


# GroupConfig's own validators (its CONFIG_DEF): a least value, or the values a string takes
_LEAST = {
    "consumer.session.timeout.ms": 1, "consumer.heartbeat.interval.ms": 1,
    "consumer.assignment.interval.ms": 0, "share.session.timeout.ms": 1,
    "share.heartbeat.interval.ms": 1, "share.record.lock.duration.ms": 1000,
    "share.delivery.count.limit": 2, "share.partition.max.record.locks": 100,
    "share.assignment.interval.ms": 0, "streams.session.timeout.ms": 1,
    "streams.heartbeat.interval.ms": 1, "streams.num.standby.replicas": 0,
    "streams.initial.rebalance.delay.ms": 0, "streams.assignment.interval.ms": 0,
}  # fmt: skip
_CHOICES = {"share.isolation.level": ("read_committed", "read_uncommitted")}
_BY_DURATION = re.compile(  # java.time.Duration.parse's form, after by_duration:
    r"by_duration:P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d{1,9})?S)?)?"
)

# group key -> the broker keys of its least and greatest value, with Kafka's defaults
# (GroupConfig.validateValues; None: no such bound)
_BOUNDS: dict[str, tuple[tuple[str, int] | None, tuple[str, int] | None]] = {
    "consumer.heartbeat.interval.ms": (("group.consumer.min.heartbeat.interval.ms", 5000),
                                       ("group.consumer.max.heartbeat.interval.ms", 15000)),
    "consumer.session.timeout.ms": (("group.consumer.min.session.timeout.ms", 45000),
                                    ("group.consumer.max.session.timeout.ms", 60000)),
    "consumer.assignment.interval.ms": (("group.consumer.min.assignment.interval.ms", 0),
                                        ("group.consumer.max.assignment.interval.ms", 15000)),
    "share.heartbeat.interval.ms": (("group.share.min.heartbeat.interval.ms", 5000),
                                    ("group.share.max.heartbeat.interval.ms", 15000)),
    "share.session.timeout.ms": (("group.share.min.session.timeout.ms", 45000),
                                 ("group.share.max.session.timeout.ms", 60000)),
    "share.record.lock.duration.ms": (("group.share.min.record.lock.duration.ms", 15000),
                                      ("group.share.max.record.lock.duration.ms", 60000)),
    "share.delivery.count.limit": (("group.share.min.delivery.count.limit", 2),
                                   ("group.share.max.delivery.count.limit", 10)),
    "share.partition.max.record.locks": (("group.share.min.partition.max.record.locks", 100),
                                         ("group.share.max.partition.max.record.locks", 4000)),
    "share.assignment.interval.ms": (("group.share.min.assignment.interval.ms", 0),
                                     ("group.share.max.assignment.interval.ms", 15000)),
    "streams.heartbeat.interval.ms": (("group.streams.min.heartbeat.interval.ms", 5000),
                                      ("group.streams.max.heartbeat.interval.ms", 15000)),
    "streams.session.timeout.ms": (("group.streams.min.session.timeout.ms", 45000),
                                   ("group.streams.max.session.timeout.ms", 60000)),
    "streams.num.standby.replicas": (None, ("group.streams.max.standby.replicas", 2)),
    "streams.assignment.interval.ms": (("group.streams.min.assignment.interval.ms", 0),
                                       ("group.streams.max.assignment.interval.ms", 15000)),
}  # fmt: skip


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


def altered_group_configs(
    current: Mapping[str, str], ops: Iterable[AlterConfigOp], *, replace: bool = False
) -> dict[str, str]:
    """A group's own values after ``ops``; ``replace``: the legacy AlterConfigs, whose SETs are
    the whole new set. InvalidConfigError (INVALID_CONFIG) for an unknown key or an APPEND or
    SUBTRACT (no group key is a list), in the controller's words."""
    out: dict[str, str] = {} if replace else dict(current)
    for op in ops:
        if op.name not in GROUP_CONFIG:
            raise InvalidConfigError(op.name, f"Unknown group config name: {op.name}")
        if op.op is AlterConfigOpType.DELETE:
            out.pop(op.name, None)
        elif op.op is AlterConfigOpType.SET and op.value is not None:
            out[op.name] = op.value
        elif op.op is AlterConfigOpType.SET:
            raise InvalidConfigError(op.name, f"Null value not supported for : {op.name}")
        else:
            raise InvalidConfigError(
                op.name, f"Can't {op.op.name} to key {op.name} because its type is not LIST."
            )
    return out


def check_group_configs(values: Mapping[str, str], broker_properties: Mapping[str, Any]) -> None:
    """InvalidConfigError, in Kafka's words, unless a group may hold ``values`` as its own
    (GroupConfig.validate, with the broker's bounds from ``broker_properties``)."""
    typed: dict[str, Any] = {}
    for name, (_, key) in GROUP_CONFIG.items():
        raw = values.get(name)
        if raw is None:
            typed[name] = key.default
            continue
        typed[name] = _parsed(name, key, raw)
    for name, (least, most) in _BOUNDS.items():
        for bound, word in ((least, "greater than or equal to"), (most, "less than or equal to")):
            if bound is None:
                continue
            broker_key, default = bound
            limit = int(broker_properties.get(broker_key, default))
            below = word.startswith("greater")
            if (typed[name] < limit) if below else (typed[name] > limit):
                raise InvalidConfigError(name, f"{name} must be {word} {broker_key}")
    for kind in ("consumer", "share", "streams"):
        session, heartbeat = f"{kind}.session.timeout.ms", f"{kind}.heartbeat.interval.ms"
        if typed[session] <= typed[heartbeat]:
            raise InvalidConfigError(session, f"{session} must be greater than {heartbeat}")


def _parsed(name: str, key: ConfigKey, raw: str) -> Any:
    def invalid(why: str) -> InvalidConfigError:
        return InvalidConfigError(name, f"Invalid value {raw} for configuration {name}: {why}")

    if key.type is INT:
        try:
            value = key.parse(raw)
        except InvalidConfigError:
            raise invalid("Not a number of type INT") from None
        least = _LEAST.get(name)
        if least is not None:
            try:
                at_least(least)(name, value)
            except InvalidConfigError:
                raise invalid(f"Value must be at least {least}") from None
        return value
    if key.type is BOOLEAN:
        try:
            return key.parse(raw)
        except InvalidConfigError:
            raise invalid("Expected value to be either true or false") from None
    if name == "share.auto.offset.reset":
        if raw not in ("latest", "earliest") and not _BY_DURATION.fullmatch(raw):
            raise invalid("String must be one of: latest, earliest, by_duration:PnDTnHnMn.nS")
        return raw
    choices = _CHOICES.get(name)
    if choices is not None:
        try:
            one_of(*choices)(name, raw)
        except InvalidConfigError:
            raise invalid(f"String must be one of: {', '.join(choices)}") from None
    return raw

"""Broker configs set at run time: Kafka's rules for altering them (ConfigAdminManager's
broker preprocessing and DynamicBrokerConfig.validateConfigs), as pure functions.

Why: ``kafka-configs --entity-type brokers --entity-name 1 --alter`` (one broker) and
``--entity-default`` (every broker) end in a new set of dynamic keys for that level, which
Kafka checks before it keeps them: the operations are applied as for any resource (APPEND and
SUBTRACT only on list keys, from Kafka's default when unset), then the resulting set must name
no key Kafka reads at start-up only, no SSL key without a listener prefix, no per-broker key
at the every-broker level, and values of each key's type and range. The answers are Kafka's
words, so a client sees what a Kafka broker would say. Refuses: persisting or applying
anything (the LogManager keeps the set; what it acts on is the topic defaults among them),
and the wire (the server turns a refusal into INVALID_REQUEST, as Kafka does).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

from kafkalog.errors import InvalidConfigError
from kafkalog.manager.config_ops import AlterConfigOp, applied
from kafkalog.manager.kafka_broker_keys import (
    CLUSTER_LEVEL_LISTENER_KEYS,
    DYNAMIC_BROKER_DEFAULTS,
    DYNAMIC_BROKER_KEYS,
    LISTENER_ONLY_KEYS,
    STATIC_BROKER_KEYS,
)
from kafkalog.types import INT32_MAX, INT64_MAX

_LISTENER_KEY = re.compile(r"listener\.name\.[^.]*\.(.*)")  # DynamicBrokerConfig's regex
_INTEGER = re.compile(r"[+-]?[0-9]+")
_INTEGER_TOPS = {"SHORT": 2**15 - 1, "INT": INT32_MAX, "LONG": INT64_MAX}


def base_name(key: str) -> str:
    """The key without a listener prefix (``listener.name.external.ssl.keystore.type``)."""
    found = _LISTENER_KEY.fullmatch(key)
    return found.group(1) if found else key


def altered_broker_configs(
    current: Mapping[str, str], ops: Iterable[AlterConfigOp], *, replace: bool = False
) -> dict[str, str]:
    """The level's dynamic keys after ``ops`` (ConfigAdminManager.prepareIncrementalConfigs);
    ``replace``: the legacy AlterConfigs, whose SETs are the whole new set. A duplicated key
    or APPEND/SUBTRACT on a key that is not a list is InvalidConfigError (INVALID_CONFIG)."""

    def list_default(name: str) -> str | None:
        known = DYNAMIC_BROKER_KEYS.get(base_name(name))
        if known is None and name not in STATIC_BROKER_KEYS:
            raise InvalidConfigError(name, f"Unknown config name: {name}")
        if known is None or known[0] != "LIST":
            return None
        return DYNAMIC_BROKER_DEFAULTS.get(base_name(name)) or ""

    return applied(current, ops, list_default, replace=replace)


def check_broker_configs(values: Mapping[str, str], *, per_broker: bool) -> None:
    """InvalidConfigError, in Kafka's words, unless a broker may hold ``values`` as its
    dynamic keys (``per_broker``) or as every broker's (DynamicBrokerConfig.validateConfigs)."""
    static = sorted(k for k in values if k in STATIC_BROKER_KEYS)
    if static:
        _refuse(static, "Cannot update these configs dynamically")
    unprefixed = sorted(k for k in values if k in LISTENER_ONLY_KEYS)
    if unprefixed:
        _refuse(
            unprefixed,
            "These security configs can be dynamically updated only per-listener using the "
            "listener prefix",
        )
    for key, value in values.items():
        _check_value(key, value)
    if not per_broker:
        only = sorted(k for k in values if _per_broker(k))
        if only:
            _refuse(only, "Cannot update these configs at default cluster level, broker id must "
                    "be specified")  # fmt: skip


def _per_broker(key: str) -> bool:
    base = base_name(key)
    if base != key:  # under a listener's prefix: per broker unless cluster-level
        return base not in CLUSTER_LEVEL_LISTENER_KEYS
    known = DYNAMIC_BROKER_KEYS.get(key)
    return known is not None and known[1]


def _refuse(keys: list[str], why: str) -> None:
    raise InvalidConfigError(keys[0], f"{why}: [{', '.join(keys)}]")


def _check_value(key: str, value: str) -> None:
    """DynamicConfig.Broker.validate: the value parses as the key's type and passes its
    validator; keys Kafka does not define are kept as given."""
    known = DYNAMIC_BROKER_KEYS.get(base_name(key))
    if known is None:
        return
    type_, _, rule = known

    def invalid(why: str) -> InvalidConfigError:
        return InvalidConfigError(key, f"Invalid value {value} for configuration {key}: {why}")

    text = value.strip()
    number: float | None = None
    if type_ in _INTEGER_TOPS:
        top = _INTEGER_TOPS[type_]
        if not _INTEGER.fullmatch(text) or not -top - 1 <= int(text) <= top:
            raise invalid(f"Not a number of type {type_}")
        number = int(text)
    elif type_ == "DOUBLE":
        try:
            number = float(text)
        except ValueError:
            raise invalid("Not a number of type DOUBLE") from None
        if math.isnan(number):
            raise invalid("Not a number of type DOUBLE")
    elif type_ == "BOOLEAN" and text.lower() not in ("true", "false"):
        raise invalid("Expected value to be either true or false")
    if rule is None:
        return
    if isinstance(rule[0], str):
        items = [v.strip() for v in text.split(",") if v.strip()] if type_ == "LIST" else [text]
        for item in items:
            if item not in rule:
                raise invalid(f"String must be one of: {', '.join(str(r) for r in rule)}")
        return
    assert number is not None
    low, high = rule[0], rule[1]
    if len(rule) == 3 and number == rule[2]:
        return
    if isinstance(low, int | float) and number < low:
        raise invalid(f"Value must be at least {low}")
    if isinstance(high, int | float) and number > high:
        raise invalid(f"Value must be no more than {high}")

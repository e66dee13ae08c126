"""Where a topic's config value comes from, in Kafka's words (DescribeConfigs' ConfigSource).

Why: ``kafka-configs --describe`` and ``AdminClient.describe_configs`` show, for each key,
its source and synonyms: the topic's own override, then the layers that set the key's broker
synonyms (a Kafka broker's run-time defaults, its own then every broker's, then
``server.properties``, then Kafka's own defaults of the broker keys), each under the broker key
that sets it. This follows Kafka's ConfigHelper to the letter, quirk included: the broker
layers are listed only from the first that sets the key's primary synonym, so a retention set
by ``log.retention.hours`` alone is described as DEFAULT_CONFIG, as Kafka describes it.
``kafkalog serve`` and ``kafkalog configs`` answer from this one place. Refuses: knowing where
the layers come from (the manager reads them) and the wire format (the server's).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafkalog.log.config import REMOVED_IN_KAFKA_4, LogConfig
from kafkalog.manager.server_config import TOPIC_CONFIG_SYNONYMS

# DescribeConfigsResponse.ConfigSource
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 2, 3
STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 4, 5
GROUP_CONFIG = 8  # a group's own value (Kafka 4's group configs)
SOURCE_NAMES = {
    DYNAMIC_TOPIC_CONFIG: "DYNAMIC_TOPIC_CONFIG",
    DYNAMIC_BROKER_CONFIG: "DYNAMIC_BROKER_CONFIG",
    DYNAMIC_DEFAULT_BROKER_CONFIG: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    STATIC_BROKER_CONFIG: "STATIC_BROKER_CONFIG",
    DEFAULT_CONFIG: "DEFAULT_CONFIG",
    GROUP_CONFIG: "GROUP_CONFIG",
}
_TOPIC_DEFAULTS = LogConfig().to_properties()


def _broker_defaults() -> dict[str, str]:
    """Kafka's defaults of the broker keys that are topic synonyms. Where a key has several
    (log.retention.ms, .minutes, .hours), Kafka gives only the last a default, in its unit."""
    out = {}
    for topic_key, synonyms in TOPIC_CONFIG_SYNONYMS.items():
        broker_key, factor = synonyms[-1]
        value = _TOPIC_DEFAULTS[topic_key]
        out[broker_key] = value if factor == 1 else str(int(value) // factor)
    return out


_BROKER_DEFAULTS = _broker_defaults()

Synonym = tuple[str, str | None, int]  # (name, value, source)


def topic_config_synonyms(
    name: str,
    overrides: Mapping[str, str],
    dynamic: tuple[Mapping[str, str], Mapping[str, str]],
    static: Mapping[str, Any],
) -> list[Synonym]:
    """The synonyms DescribeConfigs gives topic key ``name``, highest first; the first names
    its source, and none means DEFAULT_CONFIG. ``dynamic``: the run-time broker configs
    (every broker's, this broker's own); ``static``: ``server.properties``."""
    broker_keys = [key for key, _ in TOPIC_CONFIG_SYNONYMS.get(name, ())]
    synonyms = _layered(broker_keys, broker_keys[0] if broker_keys else "", dynamic, static)
    if name in overrides:
        synonyms.insert(0, (name, overrides[name], DYNAMIC_TOPIC_CONFIG))
    return synonyms


# the broker keys a broker resource is described with here: those that set topic defaults,
# but for the keys Kafka 4.0 removed
BROKER_TOPIC_DEFAULTS = sorted(
    key
    for topic_key, synonyms in TOPIC_CONFIG_SYNONYMS.items()
    if topic_key not in REMOVED_IN_KAFKA_4
    for key, _ in synonyms
)


# broker key -> (the topic key it sets the default of, its unit's factor to milliseconds)
TOPIC_KEY_OF = {
    broker_key: (topic_key, factor)
    for topic_key, synonyms in TOPIC_CONFIG_SYNONYMS.items()
    for broker_key, factor in synonyms
}


def broker_config_synonyms(
    key: str, dynamic: tuple[Mapping[str, str], Mapping[str, str]], static: Mapping[str, Any]
) -> list[Synonym]:
    """The synonyms DescribeConfigs gives broker key ``key`` (one of BROKER_TOPIC_DEFAULTS):
    the layers that set it or a key of its group (log.retention.ms, .minutes, .hours)."""
    group = [k for k, _ in TOPIC_CONFIG_SYNONYMS[TOPIC_KEY_OF[key][0]]]
    return _layered(group, key, dynamic, static)


def _layered(
    keys: list[str],
    primary: str,
    dynamic: tuple[Mapping[str, str], Mapping[str, str]],
    static: Mapping[str, Any],
) -> list[Synonym]:
    """Every layer's ``keys``, layer by layer, from the first that sets ``primary``."""
    every_broker, this_broker = dynamic
    layers = (
        (this_broker, DYNAMIC_BROKER_CONFIG),
        (every_broker, DYNAMIC_DEFAULT_BROKER_CONFIG),
        (static, STATIC_BROKER_CONFIG),
        (_BROKER_DEFAULTS, DEFAULT_CONFIG),
    )
    synonyms: list[Synonym] = [
        (key, str(layer[key]), source) for layer, source in layers for key in keys if key in layer
    ]
    while synonyms and synonyms[0][0] != primary:  # ConfigHelper's dropWhile
        synonyms.pop(0)
    return synonyms


def config_source(synonyms: list[Synonym]) -> int:
    return synonyms[0][2] if synonyms else DEFAULT_CONFIG

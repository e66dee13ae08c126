"""Where a topic's config value comes from, in Kafka's words (DescribeConfigs' ConfigSource).

Why: ``kafka-configs --describe --all`` and ``AdminClient.describe_configs`` show, for each
key, every layer that sets it, highest first: the topic's own override, a broker default a
Kafka broker was given at run time (its own, then every broker's), ``server.properties``, and
Kafka's default, each broker layer under the broker synonyms that set it (ConfigHelper's
order). ``kafkalog serve`` and ``kafkalog configs`` answer from this one place. Refuses: knowing
where the layers come from (the manager reads them) and the wire format (the server's).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafkalog.log.config import LogConfig
from kafkalog.manager.server_config import TOPIC_CONFIG_SYNONYMS

# DescribeConfigsResponse.ConfigSource
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 2, 3
STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 4, 5
SOURCE_NAMES = {
    DYNAMIC_TOPIC_CONFIG: "DYNAMIC_TOPIC_CONFIG",
    DYNAMIC_BROKER_CONFIG: "DYNAMIC_BROKER_CONFIG",
    DYNAMIC_DEFAULT_BROKER_CONFIG: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    STATIC_BROKER_CONFIG: "STATIC_BROKER_CONFIG",
    DEFAULT_CONFIG: "DEFAULT_CONFIG",
}
_KAFKA_DEFAULTS = LogConfig().to_properties()

Synonym = tuple[str, str | None, int]  # (name, value, source)


def topic_config_synonyms(
    name: str,
    overrides: Mapping[str, str],
    dynamic: tuple[Mapping[str, str], Mapping[str, str]],
    static: Mapping[str, Any],
) -> list[Synonym]:
    """Every layer that sets topic key ``name``, highest first; the first is its source.
    ``dynamic``: the run-time broker configs (every broker's, this broker's own);
    ``static``: ``server.properties``."""
    every_broker, this_broker = dynamic
    synonyms: list[Synonym] = []
    if name in overrides:
        synonyms.append((name, overrides[name], DYNAMIC_TOPIC_CONFIG))
    layers = (
        (this_broker, DYNAMIC_BROKER_CONFIG),
        (every_broker, DYNAMIC_DEFAULT_BROKER_CONFIG),
        (static, STATIC_BROKER_CONFIG),
    )
    for layer, source in layers:
        for broker_key, _ in TOPIC_CONFIG_SYNONYMS.get(name, ()):
            if broker_key in layer:
                synonyms.append((broker_key, str(layer[broker_key]), source))
    synonyms.append((name, _KAFKA_DEFAULTS.get(name), DEFAULT_CONFIG))
    return synonyms

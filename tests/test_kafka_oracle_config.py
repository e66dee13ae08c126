"""kafkalog's config keys against Apache Kafka's own: every topic key Kafka defines, with
Kafka's default, and the broker synonyms (``log.retention.hours`` ...) each takes its default
from, in Kafka's order and units. Kafka prints its tables with interop/TopicConfigs.java."""

from __future__ import annotations

import subprocess

import pytest

from kafka_oracle import JVM_FLAGS, KAFKA_VERSIONS, ROOT, classpath
from kafkalog.config_def import render
from kafkalog.log.config import TOPIC_CONFIG
from kafkalog.manager.server_config import TOPIC_CONFIG_SYNONYMS

pytestmark = pytest.mark.one_codec  # no records involved

# Where kafkalog keeps Kafka 3.x's default on purpose, and why.
KEPT_3X_DEFAULTS = {
    # Kafka 4.0 lowered it from "unlimited" to one hour; kafkalog opens logs Kafka 3.x wrote
    # and keeps 3.x's validation, so a CreateTime an hour ahead is still accepted.
    "message.timestamp.after.max.ms": "9223372036854775807",
}


def kafka_tables(version: str) -> tuple[dict[str, str], dict[str, list[tuple[str, int]]]]:
    cmd = ["java", *JVM_FLAGS, "-cp", classpath(version), str(ROOT / "interop/TopicConfigs.java")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True).stdout
    defaults: dict[str, str] = {}
    synonyms: dict[str, list[tuple[str, int]]] = {}
    for line in out.splitlines():
        kind, name, *rest = line.split("\t")
        if kind == "default":
            defaults[name] = rest[0]
        else:
            synonyms[name] = [(s.split("=")[0], int(s.split("=")[1])) for s in rest]
    return defaults, synonyms


def kafka_rendering(value: str) -> str:
    """Kafka prints lists as [a, b]; kafkalog renders them as a,b."""
    return value[1:-1].replace(", ", ",") if value.startswith("[") else value


@pytest.mark.parametrize("version", KAFKA_VERSIONS)
def test_every_kafka_topic_key_is_ours_with_kafkas_default(version: str) -> None:
    defaults, _ = kafka_tables(version)
    public = {k: v for k, v in defaults.items() if not k.startswith("internal.")}
    missing = sorted(set(public) - set(TOPIC_CONFIG.keys))
    assert not missing, f"Kafka {version} topic keys kafkalog lacks: {missing}"
    ours = {k: render(TOPIC_CONFIG.keys[k].default) for k in public}
    theirs = {k: KEPT_3X_DEFAULTS.get(k, kafka_rendering(v)) for k, v in public.items()}
    if version.startswith("3."):
        theirs = {k: kafka_rendering(v) for k, v in public.items()}
    assert ours == theirs


@pytest.mark.parametrize("version", KAFKA_VERSIONS)
def test_broker_synonyms_are_kafkas_in_order_and_unit(version: str) -> None:
    _, synonyms = kafka_tables(version)
    ours = {k: list(v) for k, v in TOPIC_CONFIG_SYNONYMS.items() if k in synonyms}
    assert ours == synonyms
    # the keys Kafka 4 dropped keep their 3.x synonyms here
    assert set(TOPIC_CONFIG_SYNONYMS) - set(synonyms) <= {
        "message.format.version",
        "message.timestamp.difference.max.ms",
        "message.downconversion.enable",
    }

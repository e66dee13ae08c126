"""kafkalog's config keys against Apache Kafka's own: every topic key Kafka defines, with
Kafka 4's default; the broker synonyms (``log.retention.hours`` ...) each takes its default
from, in Kafka's order and units; which values Kafka's LogConfig accepts; and the defaults of
the broker keys kafkalog shares with KafkaConfig. Kafka prints its tables with
interop/TopicConfigs.java and interop/ConfigRules.java."""

from __future__ import annotations

import subprocess

import pytest

from kafka_oracle import JVM_FLAGS, KAFKA_VERSIONS, ROOT, classpath
from kafkalog.cleaner.config import CLEANER_CONFIG
from kafkalog.config_def import render
from kafkalog.errors import InvalidConfigError
from kafkalog.log.config import TOPIC_CONFIG, LogConfig
from kafkalog.log.producer_state_manager import PRODUCER_STATE_CONFIG
from kafkalog.manager.config import MANAGER_CONFIG
from kafkalog.manager.server_config import BROKER_KEYS, TOPIC_CONFIG_SYNONYMS

pytestmark = pytest.mark.one_codec  # no records involved

# kafkalog follows Kafka 4's defaults; the topic defaults Kafka 4.0 changed (KIP-1030).
CHANGED_IN_4 = {"message.timestamp.after.max.ms": "3600000"}


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
    theirs = {k: kafka_rendering(v) for k, v in public.items()}
    if version.startswith("3."):
        theirs |= {k: v for k, v in CHANGED_IN_4.items() if k in theirs}
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


def kafka_rules(version: str, *args: str) -> list[str]:
    cmd = ["java", *JVM_FLAGS, "-cp", classpath(version), str(ROOT / "interop/ConfigRules.java")]
    proc = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=300, check=True)
    return proc.stdout.splitlines()


# values whose fate depends on case, on the broker's codec names, or on Kafka 4's new bounds
VALUES = [
    ("segment.bytes", "1048575"), ("segment.bytes", "1048576"), ("segment.bytes", "14"),
    ("internal.segment.bytes", "1024"),
    ("compression.type", "none"), ("compression.type", "uncompressed"),
    ("compression.type", "LZ4"), ("compression.type", "lz4"), ("compression.type", "producer"),
    ("compression.type", "Producer"),
    ("cleanup.policy", "Compact"), ("cleanup.policy", "compact,delete"), ("cleanup.policy", ""),
    ("cleanup.policy", "DELETE"),
    ("message.timestamp.type", "createtime"), ("message.timestamp.type", "LogAppendTime"),
    ("preallocate", "TRUE"), ("preallocate", "yes"),
    ("compression.gzip.level", "0"), ("compression.gzip.level", "-1"),
    ("compression.zstd.level", "23"), ("compression.lz4.level", "18"),
    ("min.insync.replicas", "0"), ("max.message.bytes", "-1"),
    ("min.cleanable.dirty.ratio", "1.5"), ("retention.ms", "-2"),
    ("message.timestamp.after.max.ms", "-1"),
]  # fmt: skip


def test_kafka_4_accepts_and_refuses_the_values_kafkalog_does() -> None:
    version = KAFKA_VERSIONS[-1]
    verdicts = kafka_rules(version, "validate", *(f"{k}={v}" for k, v in VALUES))
    mismatches = []
    for (key, value), verdict in zip(VALUES, verdicts, strict=True):
        try:
            LogConfig.from_properties({key: value})
            ours = "ok"
        except InvalidConfigError:
            ours = "refused"
        if ours != verdict.split("\t")[0]:
            mismatches.append(f"{key}={value!r}: kafkalog {ours}, Kafka {version} {verdict}")
    assert not mismatches


# broker keys whose kafkalog default differs on purpose: one node on loopback, no controller
SINGLE_NODE_DEFAULTS = {
    "log.dirs": "null",  # kafkalog: empty means log.dir, as Kafka's null does
    "node.id": "<none>",  # Kafka requires it; kafkalog answers Metadata as node 1
    "listeners": "[PLAINTEXT://:9092]",  # kafkalog serve binds loopback unless told otherwise
    "controller.listener.names": "<none>",
    "listener.security.protocol.map": "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,"
    "SASL_PLAINTEXT:SASL_PLAINTEXT",
    "advertised.listeners": "null",
}


def test_broker_defaults_are_kafka_4s() -> None:
    theirs = dict(line.split("\t", 1) for line in kafka_rules(KAFKA_VERSIONS[-1], "broker"))
    checked = 0
    for config in (BROKER_KEYS, MANAGER_CONFIG, CLEANER_CONFIG, PRODUCER_STATE_CONFIG):
        for name, key in config.keys.items():
            if name not in theirs or name in SINGLE_NODE_DEFAULTS:
                continue
            assert render(key.default) == kafka_rendering(theirs[name]), name
            checked += 1
    assert checked >= 30
    assert {k: theirs[k] for k in SINGLE_NODE_DEFAULTS} == SINGLE_NODE_DEFAULTS

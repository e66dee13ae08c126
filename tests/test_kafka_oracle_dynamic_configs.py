"""Broker and group configs set at run time answer as Apache Kafka 4.3.1 answers them.

The same alterations go to a Kafka broker and to ``kafkalog serve`` through librdkafka's
AdminClient (IncrementalAlterConfigs and the legacy AlterConfigs, on BROKER and GROUP resources)
and through ``kafka-configs --entity-default``: every answer, error code and message, must be
the same. Kafka applies an alteration asynchronously (its describe lags until the metadata
reaches the broker), so the described state is compared once Kafka's has settled.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("confluent_kafka")

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from kafka_oracle import KAFKA_VERSIONS, KafkaBroker
from kafkalog import LogManager
from kafkalog.server import serve

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.one_codec]

B, G = ResourceType.BROKER, ResourceType.GROUP
Op = tuple[str, str, str]  # (key, operation, value)

# (incremental?, resource type, name, ops or a legacy whole set)
ALTERATIONS: list[tuple[bool, ResourceType, str, Any]] = [
    (True, B, "1", [("background.threads", "SET", "9"),
                    ("log.cleanup.policy", "APPEND", "compact")]),
    (True, B, "1", [("background.threads", "DELETE", ""),
                    ("log.cleanup.policy", "SUBTRACT", "compact")]),
    (True, B, "1", [("broker.id", "SET", "3")]),
    (True, B, "1", [("log.dirs", "SET", "/x"), ("num.io.threads", "SET", "4")]),
    (True, B, "1", [("ssl.keystore.location", "SET", "/x")]),
    (True, B, "1", [("background.threads", "SET", "abc")]),
    (True, B, "1", [("background.threads", "SET", "0")]),
    (True, B, "1", [("compression.type", "SET", "brotli")]),
    (True, B, "1", [("num.io.threads", "APPEND", "3")]),
    (True, B, "1", [("foo.bar", "SET", "3")]),
    (True, B, "1", [("log.retention.ms", "SET", "3600000"), ("num.io.threads", "SET", "4")]),
    (False, B, "1", {"sasl.kerberos.min.time.before.relogin": "58000", "log.roll.ms": "7200000"}),
    (False, B, "1", {"broker.id": "1"}),
    (True, G, "my-group", [("consumer.session.timeout.ms", "SET", "50000")]),
    (True, G, "my-group", [("consumer.session.timeout.ms", "SET", "1")]),
    (True, G, "my-group", [("consumer.session.timeout.ms", "SET", "abc")]),
    (True, G, "my-group", [("nope.key", "SET", "1")]),
    (True, G, "my-group", [("consumer.heartbeat.interval.ms", "SET", "60000")]),
    (True, G, "my-group", [("share.auto.offset.reset", "APPEND", "x")]),
    (True, G, "my-group", [("share.isolation.level", "SET", "read_committed")]),
    (False, G, "g2", {"consumer.session.timeout.ms": "50000"}),
    (False, G, "g2", {"consumer.heartbeat.interval.ms": "6000"}),
]  # fmt: skip

# what is described afterwards, once Kafka's state settled
DESCRIBED = [
    (B, "1", ["background.threads", "log.cleanup.policy", "num.io.threads",
              "sasl.kerberos.min.time.before.relogin", "log.roll.ms", "log.retention.ms"]),
    (G, "my-group", ["consumer.session.timeout.ms", "share.isolation.level"]),
    (G, "g2", ["consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"]),
]  # fmt: skip


def _answer(future: Any) -> str:
    try:
        future.result(30)
    except Exception as err:  # the KafkaException's KafkaError: its code's name and message
        error = err.args[0]
        return f"{error.name()}: {error.str()}"
    return "OK"


def _alter_all(bootstrap: str) -> list[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    answers = []
    for incremental, kind, name, change in ALTERATIONS:
        if incremental:
            entries = [
                ConfigEntry(k, v, incremental_operation=getattr(AlterConfigOpType, op))
                for k, op, v in change
            ]
            resource = ConfigResource(kind, name, incremental_configs=entries)
            (future,) = admin.incremental_alter_configs([resource]).values()
        else:
            resource = ConfigResource(kind, name, set_config=change)
            with pytest.warns(DeprecationWarning):
                (future,) = admin.alter_configs([resource]).values()
        answers.append(_answer(future))
    return answers


def _described(bootstrap: str) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    out = {}
    for kind, name, keys in DESCRIBED:
        resource = ConfigResource(kind, name)
        (future,) = admin.describe_configs([resource]).values()
        found = future.result(30)
        out[f"{kind.name} {name}"] = {
            k: (found[k].value, int(found[k].source), found[k].is_read_only) if k in found else None
            for k in keys
        }
    return out


def _cluster_default(tool: Any, bootstrap: str, config: str) -> str:
    try:
        return tool("kafka.admin.ConfigCommand", "--bootstrap-server", bootstrap,
                    "--entity-type", "brokers", "--entity-default", "--alter",
                    "--add-config", config).strip()  # fmt: skip
    except AssertionError as err:  # the tool failed: its words
        lines = [line for line in str(err).splitlines() if "Cannot update" in line]
        return lines[0].strip() if lines else str(err)


def test_run_time_broker_and_group_configs_answer_as_kafka(tmp_path: Path) -> None:
    version = KAFKA_VERSIONS[-1]
    broker = KafkaBroker(version, tmp_path / "broker", {})
    defaults = ("log.segment.bytes=2097152", "sasl.kerberos.min.time.before.relogin=58000")
    with broker:
        kafka_answers = _alter_all(broker.bootstrap)
        kafka_defaults = [_cluster_default(broker.tool, broker.bootstrap, c) for c in defaults]
        with serve(tmp_path / "served") as server:
            ours = _alter_all(server.bootstrap_servers)
            ours_defaults = [
                _cluster_default(broker.tool, server.bootstrap_servers, c) for c in defaults
            ]
            described = _described(server.bootstrap_servers)
        deadline = time.monotonic() + 60
        kafka_described = _described(broker.bootstrap)
        while kafka_described != described and time.monotonic() < deadline:
            time.sleep(1)  # Kafka's describe settles once its metadata reached the broker
            kafka_described = _described(broker.bootstrap)
    assert ours == kafka_answers
    assert ours_defaults == kafka_defaults
    assert "Cannot update these configs at default cluster level" in ours_defaults[1]
    assert described == kafka_described
    assert described["BROKER 1"]["sasl.kerberos.min.time.before.relogin"] == (
        "58000", 2, False)  # fmt: skip
    # kept across a restart, and the topic defaults among them in force on the logs
    with LogManager(tmp_path / "served", node_id=1) as manager:
        assert manager.broker_configs("") == {"log.segment.bytes": "2097152"}
        assert manager.default_config.segment_size == 2097152
        assert manager.default_config.segment_ms == 7_200_000  # log.roll.ms, broker 1's own
        assert manager.group_configs("g2") == {"consumer.heartbeat.interval.ms": "6000"}

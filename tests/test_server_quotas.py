"""Client quotas on ``kafkalog serve`` set with Kafka's own ``kafka-configs.sh`` and held by
throttling: a producer and a consumer pushed as hard as they go reach their byte rates and no
more (within 10% over a 12 s run), and see the ``throttle_time_ms`` the broker sends
(librdkafka's throttle callback); and the same clients against Apache Kafka with the same
quotas get what they get on kafkalog."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kafkalog import LogManager, Record
from kafkalog.server import serve

pytestmark = [pytest.mark.one_codec, pytest.mark.kafka, pytest.mark.timeout(600)]

PRODUCE_QUOTA, CONSUME_QUOTA = 200_000, 300_000  # bytes a second
VALUE = b"q" * 1000
RUN_S = 12
QUOTA_SETTINGS = {"quota.window.num": "2"}  # a short memory: the run reaches a steady state


def set_quotas(bs: str) -> str:
    """``kafka-configs --alter`` then ``--describe`` for client id ``metered``: what it shows."""
    from kafka_oracle import KAFKA_VERSIONS, java

    def configs(*args: str) -> str:
        return java(KAFKA_VERSIONS[-1], "kafka.admin.ConfigCommand", "--bootstrap-server", bs,
                    "--entity-type", "clients", "--entity-name", "metered", *args)  # fmt: skip

    configs("--alter", "--add-config",
            f"producer_byte_rate={PRODUCE_QUOTA},consumer_byte_rate={CONSUME_QUOTA}")  # fmt: skip
    return configs("--describe")


def produce_rate(bs: str) -> tuple[float, list[float]]:
    """Bytes a second acknowledged to a producer that always has more queued than it may
    send, and the throttle times (s) its broker reported."""
    from confluent_kafka import Producer

    throttles: list[float] = []
    acked = [0]
    producer = Producer({
        "bootstrap.servers": bs, "client.id": "metered", "linger.ms": 5, "batch.size": 16384,
        "throttle_cb": lambda event: throttles.append(event.throttle_time),
    })  # fmt: skip

    def on_delivery(err: object, msg: object) -> None:
        if err is None:
            acked[0] += len(VALUE)

    started = time.monotonic()
    while time.monotonic() < started + RUN_S:
        if len(producer) < 200:
            producer.produce("metered", VALUE, partition=0, on_delivery=on_delivery)
        producer.poll(0 if len(producer) < 200 else 0.005)
    producer.flush(30)
    return acked[0] / (time.monotonic() - started), throttles


def consume_rate(bs: str) -> float:
    """Bytes a second a consumer reading from the start of ``fast`` receives."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bs, "client.id": "metered", "group.id": "g",
        "fetch.max.bytes": 16384, "max.partition.fetch.bytes": 16384,
        "message.max.bytes": 16384,
    })  # fmt: skip
    consumer.assign([TopicPartition("fast", 0, 0)])
    got = 0
    started = time.monotonic()
    while time.monotonic() < started + RUN_S:
        message = consumer.poll(0.1)
        if message is not None and not message.error():
            got += len(message.value())
    consumer.close()
    return got / RUN_S


def _fill(data: Path) -> None:
    """8 MB in producer-sized batches: more than the consumer may take in a run."""
    with LogManager(data) as manager:
        log = manager.create_topic("fast", 1)[0]
        for _ in range(500):
            log.append([Record(VALUE) for _ in range(16)])


@pytest.fixture(scope="module")
def on_kafkalog(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, float, list[float], float]:
    data = tmp_path_factory.mktemp("quotas") / "data"
    _fill(data)
    with serve(data, overrides=QUOTA_SETTINGS) as server:
        described = set_quotas(server.bootstrap_servers)
        produced, throttles = produce_rate(server.bootstrap_servers)
        consumed = consume_rate(server.bootstrap_servers)
    return described, produced, throttles, consumed


def test_kafka_configs_quotas_hold_a_producer_and_a_consumer_to_their_rates(
    on_kafkalog: tuple[str, float, list[float], float],
) -> None:
    described, produced, throttles, consumed = on_kafkalog
    assert f"producer_byte_rate={PRODUCE_QUOTA}" in described, described
    assert f"consumer_byte_rate={CONSUME_QUOTA}" in described, described
    assert produced == pytest.approx(PRODUCE_QUOTA, rel=0.10), produced
    assert consumed == pytest.approx(CONSUME_QUOTA, rel=0.10), consumed
    assert throttles and max(throttles) > 0


@pytest.mark.slow
def test_the_same_clients_get_the_same_rates_from_kafka(
    tmp_path: Path, on_kafkalog: tuple[str, float, list[float], float]
) -> None:
    from confluent_kafka import Producer

    from kafka_oracle import KAFKA_VERSIONS, KafkaBroker

    settings = {**QUOTA_SETTINGS, "auto.create.topics.enable": "true"}
    with KafkaBroker(KAFKA_VERSIONS[-1], tmp_path / "kafka", settings) as broker:
        filler = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50,
                           "batch.num.messages": 16})  # fmt: skip
        for i in range(8000):
            filler.produce("fast", VALUE, partition=0)
            if i % 16 == 15:
                filler.flush(30)
        set_quotas(broker.bootstrap)
        produced, _ = produce_rate(broker.bootstrap)
        consumed = consume_rate(broker.bootstrap)
    _, ours_produced, _, ours_consumed = on_kafkalog
    assert ours_produced == pytest.approx(produced, rel=0.10), (ours_produced, produced)
    assert ours_consumed == pytest.approx(consumed, rel=0.10), (ours_consumed, consumed)

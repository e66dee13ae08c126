"""Test-wide settings: hypothesis is derandomized so every run explores the same examples."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "kafkalog",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=int(os.environ.get("KAFKALOG_EXAMPLES", "100")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile("kafkalog")

GOLDEN = Path(__file__).parent / "golden"


def golden_bytes(name: str) -> bytes:
    return bytes.fromhex("".join((GOLDEN / name).read_text().split()))


@pytest.fixture
def golden() -> type:
    class _G:
        load = staticmethod(golden_bytes)

    return _G


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Switch threads every few microseconds, so races show within a bounded run."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _kafka_versions() -> tuple[str, ...]:
    from kafka_oracle import KAFKA_VERSIONS

    return KAFKA_VERSIONS


@pytest.fixture(scope="session", params=_kafka_versions())
def written(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> object:
    """Topics a real Kafka broker wrote and stopped on (tests/kafka_scenarios.py), once per
    Kafka version per session, shared by the oracle test modules."""
    pytest.importorskip("confluent_kafka")
    from kafka_scenarios import BrokerWritten, write_topics

    reuse = os.environ.get("KAFKALOG_ORACLE_REUSE")  # a developer's saved run: DIR/out.pickle
    if reuse:
        import pickle

        with open(Path(reuse.format(version=request.param)) / "out.pickle", "rb") as f:
            saved: BrokerWritten = pickle.load(f)
        return saved
    return write_topics(request.param, tmp_path_factory.mktemp(f"kafka-{request.param}"))

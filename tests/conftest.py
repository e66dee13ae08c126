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

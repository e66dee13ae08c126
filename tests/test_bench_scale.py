"""The scale benchmark's quick variant: ``kafkalog serve`` alone at a few hundred partitions,
through the same measurement as ``make bench`` (which runs Apache Kafka beside it at 1,000,
4,000 and 10,000): it creates, produces beside a consumer of every topic (librdkafka's, then
Kafka's Java consumer, which fetches through a session), restarts cleanly and after a kill -9,
and holds one descriptor per segment throughout."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench import scale

from kafkalog.storage.mappings import MAX_CACHED_MAPPINGS

pytestmark = [pytest.mark.one_codec, pytest.mark.kafka, pytest.mark.timeout(600)]

PARTITIONS = 300


def test_scale_measurement_on_kafkalog_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scale, "WARMUP_RECORDS", 20_000)
    monkeypatch.setattr(scale, "PRODUCE_RECORDS", 30_000)
    monkeypatch.setattr(scale, "IDLE_SECONDS", 2)
    got = scale.measure(scale.kafkalog_server(tmp_path), PARTITIONS)
    assert set(got) == {key for key, *_ in scale.ROWS}
    # one segment a partition, the warm-up topic's and __consumer_offsets', the mappings kept,
    # and the process's own (sockets, pipes, the event loop's)
    assert got["descriptors"] <= PARTITIONS + 2 + MAX_CACHED_MAPPINGS + 40
    assert got["produce rec/s"] > 0 and got["restart kill -9 s"] > 0
    assert got["produce, Java consumer rec/s"] > 0 and got["cpu, Java consumer s/100k"] > 0

"""Topic configs from a KRaft node's metadata log, for the topics a Kafka broker created.

Why: a Kafka broker keeps each topic's config overrides (cleanup.policy, retention.ms ...) in
its metadata log, ``__cluster_metadata-0``, not beside the partitions. A LogManager opening the
directory of such a broker would otherwise apply the broker defaults to them: seven days of
retention to a compacted or a keep-forever topic, deleting what Kafka would have kept. When
the metadata log sits in the log directory (Kafka's place for it when ``metadata.log.dir`` is
unset), its latest snapshot and the records after it are replayed (``records.kraft_metadata``).
Refuses: writing anything there, and keys or values kafkalog's LogConfig does not accept (each
is left out, with a warning).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

from kafkalog.errors import KafkaLogError
from kafkalog.log.config import TOPIC_CONFIG, LogConfig
from kafkalog.log.view import PartitionView
from kafkalog.records import MemoryRecords
from kafkalog.records.kraft_metadata import topic_configs
from kafkalog.records.scanner import AnyBatch

logger = logging.getLogger("kafkalog.manager")

_SNAPSHOT_SUFFIX = ".checkpoint"  # <end offset, 20 digits>-<epoch, 10 digits>.checkpoint


def kraft_topic_configs(metadata_dir: Path) -> dict[str, dict[str, str]]:
    """Topic name -> the config overrides the metadata log in ``metadata_dir`` (a
    ``__cluster_metadata-0`` directory) holds for it; {} with a warning if it cannot be read."""
    try:
        return _usable(topic_configs(_batches(metadata_dir)))
    except (KafkaLogError, OSError) as err:
        logger.warning("cannot read topic configs from %s: %s", metadata_dir, err)
        return {}


def _batches(metadata_dir: Path) -> Iterator[AnyBatch]:
    """The latest snapshot's batches, then the log's from the snapshot's end offset."""
    snapshots = sorted(p for p in metadata_dir.iterdir() if p.name.endswith(_SNAPSHOT_SUFFIX))
    start = 0
    if snapshots:
        latest = snapshots[-1]  # names sort by end offset
        start = int(latest.name.partition("-")[0])
        yield from MemoryRecords(latest.read_bytes()).batches()
    view = PartitionView(metadata_dir)
    yield from view.batches(max(start, view.log_start_offset()))


def _usable(configs: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """Each topic's keys that kafkalog's LogConfig takes as they are."""
    out: dict[str, dict[str, str]] = {}
    for topic, values in configs.items():
        kept = {}
        for key, value in values.items():
            try:
                if key not in TOPIC_CONFIG.keys:
                    raise KafkaLogError(f"{key} is not a topic config kafkalog knows")
                LogConfig.from_properties({key: value})
            except KafkaLogError as err:
                logger.warning("topic %s: leaving out %s=%s from the metadata log: %s",
                               topic, key, value, err)  # fmt: skip
                continue
            kept[key] = value
        out[topic] = kept
    return out

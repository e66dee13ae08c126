"""What a LogManager would serve, read from the files of log directories without owning them.

Why: the commands that only look (``get-offsets``, ``configs --describe``, ``log-dirs
--describe``) must work on a directory someone else owns, a running ``kafkalog serve`` or a
Kafka broker's, and on a copy of a broker's directory that must stay byte for byte what the
broker left (Kafka's DumpLogSegments opens its files read-only). A LogManager locks, recovers,
aborts hanging transactions, rewrites checkpoints and the clean-shutdown marker; this reader
does none of that: partitions are PartitionViews, topic configs come from the same files the
manager reads them from.

Refuses: writing, locking, recovering or waiting for anything. What it reports is the files'
state at the moment each is read: a writer may move on meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from kafkalog.errors import UnknownTopicOrPartitionError
from kafkalog.log.config import LogConfig
from kafkalog.log.view import PartitionView, discover_partitions
from kafkalog.manager.log_dir import stored_configs
from kafkalog.manager.server_config import under_dynamic_broker_configs
from kafkalog.types import TopicPartition


class LogDirsReader:
    """Topics, partitions and configs of ``log_dirs``, as found when it was made."""

    def __init__(
        self, log_dirs: Iterable[str | Path], metadata_log_dir: str | Path | None = None
    ) -> None:
        self.log_dirs = [Path(d) for d in log_dirs]
        self._partitions = discover_partitions(self.log_dirs)
        stored = stored_configs(self.log_dirs, metadata_log_dir)
        self._overrides = stored.topics
        self.dynamic_broker_configs = stored.broker_layers
        self.default_config = under_dynamic_broker_configs(LogConfig(), *stored.broker_layers)

    def topics(self) -> dict[str, int]:
        """Topic name -> number of partitions found."""
        out: dict[str, int] = {}
        for tp in sorted(self._partitions):
            out[tp.topic] = out.get(tp.topic, 0) + 1
        return out

    def views(self) -> dict[TopicPartition, PartitionView]:
        return {tp: PartitionView(path) for tp, path in sorted(self._partitions.items())}

    def view(self, topic: str, partition: int = 0) -> PartitionView:
        path = self._partitions.get(TopicPartition(topic, partition))
        if path is None:
            raise UnknownTopicOrPartitionError(f"no log for {topic}-{partition}")
        return PartitionView(path)

    def log_dir_of(self, tp: TopicPartition) -> Path:
        return self._partitions[tp].parent

    def topic_overrides(self, topic: str) -> dict[str, str]:
        return dict(self._overrides.get(topic, {}))

    def topic_config(self, topic: str) -> LogConfig:
        return LogConfig.from_properties(self.topic_overrides(topic), defaults=self.default_config)

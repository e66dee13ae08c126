"""The broker keys of tiered storage (KIP-405), Kafka's names and defaults.

Why: the log manager needs the broker switch to open a log as remote-enabled, and the remote log
manager needs the rest; one frozen object parsed in one place keeps them next to their Kafka
names. Refuses: keys of Kafka's plugins kafkalog has no use for (the class names and class
paths of RemoteStorageManager and RemoteLogMetadataManager: kafkalog's are built in).
"""

from __future__ import annotations

from dataclasses import dataclass

from kafkalog.config_def import ConfigDef, Type, at_least, define


@dataclass(frozen=True)
class RemoteLogManagerConfig:
    """The broker keys of tiered storage, Kafka's names; the store's location has no Kafka key
    (a RemoteStorageManager plugin reads its own), so it is ``rsm.config.`` (Kafka's default
    ``remote.log.storage.manager.impl.prefix``) followed by kafkalog's own names."""

    remote_log_storage_system_enable: bool = define(
        "remote.log.storage.system.enable", Type.BOOLEAN, False,
        "Whether topics may tier closed segments to remote storage (remote.storage.enable).",
    )  # fmt: skip
    remote_log_manager_task_interval_ms: int = define(
        "remote.log.manager.task.interval.ms", Type.LONG, 30_000,
        "Period of the copy and expiration pass over remote-enabled logs.", at_least(1),
    )  # fmt: skip
    remote_log_metadata_topic_num_partitions: int = define(
        "rlmm.config.remote.log.metadata.topic.num.partitions", Type.INT, 50,
        "Partitions of __remote_log_metadata, fixed once it exists.", at_least(1),
    )  # fmt: skip
    remote_fetch_max_wait_ms: int = define(
        "remote.fetch.max.wait.ms", Type.INT, 500,
        "How long a Fetch waits for remote data before it answers without it.", at_least(1),
    )  # fmt: skip
    remote_log_reader_threads: int = define(
        "remote.log.reader.threads", Type.INT, 10,
        "Threads of kafkalog serve that read remote data for fetches.", at_least(1),
    )  # fmt: skip
    remote_log_reader_max_pending_tasks: int = define(
        "remote.log.reader.max.pending.tasks", Type.INT, 100,
        "Remote reads that may wait for a reader thread; a fetch finding that many waiting is "
        "answered with an error for the partition.", at_least(1),
    )  # fmt: skip
    store_uri: str | None = define(
        "rsm.config.kafkalog.store.uri", Type.STRING, None,
        "Where remote segments go: a directory, file:// or s3://bucket/prefix?endpoint_override=.",
    )  # fmt: skip
    store_timeout_ms: int = define(
        "rsm.config.kafkalog.store.timeout.ms", Type.INT, 10_000,
        "Bound of each connection and request to an S3 store.", at_least(1),
    )  # fmt: skip
    store_attempts: int = define(
        "rsm.config.kafkalog.store.attempts", Type.INT, 3,
        "Tries of each S3 call before it fails.", at_least(1),
    )  # fmt: skip


REMOTE_LOG_MANAGER_CONFIG = ConfigDef.of(RemoteLogManagerConfig)

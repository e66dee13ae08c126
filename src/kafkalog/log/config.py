"""LogConfig: every topic-level key of Kafka's TopicConfig, with its names, defaults and bounds.

Why: one parameter object per partition, parsed in one place (Kafka's LogConfig), so a bad value
fails at the door with an error naming the key instead of deep inside an append. Refuses:
unknown keys (Kafka rejects them too) and silent coercion of malformed values.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafkalog.config_def import (
    ConfigDef,
    Type,
    all_of,
    at_least,
    between,
    define,
    load_properties,
    render,
)
from kafkalog.errors import InvalidConfigError
from kafkalog.storage.segment import SegmentParams
from kafkalog.types import INT64_MAX, CompressionType, TimestampType

BOOLEAN, INT, LONG, DOUBLE, STRING, LIST = (
    Type.BOOLEAN, Type.INT, Type.LONG, Type.DOUBLE, Type.STRING, Type.LIST,
)  # fmt: skip
WEEK_MS = 7 * 24 * 3600 * 1000
HOUR_MS = 3600 * 1000  # message.timestamp.after.max.ms since Kafka 4.0 (KIP-1030)
MIN_SEGMENT_BYTES = 1024 * 1024  # Kafka 4.0 (KIP-1030); 3.x took 14
# topic keys Kafka 4.0 removed: still accepted (a 3.x broker's topics may carry them), but
# described, as Kafka 4 describes a topic, only where a topic sets one
REMOVED_IN_KAFKA_4 = frozenset(
    {"message.format.version", "message.downconversion.enable",
     "message.timestamp.difference.max.ms"}
)  # fmt: skip


def _policy(key: str, value: tuple[str, ...]) -> frozenset[str]:
    """Case-sensitive, as Kafka's ValidList. Empty is allowed since Kafka 4.2 (KAFKA-19112):
    no deletion by time or size, no compaction; only DeleteRecords moves the log start."""
    policies = frozenset(value)
    if not policies <= {"compact", "delete"}:
        raise InvalidConfigError(key, f"{value!r} must be a list of 'compact' and/or 'delete'")
    return policies


def _compression(key: str, value: str) -> str:
    """Kafka's BrokerCompressionType names, case-sensitive: "none" is the producer's word,
    "uncompressed" the broker's."""
    if value not in ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"):
        raise InvalidConfigError(
            key, f"{value!r} is not one of uncompressed, zstd, lz4, snappy, gzip, producer"
        )
    return value


def _timestamp_type(key: str, value: Any) -> TimestampType:
    if isinstance(value, TimestampType) and value is not TimestampType.NO_TIMESTAMP_TYPE:
        return value
    if str(value) in ("CreateTime", "LogAppendTime"):
        return TimestampType.parse(str(value))
    raise InvalidConfigError(key, f"{value!r} must be CreateTime or LogAppendTime")


def _not_zero(key: str, value: int) -> int:
    if value == 0:
        raise InvalidConfigError(key, "gzip level must be 1..9 or -1")
    return value


@dataclass(frozen=True)
class LogConfig:
    """A partition's configuration: every key of Kafka's TopicConfig, each declared once below
    (name, type, default, validator, doc). Build with ``LogConfig.from_properties``;
    ``overrides`` keeps the keys that were set explicitly (persisted with a topic, shown by
    ``describe``)."""

    segment_bytes: int = define(
        "segment.bytes", INT, 1073741824, "Size of a segment file before it rolls.",
        at_least(MIN_SEGMENT_BYTES),
    )  # fmt: skip
    internal_segment_bytes: int | None = define(
        "internal.segment.bytes", INT, None,
        "Kafka 4's internal override of segment.bytes, with no minimum (for tests).",
    )  # fmt: skip
    segment_ms: int = define(
        "segment.ms", LONG, WEEK_MS, "Age of a segment before it rolls, if not full.", at_least(1)
    )
    segment_jitter_ms: int = define(
        "segment.jitter.ms", LONG, 0, "Random reduction of segment.ms per segment.", at_least(0)
    )
    segment_index_bytes: int = define(
        "segment.index.bytes", INT, 10485760, "Maximum size of an offset or time index.",
        at_least(4),
    )  # fmt: skip
    index_interval_bytes: int = define(
        "index.interval.bytes", INT, 4096, "Bytes appended between two index entries.",
        at_least(0),
    )  # fmt: skip
    flush_messages: int = define(
        "flush.messages", LONG, INT64_MAX, "Records appended between forced fsyncs.",
        at_least(1),
    )  # fmt: skip
    flush_ms: int = define(
        "flush.ms", LONG, INT64_MAX, "Time between forced fsyncs of the log.", at_least(0)
    )
    retention_bytes: int = define(
        "retention.bytes", LONG, -1, "Size the log may grow to before old segments go; -1: none."
    )
    retention_ms: int = define(
        "retention.ms", LONG, WEEK_MS, "Age after which a segment is deleted; -1: forever.",
        at_least(-1),
    )  # fmt: skip
    max_message_bytes: int = define(
        "max.message.bytes", INT, 1048588, "Largest record batch the log accepts.", at_least(0)
    )
    file_delete_delay_ms: int = define(
        "file.delete.delay.ms", LONG, 60000, "Delay before a deleted segment's files go.",
        at_least(0),
    )  # fmt: skip
    delete_retention_ms: int = define(
        "delete.retention.ms", LONG, 86400000, "How long compaction keeps tombstones.",
        at_least(0),
    )  # fmt: skip
    min_compaction_lag_ms: int = define(
        "min.compaction.lag.ms", LONG, 0, "Minimum age of a record before it may be compacted.",
        at_least(0),
    )  # fmt: skip
    max_compaction_lag_ms: int = define(
        "max.compaction.lag.ms", LONG, INT64_MAX, "Maximum time a record stays uncompacted.",
        at_least(1),
    )  # fmt: skip
    min_cleanable_dirty_ratio: float = define(
        "min.cleanable.dirty.ratio", DOUBLE, 0.5, "Dirty share of a log that makes it cleanable.",
        between(0, 1),
    )  # fmt: skip
    cleanup_policy: frozenset[str] = define(
        "cleanup.policy", LIST, frozenset({"delete"}), "delete, compact, or both.", _policy
    )
    compression_type: str = define(
        "compression.type", STRING, "producer", "Codec the log writes; producer: keep theirs.",
        _compression,
    )  # fmt: skip
    compression_gzip_level: int = define(
        "compression.gzip.level", INT, -1, "gzip level when the log compresses.",
        all_of(between(-1, 9), _not_zero),
    )  # fmt: skip
    compression_lz4_level: int = define(
        "compression.lz4.level", INT, 9, "lz4 level when the log compresses.", between(1, 17)
    )
    compression_zstd_level: int = define(
        "compression.zstd.level", INT, 3, "zstd level when the log compresses.",
        between(-131072, 22),
    )  # fmt: skip
    preallocate: bool = define(
        "preallocate", BOOLEAN, False, "Preallocate a new segment file to segment.bytes."
    )
    message_timestamp_type: TimestampType = define(
        "message.timestamp.type", STRING, TimestampType.CREATE_TIME,
        "CreateTime (the producer's) or LogAppendTime (the log's clock).", _timestamp_type,
    )  # fmt: skip
    message_timestamp_before_max_ms: int = define(
        "message.timestamp.before.max.ms", LONG, INT64_MAX,
        "How far in the past a CreateTime may be.", at_least(0),
    )  # fmt: skip
    message_timestamp_after_max_ms: int = define(
        "message.timestamp.after.max.ms", LONG, HOUR_MS,
        "How far in the future a CreateTime may be.", at_least(0),
    )  # fmt: skip
    message_timestamp_difference_max_ms: int = define(
        "message.timestamp.difference.max.ms", LONG, INT64_MAX,
        "Deprecated: both limits above at once.", at_least(0),
    )  # fmt: skip
    message_format_version: str = define(
        "message.format.version", STRING, "3.0-IV1", "Ignored since Kafka 3.0; accepted."
    )
    message_downconversion_enable: bool = define(
        "message.downconversion.enable", BOOLEAN, True, "Ignored: no down-conversion here."
    )
    local_retention_ms: int = define(
        "local.retention.ms", LONG, -2, "Tiered storage: local retention; -2: retention.ms.",
        at_least(-2),
    )  # fmt: skip
    local_retention_bytes: int = define(
        "local.retention.bytes", LONG, -2,
        "Tiered storage: local size limit; -2: retention.bytes.", at_least(-2),
    )  # fmt: skip
    remote_storage_enable: bool = define(
        "remote.storage.enable",
        BOOLEAN,
        False,
        "Tiered storage: copy closed segments to remote storage (the broker must allow it).",
    )
    remote_log_copy_disable: bool = define(
        "remote.log.copy.disable",
        BOOLEAN,
        False,
        "Tiered storage: stop copying, keep what is remote readable.",
    )
    remote_log_delete_on_disable: bool = define(
        "remote.log.delete.on.disable",
        BOOLEAN,
        False,
        "Tiered storage: turning remote.storage.enable off deletes the remote data.",
    )
    unclean_leader_election_enable: bool = define(
        "unclean.leader.election.enable", BOOLEAN, False, "Replication (kept, not acted on)."
    )
    min_insync_replicas: int = define(
        "min.insync.replicas", INT, 1, "Replication (kept, not acted on).", at_least(1)
    )
    leader_replication_throttled_replicas: str = define(
        "leader.replication.throttled.replicas", STRING, "", "Replication (kept, not acted on)."
    )
    follower_replication_throttled_replicas: str = define(
        "follower.replication.throttled.replicas", STRING, "",
        "Replication (kept, not acted on).",
    )  # fmt: skip
    overrides: Mapping[str, str] = field(default_factory=dict, compare=False)

    @classmethod
    def from_properties(
        cls,
        props: Mapping[str, Any] | Path | str | None = None,
        *,
        defaults: LogConfig | None = None,
    ) -> LogConfig:
        """Build from Kafka topic keys (a dict, or a path to a ``.properties`` file)."""
        if props is None:
            props = {}
        elif isinstance(props, str | Path):
            props = load_properties(props)
        base = defaults or cls()
        values = TOPIC_CONFIG.parse(props, unknown="unknown topic config name")
        overrides = dict(base.overrides) | {k: render(v) for k, v in props.items()}
        config = dataclasses.replace(base, **values, overrides=overrides)
        config._check()
        return config

    def _check(self) -> None:
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidConfigError(
                "min.compaction.lag.ms",
                f"{self.min_compaction_lag_ms} is above max.compaction.lag.ms "
                f"{self.max_compaction_lag_ms}",
            )

    def to_properties(self, *, only_overrides: bool = False) -> dict[str, str]:
        """Every key as Kafka names and renders it, or only the keys set explicitly."""
        if only_overrides:
            return dict(self.overrides)
        return TOPIC_CONFIG.render(self)

    # --- derived values -----------------------------------------------------------------------

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    @property
    def timestamp_before_max_ms(self) -> int:
        if self.message_timestamp_before_max_ms == INT64_MAX:
            return self.message_timestamp_difference_max_ms
        return self.message_timestamp_before_max_ms

    @property
    def segment_size(self) -> int:
        """The size a segment rolls at: ``internal.segment.bytes`` when set (Kafka 4's
        ``LogConfig.segmentSize``), else ``segment.bytes``."""
        if self.internal_segment_bytes is not None:
            return self.internal_segment_bytes
        return self.segment_bytes

    @property
    def timestamp_after_max_ms(self) -> int:
        """Kafka 3.x's rule (KIP-937): message.timestamp.difference.max.ms bounds the future
        when message.timestamp.after.max.ms is unlimited, and, now that the latter defaults to
        Kafka 4's hour, also when only the former was set."""
        after = self.message_timestamp_after_max_ms
        difference = self.message_timestamp_difference_max_ms
        after_set = "message.timestamp.after.max.ms" in self.overrides
        if after == INT64_MAX or (not after_set and difference != INT64_MAX):
            return difference
        return after

    @property
    def target_compression(self) -> CompressionType | None:
        """The codec the leader writes; None means "keep the producer's"."""
        if self.compression_type == "producer":
            return None
        if self.compression_type == "uncompressed":
            return CompressionType.NONE
        return CompressionType.parse(self.compression_type)

    def compression_level(self, codec: CompressionType) -> int | None:
        """The KIP-390 level this topic writes ``codec`` at; None for the codec's default."""
        if codec is CompressionType.GZIP:
            return None if self.compression_gzip_level == -1 else self.compression_gzip_level
        if codec is CompressionType.LZ4:
            return self.compression_lz4_level
        if codec is CompressionType.ZSTD:
            return self.compression_zstd_level
        return None

    def segment_params(self) -> SegmentParams:
        """What a segment needs of the config: index interval and size, preallocation, roll size."""
        return SegmentParams(
            index_interval_bytes=self.index_interval_bytes,
            max_index_size=self.segment_index_bytes,
            preallocate=self.preallocate,
            segment_bytes=self.segment_size,
        )

    def random_segment_jitter(self, rng: random.Random) -> int:
        """A segment's roll jitter in ms, drawn as Kafka draws it (``segment.jitter.ms``)."""
        if self.segment_jitter_ms == 0:
            return 0
        return rng.randrange(2**31) % min(self.segment_jitter_ms, self.segment_ms)


TOPIC_CONFIG = ConfigDef.of(LogConfig)


def check_remote_storage(config: LogConfig, *, system_enable: bool, was_enabled: bool) -> None:
    """Kafka's LogConfig.validateTopicLogConfigValues for tiered storage: a topic tiers only
    where the broker allows it, only with ``cleanup.policy=delete``, with local retention
    within the total; turning it off needs ``remote.log.delete.on.disable``; with copies
    disabled, local retention is the total's. Messages are Kafka's."""
    if not config.remote_storage_enable:
        if was_enabled and not config.remote_log_delete_on_disable:
            raise InvalidConfigError(
                "remote.storage.enable",
                "It is invalid to disable remote storage without deleting remote data. If you "
                "want to keep the remote data and turn to read only, please set "
                "`remote.storage.enable=true,remote.log.copy.disable=true`. If you want to "
                "disable remote storage and delete all remote data, please set "
                "`remote.storage.enable=false,remote.log.delete.on.disable=true`.",
            )
        return
    if not system_enable:
        raise InvalidConfigError(
            "remote.storage.enable",
            "Tiered Storage functionality is disabled in the broker. Topic cannot be "
            "configured with remote log storage.",
        )
    if config.cleanup_policy and config.cleanup_policy != frozenset({"delete"}):
        raise InvalidConfigError(
            "cleanup.policy",
            "Remote log storage only supports topics with cleanup.policy=delete or "
            "cleanup.policy being an empty list.",
        )
    for name, total, local in (
        ("bytes", config.retention_bytes, config.local_retention_bytes),
        ("ms", config.retention_ms, config.local_retention_ms),
    ):
        if total > -1 and local != -2:
            if local == -1:
                raise InvalidConfigError(
                    f"local.retention.{name}",
                    f"Value must not be -1 as retention.{name} value is set as {total}.",
                )
            if local > total:
                raise InvalidConfigError(
                    f"local.retention.{name}",
                    f"Value must not be more than retention.{name} property value: {total}",
                )
        if config.remote_log_copy_disable and local not in (-2, total):
            raise InvalidConfigError(
                f"local.retention.{name}",
                f"When `remote.log.copy.disable` is set to true, the `local.retention.{name}` "
                f"and `retention.{name}` must be set to the identical value because there will "
                "be no more logs copied to the remote storage.",
            )

"""LogConfig: every topic-level key of Kafka's TopicConfig, with its names, defaults and bounds.

Why: one parameter object per partition, parsed in one place (Kafka's LogConfig), so a bad value
fails at the door with an error naming the key instead of deep inside an append. Refuses:
unknown keys (Kafka rejects them too) and silent coercion of malformed values.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafkalog.errors import InvalidConfigError
from kafkalog.storage.segment import SegmentParams
from kafkalog.types import INT32_MAX, INT64_MAX, CompressionType, TimestampType

Validator = Callable[[str, Any], Any]


def _int(low: int | None = None, high: int | None = None, *, int32: bool = False) -> Validator:
    top = INT32_MAX if int32 else INT64_MAX
    high = top if high is None else high

    def parse(key: str, value: Any) -> int:
        if isinstance(value, bool):
            raise InvalidConfigError(key, f"expected an integer, got {value!r}")
        try:
            n = int(str(value).strip()) if not isinstance(value, int) else int(value)
        except ValueError:
            raise InvalidConfigError(key, f"expected an integer, got {value!r}") from None
        if (low is not None and n < low) or n > high:
            raise InvalidConfigError(key, f"{n} is outside [{low}, {high}]")
        return n

    return parse


def _bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise InvalidConfigError(key, f"expected true or false, got {value!r}")


def _ratio(key: str, value: Any) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InvalidConfigError(key, f"expected a number, got {value!r}") from None
    if not 0.0 <= x <= 1.0:
        raise InvalidConfigError(key, f"{x} is outside [0, 1]")
    return x


def _policy(key: str, value: Any) -> frozenset[str]:
    items = value if isinstance(value, list | tuple | set | frozenset) else str(value).split(",")
    policies = frozenset(str(p).strip().lower() for p in items if str(p).strip())
    if not policies or not policies <= {"compact", "delete"}:
        raise InvalidConfigError(key, f"{value!r} must be a list of 'compact' and/or 'delete'")
    return policies


def _compression(key: str, value: Any) -> str:
    text = str(value).strip().lower()
    if text not in ("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd"):
        raise InvalidConfigError(
            key, f"{value!r} is not one of uncompressed, zstd, lz4, snappy, gzip, producer"
        )
    return "uncompressed" if text == "none" else text


def _timestamp_type(key: str, value: Any) -> TimestampType:
    if isinstance(value, TimestampType) and value is not TimestampType.NO_TIMESTAMP_TYPE:
        return value
    if str(value) in ("CreateTime", "LogAppendTime"):
        return TimestampType.parse(str(value))
    raise InvalidConfigError(key, f"{value!r} must be CreateTime or LogAppendTime")


def _gzip_level(key: str, value: Any) -> int:
    n: int = _int(-1, 9, int32=True)(key, value)
    if n == 0:
        raise InvalidConfigError(key, "gzip level must be 1..9 or -1")
    return n


def _string(key: str, value: Any) -> str:
    return str(value)


# (Kafka key, attribute, validator); the defaults are the LogConfig field defaults below
_KEYS: tuple[tuple[str, str, Validator], ...] = (
    ("segment.bytes", "segment_bytes", _int(14, int32=True)),
    ("segment.ms", "segment_ms", _int(1)),
    ("segment.jitter.ms", "segment_jitter_ms", _int(0)),
    ("segment.index.bytes", "segment_index_bytes", _int(4, int32=True)),
    ("index.interval.bytes", "index_interval_bytes", _int(0, int32=True)),
    ("flush.messages", "flush_messages", _int(1)),
    ("flush.ms", "flush_ms", _int(0)),
    ("retention.bytes", "retention_bytes", _int()),
    ("retention.ms", "retention_ms", _int(-1)),
    ("max.message.bytes", "max_message_bytes", _int(0, int32=True)),
    ("file.delete.delay.ms", "file_delete_delay_ms", _int(0)),
    ("delete.retention.ms", "delete_retention_ms", _int(0)),
    ("min.compaction.lag.ms", "min_compaction_lag_ms", _int(0)),
    ("max.compaction.lag.ms", "max_compaction_lag_ms", _int(1)),
    ("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", _ratio),
    ("cleanup.policy", "cleanup_policy", _policy),
    ("compression.type", "compression_type", _compression),
    ("compression.gzip.level", "compression_gzip_level", _gzip_level),
    ("compression.lz4.level", "compression_lz4_level", _int(1, 17, int32=True)),
    ("compression.zstd.level", "compression_zstd_level", _int(-131072, 22, int32=True)),
    ("preallocate", "preallocate", _bool),
    ("message.timestamp.type", "message_timestamp_type", _timestamp_type),
    ("message.timestamp.before.max.ms", "message_timestamp_before_max_ms", _int(0)),
    ("message.timestamp.after.max.ms", "message_timestamp_after_max_ms", _int(0)),
    ("message.timestamp.difference.max.ms", "message_timestamp_difference_max_ms", _int(0)),
    ("message.format.version", "message_format_version", _string),
    ("message.downconversion.enable", "message_downconversion_enable", _bool),
    ("local.retention.ms", "local_retention_ms", _int(-2)),
    ("local.retention.bytes", "local_retention_bytes", _int(-2)),
    ("remote.storage.enable", "remote_storage_enable", _bool),
    ("remote.log.copy.disable", "remote_log_copy_disable", _bool),
    ("remote.log.delete.on.disable", "remote_log_delete_on_disable", _bool),
    ("unclean.leader.election.enable", "unclean_leader_election_enable", _bool),
    ("min.insync.replicas", "min_insync_replicas", _int(1, int32=True)),
    ("leader.replication.throttled.replicas", "leader_replication_throttled_replicas", _string),
    ("follower.replication.throttled.replicas", "follower_replication_throttled_replicas", _string),
)
KEY_TO_ATTR = {key: attr for key, attr, _ in _KEYS}


def read_properties(path: Path) -> dict[str, str]:
    """A Java ``.properties`` file: ``key=value`` or ``key: value``, ``#``/``!`` comments."""
    out: dict[str, str] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            raise InvalidConfigError(str(path), f"line {number} has no '=' or ':': {raw!r}")
        out[line[:sep].strip()] = line[sep + 1 :].strip()
    return out


@dataclass(frozen=True)
class LogConfig:
    """A partition's configuration. Build with ``LogConfig.from_properties``; ``overrides`` keeps
    the keys that were set explicitly (persisted with a topic, shown by ``describe``)."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    flush_messages: int = INT64_MAX
    flush_ms: int = INT64_MAX
    retention_bytes: int = -1
    retention_ms: int = 604800000
    max_message_bytes: int = 1048588
    file_delete_delay_ms: int = 60000
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = INT64_MAX
    min_cleanable_dirty_ratio: float = 0.5
    cleanup_policy: frozenset[str] = frozenset({"delete"})
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    preallocate: bool = False
    message_timestamp_type: TimestampType = TimestampType.CREATE_TIME
    message_timestamp_before_max_ms: int = INT64_MAX
    message_timestamp_after_max_ms: int = INT64_MAX
    message_timestamp_difference_max_ms: int = INT64_MAX
    message_format_version: str = "3.0-IV1"
    message_downconversion_enable: bool = True
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    remote_storage_enable: bool = False
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    unclean_leader_election_enable: bool = False
    min_insync_replicas: int = 1
    leader_replication_throttled_replicas: str = ""
    follower_replication_throttled_replicas: str = ""
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
            props = read_properties(Path(props))
        base = defaults or cls()
        values: dict[str, Any] = {}
        for key, value in props.items():
            if key not in KEY_TO_ATTR:
                raise InvalidConfigError(key, "unknown topic config name")
            validator = next(v for k, _, v in _KEYS if k == key)
            values[KEY_TO_ATTR[key]] = validator(key, value)
        overrides = dict(base.overrides) | {k: _render(v) for k, v in props.items()}
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
        if only_overrides:
            return dict(self.overrides)
        return {key: _render(getattr(self, attr)) for key, attr, _ in _KEYS}

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
    def timestamp_after_max_ms(self) -> int:
        if self.message_timestamp_after_max_ms == INT64_MAX:
            return self.message_timestamp_difference_max_ms
        return self.message_timestamp_after_max_ms

    @property
    def target_compression(self) -> CompressionType | None:
        """The codec the leader writes; None means "keep the producer's"."""
        if self.compression_type == "producer":
            return None
        if self.compression_type == "uncompressed":
            return CompressionType.NONE
        return CompressionType.parse(self.compression_type)

    def compression_level(self, codec: CompressionType) -> int | None:
        if codec is CompressionType.GZIP:
            return None if self.compression_gzip_level == -1 else self.compression_gzip_level
        if codec is CompressionType.LZ4:
            return self.compression_lz4_level
        if codec is CompressionType.ZSTD:
            return self.compression_zstd_level
        return None

    def segment_params(self) -> SegmentParams:
        return SegmentParams(
            index_interval_bytes=self.index_interval_bytes,
            max_index_size=self.segment_index_bytes,
            preallocate=self.preallocate,
            segment_bytes=self.segment_bytes,
        )

    def random_segment_jitter(self, rng: random.Random) -> int:
        if self.segment_jitter_ms == 0:
            return 0
        return rng.randrange(2**31) % min(self.segment_jitter_ms, self.segment_ms)


def _render(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, frozenset | set | list | tuple):
        return ",".join(sorted(str(v) for v in value))
    if isinstance(value, TimestampType):
        return value.display_name
    return str(value)

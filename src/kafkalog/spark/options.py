"""The options of Spark's Kafka source and sink, parsed once, with Spark's names and rules.

Why: a job should switch between ``format("kafka")`` and ``format("kafkalog")`` without other
changes, so the option names, defaults, JSON forms (-2 earliest, -1 latest) and contradictions
are Spark's. PySpark lower-cases option keys, so every lookup is case-insensitive. Refuses:
guessing — an unknown, missing or contradictory option is an InvalidConfigError naming it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kafkalog.errors import InvalidConfigError
from kafkalog.records.compression import check_level
from kafkalog.types import CompressionType, TopicPartition

EARLIEST = -2
LATEST = -1

# Options Spark's Kafka source accepts that mean nothing without a broker: accepted, unused.
_BROKER_ONLY = {
    "kafka.bootstrap.servers",
    "groupidprefix",
    "kafka.group.id",
    "kafkaconsumer.polltimeoutms",
    "fetchoffset.numretries",
    "fetchoffset.retryintervalms",
    "mintriggerdelay",
    "checkpointlocation",  # Spark hands the query's checkpoint to its sources and sinks
}
_READ_KEYS = {
    "path",
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "startingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "endingtimestamp",
    "endingoffsetsbytimestamp",
    "failondataloss",
    "minpartitions",
    "maxrecordsperpartition",
    "maxoffsetspertrigger",
    "minoffsetspertrigger",
    "maxtriggerdelay",
    "includeheaders",
    "kafka.isolation.level",
    "remotestorageuri",  # tiered storage: read the remote copies alone, no log directory
}
_WRITE_KEYS = {
    "path",
    "topic",
    "kafka.transactional.id",
    "batchsize",
    "checkpointlocation",
    "includeheaders",  # Spark's guide sets it on writers too; a headers column is always written
    # the broker's side of a produce, which kafkalog plays (Kafka's broker config names)
    "auto.create.topics.enable",
    "num.partitions",
}
# Of the kafka.* producer settings, those with a meaning for records written to files are
# honoured (compression.type and its levels, batch.size); the others (acks, retries, linger.ms,
# ...) are about a network send and are accepted, unused.
# kafka.* consumer settings Spark itself rejects, with its reasons
_REJECTED = {
    "kafka.auto.offset.reset": "use startingOffsets instead",
    "kafka.key.deserializer": "keys are always read as bytes",
    "kafka.value.deserializer": "values are always read as bytes",
    "kafka.enable.auto.commit": "offsets are tracked by Spark's checkpoint",
    "kafka.interceptor.classes": "interceptors are not supported",
}

_CANONICAL = {
    name.lower(): name
    for name in [
        "subscribePattern",
        "startingOffsets",
        "endingOffsets",
        "startingTimestamp",
        "startingOffsetsByTimestamp",
        "startingOffsetsByTimestampStrategy",
        "endingTimestamp",
        "endingOffsetsByTimestamp",
        "failOnDataLoss",
        "minPartitions",
        "maxRecordsPerPartition",
        "maxOffsetsPerTrigger",
        "minOffsetsPerTrigger",
        "maxTriggerDelay",
        "includeHeaders",
        "batchSize",
        "remoteStorageUri",
    ]
}


def _name(key: str) -> str:
    """An option as Spark's documentation spells it (PySpark hands them over lower-cased)."""
    return _CANONICAL.get(key, key)


OffsetKind = Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]


@dataclass(frozen=True)
class OffsetSpec:
    """A starting or ending position: earliest, latest, per-partition offsets (-2/-1 allowed),
    one timestamp for every partition, or per-partition timestamps."""

    kind: OffsetKind
    offsets: Mapping[TopicPartition, int] | None = None
    timestamp: int | None = None


@dataclass(frozen=True)
class ReadOptions:
    log_dirs: tuple[Path, ...]
    subscribe: tuple[str, ...] | None
    subscribe_pattern: str | None
    assign: tuple[TopicPartition, ...] | None
    starting: OffsetSpec
    ending: OffsetSpec
    by_timestamp_strategy: Literal["error", "latest"]
    fail_on_data_loss: bool
    min_partitions: int | None
    max_records_per_partition: int | None
    max_offsets_per_trigger: int | None
    include_headers: bool
    read_committed: bool
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000  # Spark's Kafka source: "15m"
    remote_storage_uri: str | None = None  # set without ``path``: the store alone is read


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): str(v) for k, v in options.items()}


def log_dirs_of(opts: Mapping[str, str]) -> tuple[Path, ...]:
    raw = opts.get("path")
    if not raw:
        raise InvalidConfigError(
            "path", "is required: the log directories (Kafka's log.dirs), comma-separated"
        )
    dirs = tuple(Path(p) for p in raw.split(",") if p)
    for d in dirs:
        if not d.is_dir():
            raise InvalidConfigError("path", f"{d} is not a directory (a Kafka log directory)")
    return dirs


def _bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    if raw.lower() not in ("true", "false"):
        raise InvalidConfigError(_name(key), f"must be true or false, not {raw!r}")
    return raw.lower() == "true"


def _positive(opts: Mapping[str, str], key: str) -> int | None:
    raw = opts.get(key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise InvalidConfigError(_name(key), f"must be a positive integer, not {raw!r}") from None
    if value <= 0:
        raise InvalidConfigError(_name(key), f"must be a positive integer, not {raw!r}")
    return value


_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000,
                  "h": 3_600_000, "d": 86_400_000}  # fmt: skip


def _duration_ms(opts: Mapping[str, str], key: str, default: str) -> int:
    """A Spark time string (``15m``, ``30s``, ``500``: milliseconds), as JavaUtils.timeStringAsMs
    reads it."""
    raw = opts.get(key, default).strip().lower()
    match = re.fullmatch(r"(-?\d+)\s*([a-z]*)", raw)
    if match is None or match[2] not in ("", *_TIME_UNITS_MS) or int(match[1]) < 0:
        raise InvalidConfigError(
            _name(key), f"must be a duration such as 15m, 30s or 500ms, not {opts.get(key)!r}"
        )
    return int(int(match[1]) * _TIME_UNITS_MS.get(match[2] or "ms", 1))


def _json_partitions(key: str, raw: str) -> dict[TopicPartition, int]:
    """``{"topic":{"0":23,"1":-2}}`` -> {TopicPartition: value}."""
    try:
        parsed = json.loads(raw)
        out = {}
        for topic, parts in parsed.items():
            for partition, value in parts.items():
                out[TopicPartition(str(topic), int(partition))] = int(value)
        return out
    except (ValueError, AttributeError, TypeError):
        raise InvalidConfigError(
            _name(key), f'expected JSON like {{"topicA":{{"0":23,"1":-1}}}}, got {raw!r}'
        ) from None


def _offsets(opts: Mapping[str, str], prefix: str, streaming: bool, start: bool) -> OffsetSpec:
    """Spark's priority: <prefix>Timestamp > <prefix>OffsetsByTimestamp > <prefix>Offsets."""
    ts_key, by_ts_key, off_key = (
        f"{prefix}timestamp",
        f"{prefix}offsetsbytimestamp",
        (f"{prefix}offsets"),
    )
    if ts_key in opts:
        try:
            return OffsetSpec("timestamp", timestamp=int(opts[ts_key]))
        except ValueError:
            raise InvalidConfigError(
                _name(ts_key), f"must be a timestamp in ms, not {opts[ts_key]!r}"
            ) from None
    if by_ts_key in opts:
        return OffsetSpec("timestamps", offsets=_json_partitions(by_ts_key, opts[by_ts_key]))
    raw = opts.get(off_key)
    if raw is None:
        return OffsetSpec("latest" if streaming or not start else "earliest")
    value = raw.strip().lower()
    if value in ("earliest", "latest"):
        if not start and value == "earliest":
            raise InvalidConfigError(_name(off_key), "earliest is not allowed for ending offsets")
        if start and value == "latest" and not streaming:
            raise InvalidConfigError(_name(off_key), "latest is not allowed for a batch query")
        return OffsetSpec(value)  # type: ignore[arg-type]
    offsets = _json_partitions(off_key, raw)
    for tp, offset in offsets.items():
        if offset < EARLIEST:
            raise InvalidConfigError(_name(off_key), f"offset {offset} for {tp} is not valid")
        if not start and offset == EARLIEST:
            raise InvalidConfigError(
                _name(off_key), f"earliest (-2) for {tp} is not an ending offset"
            )
        if start and offset == LATEST and not streaming:
            raise InvalidConfigError(_name(off_key), f"latest (-1) for {tp} is not a batch start")
    return OffsetSpec("offsets", offsets=offsets)


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    opts = _lower(options)
    for key in opts:
        if key in _REJECTED:
            raise InvalidConfigError(_name(key), f"is not supported: {_REJECTED[key]}")
        if key not in _READ_KEYS and key not in _BROKER_ONLY and not key.startswith("kafka."):
            raise InvalidConfigError(_name(key), "is not an option of the kafkalog (Kafka) source")
    strategies = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(strategies) != 1:
        raise InvalidConfigError(
            "subscribe",
            "exactly one of subscribe, subscribePattern and assign must be given"
            + (f" (got {', '.join(strategies)})" if strategies else ""),
        )
    subscribe = pattern = assign = None
    if "subscribe" in opts:
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise InvalidConfigError("subscribe", "names no topic")
    elif "subscribepattern" in opts:
        pattern = opts["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as err:
            raise InvalidConfigError("subscribePattern", f"is not a valid regex: {err}") from None
    else:
        try:
            parsed = json.loads(opts["assign"])
            assign = tuple(
                TopicPartition(str(t), int(p)) for t, parts in parsed.items() for p in parts
            )
        except (ValueError, AttributeError, TypeError):
            raise InvalidConfigError(
                "assign", f'expected JSON like {{"topicA":[0,1]}}, got {opts["assign"]!r}'
            ) from None
    if streaming:
        for key in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
            if key in opts:
                raise InvalidConfigError(_name(key), "is not allowed for a streaming query")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise InvalidConfigError(
            "startingOffsetsByTimestampStrategy", f"must be error or latest, not {strategy!r}"
        )
    max_rows = _positive(opts, "maxoffsetspertrigger") if streaming else None
    min_rows = _positive(opts, "minoffsetspertrigger") if streaming else None
    if min_rows is not None and max_rows is not None and min_rows > max_rows:
        raise InvalidConfigError(  # Spark's KafkaSourceProvider refuses the same
            "minOffsetsPerTrigger",
            f"{min_rows} is higher than maxOffsetsPerTrigger ({max_rows})",
        )
    isolation = opts.get("kafka.isolation.level", "read_uncommitted").lower()
    if isolation not in ("read_uncommitted", "read_committed"):
        raise InvalidConfigError(
            "kafka.isolation.level",
            f"must be read_uncommitted or read_committed, not {isolation!r}",
        )
    remote = opts.get("remotestorageuri") or None
    if remote is not None and streaming:
        raise InvalidConfigError("remoteStorageUri", "is for batch reads of the remote copies")
    return ReadOptions(
        log_dirs=() if remote is not None and not opts.get("path") else log_dirs_of(opts),
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=_offsets(opts, "starting", streaming, start=True),
        ending=OffsetSpec("latest") if streaming else _offsets(opts, "ending", False, start=False),
        by_timestamp_strategy="latest" if strategy == "latest" else "error",
        fail_on_data_loss=_bool(opts, "failondataloss", True),
        min_partitions=_positive(opts, "minpartitions"),
        max_records_per_partition=_positive(opts, "maxrecordsperpartition"),
        max_offsets_per_trigger=max_rows,
        include_headers=_bool(opts, "includeheaders", False),
        read_committed=isolation == "read_committed",
        min_offsets_per_trigger=min_rows,
        max_trigger_delay_ms=_duration_ms(opts, "maxtriggerdelay", "15m"),
        remote_storage_uri=remote if not opts.get("path") else None,
    )


@dataclass(frozen=True)
class WriteOptions:
    log_dirs: tuple[Path, ...]
    topic: str | None
    transactional_id: str | None
    batch_size: int
    compression: CompressionType = CompressionType.NONE
    compression_level: int | None = None
    auto_create_partitions: int | None = 1  # None: auto.create.topics.enable=false


def _int(opts: Mapping[str, str], key: str) -> int | None:
    raw = opts.get(key)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise InvalidConfigError(_name(key), f"must be an integer, not {raw!r}") from None


def _compression(opts: Mapping[str, str]) -> tuple[CompressionType, int | None]:
    """The producer's ``compression.type`` (default none) and its KIP-390 level."""
    raw = opts.get("kafka.compression.type", "none")
    if raw not in ("none", "gzip", "snappy", "lz4", "zstd"):  # the producer's values, exactly
        raise InvalidConfigError(
            "kafka.compression.type", f"must be one of none, gzip, snappy, lz4, zstd, not {raw!r}"
        )
    codec = CompressionType.parse(raw)
    level = _int(opts, f"kafka.compression.{raw}.level")
    for other in ("gzip", "lz4", "zstd"):
        if other != raw:
            _int(opts, f"kafka.compression.{other}.level")  # a typo fails even when unused
    try:
        return codec, check_level(codec, level)
    except InvalidConfigError as err:
        raise InvalidConfigError(f"kafka.{err.key}", str(err).partition("': ")[2]) from None


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    opts = _lower(options)
    for key in opts:
        if key not in _WRITE_KEYS and key not in _BROKER_ONLY and not key.startswith("kafka."):
            raise InvalidConfigError(_name(key), "is not an option of the kafkalog (Kafka) sink")
    _bool(opts, "includeheaders", False)
    codec, level = _compression(opts)
    partitions = _positive(opts, "num.partitions") or 1
    return WriteOptions(
        log_dirs=log_dirs_of(opts),
        topic=opts.get("topic") or None,
        transactional_id=opts.get("kafka.transactional.id") or None,
        # files want big batches (one task writes all its rows at once, so there is no linger
        # to wait for); batchSize is kafkalog's older name for the same setting
        batch_size=_positive(opts, "kafka.batch.size") or _positive(opts, "batchsize") or 256 << 10,
        compression=codec,
        compression_level=level,
        auto_create_partitions=(
            partitions if _bool(opts, "auto.create.topics.enable", True) else None
        ),
    )

"""A topic checked before it is created, and the durability of a batch of new partitions.

Why: CreateTopics names up to thousands of partitions in one request. Kafka's controller writes
the request's topics to its metadata log as one batch, answers, and its broker makes the
partitions afterwards, flushing each ``partition.metadata`` in the background. Here the batch's
intent record (every topic's name, partition count, ID and configs) is the durable part, synced
before anything else is touched; the partitions are then made unsynced and the request
answered. Settling the batch later (the topic configs file, every new file and directory
fsynced together, then the intent cleared) is a background task's, or the next topic change's;
a crash before it completes the creation from the intent at the next start. Refuses: holding
the topic map (the manager's), and a creation half-done after a start.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kafkalog.errors import (
    CorruptCheckpointError,
    InvalidArgumentError,
    InvalidConfigError,
    KafkaLogError,
    TopicExistsError,
)
from kafkalog.log.config import LogConfig, check_remote_storage
from kafkalog.manager.log_dir import partitions
from kafkalog.storage import filenames as fn
from kafkalog.storage.atomic import fsync_together
from kafkalog.storage.faults import storage_call
from kafkalog.storage.filenames import PARTITION_METADATA
from kafkalog.storage.partition_metadata import (
    random_topic_id,
    read_partition_metadata,
    write_partition_metadata,
)
from kafkalog.types import RESERVED_UUIDS, TopicPartition, uuid_bytes, validate_new_topic_name

# far above any real topic; a guard against a typo creating millions of directories
MAX_PARTITIONS = 100_000

D = TypeVar("D")


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create, checked: its name, partition count, config overrides (as strings,
    persisted as given) and topic ID (a Kafka Uuid string)."""

    name: str
    partitions: int
    overrides: Mapping[str, str] = field(default_factory=dict)
    topic_id: str = field(default_factory=random_topic_id)


def new_topic(
    name: str,
    partitions: int,
    config: Mapping[str, Any] | None,
    topic_id: str | None,
    defaults: LogConfig,
) -> NewTopic:
    """A NewTopic from loosely typed arguments (config values of any type, as strings; a
    fresh topic ID if ``topic_id`` is None), checked by ``check_new_topic``."""
    if config is not None and not isinstance(config, Mapping):
        raise InvalidConfigError("config", f"must be a mapping, not {type(config).__name__}")
    overrides = {
        k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in (config or {}).items()
    }
    new = NewTopic(name, partitions, overrides, random_topic_id() if topic_id is None else topic_id)
    check_new_topic(new, defaults)
    return new


def check_new_topic(
    new: NewTopic, defaults: LogConfig, *, remote_storage_system_enable: bool | None = None
) -> None:
    """Raise, before anything is written, if ``new`` could not be created: its name as Kafka
    checks a new topic's, its partition count, its topic ID (a Uuid, not one Kafka reserves),
    its overrides over ``defaults``, and (given the broker's switch) tiered storage's rules."""
    validate_new_topic_name(new.name)
    uuid_bytes(new.topic_id)
    if new.topic_id in RESERVED_UUIDS:
        raise InvalidArgumentError(f"topic ID {new.topic_id} is reserved by Kafka")
    count = new.partitions
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise InvalidConfigError("partitions", f"must be an int >= 1, not {count!r}")
    if count > MAX_PARTITIONS:
        raise InvalidConfigError("partitions", f"at most {MAX_PARTITIONS}, not {count}")
    config = LogConfig.from_properties(dict(new.overrides), defaults=defaults)
    if remote_storage_system_enable is not None:
        check_remote_storage(config, system_enable=remote_storage_system_enable, was_enabled=False)


def refuse_creating(
    topics: Sequence[NewTopic], existing: set[str], only: frozenset[TopicPartition] | None
) -> tuple[dict[str, KafkaLogError], list[NewTopic]]:
    """Why each of ``topics`` may not be created (it is among ``existing``; a manager that
    opened ``only`` some partitions would not have opened all of its), and those that may."""
    refused: dict[str, KafkaLogError] = {}
    accepted = []
    for new in topics:
        wanted = (TopicPartition(new.name, p) for p in range(new.partitions))
        missing = [] if only is None else [tp for tp in wanted if tp not in only]
        if new.name in existing:
            refused[new.name] = TopicExistsError(f"topic {new.name!r} already exists")
        elif missing:
            # a partition a partial manager creates without opening would never be closed
            refused[new.name] = KafkaLogError(
                f"cannot create topic {new.name!r} with {new.partitions} partitions: this log "
                f"manager was asked to open some partitions only, and not {missing[0]}"
            )
        else:
            accepted.append(new)
    return refused, accepted


def place_partitions(
    new: Sequence[TopicPartition], log_dirs: Sequence[D], holding: Iterable[D]
) -> list[D]:
    """The log directory of each ``new`` partition: the one holding the fewest partitions
    (``holding`` names each existing partition's), the first on ties, as Kafka's LogManager
    chooses. Counted once and kept up to date, so placing thousands is linear."""
    counts = {id(d): 0 for d in log_dirs}
    for d in holding:
        if id(d) in counts:
            counts[id(d)] += 1
    placed = []
    for _ in new:
        target = min(log_dirs, key=lambda d: counts[id(d)])
        counts[id(target)] += 1
        placed.append(target)
    return placed


def sync_new_partitions(
    partition_dirs: Iterable[Path], log_dirs: Iterable[Path], *, threads: int = 16
) -> None:
    """Make new partition directories durable: each ``partition.metadata`` (written unsynced),
    each directory's entries (the segment files, the metadata's rename), and each log
    directory's entries (the partition directories), all fsynced together."""
    paths: list[Path] = []
    for d in partition_dirs:
        if (d / PARTITION_METADATA).exists():
            paths.append(d / PARTITION_METADATA)
        paths.append(d)
    fsync_together([*paths, *log_dirs], threads=threads)


def roll_forward(topics: Sequence[NewTopic], log_dirs: Sequence[Path]) -> None:
    """Complete a creation whose intent was durable, before the logs are loaded: every partition
    of ``topics`` gets its directory (placed as a new one would be, if the crash came before it
    was made) and its ``partition.metadata`` (rewritten: the crash may have left it empty), all
    synced. The loader gives an empty directory its first segment."""
    wanted = {
        TopicPartition(new.name, p): new.topic_id for new in topics for p in range(new.partitions)
    }
    found: dict[TopicPartition, Path] = {}
    holding: list[Path] = []
    for d in log_dirs:
        for tp, child in partitions(d)[0]:
            holding.append(d)
            if tp in wanted:
                found[tp] = child
    missing = [tp for tp in wanted if tp not in found]
    for tp, d in zip(missing, place_partitions(missing, log_dirs, holding), strict=True):
        found[tp] = d / fn.partition_dir_name(tp)
        storage_call(found[tp].mkdir, what=f"creating {found[tp]}")
    for tp, partition_dir in found.items():
        try:
            meta = read_partition_metadata(partition_dir)
        except CorruptCheckpointError:  # the crash left it empty or torn
            meta = None
        if meta is None or meta.topic_id != wanted[tp]:  # a full disk refuses only what it must
            write_partition_metadata(partition_dir, wanted[tp], sync=False)
    sync_new_partitions(list(found.values()), log_dirs)

"""Making topic creation and deletion all-or-nothing across a crash.

Why: a topic is several partition directories, possibly in several log directories, and no file
system renames several directories at once. A kill -9 half-way through creating a topic would
leave 1 of its 2 partitions (and "it exists" when created again); half-way through deleting one,
a topic with partitions missing. Kafka records the intent in its metadata log first; kafkalog
records it in a small file in each log directory (a file, which a broker's loader ignores)
before it touches a partition, and removes it when done. On the next start a pending creation is
rolled back (it was never acknowledged) and a pending deletion is completed; so are partitions
being added to a topic (rolled back). One intent may name several topics: the topics of one
CreateTopics request share it, and are created or rolled back together. Refuses: anything but
whole topics and added partitions.
"""

from __future__ import annotations

import json
import logging
import shutil
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kafkalog.errors import CorruptCheckpointError, InvalidConfigError
from kafkalog.storage import filenames as fn
from kafkalog.storage.atomic import delete_if_exists, fsync_dir, write_atomically
from kafkalog.storage.faults import storage_call
from kafkalog.types import TopicPartition

logger = logging.getLogger("kafkalog.manager")

INTENT_FILE = "kafkalog-topic-intent.json"
CREATE, DELETE, ADD_PARTITIONS = "create", "delete", "add-partitions"


@dataclass(frozen=True, slots=True)
class TopicIntent:
    op: str
    topics: tuple[str, ...]  # DELETE and ADD_PARTITIONS: one
    first_partition: int = 0  # ADD_PARTITIONS: the first new partition (rolled back from here)


def record(log_dirs: Iterable[Path], intent: TopicIntent) -> None:
    """Say, durably and in every log directory, what is about to be done to which topics."""
    data = json.dumps(
        {
            "version": 1,
            "op": intent.op,
            "topics": list(intent.topics),
            "first": intent.first_partition,
        }
    ).encode()
    for d in log_dirs:
        write_atomically(d / INTENT_FILE, data)


def clear(log_dirs: Iterable[Path]) -> None:
    for d in log_dirs:
        if delete_if_exists(d / INTENT_FILE):
            fsync_dir(d)


def pending(log_dir: Path) -> TopicIntent | None:
    path = log_dir / INTENT_FILE
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
        op, first = data["op"], data.get("first", 0)
        topics = data["topics"] if "topics" in data else [data["topic"]]  # version 0: one
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CorruptCheckpointError(f"unreadable topic intent: {err}", file=str(path)) from err
    if op not in (CREATE, DELETE, ADD_PARTITIONS) or not isinstance(topics, list) or not topics:
        raise CorruptCheckpointError(f"unknown topic intent {data!r}", file=str(path))
    if not all(isinstance(t, str) for t in topics) or not isinstance(first, int) or first < 0:
        raise CorruptCheckpointError(f"unknown topic intent {data!r}", file=str(path))
    return TopicIntent(op, tuple(topics), first)


def mark_for_deletion(partition_dir: Path) -> Path:
    """Rename a partition directory ``<topic>-<p>.<uuid>-delete`` (Kafka's name for a partition
    being deleted, which every loader skips) and return the new path."""
    target = partition_dir.with_name(
        f"{partition_dir.name}.{uuid.uuid4().hex}{fn.DELETE_DIR_SUFFIX}"
    )
    storage_call(partition_dir.rename, target, what=f"renaming {partition_dir} for deletion")
    fsync_dir(partition_dir.parent)
    return target


def finish(log_dir: Path, intent: TopicIntent) -> list[Path]:
    """Undo a pending creation or complete a pending deletion in ``log_dir``: every partition
    directory of the topic is renamed for deletion (for an interrupted CreatePartitions, those
    from ``first_partition`` on). Returns the renamed directories."""
    renamed = []
    for child in sorted(log_dir.iterdir()):
        if not child.is_dir() or child.name.endswith(
            (fn.DELETE_DIR_SUFFIX, fn.FUTURE_DIR_SUFFIX, fn.STRAY_DIR_SUFFIX)
        ):
            continue
        try:
            tp = fn.parse_partition_dir_name(child.name)
        except ValueError:
            continue
        if tp.topic in intent.topics and tp.partition >= intent.first_partition:
            renamed.append(mark_for_deletion(child))
    return renamed


def finish_interrupted(log_dirs: list[Path]) -> list[TopicIntent]:
    """Roll back a creation, or complete a deletion, that a crash interrupted, in every log
    directory; the intents finished. The caller forgets a rolled-back topic's configs, then
    ``clear``s the intents: a crash before that finishes them again, harmlessly."""
    intents = {pending(d) for d in log_dirs} - {None}
    done = []
    for intent in intents:
        assert intent is not None
        for d in log_dirs:
            finish(d, intent)
        logger.warning(
            "completed the interrupted %s of %s", intent.op, ", ".join(map(repr, intent.topics))
        )
        done.append(intent)
    return done


def roll_back(log_dirs: list[Path], intent: TopicIntent) -> None:
    """Remove what a creation that failed part-way made, in every log directory (the caller
    ``clear``s the intent once the topic configs say the same)."""
    for d in log_dirs:
        for path in finish(d, intent):
            shutil.rmtree(path, ignore_errors=True)


def topic_partitions(partitions: object) -> frozenset[TopicPartition]:
    """The ``partitions`` a LogManager was asked to open, checked: TopicPartitions only."""
    listed = list(partitions) if isinstance(partitions, Iterable) else None
    if listed is None or not all(isinstance(tp, TopicPartition) for tp in listed):
        raise InvalidConfigError("partitions", f"must be TopicPartitions, not {partitions!r}")
    return frozenset(listed)

"""Making topic creation and deletion all-or-nothing across a crash.

Why: a topic is several partition directories, possibly in several log directories, and no file
system renames several directories at once. A kill -9 half-way through creating a topic would
leave 1 of its 2 partitions (and "it exists" when created again); half-way through deleting one,
a topic with partitions missing. Kafka records the intent in its metadata log first; kafkalog
records it in a small file in each log directory (a file, which a broker's loader ignores)
before it touches a partition, and removes it when done.

On the next start a pending deletion is completed, and so is a pending creation (``CREATED``:
the intent names every topic's partition count, ID and configs, and once it is durable the
topics exist, as a topic in Kafka's metadata log exists while its broker has yet to make the
partitions); partitions being added to a topic are rolled back, as is a creation recorded by an
earlier kafkalog (``CREATE``, which named no partition counts). One intent may name several
topics: a CreateTopics request's share one. Refuses: anything but whole topics and added
partitions.
"""

from __future__ import annotations

import json
import logging
import shutil
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafkalog.errors import CorruptCheckpointError, InvalidConfigError
from kafkalog.manager.log_dir import partitions
from kafkalog.manager.topic_creation import MAX_PARTITIONS, NewTopic
from kafkalog.storage import filenames as fn
from kafkalog.storage.atomic import delete_if_exists, fsync_dir, write_atomically
from kafkalog.storage.faults import storage_call
from kafkalog.types import TopicPartition, uuid_bytes

logger = logging.getLogger("kafkalog.manager")

INTENT_FILE = "kafkalog-topic-intent.json"
CREATE, DELETE, ADD_PARTITIONS = "create", "delete", "add-partitions"
CREATED = "created"  # rolled forward at the next start, where CREATE is rolled back


@dataclass(frozen=True, slots=True)
class TopicIntent:
    op: str
    topics: tuple[str, ...]  # DELETE and ADD_PARTITIONS: one
    first_partition: int = 0  # ADD_PARTITIONS: the first new partition (rolled back from here)
    new_topics: tuple[NewTopic, ...] = ()  # CREATED: what to complete

    @classmethod
    def created(cls, topics: Iterable[NewTopic]) -> TopicIntent:
        listed = tuple(topics)
        return cls(CREATED, tuple(new.name for new in listed), new_topics=listed)


def record(log_dirs: Iterable[Path], intent: TopicIntent) -> None:
    """Say, durably and in every log directory, what is about to be done to which topics."""
    document: dict[str, object] = {
        "version": 1,
        "op": intent.op,
        "topics": list(intent.topics),
        "first": intent.first_partition,
    }
    if intent.op == CREATED:
        document["new"] = [
            {
                "name": new.name,
                "partitions": new.partitions,
                "topic_id": new.topic_id,
                "configs": dict(new.overrides),
            }
            for new in intent.new_topics
        ]
    data = json.dumps(document).encode()
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
        new_topics = tuple(_new_topic(t) for t in data["new"]) if op == CREATED else ()
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CorruptCheckpointError(f"unreadable topic intent: {err}", file=str(path)) from err
    known = (CREATE, CREATED, DELETE, ADD_PARTITIONS)
    if op not in known or not isinstance(topics, list) or not topics:
        raise CorruptCheckpointError(f"unknown topic intent {data!r}", file=str(path))
    if not all(isinstance(t, str) for t in topics) or not isinstance(first, int) or first < 0:
        raise CorruptCheckpointError(f"unknown topic intent {data!r}", file=str(path))
    if op == CREATED and [new.name for new in new_topics] != topics:
        raise CorruptCheckpointError(f"unknown topic intent {data!r}", file=str(path))
    return TopicIntent(op, tuple(topics), first, new_topics)


def _new_topic(entry: dict[str, Any]) -> NewTopic:
    name, partitions, topic_id = entry["name"], entry["partitions"], entry["topic_id"]
    configs = entry["configs"]
    if not isinstance(name, str) or not isinstance(topic_id, str):
        raise TypeError(f"a created topic's name and ID are strings, not {entry!r}")
    if not isinstance(partitions, int) or not 1 <= partitions <= MAX_PARTITIONS:
        raise ValueError(f"a created topic's partition count out of range in {entry!r}")
    if not isinstance(configs, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in configs.items()
    ):
        raise TypeError(f"a created topic's configs are strings, not {entry!r}")
    uuid_bytes(topic_id)
    return NewTopic(name, partitions, configs, topic_id)


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
    for tp, child in partitions(log_dir)[0]:
        if tp.topic in intent.topics and tp.partition >= intent.first_partition:
            renamed.append(mark_for_deletion(child))
    return renamed


def finish_interrupted(log_dirs: list[Path]) -> list[TopicIntent]:
    """Roll back a creation of old (``CREATE``) or added partitions, or complete a deletion,
    that a crash interrupted, in every log directory; the intents found. A ``CREATED`` one is
    the caller's to complete (it places partitions); the caller also forgets a rolled-back
    topic's configs, then ``clear``s the intents: a crash before that finishes them again,
    harmlessly."""
    intents: list[TopicIntent] = []  # each once: every log directory holds a copy
    for d in log_dirs:
        found = pending(d)
        if found is not None and found not in intents:
            intents.append(found)
    done = []
    for intent in intents:
        for d in log_dirs if intent.op != CREATED else ():
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

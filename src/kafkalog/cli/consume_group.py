"""``consume --group``: the console consumer's group offsets, kept where Kafka keeps them.

Why: ``kafka-console-consumer --group g`` resumes where the group's last commit left off and
commits as it goes; kafkalog's ``consume`` does the same on the files. It starts each
partition at the group's committed offset in ``__consumer_offsets`` (read without the lock,
as ``kafkalog serve`` or a Kafka broker wrote it), and at exit commits its position there in
Kafka's record format, so a later ``consume --group``, ``kafkalog serve``'s OffsetFetch and
``kafka-consumer-groups`` see it. Refuses: running beside a process that holds the directory
(the commit needs the lock; a consumer of that server should use the server), and group
membership (one console consumer is the whole group, as a single Kafka console consumer is).
"""

from __future__ import annotations

import time
from pathlib import Path

from kafkalog.coordinator.offsets_store import (
    GroupOffsets,
    OffsetAndMetadata,
    append_offset_records,
    apply_batches,
    offset_commit_key,
    offset_commit_value,
    partition_for,
)
from kafkalog.errors import LogDirectoryLockedError
from kafkalog.log.view import PartitionView, discover_partitions
from kafkalog.manager.log_manager import LogManager
from kafkalog.storage.dir_lock import held_by_writer
from kafkalog.types import OFFSETS_TOPIC

OFFSETS_TOPIC_PARTITIONS = 50  # offsets.topic.num.partitions' default, for the first commit


def committed_offsets(dirs: list[Path], group: str) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the group's committed offset, from the files."""
    partitions = {tp.partition: path for tp, path in discover_partitions(dirs).items()
                  if tp.topic == OFFSETS_TOPIC}  # fmt: skip
    if not partitions:
        return {}
    view = PartitionView(partitions[partition_for(group, len(partitions))])
    out: GroupOffsets = {}
    apply_batches(out, view.batches(view.log_start_offset()))
    return {tp: o.offset for tp, o in out.get(group, {}).items()}


def check_can_commit(dirs: list[Path]) -> None:
    """Refuse before reading anything when a writer holds a directory the commit needs."""
    for d in dirs:
        if held_by_writer(d):
            raise LogDirectoryLockedError(
                f"--group commits to {OFFSETS_TOPIC} under the log directory's lock, and {d} is "
                "held by another process (kafkalog serve?): consume through that server with a "
                "Kafka client instead, or leave out --group"
            )


def commit(dirs: list[Path], group: str, topic: str, positions: dict[int, int]) -> None:
    """Commit each partition's next offset for ``group``, as a consumer's close does."""
    if not positions:
        return  # nothing consumed: nothing to commit (and no topic to create)
    now = int(time.time() * 1000)
    rows: list[tuple[bytes, bytes | None]] = [
        (offset_commit_key(group, topic, p), offset_commit_value(OffsetAndMetadata(o, -1, "", now)))
        for p, o in sorted(positions.items())
    ]
    with LogManager(dirs) as manager:
        append_offset_records(manager, group, rows, OFFSETS_TOPIC_PARTITIONS)

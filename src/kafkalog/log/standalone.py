"""Clean-shutdown marker and checkpoints for a Log used without a LogManager.

Why: Kafka keeps the clean-shutdown marker and the recovery-point / log-start-offset checkpoints
per *log directory*, written by the LogManager. A Log opened on its own keeps the same files, in
the same formats, inside its partition directory (Kafka ignores files it does not know there).
If the partition has no state of its own yet (say, a broker wrote it), the parent log
directory's files are read, so the Log starts from what the broker recorded. Refuses: writing
to the parent directory, which may belong to a broker.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kafkalog.errors import CorruptCheckpointError, InvalidTopicError
from kafkalog.storage import filenames as fn
from kafkalog.storage.atomic import delete_if_exists, write_atomically
from kafkalog.storage.checkpoints import OffsetCheckpointFile
from kafkalog.types import TopicPartition


@dataclass(frozen=True, slots=True)
class PartitionState:
    had_clean_shutdown: bool
    recovery_point: int
    log_start_offset: int


def _topic_partition(directory: Path) -> TopicPartition:
    try:
        return fn.parse_partition_dir_name(directory.name)
    except InvalidTopicError:
        return TopicPartition(directory.name, 0)


def _entry(path: Path, tp: TopicPartition) -> int | None:
    try:
        found = OffsetCheckpointFile(path).read().get(tp)
        return None if found is None else max(0, found)
    except CorruptCheckpointError:
        return None  # as Kafka: an unreadable checkpoint means "recover everything"


class StandaloneState:
    """The marker and checkpoints of one partition directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.tp = _topic_partition(directory)
        self.marker = directory / fn.CLEAN_SHUTDOWN_FILE
        self.recovery_file = directory / fn.RECOVERY_POINT_CHECKPOINT
        self.start_file = directory / fn.LOG_START_OFFSET_CHECKPOINT

    def read(self) -> PartitionState:
        """Read the state, then remove the marker so a crash from now on counts as unclean."""
        own = self.recovery_file.exists()
        source = self.directory if own else self.directory.parent
        clean = (source / fn.CLEAN_SHUTDOWN_FILE).exists()
        recovery = _entry(source / fn.RECOVERY_POINT_CHECKPOINT, self.tp) or 0
        start = _entry(source / fn.LOG_START_OFFSET_CHECKPOINT, self.tp) or 0
        delete_if_exists(self.marker)
        return PartitionState(clean, recovery, start)

    def save(self, recovery_point: int, log_start_offset: int) -> None:
        OffsetCheckpointFile(self.recovery_file).write({self.tp: recovery_point})
        OffsetCheckpointFile(self.start_file).write({self.tp: log_start_offset})

    def mark_clean_shutdown(self, recovery_point: int, log_start_offset: int) -> None:
        self.save(recovery_point, log_start_offset)
        write_atomically(self.marker, json.dumps({"version": 0, "brokerEpoch": -1}).encode())

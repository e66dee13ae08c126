"""Loading one log directory at start, and the directories the disk failed while loading
(Kafka's LogManager.loadLogs and LogDirFailureChannel).

Why: a full or failing disk in one log directory must not cost acknowledged data (recovery
may not "repair" what is only a failed write) nor the partitions of the other directories.
Kafka takes such a directory offline: its partitions answer KAFKA_STORAGE_ERROR, its files
stay as they are for the operator, and the broker serves the rest. Refuses: retrying (the
directory comes back at the next open, once the disk is repaired) and deciding anything about
healthy directories.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from kafkalog.errors import KafkaStorageError
from kafkalog.log.log import Log
from kafkalog.manager.log_dir import LogDirectory
from kafkalog.storage import filenames as fn
from kafkalog.types import TopicPartition

logger = logging.getLogger("kafkalog.manager")


def open_directory_logs(
    jobs: list[tuple[TopicPartition, Path]],
    open_log: Callable[[TopicPartition, Path], Log],
    threads: int,
) -> list[Log]:
    """Open every partition of one directory on ``threads`` threads. If any fails, every one
    that opened is closed again (as after a crash: nothing written), and the first failure is
    raised, a non-storage one before a KafkaStorageError."""
    with ThreadPoolExecutor(threads, thread_name_prefix="kafkalog-load") as pool:
        futures = [pool.submit(open_log, tp, path) for tp, path in jobs]
    failures = [e for e in (f.exception() for f in futures) if e is not None]
    if not failures:
        return [f.result() for f in futures]
    for f in futures:
        if f.exception() is None:
            f.result().close_without_flush()
    raise next((e for e in failures if not isinstance(e, KafkaStorageError)), failures[0])


# (partition directory, partition, recovery point, log start offset, clean shutdown) -> Log
OpenLog = Callable[[Path, TopicPartition, int, int, bool], Log]


@dataclass
class DirectoryLoad:
    """What loading one directory found: the logs it opened, the partitions it left closed
    (a partial manager's others) and those a deletion left marked ``-delete``."""

    opened: list[tuple[TopicPartition, Log]] = field(default_factory=list)
    unopened: list[TopicPartition] = field(default_factory=list)
    deleted: list[tuple[TopicPartition, Path]] = field(default_factory=list)


def load_directory(
    d: LogDirectory,
    only: frozenset[TopicPartition] | None,
    open_log: OpenLog,
    threads: int,
    offline: OfflineLogDirs,
) -> DirectoryLoad | None:
    """Open ``d``'s partitions (``only`` these, if given) from its checkpoints and marker;
    None if the disk failed meanwhile, and ``d`` is then offline."""
    clean = d.take_clean_shutdown()
    recovery, starts = d.read_checkpoints()
    live, deleted = d.partitions()
    jobs = [(tp, path) for tp, path in live if only is None or tp in only]
    load = DirectoryLoad(deleted=deleted)
    if only is not None:
        load.unopened = [tp for tp, _ in live if tp not in only]
        d.keep_unopened(
            {tp: o for tp, o in recovery.items() if tp in load.unopened},
            {tp: o for tp, o in starts.items() if tp in load.unopened},
        )
    try:
        logs = open_directory_logs(
            jobs,
            lambda tp, path: open_log(path, tp, recovery.get(tp, 0), starts.get(tp, 0), clean),
            threads,
        )
    except KafkaStorageError as err:  # the disk, not the data: Kafka's offline directory
        offline.take(d, [tp for tp, _ in live], err)
        return None
    load.opened = [(tp, log) for (tp, _), log in zip(jobs, logs, strict=True)]
    return load


class OfflineLogDirs:
    """The directories taken offline, with the error that did it, and their partitions. Not
    thread-safe: the manager changes it only while loading."""

    def __init__(self) -> None:
        self._dirs: dict[Path, tuple[LogDirectory, str]] = {}
        self.partitions: dict[TopicPartition, Path] = {}

    def take(self, d: LogDirectory, partitions: list[TopicPartition], err: BaseException) -> None:
        """``d`` goes offline; it stays locked, so nobody else writes it meanwhile."""
        self._dirs[d.path] = (d, str(err))
        for tp in partitions:
            self.partitions[tp] = d.path
        logger.error(
            "log directory %s is offline: %s; its %d partitions answer KAFKA_STORAGE_ERROR "
            "until the disk is repaired and the directory opened again",
            d.path,
            err,
            len(partitions),
        )

    @property
    def reasons(self) -> dict[Path, str]:
        return {path: why for path, (_, why) in self._dirs.items()}

    def error_for(self, tp: TopicPartition) -> KafkaStorageError | None:
        """The error an operation on ``tp`` gets, if its directory is offline."""
        path = self.partitions.get(tp)
        if path is None:
            return None
        return KafkaStorageError(
            f"{tp.topic}-{tp.partition} is in log directory {path}, which is offline: "
            f"{self._dirs[path][1]}"
        )

    def partition_dir(self, tp: TopicPartition) -> Path | None:
        """Where an offline partition's files are (to read, never to write); None if online."""
        path = self.partitions.get(tp)
        return None if path is None else path / fn.partition_dir_name(tp)

    def check_topic(self, topic: str) -> None:
        """KafkaStorageError if any partition of ``topic`` is offline."""
        for tp in self.partitions:
            if tp.topic == topic and (err := self.error_for(tp)) is not None:
                raise err

    def release(self) -> None:
        for d, _ in self._dirs.values():
            d.release()

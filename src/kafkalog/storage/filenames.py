"""Every file and directory name kafkalog reads or writes (Kafka's LogFileUtils,
UnifiedLog.parseTopicPartitionName).

Why: Kafka names a segment's files by a 20-digit, zero-padded base offset plus a suffix, and a
partition directory ``<topic>-<partition>``; temporary states add ``.deleted``, ``.cleaned``,
``.swap``. Those strings live here and nowhere else. Refuses: any I/O.
"""

from __future__ import annotations

import re
from pathlib import Path

from kafkalog.errors import InvalidTopicError
from kafkalog.types import TopicPartition, validate_topic_name

LOG_FILE_SUFFIX = ".log"
INDEX_FILE_SUFFIX = ".index"
TIME_INDEX_FILE_SUFFIX = ".timeindex"
TXN_INDEX_FILE_SUFFIX = ".txnindex"
PRODUCER_SNAPSHOT_FILE_SUFFIX = ".snapshot"
DELETED_FILE_SUFFIX = ".deleted"
CLEANED_FILE_SUFFIX = ".cleaned"
SWAP_FILE_SUFFIX = ".swap"
TMP_FILE_SUFFIX = ".tmp"
CHECKPOINT_DELETED_SUFFIX = ".checkpoint.deleted"

INDEX_SUFFIXES = (INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX)

# files in a partition directory that are not segments
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
# files in a log directory
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"

DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
_SPECIAL_DIR = re.compile(r"^(\S+)-(\S+)\.(\S+)(-delete|-future|-stray)$")


def filename_prefix_from_offset(offset: int) -> str:
    """The 20-digit, zero-padded decimal form of an offset."""
    if offset < 0:
        raise ValueError(f"file name offsets must be >= 0, not {offset}")
    return f"{offset:020d}"


def log_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / (filename_prefix_from_offset(offset) + LOG_FILE_SUFFIX + suffix)


def offset_index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / (filename_prefix_from_offset(offset) + INDEX_FILE_SUFFIX + suffix)


def time_index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / (filename_prefix_from_offset(offset) + TIME_INDEX_FILE_SUFFIX + suffix)


def transaction_index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / (filename_prefix_from_offset(offset) + TXN_INDEX_FILE_SUFFIX + suffix)


def segment_files(directory: Path, offset: int, suffix: str = "") -> tuple[Path, ...]:
    """The four files of the segment at ``offset``: log, offset index, time index, txn index."""
    return (
        log_file(directory, offset, suffix),
        offset_index_file(directory, offset, suffix),
        time_index_file(directory, offset, suffix),
        transaction_index_file(directory, offset, suffix),
    )


def producer_snapshot_file(directory: Path, offset: int) -> Path:
    return directory / (filename_prefix_from_offset(offset) + PRODUCER_SNAPSHOT_FILE_SUFFIX)


def offset_from_file_name(name: str) -> int:
    """The offset before the first ``.`` of a segment-style file name."""
    prefix = name.split(".", 1)[0]
    if not prefix.isdigit():
        raise ValueError(f"{name!r} does not start with an offset")
    return int(prefix)


def strip_suffix(path: Path, suffix: str) -> Path:
    name = path.name
    if not name.endswith(suffix):
        raise ValueError(f"{name} does not end with {suffix}")
    return path.with_name(name[: -len(suffix)])


def is_index_file(name: str) -> bool:
    return name.endswith(INDEX_SUFFIXES)


def is_log_file(name: str) -> bool:
    return name.endswith(LOG_FILE_SUFFIX)


def is_snapshot_file(name: str) -> bool:
    return name.endswith(PRODUCER_SNAPSHOT_FILE_SUFFIX)


def partition_dir_name(tp: TopicPartition) -> str:
    validate_topic_name(tp.topic)
    if tp.partition < 0:
        raise InvalidTopicError(f"partition must be >= 0, not {tp.partition}")
    return f"{tp.topic}-{tp.partition}"


def parse_partition_dir_name(name: str) -> TopicPartition:
    """``<topic>-<partition>`` (also the ``.<uuid>-delete|-future|-stray`` forms)."""
    bare = name
    if name.endswith((DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)):
        if not _SPECIAL_DIR.match(name):
            raise InvalidTopicError(
                f"{name!r} is not in the form of topic-partition.uniqueId-suffix"
            )
        bare = name[: name.rindex(".")]
    if not bare or "-" not in bare:
        raise InvalidTopicError(f"{name!r} is not in the form of topic-partition")
    topic, _, partition = bare.rpartition("-")
    if not topic or not partition or not partition.isdigit():
        raise InvalidTopicError(f"{name!r} is not in the form of topic-partition")
    return TopicPartition(topic, int(partition))

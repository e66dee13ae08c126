"""Checkpoint files in Kafka's text format (Kafka's CheckpointFile): offsets per partition, leader
epochs.

Why: recovery points, log start offsets, cleaner offsets and leader epochs must survive restarts
in the exact format a Kafka broker reads. Refuses: writing in place (always temp + rename) and
guessing at malformed content (a CorruptCheckpointError names the file and line).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TypeVar

from kafkalog.errors import CorruptCheckpointError
from kafkalog.storage.atomic import write_atomically
from kafkalog.types import INT32_MAX, INT64_MAX, TopicPartition

CHECKPOINT_VERSION = 0
T = TypeVar("T")


def _write(path: Path, lines: list[str], sync: bool) -> None:
    text = f"{CHECKPOINT_VERSION}\n{len(lines)}\n" + "".join(line + "\n" for line in lines)
    write_atomically(path, text.encode("utf-8"), sync=sync)


def _read(path: Path, parse: Callable[[list[str]], T], fields: int) -> list[T]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    except UnicodeDecodeError as err:
        raise CorruptCheckpointError(f"not UTF-8 text: {err}", file=str(path)) from err
    except IsADirectoryError as err:
        raise CorruptCheckpointError(
            "a directory where a checkpoint belongs", file=str(path)
        ) from err
    except OSError as err:
        raise CorruptCheckpointError(f"unreadable: {err.strerror or err}", file=str(path)) from err
    if not lines:
        return []
    try:
        version = int(lines[0].strip())
    except ValueError as err:
        raise CorruptCheckpointError(
            f"malformed version line {lines[0]!r}", file=str(path)
        ) from err
    if version != CHECKPOINT_VERSION:
        raise CorruptCheckpointError(f"unrecognised version {version}", file=str(path))
    if len(lines) < 2:
        return []
    try:
        count = int(lines[1].strip())
    except ValueError as err:
        raise CorruptCheckpointError(f"malformed count line {lines[1]!r}", file=str(path)) from err
    entries = [line for line in lines[2:] if line.strip()]
    if len(entries) != count:
        raise CorruptCheckpointError(
            f"expected {count} entries but found {len(entries)}", file=str(path)
        )
    out = []
    for number, line in enumerate(entries, start=3):
        parts = line.split()
        if len(parts) != fields:
            raise CorruptCheckpointError(f"malformed line {number}: {line!r}", file=str(path))
        try:
            out.append(parse(parts))
        except ValueError as err:
            raise CorruptCheckpointError(
                f"malformed line {number}: {line!r}", file=str(path)
            ) from err
    return out


def _ranged(text: str, high: int, low: int = 0) -> int:
    value = int(text)
    if not low <= value <= high:
        raise ValueError(f"{value} is outside [{low}, {high}]")
    return value


def _offset(text: str) -> int:
    # -1 is how Kafka's checkpoints say "no offset" for a partition
    return _ranged(text, INT64_MAX, -1)


class OffsetCheckpointFile:
    """``recovery-point-offset-checkpoint`` and friends: ``<topic> <partition> <offset>`` lines."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, offsets: Mapping[TopicPartition, int], *, sync: bool = True) -> None:
        lines = [f"{tp.topic} {tp.partition} {offset}" for tp, offset in sorted(offsets.items())]
        _write(self.path, lines, sync)

    def read(self) -> dict[TopicPartition, int]:
        def parse(parts: list[str]) -> tuple[TopicPartition, int]:
            return TopicPartition(parts[0], _ranged(parts[1], INT32_MAX)), _offset(parts[2])

        return dict(_read(self.path, parse, 3))


class LeaderEpochCheckpointFile:
    """``leader-epoch-checkpoint``: ``<epoch> <startOffset>`` lines in ascending epoch order."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, entries: Iterable[tuple[int, int]], *, sync: bool = True) -> None:
        _write(self.path, [f"{epoch} {start}" for epoch, start in entries], sync)

    def read(self) -> list[tuple[int, int]]:
        return _read(self.path, lambda p: (_ranged(p[0], INT32_MAX), _offset(p[1])), 2)

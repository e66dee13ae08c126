"""The leader epoch cache, ``leader-epoch-checkpoint`` (Kafka's LeaderEpochFileCache).

Why: maps each partition leader epoch to the first offset written in it, so a follower can find
where its log diverges; recovery re-derives it from batch headers. Refuses: any other state.
"""

from __future__ import annotations

import bisect
import threading
from pathlib import Path

from kafkalog.errors import CorruptCheckpointError, InvalidOffsetError
from kafkalog.storage.atomic import delete_if_exists
from kafkalog.storage.checkpoints import LeaderEpochCheckpointFile
from kafkalog.storage.filenames import LEADER_EPOCH_CHECKPOINT


class _ChangeCount:
    def __init__(self) -> None:
        self.value = 0
        self._lock = threading.Lock()  # a bare += from two threads could write an older count

    def bump(self) -> None:
        with self._lock:
            self.value += 1


_changes = _ChangeCount()


def epoch_changes() -> int:
    """How many times any partition's epoch cache in this process changed: a reader of many
    partitions' latest epochs (a Metadata answer over thousands of partitions) can tell in
    O(1) that none moved since it last looked."""
    return _changes.value


class LeaderEpochCache:
    """Ordered (epoch, start offset) entries, written through to the checkpoint file.

    Thread-safe."""

    def __init__(self, partition_dir: Path) -> None:
        self._file = LeaderEpochCheckpointFile(partition_dir / LEADER_EPOCH_CHECKPOINT)
        self._lock = threading.Lock()
        try:
            self._entries: list[tuple[int, int]] = self._file.read()
        except CorruptCheckpointError:
            self._entries = []  # re-derived from batch headers by recovery

    @property
    def entries(self) -> list[tuple[int, int]]:
        with self._lock:
            return list(self._entries)

    def latest_epoch(self) -> int | None:
        with self._lock:
            return self._entries[-1][0] if self._entries else None

    def leader_epoch(self) -> int:
        """The epoch a leader stamps on what it appends now: the latest, or 0 in a log that has
        none. A fixed 0 would, in a log a Kafka broker left at a later epoch, stamp new batches
        with an older epoch, cut the later ones out of this cache, and make the partition
        refuse transaction markers as a zombie coordinator's."""
        latest = self.latest_epoch()
        return 0 if latest is None else latest

    def earliest(self) -> tuple[int, int] | None:
        with self._lock:
            return self._entries[0] if self._entries else None

    def _flush(self) -> None:
        _changes.bump()  # before the write: the entries changed even if the disk refuses it
        self._file.write(self._entries)

    def assign(self, epoch: int, start_offset: int) -> None:
        if epoch < 0 or start_offset < 0:
            raise InvalidOffsetError(f"invalid leader epoch {epoch} at offset {start_offset}")
        with self._lock:
            if (
                self._entries
                and self._entries[-1][0] == epoch
                and start_offset >= self._entries[-1][1]
            ):
                return
            while self._entries and (
                self._entries[-1][0] >= epoch or self._entries[-1][1] >= start_offset
            ):
                self._entries.pop()
            self._entries.append((epoch, start_offset))
            self._flush()

    def truncate_from_end(self, end_offset: int) -> None:
        with self._lock:
            if self._entries and self._entries[-1][1] >= end_offset:
                self._entries = [e for e in self._entries if e[1] < end_offset]
                self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        with self._lock:
            removed = [e for e in self._entries if e[1] <= start_offset]
            if not removed:
                return
            kept = [e for e in self._entries if e[1] > start_offset]
            self._entries = [(removed[-1][0], start_offset), *kept]
            self._flush()

    def clear(self) -> None:
        with self._lock:
            self._entries = []
            self._flush()

    def epoch_for_offset(self, offset: int) -> int | None:
        with self._lock:
            starts = [s for _, s in self._entries]
            i = bisect.bisect_right(starts, offset)
            return self._entries[i - 1][0] if i else None

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        with self._lock:
            if not self._entries or epoch < 0:
                return (-1, -1)
            if epoch == self._entries[-1][0]:
                return (epoch, log_end_offset)
            if epoch > self._entries[-1][0]:
                return (-1, -1)
            epochs = [e for e, _ in self._entries]
            i = bisect.bisect_right(epochs, epoch)
            found = self._entries[i - 1][0] if i else epoch
            return (found, self._entries[i][1])

    def delete(self) -> None:
        with self._lock:
            self._entries = []
            _changes.bump()
            delete_if_exists(self._file.path)

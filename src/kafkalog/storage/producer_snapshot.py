"""Producer-state snapshot files, ``<offset>.snapshot`` (Kafka's
ProducerStateManager.writeSnapshot/readSnapshot).

Why: rebuilding idempotence and transaction state by scanning the whole log is slow, so Kafka
writes the state of every producer at roll, close and recovery points; the loader starts from the
newest good snapshot and replays only what follows. This module owns the byte layout, the CRC
and the file listing. Refuses: deciding when to snapshot or what the entries mean (producer state
in ``kafkalog.log`` does), and trusting a damaged file (it raises CorruptSnapshotError instead).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from kafkalog.errors import CorruptSnapshotError
from kafkalog.records.crc import crc32c
from kafkalog.storage import filenames as fn
from kafkalog.storage.faults import fsync_if_exists, open_no_follow, storage_error

# version (int16), crc (uint32) over everything after it, entry count (int32)
HEADER = struct.Struct(">hIi")
VERSION = 1
CRC_START = 6
# producer id, epoch, last sequence, last offset, offset delta, timestamp, coordinator epoch,
# first offset of the open transaction (-1: none)
ENTRY = struct.Struct(">qhiqiqiq")
ENTRY_SIZE = ENTRY.size  # 46


class SnapshotEntry(NamedTuple):
    """One producer as a snapshot stores it: only its most recent batch survives a reload."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


def encode_snapshot(entries: Iterable[SnapshotEntry]) -> bytes:
    body = b"".join(ENTRY.pack(*e) for e in entries)
    count = len(body) // ENTRY_SIZE
    tail = struct.pack(">i", count) + body
    return struct.pack(">hI", VERSION, crc32c(tail)) + tail


def decode_snapshot(data: bytes, file: str | None = None) -> list[SnapshotEntry]:
    """The entries of a snapshot; CorruptSnapshotError for any damage (Kafka's
    ProducerStateManager.writeSnapshot/readSnapshot)."""
    if len(data) < HEADER.size:
        raise CorruptSnapshotError(
            f"snapshot of {len(data)} bytes is shorter than its {HEADER.size}-byte header",
            file=file,
        )
    version, stored_crc, count = HEADER.unpack_from(data)
    if version != VERSION:
        raise CorruptSnapshotError(f"snapshot has unknown version {version}", file=file)
    computed = crc32c(memoryview(data)[CRC_START:])
    if computed != stored_crc:
        raise CorruptSnapshotError(
            f"snapshot is corrupt (CRC is no longer valid): stored {stored_crc}, "
            f"computed {computed}",
            file=file,
        )
    if count < 0 or len(data) != HEADER.size + count * ENTRY_SIZE:
        raise CorruptSnapshotError(
            f"snapshot claims {count} entries but holds {len(data) - HEADER.size} entry bytes",
            file=file,
        )
    return [SnapshotEntry(*e) for e in ENTRY.iter_unpack(memoryview(data)[HEADER.size :])]


def write_snapshot(path: Path, entries: Iterable[SnapshotEntry], *, sync: bool = True) -> None:
    """Create (or replace) ``path``. A torn write is caught by the CRC on the next load, so no
    temporary file is needed; ``sync`` fsyncs the file (Kafka defers it for roll snapshots)."""
    data = encode_snapshot(entries)
    fd = open_no_follow(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "producer snapshot")
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    except OSError as err:
        raise storage_error(err, f"writing snapshot {path}") from err
    finally:
        os.close(fd)


def read_snapshot(path: Path) -> list[SnapshotEntry]:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise CorruptSnapshotError(f"cannot read snapshot: {err}", file=str(path)) from err
    return decode_snapshot(data, str(path))


def fsync_snapshot(path: Path) -> None:
    fsync_if_exists(path)


def list_snapshots(directory: Path) -> dict[int, Path]:
    """Every ``<offset>.snapshot`` in ``directory``, by offset."""
    out: dict[int, Path] = {}
    for path in directory.iterdir():
        name = path.name
        if fn.is_snapshot_file(name) and path.is_file():
            try:
                out[fn.offset_from_file_name(name)] = path
            except ValueError:
                continue
    return out

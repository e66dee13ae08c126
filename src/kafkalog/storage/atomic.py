"""Crash-safe file replacement: write a temp file, fsync it, rename over the target, fsync the
directory (as Kafka's Utils.atomicMoveWithFallback).

Why: checkpoints and metadata must be either the old version or the new one after a crash,
never a torn mix. Refuses: renames without a directory fsync.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kafkalog.errors import CorruptCheckpointError
from kafkalog.storage.faults import storage_error
from kafkalog.storage.filenames import TMP_FILE_SUFFIX


def fsync_dir(directory: Path) -> None:
    _fsync(directory, os.O_DIRECTORY, f"syncing directory {directory}")


def _fsync(path: Path, flags: int, what: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | flags)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as err:
        raise storage_error(err, what) from err


def fsync_together(paths: Sequence[Path], *, threads: int = 16) -> None:
    """fsync every file and directory in ``paths``, several at a time: a journaling file system
    commits concurrent fsyncs in one journal write, so a thousand cost a few of their time one
    after another. The first failure is raised once every call has returned."""

    def sync(path: Path) -> None:
        _fsync(path, os.O_DIRECTORY if path.is_dir() else 0, f"syncing {path}")

    if len(paths) <= 1:
        for path in paths:
            sync(path)
        return
    with ThreadPoolExecutor(min(threads, len(paths)), "kafkalog-fsync") as pool:
        futures = [pool.submit(sync, path) for path in paths]
    for future in futures:
        future.result()


def write_atomically(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data``: ``<path>.tmp``, fsync, rename, fsync of the directory.

    The temporary file is created afresh (a stale one, or a link planted in its name, is
    removed first, never followed) and removed again if anything fails; a failure is raised as
    KafkaStorageError and leaves ``path`` as it was."""
    tmp = path.with_name(path.name + TMP_FILE_SUFFIX)
    try:
        delete_if_exists(tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            delete_if_exists(tmp)
        raise storage_error(err, f"writing {path}") from err
    if sync:
        fsync_dir(path.parent)


def read_json(path: Path, what: str) -> Any | None:
    """The JSON document ``write_atomically`` left at ``path``, or None if there is none;
    CorruptCheckpointError naming ``what`` if it cannot be read or parsed."""
    try:
        return json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise CorruptCheckpointError(f"cannot read {what} {path}: {err}") from err


def rename_if_exists(src: Path, dst: Path) -> bool:
    """Rename ``src`` to ``dst`` if it exists (an index created lazily may not)."""
    try:
        os.replace(src, dst)
        return True
    except FileNotFoundError:
        return False


def delete_if_exists(path: Path) -> bool:
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False

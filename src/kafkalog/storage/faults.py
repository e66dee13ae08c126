"""How storage failures reach the caller: one typed error for a failing disk, and opens that
never follow a planted symbolic link.

Why: a full disk, a read-only file system or an exhausted descriptor table surface from ``os`` as
bare ``OSError``s in the middle of an append, a flush or a checkpoint. Kafka wraps each in a
``KafkaStorageException`` naming the operation and the file, and so do we, so callers can tell
"the disk failed" from their own mistakes with one ``except``. Files kafkalog creates or cuts
are opened with ``O_NOFOLLOW``: a link planted in a partition directory must not make recovery
truncate, or a checkpoint overwrite, a file outside it. Refuses: retrying (a failed write is
undone by its caller and reported, never repeated blindly).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from kafkalog.errors import KafkaStorageError, NotARegularFileError

T = TypeVar("T")


def storage_error(err: OSError, what: str) -> KafkaStorageError:
    """``err`` as a KafkaStorageError that says what was being done."""
    if isinstance(err, KafkaStorageError):
        return err
    reason = err.strerror or str(err)
    return KafkaStorageError(f"{what} failed: {reason}", errno=err.errno)


def storage_call(fn: Callable[..., T], *args: object, what: str) -> T:
    """``fn(*args)``, with an OSError raised as KafkaStorageError."""
    try:
        return fn(*args)
    except OSError as err:
        raise storage_error(err, what) from err


def open_no_follow(path: Path, flags: int, kind: str, mode: int = 0o644) -> int:
    """``os.open`` that refuses symbolic links and directories where a file belongs."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW, mode)
    except OSError as err:
        if err.errno == errno.ELOOP or (err.errno == errno.ENXIO and path.is_symlink()):
            raise NotARegularFileError(
                f"{kind} {path} is a symbolic link; kafkalog does not follow links it writes"
            ) from err
        if isinstance(err, FileNotFoundError):
            raise
        if err.errno == errno.EISDIR:
            raise NotARegularFileError(f"{kind} {path} is a directory, not a file") from err
        raise storage_error(err, f"opening {kind} {path}") from err


def fsync_if_exists(path: Path) -> None:
    """fsync the file at ``path`` if there is one (a file created lazily may not be)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        storage_call(os.fsync, fd, what=f"syncing {path}")
    finally:
        os.close(fd)

"""The ``.lock`` files that keep two writers out of one directory.

Why: Kafka's LogManager locks each log directory's ``.lock`` so two brokers never own the same
data. kafkalog also lets a single partition be opened on its own, so a Log opened on its own
locks its partition directory's ``.lock`` too (Kafka's loader ignores files it does not know
there) and takes the enclosing log directory's ``.lock`` shared, so it cannot run inside a
directory a LogManager owns, nor a LogManager start around it. The locks are ``flock``s: they
conflict between processes and between two opens in one process, and the kernel drops them when
a process dies, so a kill -9 never leaves a directory locked. A Kafka broker's JVM locks the
same ``.lock`` with an fcntl record lock (FileChannel.tryLock), which an ``flock`` never meets;
so each lock also takes an open-file-description record lock (Linux's ``F_OFD_SETLK``: owned by
the open file like an ``flock``, in conflict with the JVM's), and a running broker and kafkalog
keep out of each other's directories both ways. Refuses: waiting for a lock (callers are told
at once who holds it) and creating a ``.lock`` in a directory it does not own.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from pathlib import Path

from kafkalog.errors import LogDirectoryLockedError
from kafkalog.storage.faults import open_no_follow
from kafkalog.storage.filenames import LOCK_FILE

_OFD_SETLK: int | None = getattr(fcntl, "F_OFD_SETLK", None)  # Linux 3.15+
# struct flock on 64-bit Linux: l_type, l_whence, (pad), l_start, l_len, l_pid, (pad);
# l_start = l_len = 0 covers the whole file, as the JVM's tryLock() does
_FLOCK = struct.Struct("=hh4xqqi4x")
_RECORD_LOCK_HELD = (errno.EAGAIN, errno.EACCES)


def _record_lock(fd: int, mode: int) -> None:
    """The fcntl lock matching ``mode`` (LOCK_EX or LOCK_SH) on the whole file, or OSError
    with EAGAIN/EACCES if a process (a Kafka broker) holds a conflicting one. Where the
    filesystem cannot lock records, the ``flock`` alone stands."""
    if _OFD_SETLK is None:
        return
    kind = fcntl.F_WRLCK if mode == fcntl.LOCK_EX else fcntl.F_RDLCK
    try:
        fcntl.fcntl(fd, _OFD_SETLK, _FLOCK.pack(kind, os.SEEK_SET, 0, 0, 0))
    except OSError as err:
        if err.errno in _RECORD_LOCK_HELD:
            raise


class DirectoryLock:
    """A held ``flock`` on ``<directory>/.lock``; ``release`` is idempotent."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    @classmethod
    def exclusive(cls, directory: Path, what: str) -> DirectoryLock:
        """Lock ``directory`` for writing, creating its ``.lock``; LogDirectoryLockedError if
        another writer (or a reader of the shared kind) holds it."""
        path = directory / LOCK_FILE
        fd = open_no_follow(path, os.O_RDWR | os.O_CREAT, "lock file")
        return cls._take(fd, path, fcntl.LOCK_EX, what)

    @classmethod
    def shared_if_present(cls, directory: Path, what: str) -> DirectoryLock | None:
        """Take ``directory``'s ``.lock`` shared if it has one (a log directory a LogManager
        has used); None if it has none."""
        path = directory / LOCK_FILE
        try:
            fd = open_no_follow(path, os.O_RDONLY, "lock file")
        except FileNotFoundError:
            return None
        return cls._take(fd, path, fcntl.LOCK_SH, what)

    @classmethod
    def for_partition(cls, directory: Path, *, log_dir_locked: bool) -> tuple[DirectoryLock, ...]:
        """The locks a Log holds: its partition directory's, and, unless its owner holds the
        log directory's already, that one shared (see the module docstring).

        A LogManager's Log holds none: the log directory's lock, held exclusively, keeps every
        other writer out of all its partitions, as Kafka's one lock per log directory does,
        and one descriptor per partition was a quarter of what thousands of partitions held.
        The partition's lock is still taken and let go at once, so a Log opened on its own
        before the LogManager locked the log directory (it found no ``.lock`` there to share)
        is met rather than written beside."""
        if log_dir_locked:
            cls.exclusive(directory, "partition directory").release()
            return ()
        locks: list[DirectoryLock] = []
        try:
            parent = cls.shared_if_present(directory.parent, "log directory")
            if parent is not None:
                locks.append(parent)
            locks.append(cls.exclusive(directory, "partition directory"))
        except BaseException:
            cls.release_all(locks)
            raise
        return tuple(locks)

    @staticmethod
    def release_all(locks: tuple[DirectoryLock, ...] | list[DirectoryLock]) -> None:
        for lock in reversed(locks):
            lock.release()

    @classmethod
    def _take(cls, fd: int, path: Path, mode: int, what: str) -> DirectoryLock:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            holder = lock_holder(path.parent)
            by = f"by {holder}" if holder else "by another process or log manager"
            raise LogDirectoryLockedError(
                f"{what} {path.parent} is locked {by} ({path} is held); close the other writer "
                "first, or use a command that only reads"
            ) from err
        try:
            _record_lock(fd, mode)
        except OSError as err:
            os.close(fd)  # drops the flock too
            holder = lock_holder(path.parent)
            raise LogDirectoryLockedError(
                f"{what} {path.parent} is locked by another process, a Kafka broker perhaps"
                f"{f' ({holder})' if holder else ''}: {path} has an fcntl lock; stop it first"
            ) from err
        return cls(fd, path)

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    @property
    def held(self) -> bool:
        return self._fd is not None


_LOCK_KINDS = frozenset({"FLOCK", "POSIX", "OFDLCK"})


def _lock_entries(directory: Path) -> list[tuple[str, int]]:
    """(kind, pid) of every write lock on ``directory``'s ``.lock``, from ``/proc/locks``
    (pid -1 for an open-file-description lock); [] where it cannot be read."""
    try:
        st = os.stat(directory / LOCK_FILE)
        with open("/proc/locks", encoding="ascii") as f:
            table = f.read()
    except OSError:
        return []
    wanted = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    found = []
    for line in table.splitlines():
        # "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234567 0 EOF" (major and minor in hex); a
        # Kafka broker's is a POSIX lock, ours also an OFDLCK
        fields = line.split()
        if len(fields) < 6 or fields[1] not in _LOCK_KINDS or fields[3] != "WRITE":
            continue
        parts = fields[5].split(":")
        if len(parts) == 3 and (int(parts[0], 16), int(parts[1], 16), int(parts[2])) == wanted:
            found.append((fields[1], int(fields[4]) if fields[4].lstrip("-").isdigit() else -1))
    return found


def held_by_writer(directory: Path) -> bool:
    """Whether some process holds ``directory``'s ``.lock`` exclusively, i.e. is writing there.
    Read from ``/proc/locks`` rather than by trying the lock, which would make a writer that
    opens at that instant fail; False where ``/proc/locks`` is not there to read."""
    return bool(_lock_entries(directory))


def lock_holder(directory: Path) -> str | None:
    """Who holds ``directory``'s ``.lock``: "process 4242 (kafkalog serve ...)", or None where
    the system does not say. For the error a second writer gets."""
    pids = sorted({pid for _, pid in _lock_entries(directory) if pid > 0})
    if not pids:
        return None
    try:
        with open(f"/proc/{pids[0]}/cmdline", "rb") as f:
            words = [w.decode(errors="replace") for w in f.read().split(b"\0") if w]
    except OSError:
        words = []
    command = " ".join(Path(words[0]).name if i == 0 else w for i, w in enumerate(words))
    if len(command) > 120:
        command = command[:117] + "..."
    return f"process {pids[0]}" + (f" ({command})" if command else "")

"""The aborted-transaction index, ``<base>.txnindex`` (Kafka's TransactionIndex).

Why: a READ_COMMITTED reader must learn which producer ranges were aborted without scanning the
data; each ABORT marker in a segment adds one fixed 34-byte entry here. Refuses: deciding which
transactions aborted (producer state does), and memory-mapping (it is a plain append-only file,
created lazily on the first entry).
"""

from __future__ import annotations

import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

from kafkalog.errors import CorruptIndexError, InvalidOffsetError
from kafkalog.storage.atomic import delete_if_exists, rename_if_exists
from kafkalog.storage.faults import fsync_if_exists, open_no_follow, storage_error

ENTRY = struct.Struct(">hqqqq")  # version, producer id, first offset, last offset, LSO
ENTRY_SIZE = ENTRY.size  # 34
VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = VERSION

    def encode(self) -> bytes:
        return ENTRY.pack(
            self.version,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )


@dataclass(frozen=True, slots=True)
class TxnIndexSearchResult:
    aborted: list[AbortedTxn]
    is_complete: bool


def decode_entries(data: bytes, file: str) -> list[AbortedTxn]:
    """The entries of a whole transaction index (a trailing partial entry is ignored)."""
    out = []
    for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        if data[pos] > VERSION:  # Kafka reads only the version's first byte
            raise CorruptIndexError(
                f"unknown transaction index entry version {data[pos]}", file=file, position=pos
            )
        version, pid, first, last, lso = ENTRY.unpack_from(data, pos)
        out.append(AbortedTxn(pid, first, last, lso, version))
    return out


def collect_aborted_txns(
    entries: list[AbortedTxn], fetch_offset: int, upper_bound_offset: int
) -> TxnIndexSearchResult:
    """Kafka's TransactionIndex.collectAbortedTxns: the aborted transactions overlapping
    [fetch offset, upper bound); complete once an entry's LSO reaches the upper bound (no
    later segment can hold one that overlaps)."""
    found = []
    for txn in entries:
        if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
            found.append(txn)
        if txn.last_stable_offset >= upper_bound_offset:
            return TxnIndexSearchResult(found, True)
    return TxnIndexSearchResult(found, False)


class TransactionIndex:
    """Append-only list of aborted transactions whose ABORT marker lies in this segment.

    Thread-safe (a lock guards the file). The file exists only once an entry was appended.
    """

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._lock = threading.Lock()
        self._last_offset: int | None = None

    def append(self, txn: AbortedTxn) -> None:
        with self._lock:
            if self._last_offset is not None and txn.last_offset <= self._last_offset:
                raise InvalidOffsetError(
                    f"the last offset of appended transaction {txn} must be greater than "
                    f"{self._last_offset} in {self.path}"
                )
            try:
                with self._open(os.O_WRONLY | os.O_APPEND | os.O_CREAT, "ab") as f:
                    f.write(txn.encode())
            except OSError as err:
                raise storage_error(err, f"appending to {self.path}") from err
            self._last_offset = txn.last_offset

    def all_aborted(self) -> list[AbortedTxn]:
        with self._lock:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                return []
        out = decode_entries(data, str(self.path))
        if out and self._last_offset is None:
            self._last_offset = out[-1].last_offset
        return out

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        return collect_aborted_txns(self.all_aborted(), fetch_offset, upper_bound_offset)

    def truncate_to(self, offset: int) -> None:
        entries = self.all_aborted()
        for i, txn in enumerate(entries):
            if txn.last_offset >= offset:
                with self._lock, self._open(os.O_RDWR, "r+b") as f:
                    f.truncate(i * ENTRY_SIZE)
                self._last_offset = entries[i - 1].last_offset if i else None
                return

    def reset(self) -> None:
        with self._lock:
            if self.path.exists():
                with self._open(os.O_RDWR, "r+b") as f:
                    f.truncate(0)
            self._last_offset = None

    def _open(self, flags: int, mode: str) -> BinaryIO:
        """The file, never through a symbolic link; write failures become KafkaStorageError."""
        return cast(
            "BinaryIO", os.fdopen(open_no_follow(self.path, flags, "transaction index"), mode)
        )

    def sanity_check(self) -> None:
        for txn in self.all_aborted():
            if txn.last_offset < self.base_offset:
                raise CorruptIndexError(
                    f"last offset of aborted transaction {txn} is below the base offset "
                    f"{self.base_offset}",
                    file=str(self.path),
                )

    def flush(self) -> None:
        fsync_if_exists(self.path)

    def rename_to(self, path: Path) -> None:
        with self._lock:
            rename_if_exists(self.path, path)
            self.path = path

    def delete(self) -> bool:
        return delete_if_exists(self.path)

    def close(self) -> None:
        """Nothing is held open between calls."""

"""Which segment files keep their read mapping between reads: the most recently read, a bounded
number of them in the whole process.

Why: CPython's ``mmap`` holds a duplicate of the file's descriptor for as long as the mapping
lives, so a mapping kept by every segment read once doubled the descriptors of a broker with
thousands of partitions, where Kafka holds one per segment (its ``FileChannel``), and a Fetch
across every partition left one more behind each. A file that falls out of this set drops its
cached mapping (unmapped, and its duplicate closed, when its last reader lets go) and maps
again on its next read, which costs one ``mmap`` call.

Refuses: closing a mapping itself (a reader may still hold a view of it) and holding any lock
of a file while it takes another's.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol

# enough for the partitions a client reads at once on a busy broker; beyond it each read maps
MAX_CACHED_MAPPINGS = 64


class MappedFile(Protocol):
    def drop_mapping(self) -> None: ...


class MappingSet:
    """The files whose mappings are kept, least recently read first. Thread-safe."""

    def __init__(self, capacity: int = MAX_CACHED_MAPPINGS) -> None:
        self.capacity = capacity
        self._files: OrderedDict[int, MappedFile] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._files)

    def read(self, owner: MappedFile) -> None:
        """``owner`` was just read through its mapping: keep it, and make the least recently
        read files past the capacity drop theirs (outside this set's lock)."""
        key = id(owner)
        with self._lock:
            if key in self._files:
                self._files.move_to_end(key)
                return
            self._files[key] = owner
            evicted = [
                self._files.popitem(last=False)[1] for _ in range(len(self._files) - self.capacity)
            ]
        for other in evicted:
            other.drop_mapping()

    def forget(self, owner: MappedFile) -> None:
        """``owner`` is closed: it keeps no mapping and leaves the set."""
        with self._lock:
            self._files.pop(id(owner), None)


MAPPINGS = MappingSet()

"""The cleaner's offset map, key -> latest offset for one cleaning round, in Kafka's capacity
(Kafka's OffsetMap and SkimpyOffsetMap).

Why: a round must know, for every key of the dirty section, its latest offset, in bounded
memory. Kafka's SkimpyOffsetMap packs 24-byte slots (16-byte MD5 + int64 offset) into
``log.cleaner.dedupe.buffer.size / threads`` bytes and ends the round once
``slots * log.cleaner.io.buffer.load.factor`` keys are in. Both maps here keep that capacity in
keys and that early end, and differ in what a key is, so they are two types:

- ``DigestOffsetMap`` keeps Kafka's contract exactly: keys are compared by MD5 only (a
  collision counts as the same key, as in Kafka). The digests live in a dict, since hashing
  and probing a bytearray in Python costs ~10x more per record; an entry takes ~100 bytes
  rather than 24.
- ``ExactOffsetMap`` is the compiled ``_keymap.KeyOffsetMap``: keys kept whole and compared
  exactly (no collisions at all), about 56 bytes plus the key per entry. The cleaner hands it
  whole runs of batches (``keys``), and its key scan keeps notes (8 bytes a record, at most
  half the dedupe buffer) so the recopy need not parse those records again.

``new_offset_map`` chooses once, for a Cleaner's life: the exact map when the compiled codec
is in use, the digest map otherwise.
Refuses: persistence (it is cleared before each round) and keys it cannot hash (None).
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from kafkalog.cleaner.keymap import compiled_offset_map
from kafkalog.errors import InvalidConfigError

if TYPE_CHECKING:
    from kafkalog.cleaner._keymap import KeyOffsetMap

SLOT_SIZE = 24  # 16-byte MD5 + int64 offset, as Kafka sizes its slots
MAX_BUFFER_PER_THREAD = 2**31 - 1


def _usable_capacity(memory: int, load_factor: float) -> int:
    usable = int(memory // SLOT_SIZE * load_factor)
    if usable < 1:
        raise InvalidConfigError(
            "log.cleaner.dedupe.buffer.size",
            f"{memory} bytes at load factor {load_factor} hold no key; the cleaner needs "
            f"at least {SLOT_SIZE * 2} bytes per thread",
        )
    return usable


class OffsetMap(ABC):
    """Latest offset per key for one cleaning round, holding at most ``usable_capacity``
    keys: Kafka's slots of ``memory`` bytes at its load factor."""

    __slots__ = ("memory", "slots", "usable_capacity")

    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        self.memory = min(memory, MAX_BUFFER_PER_THREAD)
        self.slots = self.memory // SLOT_SIZE
        self.usable_capacity = _usable_capacity(self.memory, load_factor)

    @property
    @abstractmethod
    def latest_offset(self) -> int:
        """The offset of the last record the round mapped (or skipped over), -1 when empty."""

    @abstractmethod
    def put(self, key: bytes, offset: int) -> None: ...

    @abstractmethod
    def get(self, key: bytes) -> int:
        """The latest offset recorded for ``key``, or -1."""

    @abstractmethod
    def update_latest_offset(self, offset: int) -> None: ...

    @property
    @abstractmethod
    def size(self) -> int:
        """Keys held."""

    @abstractmethod
    def clear(self) -> None: ...

    @property
    def utilization(self) -> float:
        return self.size / self.slots


class DigestOffsetMap(OffsetMap):
    """Kafka's SkimpyOffsetMap: keys known by their MD5 digest."""

    __slots__ = ("_latest_offset", "_map")

    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        super().__init__(memory, load_factor)
        self._map: dict[bytes, int] = {}
        self._latest_offset = -1

    @property
    def latest_offset(self) -> int:
        return self._latest_offset

    def put(self, key: bytes, offset: int) -> None:
        self._map[hashlib.md5(key, usedforsecurity=False).digest()] = offset
        self._latest_offset = offset

    def get(self, key: bytes) -> int:
        return self._map.get(hashlib.md5(key, usedforsecurity=False).digest(), -1)

    def update_latest_offset(self, offset: int) -> None:
        self._latest_offset = offset

    @property
    def size(self) -> int:
        return len(self._map)

    def clear(self) -> None:
        self._map.clear()
        self._latest_offset = -1


class ExactOffsetMap(OffsetMap):
    """The compiled map: keys kept whole. ``keys`` is the compiled object itself, which the
    cleaner's bulk walks (kafkalog.cleaner.keymap) drive directly."""

    __slots__ = ("keys",)

    def __init__(self, keys: KeyOffsetMap, memory: int, load_factor: float = 0.9) -> None:
        super().__init__(memory, load_factor)
        self.keys = keys

    @property
    def latest_offset(self) -> int:
        return int(self.keys.latest_offset)

    def put(self, key: bytes, offset: int) -> None:
        self.keys.put(key, offset)

    def get(self, key: bytes) -> int:
        return int(self.keys.get(key))

    def update_latest_offset(self, offset: int) -> None:
        self.keys.latest_offset = offset

    @property
    def size(self) -> int:
        return int(self.keys.size)

    def clear(self) -> None:
        self.keys.clear()


def new_offset_map(memory: int, load_factor: float = 0.9) -> OffsetMap:
    """The exact map when the compiled codec is in use, else Kafka's digest map; both hold
    Kafka's number of keys for ``memory`` bytes at ``load_factor``."""
    memory = min(memory, MAX_BUFFER_PER_THREAD)
    # the compiled map's notes for the recopy: 8 bytes a record, within half the buffer again
    keys = compiled_offset_map(_usable_capacity(memory, load_factor), memory // 2)
    if keys is None:
        return DigestOffsetMap(memory, load_factor)
    return ExactOffsetMap(keys, memory, load_factor)

"""The cleaner's offset map: MD5(key) -> latest offset, with Kafka's capacity (Kafka's
SkimpyOffsetMap).

Why: a cleaning round must know, for every key in the dirty section, its latest offset, in
bounded memory. Kafka's SkimpyOffsetMap packs 24-byte slots (16-byte MD5 + int64 offset) into
``log.cleaner.dedupe.buffer.size / threads`` bytes and stops the round once
``slots * log.cleaner.io.buffer.load.factor`` keys are in. We keep its contract exactly — keys
are compared by MD5 only (a collision counts as the same key, as in Kafka), the capacity in keys
is Kafka's, and a full map ends the round early — but store the digests in a dict: hashing and
probing a bytearray in Python costs ~10x more per record. A dict entry takes ~100 bytes rather
than 24, so a map holds the same number of keys as Kafka's in about 4x the memory.
With the compiled codec the map is ``_keymap.KeyOffsetMap`` instead (``compiled``): the
same capacity in keys, keys kept whole and compared exactly (so no collisions at all), about
56 bytes plus the key per entry, and the cleaner hands it whole runs of batches. Its key scan
also keeps notes (8 bytes a record, at most half the dedupe buffer) so the recopy need not
parse those records again; past that budget the recopy parses them, as before.
Refuses: persistence (it is cleared before each round) and keys it cannot hash (None).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from kafkalog.cleaner.keymap import compiled_offset_map
from kafkalog.errors import InvalidConfigError

if TYPE_CHECKING:
    from kafkalog.cleaner._keymap import KeyOffsetMap

SLOT_SIZE = 24  # 16-byte MD5 + int64 offset, as Kafka sizes its slots
MAX_BUFFER_PER_THREAD = 2**31 - 1


class OffsetMap:
    """Latest offset per key for one cleaning round."""

    __slots__ = ("_latest_offset", "_map", "compiled", "memory", "slots", "usable_capacity")

    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        memory = min(memory, MAX_BUFFER_PER_THREAD)
        self.memory = memory
        self.slots = memory // SLOT_SIZE
        self.usable_capacity = int(self.slots * load_factor)
        if self.usable_capacity < 1:
            raise InvalidConfigError(
                "log.cleaner.dedupe.buffer.size",
                f"{memory} bytes at load factor {load_factor} hold no key; the cleaner needs "
                f"at least {SLOT_SIZE * 2} bytes per thread",
            )
        # the compiled map, when the compiled codec is in use; it keeps its own latest offset,
        # and notes from the key scan (8 bytes a record, within half the buffer's size again)
        # that spare the recopy a second parse
        self.compiled: KeyOffsetMap | None = compiled_offset_map(self.usable_capacity, memory // 2)
        self._map: dict[bytes, int] = {}
        self._latest_offset = -1

    @property
    def latest_offset(self) -> int:
        return self._latest_offset if self.compiled is None else int(self.compiled.latest_offset)

    def put(self, key: bytes, offset: int) -> None:
        if self.compiled is not None:
            self.compiled.put(key, offset)
            return
        self._map[hashlib.md5(key, usedforsecurity=False).digest()] = offset
        self._latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset recorded for ``key``, or -1."""
        if self.compiled is not None:
            return int(self.compiled.get(key))
        return self._map.get(hashlib.md5(key, usedforsecurity=False).digest(), -1)

    def update_latest_offset(self, offset: int) -> None:
        if self.compiled is not None:
            self.compiled.latest_offset = offset
        else:
            self._latest_offset = offset

    @property
    def size(self) -> int:
        return len(self._map) if self.compiled is None else int(self.compiled.size)

    @property
    def utilization(self) -> float:
        return self.size / self.slots

    def clear(self) -> None:
        if self.compiled is not None:
            self.compiled.clear()
        self._map.clear()
        self._latest_offset = -1

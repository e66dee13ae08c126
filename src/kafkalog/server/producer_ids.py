"""Producer ids for InitProducerId, unique across restarts (Kafka's ProducerIdManager).

Why: an idempotent producer's id keys its sequence numbers in every partition's producer
state; handing out an id twice, after a restart, would make a new producer's batches look like
duplicates or gaps of an old one's. Like Kafka, ids are reserved in blocks of 1000 and the end
of the reserved block is made durable before any id of it is handed out, so a crash wastes at
most a block and never repeats an id. Ids the log directories already hold (in a partition's
producer state or in ``__transaction_state``: a Kafka broker's, whose controller kept its
blocks in a metadata log we do not read) are never handed out either: a new producer given
such an id would have its first batches taken for retries of the old one's and dropped as
duplicates, though acknowledged. For the same reason in the other direction ids start at
``FIRST_ID``, far above the ids a Kafka controller hands out (from 0, a block at a time) when
the directory goes back to a Kafka broker: its counter never learns of ours.

Refuses: to start on a damaged block file (it could not know which ids are used), and to hand
out ids past Kafka's int64 range.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path

from kafkalog.errors import CorruptCheckpointError, KafkaStorageError
from kafkalog.storage.atomic import write_atomically

BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
# 10**15 (a whole number of blocks): room for 10**12 of a Kafka controller's blocks below ours
FIRST_ID = 10**15
FILE_NAME = "kafkalog-producer-ids"
_VERSION = 0
_MAX_ID = 2**63 - 1


class ProducerIdManager:
    """Hands out producer ids from a reserved block; thread-safe (one lock)."""

    def __init__(self, log_dirs: list[Path], in_use: Iterable[int] = ()) -> None:
        self._paths = [d / FILE_NAME for d in log_dirs]
        self._lock = threading.Lock()
        # FIRST_ID also over a file from before ids started there
        reserved = max([FIRST_ID, *(self._read(p) for p in self._paths)])
        self._next = reserved  # the block before it may have been handed out: skip it
        self._block_end = reserved
        self.reserve_above(in_use)

    def reserve_above(self, producer_ids: Iterable[int]) -> None:
        """Hand out only ids above all of ``producer_ids`` (ids found in use), from the start
        of the block after the highest."""
        top = max(producer_ids, default=-1)
        with self._lock:
            if top >= self._next:
                self._next = (top // BLOCK_SIZE + 1) * BLOCK_SIZE

    @staticmethod
    def _read(path: Path) -> int:
        try:
            text = path.read_text("ascii")
        except FileNotFoundError:
            return 0
        except (OSError, UnicodeDecodeError) as err:
            raise CorruptCheckpointError(
                f"cannot read producer id block file {path}: {err}"
            ) from err
        lines = text.split("\n")
        if len(lines) != 3 or lines[0] != str(_VERSION) or lines[2] != "" or not lines[1].isdigit():
            raise CorruptCheckpointError(f"producer id block file {path} is damaged: {text!r}")
        return int(lines[1])

    def generate(self) -> int:
        """The next unused producer id."""
        with self._lock:
            if self._next >= self._block_end:
                end = self._next + BLOCK_SIZE
                if end > _MAX_ID:
                    raise KafkaStorageError("producer ids are exhausted")
                data = f"{_VERSION}\n{end}\n".encode("ascii")
                for path in self._paths:
                    write_atomically(path, data)
                self._block_end = end
            pid = self._next
            self._next += 1
            return pid

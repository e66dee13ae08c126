"""An in-memory model of a partition log, for stateful tests of the real one.

Why: the model says what a Log must contain after any sequence of appends, transactions,
truncations and DeleteRecords, in a few lines that are obviously right: it keeps the batches in
order and answers every question by scanning them. Truncation is batch-granular in Kafka, so the
model keeps batch boundaries. Refuses: files, time, and everything else the real Log does.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ModelBatch:
    first: int
    last: int
    producer_id: int = -1
    first_seq: int = -1
    transactional: bool = False
    marker: str | None = None  # "commit" / "abort" for a control batch


@dataclass
class ModelLog:
    values: list[bytes | None] = field(default_factory=list)  # value by offset
    batches: list[ModelBatch] = field(default_factory=list)
    log_start_offset: int = 0

    @property
    def log_end_offset(self) -> int:
        return len(self.values)

    @property
    def batch_starts(self) -> list[int]:
        return [b.first for b in self.batches]

    def append(
        self,
        values: list[bytes | None],
        producer_id: int = -1,
        first_seq: int = -1,
        transactional: bool = False,
    ) -> tuple[int, int]:
        first = len(self.values)
        self.values.extend(values)
        last = len(self.values) - 1
        self.batches.append(ModelBatch(first, last, producer_id, first_seq, transactional))
        return first, last

    def append_marker(self, producer_id: int, kind: str) -> int:
        offset = len(self.values)
        self.values.append(None)
        self.batches.append(ModelBatch(offset, offset, producer_id, -1, True, kind))
        return offset

    def truncate_to(self, offset: int) -> None:
        """``offset`` must be a batch start (or the log end)."""
        del self.values[offset:]
        self.batches = [b for b in self.batches if b.first < offset]
        self.log_start_offset = min(self.log_start_offset, offset)

    def read_from(self, offset: int) -> list[tuple[int, bytes | None]]:
        markers = {b.first for b in self.batches if b.marker}
        return [(o, self.values[o]) for o in range(offset, len(self.values)) if o not in markers]

    # --- producers and transactions ---------------------------------------------------------

    def last_data_batch(self, producer_id: int) -> ModelBatch | None:
        for b in reversed(self.batches):
            if b.producer_id == producer_id and b.marker is None:
                return b
        return None

    def next_sequence(self, producer_id: int) -> int:
        last = self.last_data_batch(producer_id)
        return 0 if last is None else last.first_seq + last.last - last.first + 1

    def _transactions(self) -> tuple[dict[int, int], set[int]]:
        """(open transactions: producer -> first offset, offsets of aborted records)."""
        open_txns: dict[int, int] = {}
        pending: dict[int, list[int]] = {}
        aborted: set[int] = set()
        for b in self.batches:
            pid = b.producer_id
            if b.marker is not None:
                offsets = pending.pop(pid, [])
                open_txns.pop(pid, None)
                if b.marker == "abort":
                    aborted.update(offsets)
            elif b.transactional:
                open_txns.setdefault(pid, b.first)
                pending.setdefault(pid, []).extend(range(b.first, b.last + 1))
        return open_txns, aborted

    def open_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of its open transaction."""
        return self._transactions()[0]

    def open_transaction(self, producer_id: int) -> bool:
        return producer_id in self._transactions()[0]

    @property
    def last_stable_offset(self) -> int:
        open_txns, _ = self._transactions()
        first = min(open_txns.values(), default=self.log_end_offset)
        return max(first, self.log_start_offset)

    def read_committed_from(self, offset: int) -> list[tuple[int, bytes | None]]:
        _, aborted = self._transactions()
        lso = self.last_stable_offset
        return [(o, v) for o, v in self.read_from(offset) if o < lso and o not in aborted]

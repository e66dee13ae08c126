"""An in-memory model of a partition log, for stateful tests of the real one.

Why: the model says what a Log must contain after any sequence of appends, truncations and
DeleteRecords, in a dozen lines that are obviously right. Truncation is batch-granular in Kafka,
so the model keeps batch boundaries. Refuses: files, time, and everything else the real Log does.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ModelLog:
    values: list[bytes | None] = field(default_factory=list)  # value by offset
    batch_starts: list[int] = field(default_factory=list)
    log_start_offset: int = 0

    @property
    def log_end_offset(self) -> int:
        return len(self.values)

    def append(self, values: list[bytes | None]) -> tuple[int, int]:
        first = len(self.values)
        self.batch_starts.append(first)
        self.values.extend(values)
        return first, len(self.values) - 1

    def truncate_to(self, offset: int) -> None:
        """``offset`` must be a batch start (or the log end)."""
        del self.values[offset:]
        self.batch_starts = [s for s in self.batch_starts if s < offset]
        self.log_start_offset = min(self.log_start_offset, offset)

    def read_from(self, offset: int) -> list[tuple[int, bytes | None]]:
        return [(o, self.values[o]) for o in range(offset, len(self.values))]

"""CleanerConfig: the broker's ``log.cleaner.*`` keys (Kafka's CleanerConfig), Kafka's defaults.

Why: the cleaner's memory, buffers, threads, throttle and back-off are broker settings; parsing
them once, under Kafka's names, keeps every limit checkable and every error naming its key.
Refuses: unknown keys and values Kafka would reject.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafkalog.config_def import ConfigDef, Type, at_least, between, define
from kafkalog.errors import InvalidConfigError


def _positive(key: str, value: float) -> float:
    if not value > 0:
        raise InvalidConfigError(key, f"{value!r} is out of range: it must be above 0")
    return value


@dataclass(frozen=True)
class CleanerConfig:
    enable: bool = define(
        "log.cleaner.enable", Type.BOOLEAN, True, "Run the cleaner for compacted topics."
    )
    num_threads: int = define(
        "log.cleaner.threads", Type.INT, 1, "Cleaner threads; 0: none (run_once still cleans).",
        at_least(0),
    )  # fmt: skip
    dedupe_buffer_size: int = define(
        "log.cleaner.dedupe.buffer.size", Type.LONG, 128 * 1024 * 1024,
        "Memory for the key -> offset maps, over all threads.", at_least(0),
    )  # fmt: skip
    io_buffer_size: int = define(
        "log.cleaner.io.buffer.size", Type.INT, 512 * 1024,
        "Read and write buffers, over all threads.", at_least(1),
    )  # fmt: skip
    dedupe_buffer_load_factor: float = define(
        "log.cleaner.io.buffer.load.factor", Type.DOUBLE, 0.9,
        "How full a key map may get before a round stops.", between(None, 1),
    )  # fmt: skip
    max_io_bytes_per_second: float = define(
        "log.cleaner.io.max.bytes.per.second", Type.DOUBLE, math.inf,
        "Throttle on the cleaner's reads and writes.", _positive,
    )  # fmt: skip
    backoff_ms: int = define(
        "log.cleaner.backoff.ms", Type.LONG, 15_000, "Sleep when no log is cleanable.",
        at_least(0),
    )  # fmt: skip
    max_message_size: int = define(
        "message.max.bytes", Type.INT, 1_048_588, "Largest batch, so the buffers can grow to it.",
        at_least(1),
    )  # fmt: skip

    @classmethod
    def from_properties(cls, props: Mapping[str, Any] | None = None) -> CleanerConfig:
        values = CLEANER_CONFIG.parse(
            props or {}, unknown="unknown broker config name for the log cleaner"
        )
        if "dedupe_buffer_load_factor" in values:
            _positive("log.cleaner.io.buffer.load.factor", values["dedupe_buffer_load_factor"])
        config = cls(**values)
        config.validate()
        return config

    def validate(self) -> None:
        if self.dedupe_buffer_per_thread < 24 * 2:
            raise InvalidConfigError(
                "log.cleaner.dedupe.buffer.size",
                f"{self.dedupe_buffer_size} bytes over {self.num_threads} thread(s) leaves too "
                "little per thread for even one key",
            )

    @property
    def dedupe_buffer_per_thread(self) -> int:
        # with no threads (log.cleaner.threads=0) run_once still cleans, as one thread would
        return self.dedupe_buffer_size // max(self.num_threads, 1)

    @property
    def io_buffer_per_thread(self) -> int:
        """Each of the read and write buffers (Kafka halves the per-thread share)."""
        return max(self.io_buffer_size // max(self.num_threads, 1) // 2, 1)


CLEANER_CONFIG = ConfigDef.of(CleanerConfig)

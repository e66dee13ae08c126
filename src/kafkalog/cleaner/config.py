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

from kafkalog.errors import InvalidConfigError
from kafkalog.log.config import _int

_KEYS = {
    "log.cleaner.enable": "enable",
    "log.cleaner.threads": "num_threads",
    "log.cleaner.dedupe.buffer.size": "dedupe_buffer_size",
    "log.cleaner.io.buffer.size": "io_buffer_size",
    "log.cleaner.io.buffer.load.factor": "dedupe_buffer_load_factor",
    "log.cleaner.io.max.bytes.per.second": "max_io_bytes_per_second",
    "log.cleaner.backoff.ms": "backoff_ms",
    "message.max.bytes": "max_message_size",
}


@dataclass(frozen=True)
class CleanerConfig:
    enable: bool = True
    num_threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_buffer_size: int = 512 * 1024
    dedupe_buffer_load_factor: float = 0.9
    max_io_bytes_per_second: float = math.inf
    backoff_ms: int = 15_000
    max_message_size: int = 1_048_588

    @classmethod
    def from_properties(cls, props: Mapping[str, Any] | None = None) -> CleanerConfig:
        values: dict[str, Any] = {}
        for key, value in (props or {}).items():
            name = _KEYS.get(key)
            if name is None:
                raise InvalidConfigError(key, "unknown broker config name for the log cleaner")
            if name == "enable":
                text = str(value).strip().lower()
                if text not in ("true", "false"):
                    raise InvalidConfigError(key, f"{value!r} is not true or false")
                values[name] = text == "true"
            elif name in ("dedupe_buffer_load_factor", "max_io_bytes_per_second"):
                try:
                    number = float(value)
                except (TypeError, ValueError):
                    raise InvalidConfigError(key, f"{value!r} is not a number") from None
                if not number > 0 or (name == "dedupe_buffer_load_factor" and number > 1):
                    raise InvalidConfigError(key, f"{value!r} is out of range")
                values[name] = number
            else:
                low = 1 if name in ("num_threads", "io_buffer_size", "max_message_size") else 0
                values[name] = _int(low)(key, value)
        config = cls(**values)
        config.validate()
        return config

    def validate(self) -> None:
        if self.dedupe_buffer_size // self.num_threads < 24 * 2:
            raise InvalidConfigError(
                "log.cleaner.dedupe.buffer.size",
                f"{self.dedupe_buffer_size} bytes over {self.num_threads} thread(s) leaves too "
                "little per thread for even one key",
            )

    @property
    def dedupe_buffer_per_thread(self) -> int:
        return self.dedupe_buffer_size // self.num_threads

    @property
    def io_buffer_per_thread(self) -> int:
        """Each of the read and write buffers (Kafka halves the per-thread share)."""
        return max(self.io_buffer_size // self.num_threads // 2, 1)

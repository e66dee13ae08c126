"""ManagerConfig: the broker-level keys the log manager obeys (Kafka's ServerLogConfigs,
TransactionLogConfig), Kafka's defaults.

Why: retention, flush and checkpoint periods, recovery threads and producer expiry are broker
settings, not topic ones; one frozen object parsed in one place keeps them next to their Kafka
names. Refuses: unknown keys and malformed values (a typed error names the key).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from kafkalog.cleaner.config import CleanerConfig
from kafkalog.errors import InvalidConfigError
from kafkalog.log.config import _int
from kafkalog.log.producer_state_manager import ProducerStateConfig
from kafkalog.types import INT64_MAX


@dataclass(frozen=True)
class ManagerConfig:
    num_recovery_threads_per_data_dir: int = 1
    log_retention_check_interval_ms: int = 300_000
    log_flush_scheduler_interval_ms: int = INT64_MAX
    log_flush_offset_checkpoint_interval_ms: int = 60_000
    log_flush_start_offset_checkpoint_interval_ms: int = 60_000
    log_initial_task_delay_ms: int = 30_000
    producer_id_expiration_ms: int = 86_400_000
    producer_id_expiration_check_interval_ms: int = 600_000
    transaction_max_timeout_ms: int = 900_000
    # kafkalog has no transaction coordinator to ask for a producer's own timeout, so one
    # timeout (Kafka's producer default) applies to every open transaction of the manager's logs
    transaction_timeout_ms: int = 60_000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    cleaner: CleanerConfig = field(default_factory=CleanerConfig)

    @classmethod
    def from_properties(cls, props: Mapping[str, Any] | None = None) -> ManagerConfig:
        """Build from Kafka broker keys (``log.retention.check.interval.ms``, ...)."""
        names = {f.name.replace("_", "."): f.name for f in fields(cls) if f.name != "cleaner"}
        values: dict[str, Any] = {}
        cleaner_props = {
            k: v
            for k, v in (props or {}).items()
            if k.startswith("log.cleaner.") or k == "message.max.bytes"
        }
        for key, value in (props or {}).items():
            if key in cleaner_props:
                continue
            if key not in names:
                raise InvalidConfigError(key, "unknown broker config name for the log manager")
            low = 1 if key == "num.recovery.threads.per.data.dir" else 0
            values[names[key]] = _int(low)(key, value)
        return cls(**values, cleaner=CleanerConfig.from_properties(cleaner_props))

    @property
    def producer_state(self) -> ProducerStateConfig:
        return ProducerStateConfig(
            self.producer_id_expiration_ms,
            self.producer_id_expiration_check_interval_ms,
            self.transaction_max_timeout_ms,
        )

"""ManagerConfig: the broker-level keys the log manager obeys (Kafka's ServerLogConfigs,
TransactionLogConfig), Kafka's defaults.

Why: retention, flush and checkpoint periods, recovery threads and producer expiry are broker
settings, not topic ones; one frozen object parsed in one place keeps them next to their Kafka
names. Refuses: unknown keys and malformed values (a typed error names the key).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafkalog.cleaner.config import CLEANER_CONFIG, CleanerConfig
from kafkalog.config_def import ConfigDef, Type, at_least, define
from kafkalog.log.producer_state_manager import PRODUCER_STATE_CONFIG, ProducerStateConfig
from kafkalog.manager.remote_log_config import REMOTE_LOG_MANAGER_CONFIG, RemoteLogManagerConfig
from kafkalog.types import INT64_MAX

LONG = Type.LONG


@dataclass(frozen=True)
class ManagerConfig:
    num_recovery_threads_per_data_dir: int = define(
        "num.recovery.threads.per.data.dir", Type.INT, 2,
        "Threads per log directory that load logs at start and close them at shutdown.",
        at_least(1),
    )  # fmt: skip
    log_retention_check_interval_ms: int = define(
        "log.retention.check.interval.ms", LONG, 300_000, "Period of the retention task.",
        at_least(1),
    )  # fmt: skip
    log_flush_scheduler_interval_ms: int = define(
        "log.flush.scheduler.interval.ms", LONG, INT64_MAX,
        "Period of the check for logs due a flush (flush.ms).", at_least(0),
    )  # fmt: skip
    log_flush_offset_checkpoint_interval_ms: int = define(
        "log.flush.offset.checkpoint.interval.ms", Type.INT, 60_000,
        "Period of the recovery-point checkpoint.", at_least(0),
    )  # fmt: skip
    log_flush_start_offset_checkpoint_interval_ms: int = define(
        "log.flush.start.offset.checkpoint.interval.ms", Type.INT, 60_000,
        "Period of the log-start-offset checkpoint.", at_least(0),
    )  # fmt: skip
    log_initial_task_delay_ms: int = define(
        "log.initial.task.delay.ms", LONG, 30_000, "Delay before the first background task.",
        at_least(0),
    )  # fmt: skip
    # kafkalog has no transaction coordinator to ask for a producer's own timeout, so one
    # timeout (Kafka's producer default) applies to every open transaction of the manager's logs
    transaction_timeout_ms: int = define(
        "transaction.timeout.ms", Type.INT, 60_000,
        "Idle time after which an open transaction is aborted (no coordinator to ask).",
        at_least(0),
    )  # fmt: skip
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = define(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms", Type.INT, 10_000,
        "Period of the check for timed-out transactions.", at_least(1),
    )  # fmt: skip
    metadata_log_dir: str | None = define(
        "metadata.log.dir", Type.STRING, None,
        "A KRaft node's metadata log directory, read (never written) for the configs of topics "
        "a Kafka broker created; the log directory itself when unset.",
    )  # fmt: skip
    producer_state: ProducerStateConfig = field(default_factory=ProducerStateConfig)
    cleaner: CleanerConfig = field(default_factory=CleanerConfig)
    remote: RemoteLogManagerConfig = field(default_factory=RemoteLogManagerConfig)

    @classmethod
    def from_properties(cls, props: Mapping[str, Any] | None = None) -> ManagerConfig:
        """Build from Kafka broker keys (``log.retention.check.interval.ms``, ...); the
        ``log.cleaner.*``, producer-state and tiered storage keys go to their own configs."""
        own, producer, cleaner, remote = {}, {}, {}, {}
        for key, value in (props or {}).items():
            if key in CLEANER_CONFIG.keys:
                cleaner[key] = value
            elif key in REMOTE_LOG_MANAGER_CONFIG.keys:
                remote[key] = value
            elif key in PRODUCER_STATE_CONFIG.keys:
                producer[key] = value
            else:
                own[key] = value
        return cls(
            **MANAGER_CONFIG.parse(own, unknown="unknown broker config name for the log manager"),
            producer_state=ProducerStateConfig.from_properties(producer),
            cleaner=CleanerConfig.from_properties(cleaner),
            remote=RemoteLogManagerConfig(
                **REMOTE_LOG_MANAGER_CONFIG.parse(remote, unknown="unknown tiered storage config")
            ),
        )


MANAGER_CONFIG = ConfigDef.of(ManagerConfig)

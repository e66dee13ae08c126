"""The LogManager's periodic tasks: Kafka's task names and the broker keys that set their periods
(Kafka's LogManager.startup and the broker's periodic producer-expiration check).

Why: one table says what runs how often, apart from the manager that owns the work. Refuses:
doing any of the work; each task is a callable of the manager's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kafkalog.manager.config import ManagerConfig
from kafkalog.manager.scheduler import Scheduler


@dataclass(frozen=True)
class ManagerTasks:
    retention: Callable[[], object]
    flush: Callable[[], object]
    recovery_point_checkpoint: Callable[[], object]
    log_start_offset_checkpoint: Callable[[], object]
    delete_logs: Callable[[], object]
    transaction_timeouts: Callable[[], object]
    cleaner_tick: Callable[[], object]
    producer_expiration: Callable[[], object]
    flush_new_topics: Callable[[], object]


def schedule_tasks(scheduler: Scheduler, c: ManagerConfig, tasks: ManagerTasks) -> None:
    delay = c.log_initial_task_delay_ms
    for name, action, period in (
        ("kafka-log-retention", tasks.retention, c.log_retention_check_interval_ms),
        ("kafka-log-flusher", tasks.flush, c.log_flush_scheduler_interval_ms),
        (
            "kafka-recovery-point-checkpoint",
            tasks.recovery_point_checkpoint,
            c.log_flush_offset_checkpoint_interval_ms,
        ),
        (
            "kafka-log-start-offset-checkpoint",
            tasks.log_start_offset_checkpoint,
            c.log_flush_start_offset_checkpoint_interval_ms,
        ),
        ("kafka-delete-logs", tasks.delete_logs, 1000),
        (
            "transaction-abort",
            tasks.transaction_timeouts,
            c.transaction_abort_timed_out_transaction_cleanup_interval_ms,
        ),
    ):
        scheduler.schedule(name, action, period_ms=period, delay_ms=delay)
    # a batch of new topics settled soon after CreateTopics answered, from the start on
    # (Kafka's broker flushes each new partition.metadata from a task scheduled at once)
    scheduler.schedule("flush-metadata-file", tasks.flush_new_topics, period_ms=100, delay_ms=0)
    if c.cleaner.enable:
        # on a ticking clock the scheduler drives the cleaner; ``start`` gives it threads
        scheduler.schedule(
            "kafka-log-cleaner", tasks.cleaner_tick, period_ms=c.cleaner.backoff_ms, delay_ms=delay
        )
    expiration = c.producer_state.producer_id_expiration_check_interval_ms
    scheduler.schedule(
        "PeriodicProducerExpirationCheck",
        tasks.producer_expiration,
        period_ms=expiration,
        delay_ms=expiration,
    )

"""What the coordinators need of the broker they run in: the logs, a few settings, the
producer-id allocator, and the signal an append raises.

Why: the coordinators keep state and write their internal topics; they must not know the
server that builds them (its request types, its listeners), so they take this shape, which
the server's ``BrokerContext`` has. Refuses: anything of the wire.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from kafkalog.manager.log_manager import LogManager


class CoordinatorSettings(Protocol):
    """The broker keys the coordinators read (Kafka's names in the comments)."""

    @property
    def offsets_partitions(self) -> int: ...  # offsets.topic.num.partitions

    @property
    def offsets_retention_ms(self) -> int: ...  # offsets.retention.minutes

    @property
    def offsets_retention_check_interval_ms(self) -> int: ...

    @property
    def initial_rebalance_delay_ms(self) -> int: ...  # group.initial.rebalance.delay.ms

    @property
    def offset_metadata_max_bytes(self) -> int: ...  # offset.metadata.max.bytes

    @property
    def transaction_partitions(self) -> int: ...  # transaction.state.log.num.partitions

    @property
    def transaction_max_timeout_ms(self) -> int: ...

    @property
    def transaction_abort_interval_ms(self) -> int: ...

    @property
    def consumer_session_timeout_ms(self) -> int: ...  # group.consumer.session.timeout.ms

    @property
    def consumer_heartbeat_interval_ms(self) -> int: ...  # group.consumer.heartbeat.interval.ms

    @property
    def consumer_assignors(self) -> tuple[str, ...]: ...  # group.consumer.assignors

    @property
    def consumer_max_size(self) -> int: ...  # group.consumer.max.size
    @property
    def consumer_migration_policy(self) -> str: ...  # group.consumer.migration.policy
    @property
    def share_session_timeout_ms(self) -> int: ...  # group.share.session.timeout.ms
    @property
    def share_heartbeat_interval_ms(self) -> int: ...  # group.share.heartbeat.interval.ms
    @property
    def share_max_size(self) -> int: ...  # group.share.max.size


class ProducerIds(Protocol):
    def generate(self) -> int: ...

    def reserve_above(self, ids: Iterable[int]) -> None: ...


class CoordinatorContext(Protocol):
    @property
    def manager(self) -> LogManager: ...

    @property
    def settings(self) -> CoordinatorSettings: ...

    @property
    def producer_ids(self) -> ProducerIds: ...

    @property
    def on_append(self) -> Callable[[Iterable[tuple[str, int]]], None]:
        """Wakes the fetches waiting on the (topic, partition) pairs just appended to."""
        ...

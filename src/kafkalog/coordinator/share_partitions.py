"""The share-partitions this broker leads, their state made durable in ``__share_group_state``
(Kafka's SharePartitionManager with the share coordinator's writes beside it).

Why: each (share group, topic, partition) a member fetches from is a ``SharePartition``. The
first fetch initializes it: from its state in ``__share_group_state`` when there is one
(written by kafkalog or by Kafka), else at the group's ``share.auto.offset.reset`` (latest,
earliest, or by_duration:<ISO-8601 duration>), written as a ShareSnapshot and recorded in the
group's ShareGroupStatePartitionMetadata, so Kafka taking over finds it initialized. Each
settled change (acknowledgements, a lock running out, a member gone) is written as a
ShareUpdate before the change is answered, and every
``share.coordinator.snapshot.update.records.per.snapshot`` updates a new snapshot replaces
them, as Kafka's ShareCoordinatorShard does. A share-partition's writes are serialized, so
its records are appended in the order its changes were made.

Refuses: the wire and the reading of the log (``server.share_fetch``); group membership
(``share_groups``). A write that fails leaves the change in memory and is answered with its
error: on a restart the records it settled are delivered again (at least once, never lost).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kafkalog.coordinator.context import CoordinatorContext
from kafkalog.coordinator.group_config import group_config_default
from kafkalog.coordinator.offsets_store import create_if_missing
from kafkalog.coordinator.share_group import ShareGroup
from kafkalog.coordinator.share_groups import ShareGroups
from kafkalog.coordinator.share_partition import SharePartition
from kafkalog.coordinator.share_state import (
    ShareGroupOffset,
    SharePartitionKey,
    load_share_state,
    snapshot_record,
    update_record,
)
from kafkalog.log.log import Log
from kafkalog.records import Record
from kafkalog.records.partitioner import java_string_hash
from kafkalog.types import SHARE_GROUP_STATE_TOPIC

logger = logging.getLogger("kafkalog.server")

LOCK_CHECK_SECONDS = 0.1
# Kafka's ShareCoordinatorService.shareGroupStateTopicConfigs
SHARE_STATE_TOPIC_CONFIG = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "segment.bytes": "104857600",
    "retention.ms": "-1",
}
RunInWorker = Callable[..., Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class ShareStateSettings:
    """share.coordinator.* broker keys."""

    partitions: int = 50  # share.coordinator.state.topic.num.partitions
    updates_per_snapshot: int = 500  # share.coordinator.snapshot.update.records.per.snapshot


def state_partition_for(key: SharePartitionKey, partitions: int) -> int:
    """Kafka's ShareCoordinatorService.partitionFor: abs(hash of "group:topicId:partition")."""
    h = java_string_hash(f"{key[0]}:{key[1]}:{key[2]}")
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def append_share_state(
    ctx: CoordinatorContext, key: SharePartitionKey, row: tuple[bytes, bytes | None],
    partitions: int,
) -> None:  # fmt: skip
    """Append one state record to the key's ``__share_group_state`` partition (on a worker)."""
    manager = ctx.manager
    create_if_missing(manager, SHARE_GROUP_STATE_TOPIC, partitions, SHARE_STATE_TOPIC_CONFIG)
    count = manager.topics()[SHARE_GROUP_STATE_TOPIC]
    log = manager.get_log(SHARE_GROUP_STATE_TOPIC, state_partition_for(key, count))
    log.append([Record(row[1], row[0])])


_DURATION = re.compile(
    r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$"
)


def reset_start_offset(log: Log, reset: str, now_ms: int) -> int:
    """Where a share-partition without state starts (Kafka's ShareGroupAutoOffsetResetStrategy):
    the log start, the high watermark, or the first record at or after now minus a duration."""
    if reset == "earliest":
        return log.log_start_offset
    if reset.startswith("by_duration:"):
        match = _DURATION.match(reset.removeprefix("by_duration:"))
        if match is not None:
            span = datetime.timedelta(
                days=int(match["d"] or 0), hours=int(match["h"] or 0),
                minutes=int(match["m"] or 0), seconds=float(match["s"] or 0),
            )  # fmt: skip
            found = log.offset_for_timestamp(now_ms - int(span.total_seconds() * 1000))
            return log.high_watermark if found is None else found.offset
    return log.high_watermark


class SharePartitions:
    """Every share-partition in use, on the event loop; ``start`` loads the stored state."""

    def __init__(
        self,
        ctx: CoordinatorContext,
        groups: ShareGroups,
        run: RunInWorker,
        settings: ShareStateSettings,
        broker_properties: Mapping[str, Any],
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.ctx = ctx
        self.groups = groups
        self.run = run
        self.settings = settings
        self.broker_properties = broker_properties
        self.clock_ms = clock_ms
        self.partitions: dict[SharePartitionKey, SharePartition] = {}
        self.stored: dict[SharePartitionKey, ShareGroupOffset] = {}
        self._updates: dict[SharePartitionKey, int] = {}
        self._write_locks: dict[SharePartitionKey, asyncio.Lock] = {}
        self._released: asyncio.Event | None = None
        self._timer: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        groups.on_member_gone.append(self._member_gone)
        groups.before_delete.append(self._delete_state)

    async def start(self) -> None:
        logs = [
            log
            for tp, log in self.ctx.manager.logs().items()
            if tp.topic == SHARE_GROUP_STATE_TOPIC
        ]
        self.stored = await self.run(load_share_state, logs)
        self._released = asyncio.Event()
        self._timer = asyncio.create_task(self._expire_locks())

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            await asyncio.gather(self._timer, return_exceptions=True)

    def released(self) -> asyncio.Event:
        """Set (and replaced) whenever records become available again without an append."""
        if self._released is None:
            self._released = asyncio.Event()
        return self._released

    def _wake(self) -> None:
        event = self.released()
        self._released = asyncio.Event()
        event.set()

    # -- the group's settings ------------------------------------------------------------------

    def group_setting(self, group_id: str, name: str) -> str:
        own = self.ctx.manager.group_configs(group_id).get(name)
        return own if own is not None else group_config_default(name, self.broker_properties)[1]

    def lock_duration_ms(self, group_id: str) -> int:
        return int(self.group_setting(group_id, "share.record.lock.duration.ms"))

    # -- initialization --------------------------------------------------------------------------

    async def get(self, key: SharePartitionKey, topic: str, log: Log) -> SharePartition:
        """The share-partition, initialized (and its initial state written) on first use."""
        found = self.partitions.get(key)
        if found is not None:
            self._configure(found, key[0])  # a group's configs may change at run time
            return found
        async with self._write_lock(key):
            found = self.partitions.get(key)
            if found is not None:
                return found
            group_id = key[0]
            stored = self.stored.get(key)
            now = self.clock_ms()
            if stored is None or stored.start_offset < 0:
                reset = self.group_setting(group_id, "share.auto.offset.reset")
                start = await self.run(reset_start_offset, log, reset, now)
                group = self.groups.groups.get(group_id)
                stored = ShareGroupOffset(
                    0, 0 if group is None else group.group_epoch, 0, start, 0, now, now, []
                )
                await self.run(append_share_state, self.ctx, key,
                               snapshot_record(key, stored), self.settings.partitions)  # fmt: skip
                self.stored[key] = stored
            partition = SharePartition(
                max(stored.start_offset, log.log_start_offset), stored.state_batches,
                lock_duration_ms=0, delivery_count_limit=0, max_in_flight=0,
            )  # fmt: skip
            self._configure(partition, group_id)
            self.partitions[key] = partition
        await self.groups.mark_initialized(group_id, key[1], topic, key[2])
        return partition

    def _configure(self, partition: SharePartition, group_id: str) -> None:
        """The group's share.* configs (its own, else the broker's), as they are now."""
        setting = self.group_setting
        partition.lock_duration_ms = self.lock_duration_ms(group_id)
        partition.delivery_count_limit = int(setting(group_id, "share.delivery.count.limit"))
        partition.max_in_flight = int(setting(group_id, "share.partition.max.record.locks"))

    def _write_lock(self, key: SharePartitionKey) -> asyncio.Lock:
        lock = self._write_locks.get(key)
        if lock is None:
            lock = self._write_locks[key] = asyncio.Lock()
        return lock

    # -- persistence -----------------------------------------------------------------------------

    async def persist(self, key: SharePartitionKey) -> None:
        """Write the share-partition's state as it is now: a ShareUpdate with its start offset
        and batches, or a new snapshot once enough updates followed the last one."""
        async with self._write_lock(key):
            partition = self.partitions[key]
            stored = self.stored[key]
            batches = partition.state_batches()
            complete = partition.delivery_complete_count()
            count = self._updates.get(key, 0) + 1
            now = self.clock_ms()
            if count >= self.settings.updates_per_snapshot:
                snapshot = ShareGroupOffset(
                    stored.snapshot_epoch + 1, stored.state_epoch, stored.leader_epoch,
                    partition.start_offset, complete, stored.create_timestamp, now, batches,
                )  # fmt: skip
                row = snapshot_record(key, snapshot)
                await self.run(append_share_state, self.ctx, key, row, self.settings.partitions)
                self.stored[key] = snapshot
                self._updates[key] = 0
                return
            row = update_record(
                key, stored.snapshot_epoch, -1, partition.start_offset, complete, batches
            )
            await self.run(append_share_state, self.ctx, key, row, self.settings.partitions)
            stored.start_offset, stored.state_batches = partition.start_offset, batches
            self._updates[key] = count

    async def persist_all(self, keys: Iterable[SharePartitionKey]) -> None:
        for key in sorted(set(keys)):
            try:
                await self.persist(key)
            except Exception:
                logger.exception("could not write the state of share-partition %s", key)

    def offsets(self, key: SharePartitionKey) -> tuple[int, int, int] | None:
        """(start offset, leader epoch, records settled above it) of a share-partition with
        state, or None."""
        stored = self.stored.get(key)
        if stored is None:
            return None
        live = self.partitions.get(key)
        if live is not None:
            return live.start_offset, stored.leader_epoch, live.delivery_complete_count()
        return stored.start_offset, stored.leader_epoch, max(stored.delivery_complete_count, 0)

    def keys_of(self, group_id: str) -> list[SharePartitionKey]:
        return sorted(k for k in self.stored if k[0] == group_id)

    async def _delete_state(self, group: ShareGroup) -> None:
        """A deleted group's share-partitions (Kafka's DeleteShareGroupState)."""
        await self.delete_state(self.keys_of(group.group_id))

    async def delete_state(self, keys: Iterable[SharePartitionKey]) -> None:
        """Tombstone each share-partition's state in ``__share_group_state``, then forget
        it (a fetch later starts it again at the group's share.auto.offset.reset)."""
        for key in keys:
            async with self._write_lock(key):
                stored = self.stored.get(key)
                if stored is not None:
                    row = (snapshot_record(key, stored)[0], None)
                    await self.run(append_share_state, self.ctx, key, row,
                                   self.settings.partitions)  # fmt: skip
                self.stored.pop(key, None)
                self.partitions.pop(key, None)
                self._updates.pop(key, None)

    async def set_start_offsets(self, starts: Mapping[SharePartitionKey, int], epoch: int) -> None:
        """A new snapshot for each share-partition: nothing in flight, starting at the given
        offset (AlterShareGroupOffsets; Kafka's InitializeShareGroupState at the group
        epoch). A live share-partition is dropped and loaded again from it."""
        now = self.clock_ms()
        for key, start in sorted(starts.items()):
            async with self._write_lock(key):
                old = self.stored.get(key)
                snapshot = ShareGroupOffset(
                    0 if old is None else old.snapshot_epoch + 1, epoch,
                    0 if old is None else old.leader_epoch, start, 0,
                    now if old is None else old.create_timestamp, now, [],
                )  # fmt: skip
                row = snapshot_record(key, snapshot)
                await self.run(append_share_state, self.ctx, key, row, self.settings.partitions)
                self.stored[key] = snapshot
                self.partitions.pop(key, None)
                self._updates[key] = 0

    # -- locks and members ------------------------------------------------------------------------

    def _member_gone(self, group_id: str, member_id: str) -> None:
        self.release_member(group_id, member_id)

    def release_member(self, group_id: str, member_id: str) -> None:
        """Put back what the member holds in every share-partition of its group (it left, was
        fenced, or its connection went); the new states are written in the background."""
        keys = [key for key in self.partitions if key[0] == group_id]
        task = asyncio.get_running_loop().create_task(self.release(member_id, keys))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def release(self, member_id: str, keys: Iterable[SharePartitionKey]) -> None:
        """Put back what the member holds in ``keys`` and write the changed states."""
        changed = [
            k for k in keys if k in self.partitions and self.partitions[k].release_member(member_id)
        ]
        if changed:
            self._wake()
            await self.persist_all(changed)

    async def _expire_locks(self) -> None:
        """Put back records whose acquisition lock ran out, and write their new state."""
        while True:
            await asyncio.sleep(LOCK_CHECK_SECONDS)
            now = self.clock_ms()
            changed = [key for key, p in self.partitions.items() if p.expire_locks(now)]
            if changed:
                self._wake()
                await self.persist_all(changed)

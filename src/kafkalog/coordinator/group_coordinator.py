"""The group coordinator: every classic group of the broker, their committed offsets, and
their records in ``__consumer_offsets`` (Kafka's GroupCoordinator and GroupMetadataManager).

Why: membership and rebalances live in ``group.Group``; this object holds the groups, loads
them and their offsets back at start-up, writes each group's metadata and offset records
(durable before anyone is told), settles transactional commits at their marker, and expires
sessions and old offsets on timers. It runs on the event loop; appends go to worker threads.
Refuses: the wire (``server.group_apis`` turns requests into calls here and results into
responses). KIP-848 consumer groups are ``consumer_groups.ConsumerGroups``' and share groups
``share_groups.ShareGroups``', kept here beside the classic ones so one id is one group and
all write through the same partition locks; a classic group turning into a consumer group
and back with its members (online migration) is done here, where both kinds are.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kafkalog.coordinator.consumer_group import ConsumerGroup, Record, record_rows
from kafkalog.coordinator.consumer_group_classic import ClassicMembers
from kafkalog.coordinator.consumer_groups import (
    ConsumerGroupLimits,
    ConsumerGroups,
    HeartbeatError,
)
from kafkalog.coordinator.context import CoordinatorContext
from kafkalog.coordinator.group import Group
from kafkalog.coordinator.group_member import GroupState, wall_clock_ms
from kafkalog.coordinator.group_metadata import restore
from kafkalog.coordinator.group_migration import (
    MigrationError,
    consumer_records_from_classic,
    stored_classic_from_consumer,
)
from kafkalog.coordinator.offsets_retention import expired_offsets
from kafkalog.coordinator.offsets_store import (
    GroupOffsets,
    StoredGroup,
    append_offset_records,
    drop_staged,
    group_metadata_key,
    group_metadata_value,
    load_offsets,
    offset_commit_key,
    partition_for,
    settle,
)
from kafkalog.coordinator.share_group import SHARE_RECORD_NAMES
from kafkalog.coordinator.share_groups import ShareGroupLimits, ShareGroups
from kafkalog.errors import KafkaLogError
from kafkalog.types import OFFSETS_TOPIC

logger = logging.getLogger("kafkalog.server")

SESSION_CHECK_SECONDS = 0.5

RunInWorker = Callable[..., Awaitable[Any]]


class GroupCoordinator:
    """Every group of this broker. Lives on the event loop; ``start`` loads the committed
    offsets and starts the session-expiry check."""

    def __init__(self, ctx: CoordinatorContext, run: RunInWorker) -> None:
        self.ctx = ctx
        self.run = run
        self.groups: dict[str, Group] = {}
        self._commit_locks: dict[int, asyncio.Lock] = {}  # by __consumer_offsets partition
        # TxnOffsetCommit offsets by (producer id, __consumer_offsets partition), till the marker
        self.pending_transactions: dict[tuple[int, int], GroupOffsets] = {}
        self._expiry: asyncio.Task[None] | None = None
        self._offsets_expiry: asyncio.Task[None] | None = None
        settings = ctx.settings
        limits = ConsumerGroupLimits(
            settings.consumer_session_timeout_ms,
            settings.consumer_heartbeat_interval_ms,
            settings.consumer_assignors,
            settings.consumer_max_size,
            settings.consumer_migration_policy,
        )
        # KIP-848 consumer groups: their records share the partition and lock of their offsets
        self.consumer = ConsumerGroups(
            ctx, limits, self.store_consumer_records,
            lambda g: self.is_classic(g) or g in self.share.groups,
            upgrade=self._upgrade_records, downgrade=self._downgrade,
        )  # fmt: skip
        # classic consumers' requests to a consumer group (a group migrated online)
        self.classic_members = ClassicMembers(self.consumer)
        # share groups (KIP-932): their records share the partition and lock too
        share_limits = ShareGroupLimits(
            settings.share_session_timeout_ms,
            settings.share_heartbeat_interval_ms,
            settings.share_max_size,
        )
        self.share = ShareGroups(
            ctx, share_limits, self.store_share_records,
            lambda g: self.is_classic(g) or g in self.consumer.groups,
        )  # fmt: skip

    def is_classic(self, group_id: str) -> bool:
        """A classic group with members holds this id (an empty one may become a consumer
        group, as Kafka's offline migration allows)."""
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    def is_consumer(self, group_id: str) -> bool:
        """A KIP-848 consumer group with members holds this id."""
        group = self.consumer.groups.get(group_id)
        return group is not None and bool(group.members)

    def _upgrade_records(self, group_id: str) -> list[Record]:
        """The consumer group records the classic group ``group_id`` (with members) becomes;
        HeartbeatError with Kafka's words when it cannot."""
        group = self.groups[group_id]
        try:
            return consumer_records_from_classic(
                group, self.ctx.manager.topic_id, self.ctx.manager.topics(),
                self.consumer.limits.max_size,
            )  # fmt: skip
        except MigrationError as err:
            raise HeartbeatError(err.code, str(err)) from err

    async def _downgrade(self, group: ConsumerGroup, leaving: set[str]) -> None:
        """The consumer group's members but ``leaving``, all of the classic protocol, become a
        classic group (Kafka's convertToClassicGroup): the consumer group's records
        tombstoned and the classic group's GroupMetadata written in one batch, then a
        rebalance, which they learn of from their next heartbeat."""
        gid = group.group_id
        names = self.ctx.manager.topic_names_by_id()
        stored = stored_classic_from_consumer(group, leaving, names)
        rows = record_rows(self.consumer.tombstones(group))
        rows.append((group_metadata_key(gid), group_metadata_value(stored)))
        partitions = self.ctx.settings.offsets_partitions
        async with self.commit_lock(gid):
            await self.run(append_offset_records, self.ctx.manager, gid, rows, partitions)
        self.consumer.forget(gid)
        classic = self.group(gid)
        restore(classic, stored)
        classic.prepare_rebalance()

    async def store_consumer_records(self, group_id: str, records: list[Record]) -> None:
        """A consumer group's records, in one batch. The first ones of a group whose id a
        classic group held also tombstone that group's GroupMetadata (Kafka's offline and
        online migrations); its committed offsets stay the group's, and its members, if it
        had any, go on in the consumer group."""
        rows = record_rows(records)
        classic = self.groups.get(group_id)
        migrated = (
            classic is not None
            and classic.protocol_type is not None
            and group_id not in self.consumer.groups
        )
        if migrated:
            rows.insert(0, (group_metadata_key(group_id), None))
        partitions = self.ctx.settings.offsets_partitions
        async with self.commit_lock(group_id):
            await self.run(append_offset_records, self.ctx.manager, group_id, rows, partitions)
        if migrated and classic is not None and self.groups.get(group_id) is classic:
            classic.dissolve()
            del self.groups[group_id]
            self.group(group_id).offsets.update(classic.offsets)

    async def store_share_records(self, group_id: str, records: list[Record]) -> None:
        """A share group's records, in one batch, in order with the partition's others."""
        rows = record_rows(records, SHARE_RECORD_NAMES)
        partitions = self.ctx.settings.offsets_partitions
        async with self.commit_lock(group_id):
            await self.run(append_offset_records, self.ctx.manager, group_id, rows, partitions)

    async def start(self) -> None:
        logs = {
            tp.partition: log
            for tp, log in self.ctx.manager.logs().items()
            if tp.topic == OFFSETS_TOPIC
        }
        loaded = await self.run(load_offsets, logs)
        self.pending_transactions = loaded.open_transactions
        for group_id, stored in loaded.groups.items():
            if stored is not None:
                restore(self.group(group_id), stored)
        for group_id, offsets in loaded.committed.items():
            if offsets:  # all of a group's offsets tombstoned: nothing left to load
                self.group(group_id).offsets.update(offsets)
        for group_id, group_records in loaded.consumer_groups.items():
            for record in group_records:
                if record[0] in SHARE_RECORD_NAMES:
                    self.share.replay(group_id, record)
                else:
                    self.consumer.replay(group_id, record)
        self.consumer.start_sessions()
        self.share.start_sessions()
        if loaded.committed:
            logger.info("loaded the committed offsets of %d groups", len(loaded.committed))
        members = sum(len(g.members) for g in self.groups.values())
        if members:
            logger.info("loaded %d members of classic groups", members)
        self._expiry = asyncio.create_task(self._expire_sessions())
        self._offsets_expiry = asyncio.create_task(self._expire_offsets())

    async def stop(self) -> None:
        tasks = [t for t in (self._expiry, self._offsets_expiry) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _expire_sessions(self) -> None:
        """Each member's session timed on its own, as Kafka times each one: the check wakes
        when the first session runs out (a heartbeat only ever moves a deadline later), and
        at least every SESSION_CHECK_SECONDS for members that joined meanwhile."""
        loop = asyncio.get_running_loop()
        while True:
            found = [g.next_session_deadline() for g in self.groups.values()]
            found.append(self.consumer.next_deadline())
            found.append(self.share.next_deadline())
            deadlines = [d for d in found if d is not None]
            first = min(deadlines, default=loop.time() + SESSION_CHECK_SECONDS)
            await asyncio.sleep(max(0.0, min(first - loop.time(), SESSION_CHECK_SECONDS)) + 0.001)
            for group in list(self.groups.values()):
                for member_id in group.expire_sessions():
                    logger.info("member %s of group %s timed out", member_id, group.group_id)
            try:
                for group_id, member_id in await self.consumer.expire():
                    logger.info("member %s of consumer group %s fenced: its session or "
                                "revocation time ran out", member_id, group_id)  # fmt: skip
            except KafkaLogError:
                logger.exception("could not fence expired consumer group members")
            try:
                for group_id, member_id in await self.share.expire():
                    logger.info("member %s of share group %s fenced: its session ran out",
                                member_id, group_id)  # fmt: skip
            except KafkaLogError:
                logger.exception("could not fence expired share group members")

    async def _expire_offsets(self) -> None:
        """Kafka's offsets-retention check, every ``offsets.retention.check.interval.ms``."""
        while True:
            await asyncio.sleep(self.ctx.settings.offsets_retention_check_interval_ms / 1000)
            try:
                count = await self.expire_offsets(wall_clock_ms())
            except KafkaLogError:
                logger.exception("could not expire old committed offsets; trying again later")
                continue
            if count:
                logger.info("removed %d expired committed offsets", count)

    def complete_transaction(self, producer_id: int, partition: int, commit: bool) -> None:
        """The marker of ``producer_id``'s transaction is in ``__consumer_offsets`` partition
        ``partition``: its offsets count now (COMMIT) or never (ABORT)."""
        staged = self.pending_transactions.pop((producer_id, partition), {})
        if commit:
            for group_id, offsets in staged.items():
                settle(self.group(group_id).offsets, offsets)

    def group(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            loop = asyncio.get_running_loop()
            group = Group(
                group_id,
                loop.time,
                self.ctx.settings.initial_rebalance_delay_ms,
                lambda stored: self.store_group(group_id, stored),
            )
            self.groups[group_id] = group
        return group

    def commit_lock(self, group_id: str) -> asyncio.Lock:
        """The lock that keeps a group's writes to ``__consumer_offsets`` in order with what
        it holds in memory: one per partition of that topic, as Kafka serialises a
        partition's appends, so a slow commit holds up only the groups that share its
        partition."""
        partition = partition_for(group_id, self.ctx.settings.offsets_partitions)
        lock = self._commit_locks.get(partition)
        if lock is None:
            lock = self._commit_locks[partition] = asyncio.Lock()
        return lock

    async def store_group(self, group_id: str, stored: StoredGroup) -> None:
        """Append ``group_id``'s GroupMetadata record to its ``__consumer_offsets`` partition,
        in order with the group's offset commits."""
        row = (group_metadata_key(group_id), group_metadata_value(stored))
        partitions = self.ctx.settings.offsets_partitions
        async with self.commit_lock(group_id):
            await self.run(append_offset_records, self.ctx.manager, group_id, [row], partitions)

    # --- the group's records in __consumer_offsets ---------------------------------------------

    def append_offsets(self, group_id: str, rows: list[tuple[bytes, bytes | None]]) -> int:
        """Write commit records (or tombstones) to the group's ``__consumer_offsets``
        partition (on a worker); the first one's offset."""
        return append_offset_records(
            self.ctx.manager, group_id, rows, self.ctx.settings.offsets_partitions
        )

    async def delete_offsets(
        self, group: Group, tps: list[tuple[str, int]], whole_group: bool = False
    ) -> None:
        """Tombstone ``tps`` of ``group`` in ``__consumer_offsets`` (and its GroupMetadata
        when ``whole_group``), then forget them: a deletion is durable before anyone is told
        (DeleteGroups, OffsetDelete, expiry)."""
        if not tps and not whole_group:
            return
        async with self.commit_lock(group.group_id):
            tombstones: list[tuple[bytes, bytes | None]] = [
                (offset_commit_key(group.group_id, *tp), None) for tp in tps
            ]
            if whole_group:
                tombstones.append((group_metadata_key(group.group_id), None))
            await self.run(self.append_offsets, group.group_id, tombstones)
            for tp in tps:
                group.offsets.pop(tp, None)
                drop_staged(self.pending_transactions.values(), group.group_id, tp)

    async def expire_offsets(self, now_ms: int) -> int:
        """Tombstone every expired offset in ``__consumer_offsets`` and forget it; a group left
        empty with no offsets is removed (Dead), its GroupMetadata tombstoned in the same batch
        (Kafka's GroupMetadataManager.cleanupGroupMetadata). Returns how many offsets expired."""
        retention = self.ctx.settings.offsets_retention_ms
        expired = 0
        for group_id, group in list(self.groups.items()):
            consumer_group = self.consumer.groups.get(group_id)
            topics = None if consumer_group is None else consumer_group.subscribed_topic_names()
            doomed = expired_offsets(group, now_ms, retention, topics)
            dead = (
                not group.members
                and group.state is GroupState.EMPTY
                and (consumer_group is None or not consumer_group.members)
                and set(group.offsets) <= set(doomed)
                and not any(group_id in staged for staged in self.pending_transactions.values())
            )
            await self.delete_offsets(group, doomed, whole_group=dead)
            expired += len(doomed)
            if dead:
                group.state = GroupState.DEAD
                self.groups.pop(group_id, None)
                if consumer_group is not None:
                    await self.consumer.delete(consumer_group)
        return expired

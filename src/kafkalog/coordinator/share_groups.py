"""Every share group of the broker: the ShareGroupHeartbeat rule, its records, and the member
timers (Kafka's GroupMetadataManager.shareGroupHeartbeat).

Why: as for a consumer group, a heartbeat (1) creates or updates the member, bumping the
group epoch when its subscription or the subscribed topics changed; (2) recomputes the
target assignment when the group epoch is ahead of it (``share_group.simple_assignment``);
(3) moves the member to its target, in one step since share groups revoke nothing. The
records of one heartbeat are appended in one batch and then replayed, so no answer is sent
for state a restart would not find. A member silent for ``group.share.session.timeout.ms``
is fenced as a leave is; whoever listens (``on_member_gone``: the share-partitions) puts its
acquired records back. The ShareGroupStatePartitionMetadata record says which
share-partitions have state; ``mark_initialized`` adds one once its state is written.

Refuses: the wire (``server.share_group_apis``), the records' delivery (``share_partitions``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from kafkalog.coordinator.consumer_subscriptions import metadata_hash
from kafkalog.coordinator.context import CoordinatorContext
from kafkalog.coordinator.share_group import (
    Assignment,
    Record,
    ShareGroup,
    ShareGroupMember,
    current_assignment_record,
    epoch_record,
    group_removal_records,
    member_record,
    member_removal_records,
    simple_assignment,
    state_partition_metadata_record,
    target_member_record,
    target_metadata_record,
)

logger = logging.getLogger("kafkalog.server")

LEAVE_GROUP_MEMBER_EPOCH = -1
WriteRecords = Callable[[str, list[Record]], Awaitable[None]]
MemberGone = Callable[[str, str], None]


@dataclass(frozen=True, slots=True)
class ShareHeartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None
    subscribed_topic_names: tuple[str, ...] | None  # None: unchanged
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class ShareHeartbeatAnswer:
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None: unchanged, not sent


class ShareHeartbeatError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class ShareGroupLimits:
    """The group.share.* broker keys the membership reads."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 200


class ShareGroups:
    """Every share group, on the event loop. ``write`` appends a group's records durably;
    ``other_group`` says whether a group id is taken by a classic or consumer group."""

    def __init__(
        self,
        ctx: CoordinatorContext,
        limits: ShareGroupLimits,
        write: WriteRecords,
        other_group: Callable[[str], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ctx = ctx
        self.limits = limits
        self.write = write
        self.other_group = other_group
        self.clock = clock
        self.groups: dict[str, ShareGroup] = {}
        self.on_member_gone: list[MemberGone] = []
        # called with a group about to be deleted (its share-partitions' state goes first)
        self.before_delete: list[Callable[[ShareGroup], Awaitable[None]]] = []
        self._deadlines: dict[tuple[str, str], float] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    # -- loading ----------------------------------------------------------------------------

    def replay(self, group_id: str, record: Record) -> None:
        record_type, key, value = record
        group = self.groups.get(group_id)
        if group is None:
            if value is None:
                return
            group = self.groups[group_id] = ShareGroup(group_id)
        if record_type == 11 and value is None:  # ShareGroupMetadata tombstone: deleted
            self.groups.pop(group_id, None)
            return
        group.replay(record_type, key, value)

    def start_sessions(self) -> None:
        now = self.clock()
        for group in self.groups.values():
            for member_id in group.members:
                self._deadlines[(group.group_id, member_id)] = (
                    now + self.limits.session_timeout_ms / 1000
                )

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and member_id in group.members

    # -- the heartbeat ------------------------------------------------------------------------

    async def heartbeat(self, hb: ShareHeartbeat) -> ShareHeartbeatAnswer:
        lock = self._locks.setdefault(hb.group_id, asyncio.Lock())
        try:
            async with lock:
                if hb.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                    return await self._leave(hb)
                return await self._heartbeat(hb)
        except ShareHeartbeatError as err:
            return ShareHeartbeatAnswer(err.code, str(err))
        finally:
            if hb.group_id not in self.groups and not lock.locked():
                self._locks.pop(hb.group_id, None)

    async def _commit(self, group_id: str, records: list[Record]) -> None:
        if records:
            await self.write(group_id, records)
            for record in records:
                self.replay(group_id, record)

    def _group(self, hb: ShareHeartbeat) -> ShareGroup:
        group = self.groups.get(hb.group_id)
        if group is not None:
            return group
        if self.other_group(hb.group_id):
            raise ShareHeartbeatError(
                ErrorCode.group_id_not_found, f"Group {hb.group_id} is not a share group."
            )
        if hb.member_epoch != 0:
            raise ShareHeartbeatError(
                ErrorCode.group_id_not_found, f"Share group {hb.group_id} not found."
            )
        return ShareGroup(hb.group_id)

    def _member(self, group: ShareGroup, hb: ShareHeartbeat) -> ShareGroupMember:
        member = group.members.get(hb.member_id)
        if member is None:
            if hb.member_epoch != 0:
                raise ShareHeartbeatError(
                    ErrorCode.unknown_member_id,
                    f"Member {hb.member_id} is not a member of group {group.group_id}.",
                )
            if len(group.members) >= self.limits.max_size:
                raise ShareHeartbeatError(
                    ErrorCode.group_max_size_reached,
                    f"The share group has reached its maximum capacity of "
                    f"{self.limits.max_size} members.",
                )
            return ShareGroupMember(hb.member_id)
        epoch, known = hb.member_epoch, member.member_epoch
        stale = epoch < known and epoch != member.previous_member_epoch
        if epoch != 0 and (epoch > known or stale):
            raise ShareHeartbeatError(
                ErrorCode.fenced_member_epoch,
                f"The share group member has a {'greater' if epoch > known else 'smaller'} "
                f"member epoch ({epoch}) than the one known by the group coordinator "
                f"({known}). The member must abandon all its partitions and rejoin.",
            )
        return member

    def _subscribed(self, members: list[ShareGroupMember]) -> dict[str, tuple[str, int]]:
        """topic name -> (topic id, partition count) of every existing subscribed topic."""
        known = self.ctx.manager.topics()
        out = {}
        for name in sorted({t for m in members for t in m.subscribed_topic_names}):
            topic_id = self.ctx.manager.topic_id(name) if name in known else None
            if topic_id is not None:
                out[name] = (topic_id, known[name])
        return out

    async def _heartbeat(self, hb: ShareHeartbeat) -> ShareHeartbeatAnswer:
        group = self._group(hb)
        member = self._member(group, hb)
        is_new = member.member_id not in group.members
        updated = dataclasses.replace(
            member,
            rack_id=hb.rack_id if hb.rack_id is not None else member.rack_id,
            subscribed_topic_names=hb.subscribed_topic_names
            if hb.subscribed_topic_names is not None else member.subscribed_topic_names,
            client_id=hb.client_id,
            client_host=hb.client_host,
        )  # fmt: skip
        records: list[Record] = []
        subscription_changed = frozenset(updated.subscribed_topic_names) != frozenset(
            member.subscribed_topic_names
        )
        if is_new or updated != member:
            records.append(member_record(group.group_id, updated))
        members = [m for m in group.members.values() if m.member_id != updated.member_id]
        members.append(updated)
        topics = self._subscribed(members)
        new_hash = metadata_hash(topics)
        epoch = group.group_epoch
        if is_new or subscription_changed or new_hash != group.metadata_hash:
            epoch += 1
            records.append(epoch_record(group.group_id, epoch, new_hash))
            logger.info("share group %s: epoch %d", group.group_id, epoch)
        target_epoch = group.assignment_epoch
        target = group.target.get(updated.member_id, {})
        if epoch > group.assignment_epoch:
            target_epoch = epoch
            targets = _assign(members, topics, group.target)
            for member_id, assignment in sorted(targets.items()):
                if member_id == updated.member_id or assignment != group.target.get(member_id):
                    records.append(target_member_record(group.group_id, member_id, assignment))
            records.append(target_metadata_record(group.group_id, epoch, _now_ms()))
            target = targets.get(updated.member_id, {})
        reconciled = updated
        mine = _ids(topics, updated)
        wanted = {t: ps for t, ps in target.items() if t in mine}
        if updated.member_epoch != target_epoch or subscription_changed:
            reconciled = dataclasses.replace(
                updated,
                member_epoch=target_epoch,
                previous_member_epoch=updated.member_epoch,
                assigned=wanted,
            )
        if reconciled != member or is_new:
            records.append(current_assignment_record(group.group_id, reconciled))
        await self._commit(group.group_id, records)
        self._deadlines[(group.group_id, reconciled.member_id)] = (
            self.clock() + self.limits.session_timeout_ms / 1000
        )
        full = hb.member_epoch == 0 or hb.subscribed_topic_names is not None
        changed = reconciled.assigned != member.assigned
        return ShareHeartbeatAnswer(
            member_id=reconciled.member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.limits.heartbeat_interval_ms,
            assignment=reconciled.assigned if full or changed or is_new else None,
        )

    # -- share-partition state -----------------------------------------------------------------

    async def mark_initialized(
        self, group_id: str, topic_id: str, topic_name: str, partition: int
    ) -> None:
        """Record that ``(topic_id, partition)`` of the group has state in
        ``__share_group_state`` (ShareGroupStatePartitionMetadata's initialized topics), so
        Kafka taking the directory over does not initialize it again."""
        async with self._locks.setdefault(group_id, asyncio.Lock()):
            group = self.groups.get(group_id)
            if group is None or (topic_id, partition) in group.initialized_partitions():
                return
            await self._set_initialized(group, {topic_id: (topic_name, frozenset({partition}))})

    async def _set_initialized(
        self,
        group: ShareGroup,
        added: Mapping[str, tuple[str, frozenset[int]]],
        removed: frozenset[str] = frozenset(),
    ) -> None:
        """Write the group's ShareGroupStatePartitionMetadata with ``added`` partitions
        initialized and the ``removed`` topics' state gone (held: the group's lock)."""
        initialized = {t: v for t, v in group.initialized.items() if t not in removed}
        initializing = {t: v for t, v in group.initializing.items() if t not in removed}
        for topic_id, (name, parts) in added.items():
            known = initialized.get(topic_id, (name, frozenset()))[1]
            initialized[topic_id] = (name, known | parts)
            if topic_id in initializing:
                rest = initializing[topic_id][1] - parts
                if rest:
                    initializing[topic_id] = (initializing[topic_id][0], rest)
                else:
                    del initializing[topic_id]
        deleting = {t: n for t, n in group.deleting.items() if t not in removed}
        record = state_partition_metadata_record(group.group_id, initializing, initialized,
                                                 deleting)  # fmt: skip
        await self._commit(group.group_id, [record])

    async def alter_offsets(
        self,
        group_id: str,
        offsets: Mapping[str, tuple[str, dict[int, int]]],
        write_state: Callable[[dict[tuple[str, str, int], int], int], Awaitable[None]],
    ) -> None:
        """AlterShareGroupOffsets (Kafka's GroupMetadataManager.alterShareGroupOffsets): an
        empty share group's share-partitions start at ``offsets`` (topic id -> (name,
        partition -> start offset)); a group that does not exist is created. The state is
        written (``write_state``, with the group epoch) before the group's record says it
        is there. ShareHeartbeatError: another group type, or members."""
        async with self._locks.setdefault(group_id, asyncio.Lock()):
            group = self._empty_share_group(group_id, create=True)
            starts = {(group_id, t, p): o for t, (_, parts) in offsets.items()
                      for p, o in parts.items()}  # fmt: skip
            await write_state(starts, group.group_epoch)
            added = {t: (name, frozenset(parts)) for t, (name, parts) in offsets.items()}
            await self._set_initialized(group, added)

    async def delete_offsets(
        self,
        group_id: str,
        topic_ids: frozenset[str],
        delete_state: Callable[[list[tuple[str, str, int]]], Awaitable[None]],
    ) -> None:
        """DeleteShareGroupOffsets: an empty share group forgets its state of ``topic_ids``
        (each already among its initialized topics): the state is tombstoned, then the
        group's record no longer names the topics."""
        async with self._locks.setdefault(group_id, asyncio.Lock()):
            group = self._empty_share_group(group_id, create=False)
            keys = [(group_id, t, p) for t in sorted(topic_ids)
                    for p in sorted(group.initialized.get(t, ("", frozenset()))[1])]  # fmt: skip
            await delete_state(keys)
            await self._set_initialized(group, {}, topic_ids)

    def _empty_share_group(self, group_id: str, *, create: bool) -> ShareGroup:
        group = self.groups.get(group_id)
        if group is None and self.other_group(group_id):
            raise ShareHeartbeatError(
                ErrorCode.group_id_not_found, f"Group {group_id} is not a share group."
            )
        if group is None and not create:
            raise ShareHeartbeatError(
                ErrorCode.group_id_not_found, f"Share group {group_id} not found."
            )
        if group is None:
            return ShareGroup(group_id)  # kept once its first record is replayed
        if group.members:
            raise ShareHeartbeatError(ErrorCode.non_empty_group, "The group is not empty.")
        return group

    # -- leaving, fencing, timers ----------------------------------------------------------------

    async def _leave(self, hb: ShareHeartbeat) -> ShareHeartbeatAnswer:
        group = self.groups.get(hb.group_id)
        if group is None:
            raise ShareHeartbeatError(
                ErrorCode.group_id_not_found, f"Share group {hb.group_id} not found."
            )
        if hb.member_id not in group.members:
            raise ShareHeartbeatError(
                ErrorCode.unknown_member_id,
                f"Member {hb.member_id} is not a member of group {hb.group_id}.",
            )
        logger.info("member %s left share group %s", hb.member_id, group.group_id)
        await self.fence(group, hb.member_id)
        return ShareHeartbeatAnswer(member_id=hb.member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH)

    async def fence(self, group: ShareGroup, member_id: str) -> None:
        """Remove the member and bump the group epoch (Kafka's shareGroupFenceMember); its
        acquired records go back to the share-partitions."""
        records = member_removal_records(group.group_id, member_id)
        rest = [m for m in group.members.values() if m.member_id != member_id]
        epoch = group.group_epoch + 1
        records.append(epoch_record(group.group_id, epoch, metadata_hash(self._subscribed(rest))))
        if not rest:
            records.append(target_metadata_record(group.group_id, epoch, _now_ms()))
        await self._commit(group.group_id, records)
        self._deadlines.pop((group.group_id, member_id), None)
        for listener in self.on_member_gone:
            listener(group.group_id, member_id)

    async def delete(self, group: ShareGroup) -> bool:
        """Tombstone an empty share group's records and forget it; False if it has members."""
        async with self._locks.setdefault(group.group_id, asyncio.Lock()):
            if self.groups.get(group.group_id) is not group or group.members:
                return False
            for listener in self.before_delete:
                await listener(group)
            await self._commit(group.group_id, group_removal_records(group.group_id))
            self.groups.pop(group.group_id, None)
            return True

    def next_deadline(self) -> float | None:
        return min(self._deadlines.values(), default=None)

    async def expire(self) -> list[tuple[str, str]]:
        """Fence every member whose session ran out; who was fenced."""
        now = self.clock()
        fenced = []
        for key in sorted(k for k, d in self._deadlines.items() if d <= now):
            group_id, member_id = key
            async with self._locks.setdefault(group_id, asyncio.Lock()):
                group = self.groups.get(group_id)
                if group is None or member_id not in group.members:
                    self._deadlines.pop(key, None)
                    continue
                deadline = self._deadlines.get(key)
                if deadline is None or deadline > now:
                    continue  # it heartbeated while this waited for the lock
                await self.fence(group, member_id)
                fenced.append(key)
        return fenced


def _ids(topics: Mapping[str, tuple[str, int]], member: ShareGroupMember) -> set[str]:
    return {topics[t][0] for t in member.subscribed_topic_names if t in topics}


def _assign(
    members: list[ShareGroupMember],
    topics: Mapping[str, tuple[str, int]],
    previous: Mapping[str, Assignment],
) -> dict[str, dict[str, frozenset[int]]]:
    """The target assignment: one sharing of all partitions when every member subscribes to
    the same topics (Kafka's homogeneous case); otherwise each topic shared among its own
    subscribers, as Kafka's heterogeneous builder assigns topic by topic."""
    ids = {m.member_id: _ids(topics, m) for m in members}
    out: dict[str, dict[str, frozenset[int]]] = {m.member_id: {} for m in members}
    partitions_of = {tid: count for tid, count in topics.values()}
    groups: dict[frozenset[str], list[str]] = {}
    if len({frozenset(s) for s in ids.values()}) <= 1:
        groups[frozenset(next(iter(ids.values()), set()))] = list(ids)
    else:
        for tid in partitions_of:
            groups[frozenset({tid})] = [m for m, s in ids.items() if tid in s]
    for topic_ids, who in groups.items():
        parts = [(t, p) for t in sorted(topic_ids) for p in range(partitions_of[t])]
        previous_of = {
            m: {t: ps for t, ps in previous.get(m, {}).items() if t in topic_ids} for m in who
        }
        for m, assignment in simple_assignment(who, parts, previous_of).items():
            out[m].update(assignment)
    return out


def _now_ms() -> int:
    return int(time.time() * 1000)

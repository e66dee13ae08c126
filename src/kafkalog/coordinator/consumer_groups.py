"""Every KIP-848 consumer group of the broker: the ConsumerGroupHeartbeat rule, its records,
and the member timers (Kafka's GroupMetadataManager.consumerGroupHeartbeat).

Why: a heartbeat does three things, in Kafka's order: (1) it creates or updates the member,
bumping the group epoch when a subscription (or the subscribed topics' metadata) changed;
(2) when the group epoch is ahead of the target assignment's, the assignor computes a new
target; (3) the member is reconciled toward its target. Each change is a record; the records
of one heartbeat are appended to the group's ``__consumer_offsets`` partition in one batch
and then replayed into memory (``ConsumerGroup.replay``), so an answer is never sent for
state a restart would not find. A member that stops heartbeating for
``group.consumer.session.timeout.ms``, or keeps partitions it was told to revoke for its
rebalance timeout, is fenced, as a leave is. A classic group is taken over by the first
heartbeat (its members and all, through the group coordinator's ``upgrade``), and a group
left with members of the classic protocol only is handed back (``downgrade``). Refuses: the
wire (``server.consumer_group_apis``), client-side assignors, and the classic members' own
requests (``consumer_group_classic``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kafkalog.coordinator.assignors import ASSIGNOR_CLASSES, UNIFORM
from kafkalog.coordinator.consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    REGULAR_EXPRESSION,
    ConsumerGroup,
    ConsumerGroupMember,
    OwnedPartitions,
    Record,
    UnknownStateError,
    current_assignment_record,
    epoch_record,
    group_removal_records,
    member_record,
    member_removal_records,
    reconcile,
    target_member_record,
    target_metadata_record,
)
from kafkalog.coordinator.consumer_subscriptions import (
    InvalidRegexError,
    metadata_hash,
    new_target,
    resolve_regexes,
    subscribed_topics,
    subscription,
    subscription_changed,
    subset,
)
from kafkalog.coordinator.context import CoordinatorContext

logger = logging.getLogger("kafkalog.server")

WriteRecords = Callable[[str, list[Record]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A ConsumerGroupHeartbeat request's fields; None where the request left one unchanged."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    subscribed_topic_names: tuple[str, ...] | None
    subscribed_topic_regex: str | None
    server_assignor: str | None
    owned: OwnedPartitions
    client_id: str = ""
    client_host: str = ""
    # a JoinGroup of a member speaking the classic protocol (a group migrated online): its
    # session timeout and protocols; its epoch is not checked, as Kafka checks none there
    classic_member_metadata: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Mapping[str, frozenset[int]] | None = None  # None: unchanged, not sent


class HeartbeatError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class ConsumerGroupLimits:
    """The group.consumer.* broker keys."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    assignors: tuple[str, ...] = ("uniform", "range")
    max_size: int = 2**31 - 1
    migration_policy: str = "bidirectional"  # group.consumer.migration.policy


def assignor_names(values: tuple[str, ...]) -> tuple[str, ...]:
    """``group.consumer.assignors`` by short name (Kafka's class names are taken too)."""
    return tuple(ASSIGNOR_CLASSES.get(v.strip(), v.strip()) for v in values if v.strip())


class ConsumerGroups:
    """Every consumer group, on the event loop. ``write`` appends a group's records durably
    (in order with its offset commits); ``is_classic`` says whether a group id is taken by a
    classic group with members."""

    def __init__(
        self,
        ctx: CoordinatorContext,
        limits: ConsumerGroupLimits,
        write: WriteRecords,
        is_classic: Callable[[str], bool],
        clock: Callable[[], float] = time.monotonic,
        upgrade: Callable[[str], list[Record]] | None = None,
        downgrade: Callable[[ConsumerGroup, set[str]], Awaitable[None]] | None = None,
    ) -> None:
        self.ctx = ctx
        self.limits = limits
        self.write = write
        self.is_classic = is_classic
        self.clock = clock
        # online migration (the group coordinator's): the records a classic group with
        # members becomes, and turning a group of classic members back into a classic group
        self.upgrade = upgrade
        self.downgrade = downgrade
        self.groups: dict[str, ConsumerGroup] = {}
        self._session_deadlines: dict[tuple[str, str], float] = {}
        self._revocation_deadlines: dict[tuple[str, str], tuple[float, int]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        # per group: the topic snapshot its expressions were last matched against, and them
        self._resolved: dict[str, tuple[Mapping[str, int], frozenset[str]]] = {}

    # -- loading --------------------------------------------------------------------------

    def replay(self, group_id: str, record: Record) -> None:
        """One record of ``group_id`` (at start-up, or after its append)."""
        record_type, key, value = record
        group = self.groups.get(group_id)
        if group is None:
            if value is None:
                return
            group = self.groups[group_id] = ConsumerGroup(group_id)
        if record_type == 3 and value is None:  # ConsumerGroupMetadata tombstone: deleted
            self.groups.pop(group_id, None)
            return
        group.replay(record_type, key, value)

    def start_sessions(self) -> None:
        """Give every loaded member a full session, as Kafka does after a load."""
        for group in self.groups.values():
            for member in group.members.values():
                self.time_member(group.group_id, member)

    def lock(self, group_id: str) -> asyncio.Lock:
        """The lock a group's changes take turns on."""
        return self._locks.setdefault(group_id, asyncio.Lock())

    def forget(self, group_id: str) -> None:
        """A group that became a classic one: its state and timers go."""
        group = self.groups.pop(group_id, None)
        for member_id in () if group is None else group.members:
            self._forget_timers(group_id, member_id)
        self._resolved.pop(group_id, None)

    # -- the heartbeat ----------------------------------------------------------------------

    async def heartbeat(self, hb: Heartbeat) -> HeartbeatAnswer:
        lock = self._locks.setdefault(hb.group_id, asyncio.Lock())
        try:
            async with lock:
                if hb.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                    return await self._leave(hb)
                return await self._heartbeat(hb)
        except HeartbeatError as err:
            return HeartbeatAnswer(err.code, str(err))
        finally:
            self._drop_lock(hb.group_id, lock)

    def _drop_lock(self, group_id: str, lock: asyncio.Lock) -> None:
        """Forget the lock of a group that does not exist once no one holds or waits for it:
        heartbeats naming a million made-up groups leave nothing behind."""
        if group_id not in self.groups and not lock.locked() and self._locks.get(group_id) is lock:
            del self._locks[group_id]

    async def _commit(self, group_id: str, records: list[Record]) -> None:
        if records:
            try:
                await self.write(group_id, records)
            except BaseException:
                self._resolved.pop(group_id, None)  # match the expressions again next time
                raise
            for record in records:
                self.replay(group_id, record)

    def _group(self, hb: Heartbeat) -> tuple[ConsumerGroup, list[Record]]:
        """The group, and the records that make it (a classic group with members, upgraded
        online: not kept until the records are written)."""
        group = self.groups.get(hb.group_id)
        if group is not None:
            return group, []
        if self.is_classic(hb.group_id):
            if hb.member_epoch != 0 or self.upgrade is None:
                raise HeartbeatError(
                    ErrorCode.group_id_not_found, f"Group {hb.group_id} is not a consumer group."
                )
            if self.limits.migration_policy not in ("upgrade", "bidirectional"):
                raise HeartbeatError(
                    ErrorCode.group_id_not_found,
                    f"Cannot upgrade classic group {hb.group_id} to consumer group because "
                    "online upgrade is disabled.",
                )
            records = self.upgrade(hb.group_id)
            upgraded = ConsumerGroup(hb.group_id)
            for record_type, key, value in records:
                upgraded.replay(record_type, key, value)
            logger.info("converted the classic group %s to a consumer group", hb.group_id)
            return upgraded, records
        if hb.member_epoch != 0:
            raise HeartbeatError(
                ErrorCode.group_id_not_found, f"Consumer group {hb.group_id} not found."
            )
        return ConsumerGroup(hb.group_id), []  # not kept until its records are replayed

    def _member(
        self, group: ConsumerGroup, hb: Heartbeat
    ) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None]:
        """The member the heartbeat speaks for, and the static member it replaces (a static
        member that left with epoch -2 and rejoins under a new member id takes over its
        assignment, as Kafka's getOrMaybeSubscribeStaticConsumerGroupMember does)."""
        static = None if hb.instance_id is None else group.static_member(hb.instance_id)
        if static is not None and static.member_id != hb.member_id:
            if hb.member_epoch != 0:
                raise HeartbeatError(
                    ErrorCode.fenced_instance_id,
                    f"Static member {hb.member_id} with instance id {hb.instance_id} was "
                    f"fenced by member {static.member_id}.",
                )
            if static.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise HeartbeatError(
                    ErrorCode.unreleased_instance_id,
                    f"Static member {static.member_id} with instance id {hb.instance_id} is "
                    "present in the consumer group.",
                )
            copy = dataclasses.replace(
                static, member_id=hb.member_id, member_epoch=0, previous_member_epoch=0
            )
            return copy, static
        member = group.members.get(hb.member_id)
        if member is None:
            if hb.member_epoch != 0:
                raise HeartbeatError(
                    ErrorCode.unknown_member_id,
                    f"Member {hb.member_id} is not a member of group {group.group_id}.",
                )
            if len(group.members) >= self.limits.max_size:
                raise HeartbeatError(
                    ErrorCode.group_max_size_reached,
                    f"The consumer group has reached its maximum capacity of "
                    f"{self.limits.max_size} members.",
                )
            return ConsumerGroupMember(hb.member_id), None
        epoch, known = hb.member_epoch, member.member_epoch
        if hb.classic_member_metadata is not None:
            return member, None
        if epoch > known or (
            epoch < known
            and (epoch != member.previous_member_epoch or not subset(hb.owned, member.assigned))
        ):
            raise HeartbeatError(
                ErrorCode.fenced_member_epoch,
                f"The consumer group member has a {'greater' if epoch > known else 'smaller'} "
                f"member epoch ({epoch}) than the one known by the group coordinator "
                f"({known}). The member must abandon all its partitions and rejoin.",
            )
        return member, None

    async def _heartbeat(self, hb: Heartbeat) -> HeartbeatAnswer:
        if hb.server_assignor is not None and hb.server_assignor not in self.limits.assignors:
            raise HeartbeatError(
                ErrorCode.unsupported_assignor,
                f"ServerAssignor {hb.server_assignor} is not supported. Supported assignors: "
                f"{', '.join(self.limits.assignors)}.",
            )
        group, records = self._group(hb)
        converted = bool(records)
        member_id = hb.member_id or str(uuid.uuid4())
        hb = dataclasses.replace(hb, member_id=member_id)
        member, replaced = self._member(group, hb)
        previous_target = dict(group.target)
        if replaced is not None:
            previous_target[member.member_id] = group.target.get(replaced.member_id, {})
            previous_target.pop(replaced.member_id, None)
            records += member_removal_records(group.group_id, replaced.member_id)
            records.append(member_record(group.group_id, member))
            records.append(target_member_record(
                group.group_id, member.member_id, previous_target[member.member_id]
            ))  # fmt: skip
            records.append(current_assignment_record(group.group_id, member))
        is_new = member.member_id not in group.members and replaced is None
        updated = dataclasses.replace(
            member,
            instance_id=hb.instance_id if hb.instance_id is not None else member.instance_id,
            rack_id=hb.rack_id if hb.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=hb.rebalance_timeout_ms
            if hb.rebalance_timeout_ms != -1 else member.rebalance_timeout_ms,
            server_assignor=hb.server_assignor
            if hb.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=hb.subscribed_topic_names
            if hb.subscribed_topic_names is not None else member.subscribed_topic_names,
            subscribed_topic_regex=hb.subscribed_topic_regex
            if hb.subscribed_topic_regex is not None else member.subscribed_topic_regex,
            client_id=hb.client_id,
            client_host=hb.client_host,
            classic_member_metadata=hb.classic_member_metadata,
        )  # fmt: skip
        bump = False
        if subscription(updated) != subscription(member) or is_new:
            records.append(member_record(group.group_id, updated))
            bump = subscription_changed(member, updated)
        records += self._resolve_regexes(group, updated)
        topics = self._subscribed(group, updated, records)
        new_hash = metadata_hash(topics)
        epoch = group.group_epoch
        if (
            bump
            or new_hash != group.metadata_hash
            or any(r[0] == REGULAR_EXPRESSION for r in records)
        ):
            epoch += 1
            records.append(epoch_record(group.group_id, epoch, new_hash))
            logger.info("consumer group %s: epoch %d", group.group_id, epoch)
        target_epoch = group.assignment_epoch
        target = previous_target.get(member.member_id, {})
        if epoch > group.assignment_epoch:
            target_epoch = epoch
            target = self._new_target(group, updated, topics, epoch, previous_target, records)
        partition_epoch = group.current_partition_epoch
        try:
            reconciled = (
                updated if updated.is_reconciled_to(target_epoch)
                else reconcile(updated, target_epoch, target, partition_epoch, hb.owned)
            )  # fmt: skip
        except UnknownStateError as err:
            raise HeartbeatError(
                ErrorCode.fenced_member_epoch,
                "The consumer group member is in a unknown state. The member must abandon all "
                "its partitions and rejoin.",
            ) from err
        if reconciled != updated or is_new:
            records.append(current_assignment_record(group.group_id, reconciled))
        await self._commit(group.group_id, records)
        if converted:  # every member of the classic group goes on, each on its own session
            for other in self.groups[group.group_id].members.values():
                self.time_member(group.group_id, other)
        self.time_member(group.group_id, reconciled)
        full = hb.member_epoch == 0 or (
            hb.rebalance_timeout_ms != -1 and hb.subscribed_topic_names is not None
            and hb.owned is not None
        )  # fmt: skip
        changed = reconciled.assigned != member.assigned
        return HeartbeatAnswer(
            member_id=reconciled.member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.limits.heartbeat_interval_ms,
            assignment=reconciled.assigned if full or changed else None,
        )

    def _subscribed(
        self, group: ConsumerGroup, updated: ConsumerGroupMember, records: list[Record]
    ) -> dict[str, tuple[str, int]]:
        members = [m for m in group.members.values() if m.member_id != updated.member_id]
        return subscribed_topics(group, [*members, updated], records, self.ctx.manager.topics(),
                                 self.ctx.manager.topic_id)  # fmt: skip

    def _resolve_regexes(self, group: ConsumerGroup, updated: ConsumerGroupMember) -> list[Record]:
        """Expressions are matched again only when topics came or went, or an expression is
        new to the group: a steady heartbeat costs no pass over every topic name."""
        known = self.ctx.manager.topics()
        regexes = frozenset(m.subscribed_topic_regex for m in group.members.values())
        regexes |= {updated.subscribed_topic_regex}
        regexes -= {""}
        resolved = self._resolved.get(group.group_id)
        if not regexes or (
            resolved is not None and resolved[0] is known and regexes <= resolved[1]
        ):
            return []
        try:
            records = resolve_regexes(group, updated, known, _now_ms())
        except InvalidRegexError as err:
            raise HeartbeatError(ErrorCode.invalid_regular_expression, str(err)) from err
        self._resolved[group.group_id] = (known, regexes)
        return records

    def _new_target(
        self,
        group: ConsumerGroup,
        updated: ConsumerGroupMember,
        topics: dict[str, tuple[str, int]],
        epoch: int,
        previous_target: Mapping[str, Mapping[str, frozenset[int]]],
        records: list[Record],
    ) -> Mapping[str, frozenset[int]]:
        members = {m.member_id: m for m in group.members.values()}
        members[updated.member_id] = updated
        chosen = self._assignor(members.values())
        return new_target(group, updated, topics, epoch, previous_target, records, chosen,
                          _now_ms())  # fmt: skip

    def assignor_of(self, group: ConsumerGroup) -> str:
        """The assignor the group's target is computed with."""
        return self._assignor(group.members.values())

    def _assignor(self, members: Any) -> str:
        """The assignor most members ask for; the first of group.consumer.assignors if none
        asks (Kafka's ConsumerGroup.computePreferredServerAssignor)."""
        asked: dict[str, int] = {}
        for m in members:
            if m.server_assignor is not None:
                asked[m.server_assignor] = asked.get(m.server_assignor, 0) + 1
        if asked:
            return max(sorted(asked), key=lambda name: asked[name])
        return self.limits.assignors[0] if self.limits.assignors else UNIFORM

    # -- leaving, fencing, timers -----------------------------------------------------------------

    async def _leave(self, hb: Heartbeat) -> HeartbeatAnswer:
        group = self.groups.get(hb.group_id)
        if group is None:
            raise HeartbeatError(
                ErrorCode.group_id_not_found, f"Consumer group {hb.group_id} not found."
            )
        member = group.members.get(hb.member_id)
        if hb.instance_id is not None:
            member = group.static_member(hb.instance_id)
            if member is None:
                raise HeartbeatError(
                    ErrorCode.unknown_member_id, f"Instance id {hb.instance_id} is unknown."
                )
            if member.member_id != hb.member_id:
                raise HeartbeatError(
                    ErrorCode.fenced_instance_id,
                    f"Instance id {hb.instance_id} is used by another member.",
                )
            if hb.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                leaving = dataclasses.replace(
                    member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={}
                )
                await self._commit(
                    group.group_id, [current_assignment_record(group.group_id, leaving)]
                )
                # its partitions wait for it one session; then it is removed, as in Kafka
                self._forget_timers(group.group_id, member.member_id)
                self.time_member(group.group_id, leaving)
                return HeartbeatAnswer(
                    member_id=member.member_id, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH
                )
        if member is None:
            raise HeartbeatError(
                ErrorCode.unknown_member_id,
                f"Member {hb.member_id} is not a member of group {hb.group_id}.",
            )
        logger.info("member %s left consumer group %s", member.member_id, group.group_id)
        await self.fence(group, member.member_id)
        return HeartbeatAnswer(member_id=hb.member_id, member_epoch=hb.member_epoch)

    async def fence(self, group: ConsumerGroup, member_id: str) -> None:
        """Remove the member (Kafka's consumerGroupFenceMember); when only members of the
        classic protocol are left, the group becomes a classic group (an online downgrade)."""
        await self.fence_members(group, {member_id})

    async def fence_members(self, group: ConsumerGroup, member_ids: set[str]) -> None:
        """Remove the members and bump the group epoch; the next heartbeat computes the target
        assignment without them. When the last went, the assignment epoch catches up at once,
        so an empty group's epochs match (KAFKA-20442)."""
        gid = group.group_id
        rest = [m for m in group.members.values() if m.member_id not in member_ids]
        if (
            rest and self.downgrade is not None
            and all(m.classic_member_metadata is not None for m in rest)
            and self.limits.migration_policy in ("downgrade", "bidirectional")
        ):  # fmt: skip
            await self.downgrade(group, member_ids)
            logger.info("converted the consumer group %s to a classic group", gid)
            return
        records = [r for m in sorted(member_ids) for r in member_removal_records(gid, m)]
        topics = subscribed_topics(group, rest, [], self.ctx.manager.topics(),
                                   self.ctx.manager.topic_id)  # fmt: skip
        epoch = group.group_epoch + 1
        records.append(epoch_record(gid, epoch, metadata_hash(topics)))
        if not rest:
            records.append(target_metadata_record(gid, epoch, _now_ms()))
        await self._commit(gid, records)
        for member_id in member_ids:
            self._forget_timers(gid, member_id)

    def tombstones(self, group: ConsumerGroup) -> list[Record]:
        """Every record of the group removed (Kafka's createGroupTombstoneRecords)."""
        records = [
            r for m in sorted(group.members) for r in member_removal_records(group.group_id, m)
        ]
        records += [
            (REGULAR_EXPRESSION, {"groupId": group.group_id, "regularExpression": r}, None)
            for r in sorted(group.regexes)
        ]
        return records + group_removal_records(group.group_id)

    async def delete(self, group: ConsumerGroup) -> bool:
        """Tombstone an empty group's records (its resolved expressions, target metadata,
        partition metadata and epoch: Kafka's ConsumerGroup.createGroupTombstoneRecords) and
        forget it; False if a member joined meanwhile (the group stays)."""
        async with self._locks.setdefault(group.group_id, asyncio.Lock()):
            if self.groups.get(group.group_id) is not group or group.members:
                return False
            await self._delete(group)
            return True

    async def _delete(self, group: ConsumerGroup) -> None:
        await self._commit(group.group_id, self.tombstones(group))
        self.groups.pop(group.group_id, None)
        self._resolved.pop(group.group_id, None)

    def time_member(self, group_id: str, member: ConsumerGroupMember) -> None:
        """Start the member's session again (a member of the classic protocol has its own
        session timeout), and its revocation time if it has partitions to give up."""
        now = self.clock()
        key = (group_id, member.member_id)
        classic = member.classic_member_metadata
        session_ms = self.limits.session_timeout_ms
        if classic is not None:
            session_ms = int(classic.get("sessionTimeoutMs", session_ms))
        self._session_deadlines[key] = now + session_ms / 1000
        if member.pending_revocation:
            old = self._revocation_deadlines.get(key)
            if old is None or old[1] != member.member_epoch:
                timeout = max(member.rebalance_timeout_ms, 0) / 1000
                self._revocation_deadlines[key] = (now + timeout, member.member_epoch)
        else:
            self._revocation_deadlines.pop(key, None)

    def _forget_timers(self, group_id: str, member_id: str) -> None:
        self._session_deadlines.pop((group_id, member_id), None)
        self._revocation_deadlines.pop((group_id, member_id), None)

    def _is_due(self, key: tuple[str, str], now: float) -> bool:
        session = self._session_deadlines.get(key)
        revocation = self._revocation_deadlines.get(key)
        return (session is not None and session <= now) or (
            revocation is not None and revocation[0] <= now
        )

    def next_deadline(self) -> float | None:
        deadlines = [*self._session_deadlines.values()]
        deadlines += [d for d, _ in self._revocation_deadlines.values()]
        return min(deadlines, default=None)

    async def expire(self) -> list[tuple[str, str]]:
        """Fence every member whose session or revocation time ran out; who was fenced."""
        now = self.clock()
        due = {k for k, d in self._session_deadlines.items() if d <= now}
        due |= {k for k, (d, _) in self._revocation_deadlines.items() if d <= now}
        fenced = []
        for group_id, member_id in sorted(due):
            lock = self._locks.setdefault(group_id, asyncio.Lock())
            async with lock:
                group = self.groups.get(group_id)
                if group is None or member_id not in group.members:
                    self._forget_timers(group_id, member_id)
                    continue
                if not self._is_due((group_id, member_id), now):
                    continue  # it heartbeated while this waited for the group's lock
                await self.fence(group, member_id)
                fenced.append((group_id, member_id))
        return fenced


def _now_ms() -> int:
    return int(time.time() * 1000)

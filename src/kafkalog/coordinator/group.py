"""One classic consumer group's membership and rebalances (Kafka's GroupMetadata and the
join/sync/heartbeat/leave rules of its GroupCoordinator).

Why: members join, the coordinator waits until every known member has rejoined (or its
rebalance timeout passes), bumps the generation, hands the leader everyone's subscriptions,
then hands each member the assignment the leader sent back. Every rule is Kafka's: new members
first get MEMBER_ID_REQUIRED (KIP-394), a static member (``group.instance.id``, KIP-345) keeps
its place across restarts and fences its older incarnation, commits are refused while the
group completes a rebalance, and a member silent for its session timeout is removed.

The group survives a restart as Kafka's does: the leader's assignment is stored (``store``, a
GroupMetadata record) before any member hears it, and a group that becomes empty is stored
too (``group_metadata`` builds the record and rebuilds a group from it at start-up).

Runs on the server's event loop only (no locks): a JoinGroup or a follower's SyncGroup is a
future completed when the rebalance gets there. Refuses: KIP-848 consumer groups.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from kio.schema.errors import ErrorCode

from kafkalog.coordinator.group_member import (
    GroupState,
    JoinRequest,
    JoinResult,
    Member,
    SyncResult,
    wall_clock_ms,
)
from kafkalog.coordinator.group_metadata import stored_group
from kafkalog.coordinator.group_protocols import Protocols, common_protocols, select_protocol
from kafkalog.coordinator.offsets_store import OffsetAndMetadata, StoredGroup
from kafkalog.errors import KafkaLogError

logger = logging.getLogger("kafkalog.server")

# a member id and the protocols to count for it instead of its own (a static member's rejoin)
Replacing = tuple[str, list[tuple[str, bytes]]]


async def _store_nothing(stored: StoredGroup) -> None:
    """The ``store`` of a group no log backs (the state machine on its own)."""


@dataclass
class Group:
    """A classic group. ``now`` gives seconds (the loop's clock); ``initial_delay_ms`` is
    ``group.initial.rebalance.delay.ms``: the first rebalance of an empty group waits that long
    for more members. ``store`` makes a GroupMetadata record durable (raising KafkaLogError
    when it cannot)."""

    group_id: str
    now: Callable[[], float]
    initial_delay_ms: int
    store: Callable[[StoredGroup], Awaitable[None]] = _store_nothing
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending_members: set[str] = field(default_factory=set)
    static_members: dict[str, str] = field(default_factory=dict)
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    # wall-clock ms of the last change to Empty (Kafka's currentStateTimestamp, for expiry)
    emptied_at_ms: int | None = None
    # wall-clock ms of the last completed join (the state timestamp of a stored assignment)
    joined_at_ms: int = -1
    _timer: asyncio.TimerHandle | None = None
    _initial: bool = False  # in an empty group's first rebalance (its initial delay)
    _new_member_added: bool = False  # a member joined during the initial delay
    _storing: set[asyncio.Task[None]] = field(default_factory=set)

    # --- joining ---------------------------------------------------------------------------

    def join(self, req: JoinRequest) -> asyncio.Future[JoinResult]:
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        error = self._join_error(req)
        if error is not None:
            future.set_result(JoinResult(error, req.member_id))
            return future
        member_id = req.member_id
        if not member_id:
            member_id = f"{req.client_id}-{uuid.uuid4()}"
            if req.group_instance_id is not None and self._can_replace_static(req):
                self._spawn(self._replace_static(req, member_id, future))
                return future
            if req.group_instance_id is not None:
                self._fence_static(req.group_instance_id)
            elif req.require_known_member_id:
                self._add_pending(member_id, req.session_timeout_ms)
                future.set_result(JoinResult(ErrorCode.member_id_required, member_id))
                return future
        member = self.members.get(member_id)
        if member is None:
            self.pending_members.discard(member_id)
            member = self._add(member_id, req)
        elif self._same_join(member, req) and self.state is GroupState.COMPLETING_REBALANCE:
            future.set_result(self._join_result(member))  # a lost response, asked again
            return future
        elif (
            self._same_join(member, req)
            and self.state is GroupState.STABLE
            and member_id != self.leader_id
        ):
            future.set_result(self._join_result(member))  # nothing changed: the current one
            return future
        else:
            member.join = req
        member.join_waiter = future
        member.last_heartbeat = self.now()
        if self.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join()
        else:
            self.prepare_rebalance()
        return future

    def _join_error(self, req: JoinRequest) -> ErrorCode | None:
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if not req.protocol_type or not req.protocols:
            return ErrorCode.inconsistent_group_protocol
        if self.members and (
            req.protocol_type != self.protocol_type
            or not common_protocols(self._protocol_lists(), {name for name, _ in req.protocols})
        ):
            return ErrorCode.inconsistent_group_protocol
        if req.member_id and req.member_id not in self.pending_members:
            # GroupMetadataManager.validateExistingMember: the instance id first, as below
            if req.group_instance_id is not None:
                current = self.static_members.get(req.group_instance_id)
                if current is None:
                    return ErrorCode.unknown_member_id
                if current != req.member_id:
                    return ErrorCode.fenced_instance_id
            if req.member_id not in self.members:
                return ErrorCode.unknown_member_id
        return None

    @staticmethod
    def _same_join(member: Member, req: JoinRequest) -> bool:
        return member.protocols == req.protocols and member.join.protocol_type == req.protocol_type

    def _add(self, member_id: str, req: JoinRequest) -> Member:
        member = Member(member_id, req, self.now())
        if self.state is GroupState.PREPARING_REBALANCE and self._initial:
            self._new_member_added = True  # the initial delay waits for it: see prepare_rebalance
        if not self.members:
            self.protocol_type = req.protocol_type
        self.members[member_id] = member
        if req.group_instance_id is not None:
            self.static_members[req.group_instance_id] = member_id
        if self.leader_id is None:
            self.leader_id = member_id
        return member

    def _can_replace_static(self, req: JoinRequest) -> bool:
        """KIP-345: a static member restarting into a Stable group takes its old place without
        a rebalance unless its protocols change the protocol the group would select (Kafka's
        updateStaticMemberThenRebalanceOrCompleteJoin: a changed subscription alone does not
        rebalance; the member rejoins itself when it wants another assignment)."""
        assert req.group_instance_id is not None
        old_id = self.static_members.get(req.group_instance_id, "")
        if self.state is not GroupState.STABLE or old_id not in self.members:
            return False
        return select_protocol(self._protocol_lists((old_id, req.protocols))) == self.protocol_name

    async def _replace_static(
        self, req: JoinRequest, member_id: str, future: asyncio.Future[JoinResult]
    ) -> None:
        """The new incarnation gets the old one's assignment under a new member id, stored
        before it is told; the old one's waiters are fenced; nobody else rebalances. If the
        store fails the old member id is put back (the fencing stays), as Kafka reverts it."""
        assert req.group_instance_id is not None and self.protocol_name is not None
        old_id = self.static_members[req.group_instance_id]
        told_leader = self.leader_id or ""  # the leader before the replacement, as Kafka answers
        old = self.members.pop(old_id)
        if old.join_waiter is not None and not old.join_waiter.done():
            old.join_waiter.set_result(JoinResult(ErrorCode.fenced_instance_id, old_id))
        if old.sync_waiter is not None and not old.sync_waiter.done():
            old.sync_waiter.set_result(SyncResult(ErrorCode.fenced_instance_id))
        new = self.members[member_id] = Member(member_id, req, self.now(), old.assignment)
        self.static_members[req.group_instance_id] = member_id
        if self.leader_id == old_id:
            self.leader_id = member_id
        assigned = {m.member_id: m.assignment for m in self.members.values()}
        try:
            await self.store(stored_group(self, assigned))
        except KafkaLogError as err:
            logger.warning("could not store static member %s: %s", req.group_instance_id, err)
            if self.members.get(member_id) is new:  # nothing replaced it while storing
                del self.members[member_id]
                self.members[old_id] = old
                self.static_members[req.group_instance_id] = old_id
                if self.leader_id == member_id:
                    self.leader_id = old_id
            future.set_result(JoinResult(ErrorCode.coordinator_not_available, ""))
            return
        if req.supports_skip_assignment and self.leader_id == member_id:
            # JoinGroup v9+: the leader learns the members but must not assign again (KIP-814)
            result = replace(self._join_result(self.members[member_id]), skip_assignment=True)
        else:
            result = JoinResult(
                ErrorCode.none,
                member_id,
                self.generation,
                self.protocol_type,
                self.protocol_name,
                told_leader,  # the same as now unless it led: then it acts as a follower
            )
        future.set_result(result)

    def _fence_static(self, instance_id: str) -> None:
        """A static member rejoining with no member id replaces its older incarnation."""
        old = self.static_members.pop(instance_id, None)
        if old is not None and old in self.members:
            self._remove(old, ErrorCode.fenced_instance_id)

    def _protocol_lists(self, replacing: Replacing | None = None) -> list[Protocols]:
        """Each member's protocols; ``replacing`` counts one member's as the given ones (a
        static member's rejoin, before it replaces the old incarnation)."""
        return [
            replacing[1] if replacing is not None and m.member_id == replacing[0] else m.protocols
            for m in self.members.values()
        ]

    # --- rebalancing ---------------------------------------------------------------------------

    def prepare_rebalance(self) -> None:
        """Kafka's GroupMetadataManager.prepareRebalance: an empty group's first rebalance waits
        ``group.initial.rebalance.delay.ms`` for more members and completes only when that
        timer fires; any other completes as soon as every member rejoined, or after the
        rebalance timeout without the ones that did not."""
        if self.state is GroupState.COMPLETING_REBALANCE:
            for m in self.members.values():
                m.assignment = b""
                self._finish_sync(m, SyncResult(ErrorCode.rebalance_in_progress))
        was_empty = self.state is GroupState.EMPTY
        logger.info(
            "Preparing to rebalance group %s in state %s with old generation %d.",
            self.group_id,
            self.state.value,
            self.generation,
        )
        self.state = GroupState.PREPARING_REBALANCE
        self._initial = was_empty
        if was_empty:
            delay = self.initial_delay_ms
            remaining = max(self._rebalance_timeout_ms() - delay, 0)
            self._new_member_added = False
            self._arm(delay / 1000, lambda: self._initial_delay_passed(delay, remaining))
        elif self._all_joined():
            self._complete_join()
        else:
            self._arm(self._rebalance_timeout_ms() / 1000, self._expire_join)

    def dissolve(self) -> None:
        """The group became a consumer group (an online upgrade): whoever waits in a join or
        a sync is told REBALANCE_IN_PROGRESS (and rejoins the consumer group), and no timer
        of this group fires."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for m in self.members.values():
            if m.join_waiter is not None and not m.join_waiter.done():
                m.join_waiter.set_result(JoinResult(ErrorCode.rebalance_in_progress, m.member_id))
            self._finish_sync(m, SyncResult(ErrorCode.rebalance_in_progress))
        self.members.clear()
        self.static_members.clear()
        self.pending_members.clear()

    def _rebalance_timeout_ms(self) -> int:
        return max((m.join.rebalance_timeout_ms for m in self.members.values()), default=0)

    def _initial_delay_passed(self, delay: int, remaining: int) -> None:
        """Kafka's tryCompleteInitialRebalanceElseSchedule: while members keep arriving, wait
        another delay, until the rebalance timeout is used up."""
        self._timer = None
        if self.state is not GroupState.PREPARING_REBALANCE:
            return
        if self._new_member_added and remaining != 0:
            self._new_member_added = False
            next_delay = min(self.initial_delay_ms, remaining)
            left = max(remaining - delay, 0)
            self._arm(next_delay / 1000, lambda: self._initial_delay_passed(next_delay, left))
            return
        self._initial = False
        if self._all_joined():
            self._complete_join()
        else:
            # unlike Kafka, which completes here, a member told MEMBER_ID_REQUIRED is waited
            # for (until it rejoins, its session runs out or the rebalance timeout passes):
            # the first consumer took every partition, and lost them again a moment later
            self._arm(self._rebalance_timeout_ms() / 1000, self._expire_join)

    def _arm(self, seconds: float, callback: Callable[[], None]) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(seconds, callback)

    def _all_joined(self) -> bool:
        """Kafka's ClassicGroup.hasAllMembersJoined: every member waits in a JoinGroup and no
        member told to rejoin with its new id (MEMBER_ID_REQUIRED) is still on its way."""
        waiting = all(m.join_waiter is not None for m in self.members.values())
        return waiting and not self.pending_members

    def _add_pending(self, member_id: str, session_timeout_ms: int) -> None:
        """A member that must rejoin with ``member_id``; forgotten after its session timeout
        if it never does (Kafka's pending-member expiration), so it cannot hold a rebalance."""
        self.pending_members.add(member_id)

        def expire() -> None:
            if member_id in self.pending_members:
                self.pending_members.discard(member_id)
                self._maybe_complete_join()

        asyncio.get_running_loop().call_later(session_timeout_ms / 1000, expire)

    def _maybe_complete_join(self) -> None:
        """Kafka's maybeCompleteJoinPhase: never during the initial delay (its timer decides)."""
        preparing = self.state is GroupState.PREPARING_REBALANCE
        if preparing and not self._initial and self._all_joined():
            self._complete_join()

    def _expire_join(self) -> None:
        """The wait is over (Kafka's completeClassicGroupJoin): dynamic members that did not
        rejoin are out; a static one keeps its place until its session runs out. With no
        rejoined member to lead, wait another rebalance timeout."""
        self._timer = None
        if self.state is not GroupState.PREPARING_REBALANCE:
            return
        for member_id, member in list(self.members.items()):
            if member.join_waiter is None and member.group_instance_id is None:
                self._remove(member_id, ErrorCode.unknown_member_id)
        if self.members and not any(m.join_waiter is not None for m in self.members.values()):
            self._arm(self._rebalance_timeout_ms() / 1000, self._expire_join)
            return
        self._complete_join()

    def _complete_join(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.generation += 1
        if not self.members:
            self.state, self.protocol_name, self.leader_id = GroupState.EMPTY, None, None
            self._became_empty()
            return
        self._initial = False
        self.joined_at_ms = wall_clock_ms()
        self.protocol_name = select_protocol(self._protocol_lists())
        leader = self.members.get(self.leader_id or "")
        if leader is None or leader.join_waiter is None:
            # ClassicGroup.maybeElectNewJoinedLeader: the leader is one that rejoined
            joined = (m.member_id for m in self.members.values() if m.join_waiter is not None)
            self.leader_id = next(joined, next(iter(self.members)))
        self.state = GroupState.COMPLETING_REBALANCE
        logger.info(
            "Stabilized group %s generation %d with %d members.",
            self.group_id,
            self.generation,
            len(self.members),
        )
        for m in self.members.values():
            m.last_heartbeat = self.now()
            if m.join_waiter is not None and not m.join_waiter.done():
                m.join_waiter.set_result(self._join_result(m))
            m.join_waiter = None

    def _join_result(self, member: Member) -> JoinResult:
        leader = member.member_id == self.leader_id
        assert self.protocol_name is not None
        return JoinResult(
            ErrorCode.none,
            member.member_id,
            self.generation,
            self.protocol_type,
            self.protocol_name,
            self.leader_id or "",
            tuple(
                (m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                for m in self.members.values()
            )
            if leader
            else (),
        )

    # --- sync, heartbeat, leave ------------------------------------------------------------------

    def _member_error(
        self, member_id: str, generation: int, instance_id: str | None
    ) -> ErrorCode | None:
        # ClassicGroup.validateMember: a static member's instance id is judged first, so an
        # incarnation replaced by a newer one hears FENCED_INSTANCE_ID (fatal to the client),
        # not UNKNOWN_MEMBER_ID (which would send it to join again and fence the new one)
        if instance_id is not None:
            current = self.static_members.get(instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if current != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        if generation != self.generation:
            return ErrorCode.illegal_generation
        return None

    def sync(
        self,
        member_id: str,
        generation: int,
        instance_id: str | None,
        assignments: dict[str, bytes],
    ) -> asyncio.Future[SyncResult]:
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        error = self._member_error(member_id, generation, instance_id)
        if error is None and self.state is GroupState.PREPARING_REBALANCE:
            error = ErrorCode.rebalance_in_progress
        if error is not None:
            future.set_result(SyncResult(error))
            return future
        member = self.members[member_id]
        member.last_heartbeat = self.now()
        if self.state is GroupState.STABLE:
            future.set_result(self._sync_result(member))
            return future
        member.sync_waiter = future
        if member_id == self.leader_id:
            # a member the leader left out gets an empty assignment, as in Kafka
            assigned = {m: assignments.get(m, b"") for m in self.members}
            stored = stored_group(self, assigned)  # the group now, not when the task runs
            self._spawn(self._store_assignment(stored, assigned))
        return future

    async def _store_assignment(self, stored: StoredGroup, assigned: dict[str, bytes]) -> None:
        """Store the leader's assignment, then hand it out (Kafka's classicGroupSync): nobody
        hears an assignment a restart could forget. If storing fails, every member is told
        COORDINATOR_NOT_AVAILABLE and the group rebalances."""
        try:
            await self.store(stored)
        except KafkaLogError as err:
            logger.warning("could not store the assignment of group %s: %s", self.group_id, err)
            failed = True
        else:
            failed = False
        if (
            self.state is not GroupState.COMPLETING_REBALANCE
            or self.generation != stored.generation
        ):
            return  # a member joined or left meanwhile: that rebalance decides
        if failed:
            for m in self.members.values():
                m.assignment = b""
                self._finish_sync(m, SyncResult(ErrorCode.coordinator_not_available))
            self.prepare_rebalance()
            return
        for m in self.members.values():
            m.assignment = assigned.get(m.member_id, b"")
        self.state = GroupState.STABLE
        now = self.now()
        for m in self.members.values():
            if m.sync_waiter is not None:
                m.last_heartbeat = now  # its session runs from when it hears the assignment
                self._finish_sync(m, self._sync_result(m))

    def _sync_result(self, member: Member) -> SyncResult:
        return SyncResult(ErrorCode.none, self.protocol_type, self.protocol_name, member.assignment)

    @staticmethod
    def _finish_sync(member: Member, result: SyncResult) -> None:
        if member.sync_waiter is not None and not member.sync_waiter.done():
            member.sync_waiter.set_result(result)
        member.sync_waiter = None

    def heartbeat(self, member_id: str, generation: int, instance_id: str | None) -> ErrorCode:
        error = self._member_error(member_id, generation, instance_id)
        if error is not None:
            return error
        self.members[member_id].last_heartbeat = self.now()
        if self.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, member_id: str, instance_id: str | None) -> ErrorCode:
        if instance_id is not None:
            known = self.static_members.get(instance_id)
            if known is None:
                return ErrorCode.unknown_member_id
            if member_id and known != member_id:
                return ErrorCode.fenced_instance_id
            member_id = known
        if member_id in self.pending_members:
            self.pending_members.discard(member_id)
            self._maybe_complete_join()  # it was all a rebalance waited for, perhaps
            return ErrorCode.none
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        self._remove(member_id, ErrorCode.unknown_member_id)
        self._after_departure()
        return ErrorCode.none

    def _remove(self, member_id: str, error: ErrorCode) -> None:
        member = self.members.pop(member_id)
        instance = member.group_instance_id
        if instance is not None and self.static_members.get(instance) == member_id:
            del self.static_members[instance]
        if member.join_waiter is not None and not member.join_waiter.done():
            member.join_waiter.set_result(JoinResult(error, member_id))
        self._finish_sync(member, SyncResult(error))
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)

    def _after_departure(self) -> None:
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            if self.members:
                self.prepare_rebalance()
            else:
                self.generation += 1
                self.state, self.protocol_name, self.leader_id = GroupState.EMPTY, None, None
                self._became_empty()
        elif self.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join()
            if not self.members and self.state is GroupState.PREPARING_REBALANCE:
                self._complete_join()

    def next_session_deadline(self) -> float | None:
        """When the first member's session runs out if it stays silent (on ``now``'s clock);
        None when no member's session is running."""
        return min(
            (
                m.last_heartbeat + m.join.session_timeout_ms / 1000
                for m in self.members.values()
                if m.join_waiter is None and m.sync_waiter is None
            ),
            default=None,
        )

    def expire_sessions(self) -> list[str]:
        """Remove members silent for their session timeout. A member waiting in a join or a
        sync counts as heard from (Kafka's ClassicGroupMember.hasSatisfiedHeartbeat): clients
        send no heartbeats then, and a sync may wait on the leader or on storing the
        assignment."""
        now = self.now()
        expired = [
            m.member_id
            for m in self.members.values()
            if m.join_waiter is None
            and m.sync_waiter is None
            and now - m.last_heartbeat > m.join.session_timeout_ms / 1000
        ]
        for member_id in expired:
            self._remove(member_id, ErrorCode.unknown_member_id)
        if expired:
            self._after_departure()
        return expired

    # --- persistence ---------------------------------------------------------------------------

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._storing.add(task)
        task.add_done_callback(self._storing.discard)

    def _became_empty(self) -> None:
        """Kafka stores an emptied group (generation, protocol type, no members) but does not
        wait for it: no member is left to tell, and a lost record only brings back a previous
        generation whose members will time out."""
        self.emptied_at_ms = wall_clock_ms()
        self._spawn(self._store_empty(stored_group(self, {})))

    async def _store_empty(self, stored: StoredGroup) -> None:
        try:
            await self.store(stored)
        except KafkaLogError as err:
            logger.warning("could not store the empty group %s: %s", self.group_id, err)

    # --- offsets -------------------------------------------------------------------------------

    def commit_error(
        self, member_id: str, generation: int, instance_id: str | None
    ) -> ErrorCode | None:
        """Kafka's checks before an offset commit of a classic group."""
        if generation < 0 and not member_id and instance_id is None:
            return None if not self.members else ErrorCode.unknown_member_id
        error = self._member_error(member_id, generation, instance_id)
        if error is not None:
            return error
        if self.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        self.members[member_id].last_heartbeat = self.now()
        return None

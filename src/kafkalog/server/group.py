"""One classic consumer group's membership and rebalances (Kafka's GroupMetadata and the
join/sync/heartbeat/leave rules of its GroupCoordinator).

Why: members join, the coordinator waits until every known member has rejoined (or its
rebalance timeout passes), bumps the generation, hands the leader everyone's subscriptions,
then hands each member the assignment the leader sent back. Every rule is Kafka's: new members
first get MEMBER_ID_REQUIRED (KIP-394), a static member (``group.instance.id``, KIP-345) keeps
its place across restarts and fences its older incarnation, commits are refused while the
group completes a rebalance, and a member silent for its session timeout is removed.

Runs on the server's event loop only (no locks): a JoinGroup or a follower's SyncGroup is a
future completed when the rebalance gets there. Refuses: KIP-848 consumer groups.
"""

from __future__ import annotations

import asyncio
import enum
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from kafkalog.server.offsets_topic import OffsetAndMetadata


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # to the leader only


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class JoinRequest:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool  # JoinGroup v4+


@dataclass
class Member:
    """A member: its id and the parameters of its latest JoinGroup."""

    member_id: str
    join: JoinRequest
    last_heartbeat: float
    assignment: bytes = b""
    join_waiter: asyncio.Future[JoinResult] | None = None
    sync_waiter: asyncio.Future[SyncResult] | None = None

    @property
    def group_instance_id(self) -> str | None:
        return self.join.group_instance_id

    @property
    def protocols(self) -> list[tuple[str, bytes]]:
        return self.join.protocols

    def metadata(self, protocol: str) -> bytes:
        return next(m for name, m in self.protocols if name == protocol)


@dataclass
class Group:
    """A classic group. ``now`` gives seconds (the loop's clock); ``initial_delay_ms`` is
    ``group.initial.rebalance.delay.ms``: the first rebalance of an empty group waits that long
    for more members."""

    group_id: str
    now: Callable[[], float]
    initial_delay_ms: int
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
    _timer: asyncio.TimerHandle | None = None
    _delay_until: float = 0.0

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
            if req.group_instance_id is not None:
                self._fence_static(req.group_instance_id)
            elif req.require_known_member_id:
                self.pending_members.add(member_id)
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
            self._prepare_rebalance()
        return future

    def _join_error(self, req: JoinRequest) -> ErrorCode | None:
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if not req.protocol_type or not req.protocols:
            return ErrorCode.inconsistent_group_protocol
        if self.members and (
            req.protocol_type != self.protocol_type
            or not self._candidates({name for name, _ in req.protocols})
        ):
            return ErrorCode.inconsistent_group_protocol
        if req.member_id:
            if req.member_id not in self.members and req.member_id not in self.pending_members:
                return ErrorCode.unknown_member_id
            if (
                req.group_instance_id is not None
                and self.static_members.get(req.group_instance_id) != req.member_id
            ):
                return ErrorCode.fenced_instance_id
        return None

    @staticmethod
    def _same_join(member: Member, req: JoinRequest) -> bool:
        return member.protocols == req.protocols and member.join.protocol_type == req.protocol_type

    def _add(self, member_id: str, req: JoinRequest) -> Member:
        member = Member(member_id, req, self.now())
        if not self.members:
            self.protocol_type = req.protocol_type
        self.members[member_id] = member
        if req.group_instance_id is not None:
            self.static_members[req.group_instance_id] = member_id
        if self.leader_id is None:
            self.leader_id = member_id
        return member

    def _fence_static(self, instance_id: str) -> None:
        """A static member rejoining with no member id replaces its older incarnation."""
        old = self.static_members.pop(instance_id, None)
        if old is not None and old in self.members:
            self._remove(old, ErrorCode.fenced_instance_id)

    def _candidates(self, extra: set[str] | None = None) -> list[str]:
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        if extra is not None:
            sets.append(extra)
        common = set.intersection(*sets) if sets else set()
        first = next(iter(self.members.values()), None)
        order = [name for name, _ in first.protocols] if first else sorted(common)
        return [name for name in order if name in common]

    def _select_protocol(self) -> str:
        """Each member votes for its most preferred protocol all members support (Kafka's
        GroupMetadata.selectProtocol); the most votes win, the first candidate on ties."""
        candidates = self._candidates()
        votes = {name: 0 for name in candidates}
        for m in self.members.values():
            votes[next(name for name, _ in m.protocols if name in votes)] += 1
        return max(candidates, key=lambda name: votes[name])

    # --- rebalancing ---------------------------------------------------------------------------

    def _prepare_rebalance(self) -> None:
        if self.state is GroupState.COMPLETING_REBALANCE:
            for m in self.members.values():
                m.assignment = b""
                self._finish_sync(m, SyncResult(ErrorCode.rebalance_in_progress))
        was_empty = self.state is GroupState.EMPTY
        self.state = GroupState.PREPARING_REBALANCE
        timeout = max((m.join.rebalance_timeout_ms for m in self.members.values()), default=0)
        delay = min(self.initial_delay_ms, timeout) if was_empty else timeout
        self._delay_until = self.now() + (self.initial_delay_ms / 1000 if was_empty else 0)
        self._arm(delay / 1000, self._on_rebalance_timeout)
        self._maybe_complete_join()

    def _arm(self, seconds: float, callback: Callable[[], None]) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(seconds, callback)

    def _maybe_complete_join(self) -> None:
        waiting = all(m.join_waiter is not None for m in self.members.values())
        if (
            self.state is GroupState.PREPARING_REBALANCE
            and waiting
            and self.now() >= self._delay_until
        ):
            self._complete_join()

    def _on_rebalance_timeout(self) -> None:
        self._timer = None
        if self.state is not GroupState.PREPARING_REBALANCE:
            return
        if self.now() < self._delay_until:  # still in the initial delay: wait for joiners
            self._arm(self._delay_until - self.now(), self._on_rebalance_timeout)
            return
        if all(m.join_waiter is not None for m in self.members.values()):
            self._complete_join()
            return
        timeout = max((m.join.rebalance_timeout_ms for m in self.members.values()), default=0)
        self._delay_until = 0.0
        self._arm(timeout / 1000, self._expire_join)

    def _expire_join(self) -> None:
        """The rebalance timeout passed: members that did not rejoin are out."""
        self._timer = None
        if self.state is not GroupState.PREPARING_REBALANCE:
            return
        for member_id in [m for m, v in self.members.items() if v.join_waiter is None]:
            self._remove(member_id, ErrorCode.unknown_member_id)
        self._complete_join()

    def _complete_join(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.generation += 1
        if not self.members:
            self.state, self.protocol_name, self.leader_id = GroupState.EMPTY, None, None
            self.emptied_at_ms = wall_clock_ms()
            return
        self.protocol_name = self._select_protocol()
        if self.leader_id not in self.members:
            self.leader_id = next(iter(self.members))
        self.state = GroupState.COMPLETING_REBALANCE
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
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        if instance_id is not None and self.static_members.get(instance_id) != member_id:
            return ErrorCode.fenced_instance_id
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
            for m in self.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            self.state = GroupState.STABLE
            for m in self.members.values():
                self._finish_sync(m, self._sync_result(m))
        return future

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
                self._prepare_rebalance()
            else:
                self.generation += 1
                self.state, self.protocol_name = GroupState.EMPTY, None
                self.emptied_at_ms = wall_clock_ms()
        elif self.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join()
            if not self.members and self.state is GroupState.PREPARING_REBALANCE:
                self._complete_join()

    def expire_sessions(self) -> list[str]:
        """Remove members silent for their session timeout (not those waiting in a join)."""
        now = self.now()
        expired = [
            m.member_id
            for m in self.members.values()
            if m.join_waiter is None and now - m.last_heartbeat > m.join.session_timeout_ms / 1000
        ]
        for member_id in expired:
            self._remove(member_id, ErrorCode.unknown_member_id)
        if expired:
            self._after_departure()
        return expired

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

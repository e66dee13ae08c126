"""What a classic group is made of: its states, its members, and what JoinGroup and SyncGroup
hand back (Kafka's ClassicGroupState, ClassicGroupMember and the join/sync results).

Why: the state machine (``group``) and the record that keeps a group across restarts
(``group_metadata``) both build members; plain data here lets each import it without the
other. Refuses: behaviour; the rules live in ``group``.
"""

from __future__ import annotations

import asyncio
import enum
import time
from dataclasses import dataclass

from kio.schema.errors import ErrorCode


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
    skip_assignment: bool = False  # a static leader's rejoin (JoinGroup v9+, KIP-814)


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
    supports_skip_assignment: bool = False  # JoinGroup v9+


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

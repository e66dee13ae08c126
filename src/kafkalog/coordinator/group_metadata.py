"""A classic group to and from its GroupMetadata record (Kafka's
GroupCoordinatorRecordHelpers.newGroupMetadataRecord and GroupMetadataManager.replay).

Why: a restart must find each group as its last stored record left it, so the members of a
Stable group keep their ids, generation and assignments (their offset commits and
transactional commits stay valid) instead of every group starting empty. Refuses: writing
anything; the coordinator appends the record and the group decides when.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from kafkalog.coordinator.group_member import GroupState, JoinRequest, Member
from kafkalog.coordinator.offsets_store import StoredGroup, StoredMember


class StorableGroup(Protocol):
    """What of a classic group its record holds (the coordinator's ``Group`` is one)."""

    generation: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str | None
    state: GroupState
    members: dict[str, Member]
    static_members: dict[str, str]
    joined_at_ms: int
    emptied_at_ms: int | None

    @property
    def now(self) -> Callable[[], float]: ...


def stored_group(group: StorableGroup, assigned: dict[str, bytes]) -> StoredGroup:
    """``group``'s GroupMetadataValue, each member with its assignment in ``assigned``. An
    empty group is stored with its generation and protocol type and no members; its state
    timestamp is when it emptied (offsets expire from then), a Stable one's when it joined."""
    protocol = group.protocol_name
    empty = group.state is GroupState.EMPTY
    members = tuple(
        StoredMember(
            m.member_id,
            m.group_instance_id,
            m.join.client_id,
            m.join.client_host,
            m.join.rebalance_timeout_ms,
            m.join.session_timeout_ms,
            m.metadata(protocol) if protocol is not None else b"",
            assigned.get(m.member_id, b""),
        )
        for m in group.members.values()
    )
    return StoredGroup(
        group.protocol_type or "",
        group.generation,
        protocol,
        group.leader_id,
        (group.emptied_at_ms or -1) if empty else group.joined_at_ms,
        () if empty else members,
    )


def restore(group: StorableGroup, stored: StoredGroup) -> None:
    """Make ``group`` (new, never joined) the group ``stored`` describes: Stable with its
    members, each one's session starting now (Kafka reschedules every loaded member's
    heartbeat), or Empty. A record with members but no protocol, which Kafka never writes,
    loads as Empty."""
    group.generation = stored.generation
    group.protocol_type = stored.protocol_type or None
    protocol = stored.protocol
    for m in stored.members:
        if protocol is None:
            break
        join = JoinRequest(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            session_timeout_ms=m.session_timeout_ms,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            protocol_type=stored.protocol_type,
            protocols=[(protocol, m.subscription)],
            require_known_member_id=True,
        )
        group.members[m.member_id] = Member(m.member_id, join, group.now(), m.assignment)
        if m.group_instance_id is not None:
            group.static_members[m.group_instance_id] = m.member_id
    if group.members:
        group.state, group.protocol_name = GroupState.STABLE, protocol
        leader = stored.leader
        group.leader_id = leader if leader in group.members else next(iter(group.members))
        group.joined_at_ms = stored.current_state_timestamp
    else:
        group.state, group.protocol_name, group.leader_id = GroupState.EMPTY, None, None
        stamp = stored.current_state_timestamp
        group.emptied_at_ms = None if stamp < 0 else stamp

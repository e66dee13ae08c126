"""Who may commit and fetch a KIP-848 consumer group's offsets (Kafka's
ConsumerGroup.validateOffsetCommit and validateOffsetFetch).

Why: a member names itself and its epoch in OffsetCommit and OffsetFetch v9. A member of the
consumer protocol commits at its epoch, or at an older one for a partition it held by then
(KIP-1251); a member still speaking the classic protocol (a group migrated online) commits
with older versions, its generation being its epoch, and is told ILLEGAL_GENERATION where a
consumer-protocol member is told STALE_MEMBER_EPOCH. Refuses: the offsets themselves.
"""

from __future__ import annotations

from collections.abc import Callable

from kio.schema.errors import ErrorCode

from kafkalog.coordinator.consumer_group import ConsumerGroup

PartitionCheck = Callable[[str, int], ErrorCode | None]


def commit_check(
    group: ConsumerGroup,
    member_id: str,
    member_epoch: int,
    version: int,
    topic_id: Callable[[str], str | None],
    transactional: bool = False,
) -> tuple[ErrorCode | None, PartitionCheck | None]:
    """Why a commit to ``group`` is refused as a whole (or None), and the check of each
    partition when the epoch is an older one of the member (or None). An epoch below 0
    commits only to an empty group (an admin or a consumer outside the group); a member
    must be known, use OffsetCommit v9 or later unless it speaks the classic protocol, and
    name its current epoch, or an older one at or after which the partition was given to it
    (KIP-1251: ``assignmentEpoch <= clientEpoch <= memberEpoch``; a member whose bumped
    epoch is still on its way is not fenced for its own partitions)."""
    if member_epoch < 0 and not group.members:
        return None, None
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.unknown_member_id, None
    classic = member.classic_member_metadata is not None
    if not transactional and not classic and version < 9:
        return ErrorCode.unsupported_version, None
    if member_epoch == member.member_epoch:
        return None, None
    if member_epoch > member.member_epoch:
        return ErrorCode.illegal_generation if classic else ErrorCode.stale_member_epoch, None
    if member_epoch < 0:
        return ErrorCode.stale_member_epoch, None
    stale = ErrorCode.illegal_generation if classic else ErrorCode.stale_member_epoch

    def partition_error(topic: str, partition: int) -> ErrorCode | None:
        tid = topic_id(topic) or ""
        held = partition in member.assigned.get(tid, frozenset()) or (
            partition in member.pending_revocation.get(tid, frozenset())
        )
        given = member.assignment_epochs.get((tid, partition))
        if held and given is not None and given <= member_epoch:
            return None
        return stale

    return None, partition_error


def fetch_error(group: ConsumerGroup, member_id: str | None, member_epoch: int) -> ErrorCode | None:
    """Why an OffsetFetch naming a member is refused, or None (no member: an admin)."""
    if member_id is None and member_epoch < 0:
        return None
    member = group.members.get(member_id or "")
    if member is None:
        return ErrorCode.unknown_member_id
    if member_epoch != member.member_epoch:
        classic = member.classic_member_metadata is not None
        return ErrorCode.illegal_generation if classic else ErrorCode.stale_member_epoch
    return None

"""Which committed offsets of a classic group may go (Kafka's
GroupMetadata.removeExpiredOffsets, KIP-211, and the subscription rule of OffsetDelete).

Why: expiry and OffsetDelete must agree on one reading of a group -- empty or live, plain
offset storage or a consumer group, and which topics its members subscribe to -- and that
reading is a pure function of the group, tested row by row. Refuses: deleting anything (the
coordinator writes the tombstones).
"""

from __future__ import annotations

import struct

from kafkalog.coordinator.group import Group
from kafkalog.coordinator.group_member import GroupState

CONSUMER_PROTOCOL = "consumer"


def subscribed_topics(group: Group) -> set[str] | None:
    """The topics a live consumer group's members subscribe to, read from each member's
    ConsumerProtocol Subscription (version, topic array, ...); None when unknown (no protocol
    chosen yet, or metadata that does not parse), which Kafka takes as "every topic"."""
    if group.protocol_name is None:
        return None
    topics: set[str] = set()
    try:
        for member in group.members.values():
            data = member.metadata(group.protocol_name)
            (count,) = struct.unpack_from(">i", data, 2)
            pos = 6
            for _ in range(count):
                (size,) = struct.unpack_from(">h", data, pos)
                if size < 0 or pos + 2 + size > len(data):
                    return None
                topics.add(data[pos + 2 : pos + 2 + size].decode())
                pos += 2 + size
    except (struct.error, StopIteration, UnicodeDecodeError):
        return None
    return topics


def expired_offsets(
    group: Group, now_ms: int, retention_ms: int, consumer_group_topics: set[str] | None = None
) -> list[tuple[str, int]]:
    """The offsets due to expire (Kafka's GroupMetadata.removeExpiredOffsets, KIP-211): all of
    an empty group's, ``retention_ms`` after it became empty (after each commit when that time
    is unknown, as for a group loaded at start); a group that only stores offsets (no
    protocol: ``assign`` and commit) by each commit's time; a stable consumer group only those
    of topics no member subscribes to, by commit time; none of any other group. The offsets of
    a KIP-848 consumer group (``consumer_group_topics``: what its members subscribe to) go by
    commit time, but never those of a topic it subscribes to (Kafka's
    OffsetMetadataManager.cleanupExpiredOffsets)."""
    spared: set[str] = set()
    base: int | None = None
    if consumer_group_topics is not None:
        spared = consumer_group_topics
    elif group.protocol_type is not None and not group.members:
        base = group.emptied_at_ms
    elif group.protocol_type is not None:
        if group.protocol_type != CONSUMER_PROTOCOL or group.state is not GroupState.STABLE:
            return []
        subscribed = subscribed_topics(group)
        if subscribed is None:
            return []
        spared = subscribed
    return [
        tp
        for tp, committed in group.offsets.items()
        if tp[0] not in spared
        and now_ms - (committed.commit_timestamp if base is None else base) >= retention_ms
    ]

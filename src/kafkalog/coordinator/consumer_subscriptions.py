"""What a consumer group subscribes to, and the target assignment that follows from it.

Why: the group epoch moves when a member's subscription changes or when the subscribed topics
change (created, deleted, more partitions: KIP-1101's metadata hash), and a regular expression
(KIP-848's ``SubscribedTopicRegex``) is resolved on the broker against the topics there are.
These are pure functions of the group, the member being updated, the records of the heartbeat
so far and the topic image, so the heartbeat rule in ``consumer_groups`` reads as Kafka's three
steps. Expressions are RE2's (Kafka's consumer groups use RE2/J, the same dialect): a
pattern a client sends runs on the coordinator, and RE2 matches in linear time, where a
backtracking engine can be made to take minutes over one topic name. Refuses: I/O and time of
its own (``now_ms`` is passed in).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping

import re2
import xxhash

from kafkalog.coordinator.assignors import MemberSpec, assign
from kafkalog.coordinator.consumer_group import (
    MEMBER_METADATA,
    REGULAR_EXPRESSION,
    ConsumerGroup,
    ConsumerGroupMember,
    OwnedPartitions,
    Record,
    target_member_record,
    target_metadata_record,
)
from kafkalog.types import uuid_bytes

# name -> (topic id, partition count) of the topics a group subscribes to that exist
SubscribedTopics = dict[str, tuple[str, int]]


_QUIET = re2.Options()
_QUIET.log_errors = False  # a client's bad pattern is its answer, not a line on our stderr


class InvalidRegexError(ValueError):
    """A subscription's regular expression does not compile."""


def subset(owned: OwnedPartitions, assigned: Mapping[str, frozenset[int]]) -> bool:
    """Whether the partitions a heartbeat reports are all among ``assigned``."""
    if owned is None:
        return False
    return all(parts <= assigned.get(topic, frozenset()) for topic, parts in owned.items())


def subscription(m: ConsumerGroupMember) -> tuple[object, ...]:
    """What a member's metadata record holds: a change writes a new record."""
    return (m.instance_id, m.rack_id, m.client_id, m.client_host, m.subscribed_topic_names,
            m.subscribed_topic_regex, m.rebalance_timeout_ms, m.server_assignor)  # fmt: skip


def subscription_changed(old: ConsumerGroupMember, new: ConsumerGroupMember) -> bool:
    """Whether the change moves the group epoch (Kafka's hasMemberSubscriptionChanged): the
    topics, the expression, the assignor or the rack."""

    def shape(m: ConsumerGroupMember) -> tuple[object, ...]:
        return (frozenset(m.subscribed_topic_names), m.subscribed_topic_regex, m.server_assignor,
                m.rack_id)  # fmt: skip

    return shape(old) != shape(new)


def member_topics(group: ConsumerGroup, m: ConsumerGroupMember, records: list[Record]) -> set[str]:
    """A member's topics, with its expression as this heartbeat's records resolve it when
    they do (``ConsumerGroup.member_topics`` otherwise)."""
    regex = m.subscribed_topic_regex
    fresh = [
        r for r in records if regex and r[0] == REGULAR_EXPRESSION
        and r[1]["regularExpression"] == regex
    ]  # fmt: skip
    if fresh and fresh[-1][2] is not None:
        return set(m.subscribed_topic_names) | set(fresh[-1][2]["topics"])
    return group.member_topics(m)


def subscribed_topics(
    group: ConsumerGroup,
    members: list[ConsumerGroupMember],
    records: list[Record],
    known: Mapping[str, int],
    topic_id: Callable[[str], str | None],
) -> SubscribedTopics:
    """The topics ``members`` subscribe to that exist and have an ID."""
    names: set[str] = set()
    for m in members:
        names |= member_topics(group, m, records)
    out = {}
    for name in sorted(names):
        found = topic_id(name) if name in known else None
        if found is not None:
            out[name] = (found, known[name])
    return out


def metadata_hash(topics: SubscribedTopics) -> int:
    """KIP-1101's MetadataHash of the subscribed topics, as Kafka's Utils.computeGroupHash
    computes it, so a group moved between Kafka and kafkalog keeps its epoch: XXH3-64 over
    each topic's hash in name order, each topic's hash XXH3-64 over a zero byte, its ID's two
    longs, its name, its partition count and each partition number (hash4j's stream: little-
    endian numbers, a string as UTF-16LE chars then its length; no racks on this broker).
    0 for no topics."""
    if not topics:
        return 0
    hashes = b"".join(
        struct.pack("<q", _topic_hash(name, topic_id, count))
        for name, (topic_id, count) in sorted(topics.items())
    )
    return _signed(xxhash.xxh3_64_intdigest(hashes))


def _topic_hash(name: str, topic_id: str, partitions: int) -> int:
    most, least = struct.unpack(">qq", uuid_bytes(topic_id))
    data = b"\x00" + struct.pack("<qq", most, least)
    chars = name.encode("utf-16-le")
    data += chars + struct.pack("<i", len(chars) // 2)  # Java's length: UTF-16 units
    data += struct.pack(f"<{partitions + 1}i", partitions, *range(partitions))
    return _signed(xxhash.xxh3_64_intdigest(data))


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def resolve_regexes(
    group: ConsumerGroup, updated: ConsumerGroupMember, known: Mapping[str, int], now_ms: int
) -> list[Record]:
    """A ConsumerGroupRegularExpression record for each expression the members use whose
    topics differ from its last resolution (internal topics never match, as in Kafka)."""
    wanted = {m.subscribed_topic_regex for m in group.members.values()}
    wanted.add(updated.subscribed_topic_regex)
    wanted.discard("")
    records: list[Record] = []
    for regex in sorted(wanted):
        try:
            pattern = re2.compile(regex, _QUIET)
        except re2.error as err:
            reason = err.args[0].decode(errors="replace") if err.args else "invalid"
            raise InvalidRegexError(f"SubscribedTopicRegex {regex} is invalid: {reason}") from err
        topics = tuple(sorted(t for t in known if not t.startswith("__") and pattern.fullmatch(t)))
        stored = group.regexes.get(regex)
        if stored is None or stored[0] != topics:
            version = (stored[1] + 1) if stored is not None else 0
            key = {"groupId": group.group_id, "regularExpression": regex}
            value = {"topics": list(topics), "version": version, "timestamp": now_ms}
            records.append((REGULAR_EXPRESSION, key, value))
    return records


def new_target(
    group: ConsumerGroup,
    updated: ConsumerGroupMember,
    topics: SubscribedTopics,
    epoch: int,
    previous_target: Mapping[str, Mapping[str, frozenset[int]]],
    records: list[Record],
    assignor: str,
    now_ms: int,
) -> Mapping[str, frozenset[int]]:
    """The target assignment at ``epoch`` by ``assignor``: a TargetAssignmentMember record for
    each member whose target changed (Kafka's TargetAssignmentBuilder writes only the delta),
    then the TargetAssignmentMetadata; returns the updated member's target."""
    members = {m.member_id: m for m in group.members.values()}
    members[updated.member_id] = updated
    for r in records:  # a static member replaced in this heartbeat is gone
        if r[0] == MEMBER_METADATA and r[2] is None:
            members.pop(r[1]["memberId"], None)
    ids = {name: tid for name, (tid, _) in topics.items()}
    specs = [
        MemberSpec(
            m.member_id, m.instance_id,
            frozenset(ids[t] for t in member_topics(group, m, records) if t in ids),
            previous_target.get(m.member_id, {}),
        )
        for m in members.values()
    ]  # fmt: skip
    target = assign(assignor, specs, {tid: count for tid, count in topics.values()})
    for member_id, assignment in sorted(target.items()):
        if dict(previous_target.get(member_id, {})) != assignment or member_id not in group.target:
            records.append(target_member_record(group.group_id, member_id, assignment))
    records.append(target_metadata_record(group.group_id, epoch, now_ms))
    return target.get(updated.member_id, {})

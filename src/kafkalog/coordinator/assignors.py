"""The server-side assignors of KIP-848 consumer groups: ``uniform`` and ``range``, as Kafka's
UniformAssignor and RangeAssignor compute a group's target assignment.

Why: in a consumer group the coordinator, not a member, decides who reads which partition.
An assignor is a pure function of the members' subscriptions, the topics' partition counts and
the previous target assignment; it knows nothing of epochs or reconciliation (that is
``consumer_group``'s). Refuses: client-side assignors and rack awareness (no partition of a
kafkalog broker has replicas on other racks).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

# topic id -> partitions, the shape of every assignment in a consumer group
Assignment = Mapping[str, frozenset[int]]
NO_PARTITIONS: Assignment = {}

UNIFORM, RANGE = "uniform", "range"
# group.consumer.assignors takes Kafka's class names as well as the short names
ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": UNIFORM,
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": RANGE,
}


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """What an assignor sees of a member: its ids, the topic ids it subscribes to (only
    topics that exist) and its partitions in the previous target assignment."""

    member_id: str
    instance_id: str | None
    topics: frozenset[str]
    previous: Assignment


def assign(
    name: str, members: list[MemberSpec], partitions: Mapping[str, int]
) -> dict[str, dict[str, frozenset[int]]]:
    """The target assignment of every member by assignor ``name``; ``partitions`` gives each
    subscribed topic id's partition count."""
    if name == RANGE:
        return _range(members, partitions)
    return _uniform(members, partitions)


def _range_order(member: MemberSpec) -> tuple[int, str]:
    # static members first, by instance id, then the others by member id (RangeAssignor)
    if member.instance_id is not None:
        return (0, member.instance_id)
    return (1, member.member_id)


def _range(
    members: list[MemberSpec], partitions: Mapping[str, int]
) -> dict[str, dict[str, frozenset[int]]]:
    """Each topic's partitions in contiguous ranges over the members subscribed to it, in
    member order, the first ``count % members`` ranges one longer: members subscribed to the
    same topics get the same partition numbers of each (co-partitioning)."""
    ordered = sorted(members, key=_range_order)
    out: dict[str, dict[str, frozenset[int]]] = {m.member_id: {} for m in members}
    for topic, count in sorted(partitions.items()):
        readers = [m for m in ordered if topic in m.topics]
        if not readers:
            continue
        quota, extra = divmod(count, len(readers))
        start = 0
        for i, member in enumerate(readers):
            end = min(start + quota + (1 if i < extra else 0), count)
            if start < end:
                out[member.member_id][topic] = frozenset(range(start, end))
            start = end
    return out


def _uniform(
    members: list[MemberSpec], partitions: Mapping[str, int]
) -> dict[str, dict[str, frozenset[int]]]:
    """As even a spread of all subscribed partitions as the subscriptions allow, moving as few
    as possible from the previous target. With one subscription for all (the common case)
    this is Kafka's homogeneous rule: each member keeps its previous partitions up to its
    quota (``total // members``, one more for the first ``total % members``), and the rest
    fill the members below quota. With different subscriptions, a partition goes to the least
    loaded member subscribed to its topic, and partitions move from the fullest to the
    emptiest eligible member until no move makes two members' counts closer."""
    ordered = sorted(members, key=lambda m: m.member_id)
    if not ordered:
        return {}
    if len({m.topics for m in ordered}) == 1:
        return _uniform_homogeneous(ordered, partitions)
    return _uniform_heterogeneous(ordered, partitions)


def _uniform_homogeneous(
    members: list[MemberSpec], partitions: Mapping[str, int]
) -> dict[str, dict[str, frozenset[int]]]:
    topics = sorted(t for t in members[0].topics if t in partitions)
    quota, extra = divmod(sum(partitions[t] for t in topics), len(members))
    taken: set[tuple[str, int]] = set()
    grants: dict[str, list[tuple[str, int]]] = {}
    room: dict[str, int] = {}
    for i, member in enumerate(members):
        share = quota + (1 if i < extra else 0)
        mine = [
            (t, p)
            for t in topics
            for p in sorted(member.previous.get(t, ()))
            if p < partitions[t] and (t, p) not in taken
        ][:share]
        taken.update(mine)
        grants[member.member_id] = mine
        room[member.member_id] = share - len(mine)
    free = iter([(t, p) for t in topics for p in range(partitions[t]) if (t, p) not in taken])
    for member in members:  # the shares add up to every partition: none is left over
        grants[member.member_id] += itertools.islice(free, room[member.member_id])
    return {m: _by_topic(tps) for m, tps in grants.items()}


def _uniform_heterogeneous(
    members: list[MemberSpec], partitions: Mapping[str, int]
) -> dict[str, dict[str, frozenset[int]]]:
    owned: dict[str, set[tuple[str, int]]] = {m.member_id: set() for m in members}
    eligible: dict[str, list[str]] = {}
    for topic in sorted(partitions):
        eligible[topic] = [m.member_id for m in members if topic in m.topics]
    owner: dict[tuple[str, int], str] = {}
    for member in members:  # stickiness: keep what the previous target gave
        for topic, parts in member.previous.items():
            if topic in member.topics and topic in partitions:
                for p in parts:
                    if p < partitions[topic] and (topic, p) not in owner:
                        owner[(topic, p)] = member.member_id
                        owned[member.member_id].add((topic, p))
    for topic in sorted(partitions):
        for p in range(partitions[topic]):
            if (topic, p) in owner or not eligible[topic]:
                continue
            least = min(eligible[topic], key=lambda m: (len(owned[m]), m))
            owner[(topic, p)] = least
            owned[least].add((topic, p))
    moved = True
    while moved:
        moved = False
        for tp in sorted(owner):
            current = owner[tp]
            least = min(eligible[tp[0]], key=lambda m: (len(owned[m]), m))
            if len(owned[least]) + 1 < len(owned[current]):
                owned[current].discard(tp)
                owned[least].add(tp)
                owner[tp] = least
                moved = True
    return {m: _by_topic(sorted(tps)) for m, tps in owned.items()}


def _by_topic(pairs: list[tuple[str, int]]) -> dict[str, frozenset[int]]:
    out: dict[str, set[int]] = {}
    for topic, partition in pairs:
        out.setdefault(topic, set()).add(partition)
    return {t: frozenset(ps) for t, ps in out.items()}

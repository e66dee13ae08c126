"""The rules of KIP-848 consumer groups without a server: the assignors, the metadata hash
against the value Kafka 4.3.1 wrote, and a model of many members heartbeating in a random
order, joining and leaving, in which no partition is ever held by two members at once and the
group always converges to a balanced target."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kafkalog.coordinator.assignors import MemberSpec, assign
from kafkalog.coordinator.consumer_group import Record
from kafkalog.coordinator.consumer_groups import ConsumerGroupLimits, ConsumerGroups, Heartbeat
from kafkalog.coordinator.consumer_subscriptions import metadata_hash

T, U = "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg"


def test_the_metadata_hash_is_kafkas() -> None:
    """The MetadataHash Kafka 4.3.1 wrote for a group subscribed to one 4-partition topic
    "cg" (its ConsumerGroupMetadataValue), from the topic's name, ID and partitions."""
    assert metadata_hash({"cg": ("XxazXgGHT7GKk1gRJRG7pg", 4)}) == 3146599431679753484
    assert metadata_hash({}) == 0
    assert metadata_hash({"cg": ("XxazXgGHT7GKk1gRJRG7pg", 5)}) != 3146599431679753484


def test_range_gives_each_member_the_same_partition_numbers_of_each_topic() -> None:
    members = [MemberSpec(m, None, frozenset({T, U}), {}) for m in ("b", "a", "c")]
    target = assign("range", members, {T: 5, U: 5})
    assert target == {
        "a": {T: frozenset({0, 1}), U: frozenset({0, 1})},
        "b": {T: frozenset({2, 3}), U: frozenset({2, 3})},
        "c": {T: frozenset({4}), U: frozenset({4})},
    }
    static = [MemberSpec("z", "i-1", frozenset({T}), {}), MemberSpec("a", None, frozenset({T}), {})]
    assert assign("range", static, {T: 2}) == {"z": {T: frozenset({0})}, "a": {T: frozenset({1})}}


@st.composite
def _groups(draw: st.DrawFn) -> tuple[list[MemberSpec], dict[str, int]]:
    counts = {T: draw(st.integers(0, 12)), U: draw(st.integers(0, 12))}
    n = draw(st.integers(1, 6))
    members = []
    for i in range(n):
        topics = draw(st.sampled_from([frozenset({T}), frozenset({U}), frozenset({T, U})]))
        previous = {
            t: frozenset(draw(st.sets(st.integers(0, 14), max_size=4))) for t in sorted(topics)
        }
        members.append(MemberSpec(f"m{i}", None, topics, previous))
    return members, counts


@given(_groups(), st.sampled_from(["uniform", "range"]))
def test_every_subscribed_partition_goes_to_exactly_one_subscriber(
    group: tuple[list[MemberSpec], dict[str, int]], assignor: str
) -> None:
    members, counts = group
    target = assign(assignor, members, counts)
    held: dict[tuple[str, int], str] = {}
    for member_id, assignment in target.items():
        spec = next(m for m in members if m.member_id == member_id)
        for topic, parts in assignment.items():
            assert topic in spec.topics
            for p in parts:
                assert (topic, p) not in held and 0 <= p < counts[topic]
                held[(topic, p)] = member_id
    wanted = {(t, p) for t, c in counts.items() for p in range(c)
              if any(t in m.topics for m in members)}  # fmt: skip
    assert set(held) == wanted


@given(_groups())
def test_uniform_balances_one_subscription_and_keeps_what_fits(
    group: tuple[list[MemberSpec], dict[str, int]],
) -> None:
    members, counts = group
    members = [MemberSpec(m.member_id, None, frozenset({T, U}), m.previous) for m in members]
    target = assign("uniform", members, counts)
    sizes = [sum(len(p) for p in a.values()) for a in target.values()]
    assert max(sizes) - min(sizes) <= 1
    quota = sum(counts.values()) // len(members)
    for m in members:  # a member keeps at least min(quota, what it had and still exists)
        had = {(t, p) for t, ps in m.previous.items() for p in ps if p < counts[t]}
        kept = {(t, p) for t, ps in target[m.member_id].items() for p in ps} & had
        others = {(t, p) for o in members if o.member_id < m.member_id
                  for t, ps in o.previous.items() for p in ps}  # fmt: skip
        assert len(kept) >= min(quota, len(had - others))


# -- a model of a group: members that heartbeat in any order, join and leave ------------------


@dataclass
class _Manager:
    counts: dict[str, int]

    def topics(self) -> Mapping[str, int]:
        return self.counts

    def topic_id(self, name: str) -> str | None:
        return {"t": T, "u": U}.get(name)


@dataclass
class _Ctx:
    manager: _Manager
    settings: Any = None


@dataclass
class _Client:
    """What a member believes: its epoch and the partitions it owns."""

    member_id: str
    epoch: int = 0
    owned: dict[str, frozenset[int]] = field(default_factory=dict)


async def _run(steps: list[tuple[str, int]], counts: dict[str, int]) -> None:
    written: list[Record] = []

    async def write(group_id: str, records: list[Record]) -> None:
        written.extend(records)

    groups = ConsumerGroups(
        _Ctx(_Manager(counts)), ConsumerGroupLimits(), write, lambda g: False, lambda: 0.0
    )  # type: ignore[arg-type]
    clients: dict[str, _Client] = {}

    async def beat(c: _Client, leave: bool = False) -> None:
        full = c.epoch == 0
        answer = await groups.heartbeat(Heartbeat(
            "g", c.member_id, -1 if leave else c.epoch, None, None,
            30_000 if full else -1, ("t", "u") if full else None, None, None,
            {} if full else dict(c.owned),
        ))  # fmt: skip
        assert answer.error is ErrorCode.none, answer
        if leave:
            del clients[c.member_id]
            return
        c.epoch = answer.member_epoch
        if answer.assignment is not None:  # the client revokes at once and takes what it got
            c.owned = dict(answer.assignment)
        _no_partition_held_twice(clients)

    for action, who in steps:
        name = f"m{who}"
        if action == "join" and name not in clients:
            clients[name] = _Client(name)
            await beat(clients[name])
        elif action == "leave" and name in clients:
            await beat(clients[name], leave=True)
        elif name in clients:
            await beat(clients[name])
    for _ in range(2 * len(clients) + 4):  # then every member heartbeats until it settles
        for c in list(clients.values()):
            await beat(c)
    group = groups.groups.get("g")
    if clients:
        assert group is not None and group.state.value == "Stable"
        sizes = [sum(len(p) for p in c.owned.values()) for c in clients.values()]
        assert sum(sizes) == sum(counts.values()) and max(sizes) - min(sizes) <= 1


def _no_partition_held_twice(clients: dict[str, _Client]) -> None:
    seen: set[tuple[str, int]] = set()
    for c in clients.values():
        for topic, parts in c.owned.items():
            for p in parts:
                assert (topic, p) not in seen, f"{topic}-{p} owned twice"
                seen.add((topic, p))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["join", "leave", "beat", "beat"]), st.integers(0, 4)),
             max_size=40),
    st.integers(1, 8),
    st.integers(0, 8),
)  # fmt: skip
def test_members_in_any_order_never_share_a_partition_and_converge(
    steps: list[tuple[str, int]], t_count: int, u_count: int
) -> None:
    asyncio.run(_run(steps, {"t": t_count, "u": u_count}))


def test_made_up_groups_leave_nothing_behind_and_steady_heartbeats_write_nothing() -> None:
    """A heartbeat for a group that does not exist (a hostile client naming a million) keeps
    no lock or state; a member's unchanged heartbeat writes no record and matches its
    expression against the topics again only once they change."""

    async def scenario() -> None:
        written: list[Record] = []

        async def write(group_id: str, records: list[Record]) -> None:
            written.extend(records)

        manager = _Manager({"t": 2})
        groups = ConsumerGroups(_Ctx(manager), ConsumerGroupLimits(), write, lambda g: False,
                                lambda: 0.0)  # type: ignore[arg-type]  # fmt: skip
        for i in range(1000):
            answer = await groups.heartbeat(Heartbeat(f"nope-{i}", "m", 3, None, None, -1,
                                                      None, None, None, None))  # fmt: skip
            assert answer.error is ErrorCode.group_id_not_found
        assert not groups._locks and not groups.groups and not written
        joined = await groups.heartbeat(
            Heartbeat("g", "m", 0, None, None, 1000, None, "t.*", None, {})
        )
        assert joined.error is ErrorCode.none and dict(joined.assignment or {}) == {
            T: frozenset({0, 1})
        }
        holding = {T: frozenset({0, 1})}
        steady_beat = Heartbeat("g", "m", joined.member_epoch, None, None, -1, None, None, None,
                                holding)  # fmt: skip
        before = len(written)
        for _ in range(5):
            steady = await groups.heartbeat(steady_beat)
            assert steady.error is ErrorCode.none and steady.assignment is None
        assert len(written) == before
        manager.counts = {"t": 2, "tu": 1}  # a new topic: a new mapping, as LogManager gives
        grown = await groups.heartbeat(steady_beat)
        assert grown.member_epoch == joined.member_epoch + 1
        left = await groups.heartbeat(Heartbeat("g", "m", -1, None, None, -1, None, None, None,
                                                None))  # fmt: skip
        assert left.error is ErrorCode.none
        group = groups.groups["g"]  # empty, its epochs equal (KAFKA-20442)
        assert (group.state.value, group.assignment_epoch) == ("Empty", group.group_epoch)
        assert [r[0] for r in written[before:]][:2] == [16, 3]  # the expression, then the epoch

    asyncio.run(scenario())


def test_a_static_member_that_left_keeps_its_partitions_one_session_then_goes() -> None:
    """A static member leaving with epoch -2 (a restart on its way) keeps its assignment: a new
    incarnation with the same ``group.instance.id`` takes it over at once. One that does not
    come back within ``group.consumer.session.timeout.ms`` is removed, as in Kafka. A member
    that heartbeats while the expiry waits for the group's lock is not fenced."""

    async def scenario() -> None:
        now = [0.0]

        async def write(group_id: str, records: list[Record]) -> None:
            pass

        groups = ConsumerGroups(_Ctx(_Manager({"t": 2})), ConsumerGroupLimits(), write,
                                lambda g: False, lambda: now[0])  # type: ignore[arg-type]  # fmt: skip

        def join(member: str, instance: str) -> Heartbeat:
            return Heartbeat("g", member, 0, instance, None, 1000, ("t",), None, None, {})

        first = await groups.heartbeat(join("s1", "i1"))
        assert dict(first.assignment or {}) == {T: frozenset({0, 1})}
        left = await groups.heartbeat(Heartbeat("g", "s1", -2, "i1", None, -1, None, None,
                                                None, None))  # fmt: skip
        assert (left.error, left.member_epoch) == (ErrorCode.none, -2)
        back = await groups.heartbeat(join("s2", "i1"))
        assert back.error is ErrorCode.none
        assert dict(back.assignment or {}) == {T: frozenset({0, 1})}
        assert list(groups.groups["g"].members) == ["s2"]
        await groups.heartbeat(Heartbeat("g", "s2", -2, "i1", None, -1, None, None, None,
                                         None))  # fmt: skip
        now[0] = 44.0
        assert await groups.expire() == []
        now[0] = 46.0
        assert await groups.expire() == [("g", "s2")]
        assert not groups.groups["g"].members

    asyncio.run(scenario())

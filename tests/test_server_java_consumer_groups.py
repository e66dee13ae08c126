"""Kafka 4.3.1's Java consumer and librdkafka with ``group.protocol=consumer`` (KIP-848)
against ``kafkalog serve``: members join, are killed and added, and the assignments converge
with incremental revocation only; every record is read; a regular-expression subscription
picks up a topic created later."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from kafkalog import Record
from kafkalog.server import serve
from test_server_java_clients import Member, wait_for

pytestmark = [pytest.mark.one_codec, pytest.mark.timeout(400)]

FAST = {
    "group.consumer.heartbeat.interval.ms": "1000",
    "group.consumer.session.timeout.ms": "6000",
}


def _wave(logs: list[Any], wave: int, count: int) -> set[tuple[int, str]]:
    out = set()
    for i in range(count):
        value = f"w{wave}-{i}"
        logs[i % len(logs)].append([Record(value.encode(), key=f"k{i}".encode())])
        out.add((i % len(logs), value))
    return out


def _read(members: list[Member]) -> set[tuple[int, str]]:
    return {(p, v) for m in members for p, _, _, v in m.records()}


def _holding(member: Member) -> int:
    held = member.assignments()
    return held[-1] if held else 0


def test_members_join_die_and_join_and_partitions_move_incrementally(tmp_path: Path) -> None:
    with serve(tmp_path, overrides=FAST) as server:
        bs = server.bootstrap_servers
        assert server.manager is not None
        logs = server.manager.create_topic("jcg", 6)
        sent = _wave(logs, 1, 60)
        first = Member(bs, "jcg-group", "jcg", 10**6, "consumer")
        members = [first]
        try:
            wait_for(lambda: _read(members) == sent, 90, "the first member's records")
            assert _holding(first) == 6
            second = Member(bs, "jcg-group", "jcg", 10**6, "consumer")
            members.append(second)
            wait_for(lambda: _holding(first) == 3 and _holding(second) == 3, 60, "two members")
            # the first member gave up only the three partitions that moved
            assert first.revocations() == [3], first.lines[-5:]
            third = Member(bs, "jcg-group", "jcg", 10**6, "consumer")
            members.append(third)
            wait_for(lambda: [_holding(m) for m in members] == [2, 2, 2], 60, "three members")
            assert all(n < 6 for m in members for n in m.revocations())
            sent |= _wave(logs, 2, 60)
            wait_for(lambda: _read(members) >= sent, 60, "the second wave")
            second.kill()  # no leave: the session runs out
            wait_for(lambda: _holding(first) + _holding(third) == 6, 60, "the survivors")
            sent |= _wave(logs, 3, 60)
            wait_for(lambda: _read(members) >= sent, 60, "the third wave")
            fourth = Member(bs, "jcg-group", "jcg", 10**6, "consumer")
            members.append(fourth)
            wait_for(lambda: [_holding(m) for m in (first, third, fourth)] == [2, 2, 2], 60,
                     "the member added")  # fmt: skip
            sent |= _wave(logs, 4, 60)
            wait_for(lambda: _read(members) >= sent, 60, "the fourth wave")
            # read by their owners: nothing of wave 4 on the killed member, no partition of a
            # wave read by two live members
            wave4 = [{(p, v) for p, _, _, v in m.records() if v.startswith("w4")}
                     for m in (first, third, fourth)]  # fmt: skip
            assert sum(len(w) for w in wave4) == 60
            owners = [{p for p, _ in w} for w in wave4]
            assert not (owners[0] & owners[1] or owners[0] & owners[2] or owners[1] & owners[2])
        finally:
            errors = [m.stop() for m in members]
        assert not any("ERROR" in e for e in errors), errors


def test_a_regex_subscription_picks_up_a_topic_created_later(tmp_path: Path) -> None:
    with serve(tmp_path, overrides=FAST) as server:
        bs = server.bootstrap_servers
        assert server.manager is not None
        sent = _wave(server.manager.create_topic("rx-a", 2), 1, 10)
        _wave(server.manager.create_topic("other", 2), 7, 4)
        member = Member(bs, "rx-group", "regex:rx-.*", 10**6, "consumer")
        try:
            wait_for(lambda: _read([member]) == sent, 90, "rx-a's records")
            assert _holding(member) == 2
            later = set()
            for p, log in enumerate(server.manager.create_topic("rx-b", 2)):
                log.append([Record(f"b{p}".encode(), key=b"k")])
                later.add((p, f"b{p}"))
            wait_for(lambda: _holding(member) == 4, 60, "rx-b assigned")
            wait_for(lambda: _read([member]) >= sent | later, 60, "rx-b's records")
            assert _read([member]) == sent | later  # nothing of "other"
        finally:
            member.stop()


def test_librdkafka_with_the_consumer_protocol_shares_and_takes_over_partitions(
    tmp_path: Path,
) -> None:
    """librdkafka (confluent-kafka's, 2.x) with ``group.protocol=consumer``: two consumers
    split four partitions and read each record once; when one closes, the other takes all
    four and reads what comes next."""
    from confluent_kafka import Consumer

    with serve(tmp_path, overrides=FAST) as server:
        assert server.manager is not None
        logs = server.manager.create_topic("rd", 4)
        sent = _wave(logs, 1, 40)
        config = {"bootstrap.servers": server.bootstrap_servers, "group.id": "rdg",
                  "group.protocol": "consumer", "auto.offset.reset": "earliest"}  # fmt: skip
        consumers = [Consumer(config) for _ in range(2)]
        got: list[set[tuple[int, str]]] = [set(), set()]

        def poll_until(done: Any, seconds: float) -> None:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and not done():
                for i, c in enumerate(consumers):
                    m = c.poll(0.1)
                    if m is not None and m.error() is None:
                        got[i].add((m.partition(), m.value().decode()))

        try:
            for c in consumers:
                c.subscribe(["rd"])
            poll_until(lambda: got[0] | got[1] == sent, 60)
            assert got[0] | got[1] == sent and not got[0] & got[1]
            assert {p for p, _ in got[0]}.isdisjoint({p for p, _ in got[1]})
            consumers.pop().close()
            later = _wave(logs, 2, 40)
            poll_until(lambda: got[0] >= later, 60)
            assert got[0] >= later
        finally:
            for c in consumers:
                c.close()


def test_a_rolling_upgrade_to_the_consumer_protocol_and_back(tmp_path: Path) -> None:
    """Kafka 4's online migration: three classic Java consumers are replaced one by one by
    consumers with ``group.protocol=consumer`` (the first one's heartbeat turns the classic
    group into a consumer group, the classic members going on in it), then back (the last
    consumer-protocol member's leave turns it into a classic group again); every record of
    every wave is read meanwhile, and the group ends as it started."""
    with serve(tmp_path, overrides=FAST) as server:
        assert server.manager is not None
        coord = server._groups
        assert coord is not None
        logs = server.manager.create_topic("mig", 6)
        sent = _wave(logs, 1, 60)
        members = [Member(server.bootstrap_servers, "mig-group", "mig", 10**6) for _ in range(3)]
        everyone = list(members)  # the records a stopped member read count too
        wave = 1
        try:
            wait_for(lambda: _read(members) >= sent, 90, "the classic members' records")
            wait_for(lambda: sorted(_holding(m) for m in members) == [2, 2, 2], 60, "classic")
            # each wave is read by the members of the moment, whatever their protocol
            for protocol, kind in (("consumer", "consumer"), ("classic", "classic")):
                for i in range(3):
                    members[i].stop()  # a rolling restart: it leaves the group
                    members[i] = Member(server.bootstrap_servers, "mig-group", "mig", 10**6,
                                        protocol)  # fmt: skip
                    everyone.append(members[i])
                    wave += 1
                    sent |= _wave(logs, wave, 30)
                    wanted = frozenset(sent)
                    wait_for(lambda w=wanted: _read(everyone) >= w, 90, f"wave {wave}")
                    in_consumer = "mig-group" in coord.consumer.groups
                    # one consumer-protocol member makes it a consumer group; a classic
                    # member left alone makes it classic again
                    assert in_consumer == (protocol == "consumer" or i < 2), (protocol, i)
                wait_for(lambda: sorted(_holding(m) for m in members) == [2, 2, 2], 60, kind)
            group = coord.groups["mig-group"]
            assert len(group.members) == 3 and group.protocol_type == "consumer"
        finally:
            for m in everyone:
                m.stop()

"""Share groups (KIP-932) against ``kafkalog serve`` with Kafka 4.3.1's own KafkaShareConsumer
(``interop/ShareMember.java``): members share one partition's records with none settled twice;
a member killed while holding records loses them to the others once its lock runs out, each
delivered again with its count; a poison record stops after ``group.share.delivery.count.limit``
deliveries; the state survives a restart in ``__share_group_state``, in Kafka's format."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from kafka_oracle import JVM_FLAGS, TOOL_LOG, classpath, java
from kafkalog import Record
from kafkalog.coordinator.share_state import load_share_state
from kafkalog.manager import LogManager
from kafkalog.server import serve
from kafkalog.types import SHARE_GROUP_STATE_TOPIC
from test_server_java_clients import wait_for

pytestmark = [pytest.mark.one_codec, pytest.mark.timeout(300)]

LATEST = "4.3.1"
ROOT = Path(__file__).resolve().parent.parent
FAST = {
    "group.share.heartbeat.interval.ms": "1000",
    "group.share.session.timeout.ms": "10000",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.record.lock.duration.ms": "3000",
}
# Kafka's 30 s lock, where a lock running out on a slow machine would be a second delivery the
# test does not expect
STEADY = {k: v for k, v in FAST.items() if "lock" not in k}


class ShareMember:
    """One ShareMember.java process; its lines are collected as they come."""

    def __init__(self, bootstrap: str, group: str, topic: str, mode: str) -> None:
        program = str(ROOT / "interop" / "ShareMember.java")
        cmd = ["java", *JVM_FLAGS, *TOOL_LOG, "-cp", classpath(LATEST), program,
               bootstrap, group, topic, mode]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def deliveries(self, lines: list[str] | None = None) -> list[tuple[int, int, str, str]]:
        """(offset, delivery count, value, acknowledgement) of each record delivered."""
        out = []
        for line in list(self.lines) if lines is None else lines:
            if line != "joined" and not line.startswith("committed"):
                _, offset, count, value, ack = line.split()
                out.append((int(offset), int(count), value, ack))
        return out

    def committed(self, lines: list[str] | None = None) -> set[int]:
        """The offsets whose acknowledgements the broker confirmed."""
        out: set[int] = set()
        for line in list(self.lines) if lines is None else lines:
            if line.startswith("committed"):
                out.update(int(o) for o in line.split()[1:])
        return out

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def _stop(members: list[ShareMember]) -> None:
    for m in members:
        if m.proc.poll() is None:
            m.kill()


def _earliest(bootstrap: str, group: str) -> None:
    """share.auto.offset.reset=earliest for the group, with Kafka's kafka-configs tool."""
    cmd = ["java", *JVM_FLAGS, *TOOL_LOG, "-cp", classpath(LATEST), "kafka.admin.ConfigCommand",
           "--bootstrap-server", bootstrap, "--alter", "--entity-type", "groups",
           "--entity-name", group, "--add-config", "share.auto.offset.reset=earliest"]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)


def _produce(log: object, values: list[str]) -> None:
    for v in values:
        log.append([Record(v.encode())])  # type: ignore[attr-defined]


def test_four_members_share_one_partition_and_settle_each_record_once(tmp_path: Path) -> None:
    with serve(tmp_path, overrides=STEADY) as server:
        assert server.manager is not None
        (log,) = server.manager.create_topic("queue", 1)
        bs = server.bootstrap_servers
        _earliest(bs, "sg")
        members = [ShareMember(bs, "sg", "queue", "explicit") for _ in range(4)]
        try:
            wait_for(lambda: all("joined" in m.lines for m in members), 90, "four members")
            sent = [f"v{i}" for i in range(600)]
            for start in range(0, 600, 50):
                _produce(log, sent[start : start + 50])
                threading.Event().wait(0.3)

            def accepted() -> list[str]:
                return [v for m in members for _, _, v, a in m.deliveries() if a == "accept"]

            wait_for(lambda: len(set(accepted())) == 600, 120, "every record accepted")
            threading.Event().wait(1.0)
            assert sorted(accepted()) == sorted(sent)  # each once: none settled twice
            busy = [m for m in members if m.deliveries()]
            assert len(busy) >= 3, [len(m.deliveries()) for m in members]
            # no record was ever given to two members at once: each delivery count is 1
            assert {c for m in members for _, c, _, _ in m.deliveries()} == {1}
        finally:
            _stop(members)


def test_a_killed_member_s_records_come_back_after_the_lock(tmp_path: Path) -> None:
    with serve(tmp_path, overrides=FAST) as server:
        assert server.manager is not None
        (log,) = server.manager.create_topic("queue", 1)
        bs = server.bootstrap_servers
        _earliest(bs, "sg")
        sent = [f"v{i}" for i in range(100)]
        _produce(log, sent)
        holder = ShareMember(bs, "sg", "queue", "hold")
        try:
            wait_for(holder.deliveries, 90, "the holder's first records")
            held = {o for o, _, _, _ in holder.deliveries()}
            holder.kill()  # mid-batch: nothing acknowledged, no leave
            other = ShareMember(bs, "sg", "queue", "explicit")
            wait_for(lambda: {v for _, _, v, _ in other.deliveries()} >= set(sent), 90,
                     "every record at the other member")  # fmt: skip
            again = {o: c for o, c, _, _ in other.deliveries() if o in held}
            assert set(again) == held
            assert set(again.values()) == {2}  # delivered a second time, counted
            # the holder's client may have taken more than it printed (a fetch ahead of its
            # poll): those come back at count 2 too; nothing was delivered a third time
            assert all(c <= 2 for o, c, _, _ in other.deliveries() if o not in held)
        finally:
            _stop([holder])
            if "other" in locals():
                _stop([other])


def test_a_poison_record_stops_at_the_delivery_count_limit(tmp_path: Path) -> None:
    overrides = {**STEADY, "group.share.delivery.count.limit": "3"}
    with serve(tmp_path, overrides=overrides) as server:
        assert server.manager is not None
        (log,) = server.manager.create_topic("queue", 1)
        bs = server.bootstrap_servers
        _earliest(bs, "sg")
        _produce(log, ["a", "b", "poison-p", "c", "release-r", "reject-x", "d"])
        member = ShareMember(bs, "sg", "queue", "explicit")
        try:
            wait_for(lambda: len(member.deliveries()) >= 10, 90, "the deliveries")
            threading.Event().wait(3.0)  # nothing more comes
            got = member.deliveries()
            poison = [c for o, c, _, _ in got if o == 2]
            assert poison == [1, 2, 3]
            assert [c for o, c, _, _ in got if o == 4] == [1, 2]
            assert [a for o, _, _, a in got if o == 5] == ["reject"]
            assert sorted(o for o, _, _, a in got if a == "accept") == [0, 1, 3, 4, 6]
            assert len(got) == 10
        finally:
            _stop([member])


def test_the_state_survives_a_restart_in_kafka_s_format(tmp_path: Path) -> None:
    with serve(tmp_path, overrides=STEADY) as server:
        assert server.manager is not None
        (log,) = server.manager.create_topic("queue", 1)
        bs = server.bootstrap_servers
        _earliest(bs, "sg")
        _produce(log, [f"a{i}" for i in range(40)])
        member = ShareMember(bs, "sg", "queue", "explicit")
        try:
            wait_for(lambda: len(member.deliveries()) == 40, 90, "the first forty")
            threading.Event().wait(1.0)  # the last commit
        finally:
            _stop([member])
    with serve(tmp_path, overrides=STEADY) as server:
        assert server.manager is not None
        log = server.manager.get_log("queue", 0)
        _produce(log, [f"b{i}" for i in range(10)])
        member = ShareMember(server.bootstrap_servers, "sg", "queue", "explicit")
        try:
            wait_for(lambda: len(member.deliveries()) >= 10, 90, "the next ten")
            threading.Event().wait(2.0)
            assert [v for _, _, v, _ in member.deliveries()] == [f"b{i}" for i in range(10)]
        finally:
            _stop([member])
    with LogManager([tmp_path]) as manager:
        logs = [log for tp, log in manager.logs().items() if tp.topic == SHARE_GROUP_STATE_TOPIC]
        state = load_share_state(logs)
        ((key, offset),) = state.items()
        assert key[0] == "sg" and key[2] == 0
        assert offset.start_offset == 50 and offset.state_batches == []


def _tool(bootstrap: str, *args: str) -> list[list[str]]:
    """kafka-share-groups.sh (Kafka's ShareGroupCommand): its output's rows, split."""
    out = java(LATEST, "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
               "--bootstrap-server", bootstrap, *args, timeout=120)  # fmt: skip
    return [line.split() for line in out.splitlines() if line.strip()]


def test_kafka_share_groups_lists_describes_and_deletes(tmp_path: Path) -> None:
    from test_server_share_protocol import ACCEPT, ShareClient

    with serve(tmp_path, overrides=FAST) as server:
        assert server.manager is not None
        logs = server.manager.create_topic("queue", 2)
        bs = server.bootstrap_servers
        _earliest(bs, "sg")
        _produce(logs[0], [f"v{i}" for i in range(10)])
        c = ShareClient(int(bs.rsplit(":", 1)[1]))
        topic_id = server.manager.topic_id("queue")
        assert topic_id is not None
        c.heartbeat("sg", "m1", 0, ("queue",))
        c.fetch("sg", "m1", 0, topic_id, [0, 1], max_records=4)
        c.acknowledge("sg", "m1", 1, topic_id, 0, [(0, 3, [ACCEPT])])
        assert _tool(bs, "--list") == [["sg"]]
        offsets = _tool(bs, "--describe", "--group", "sg")
        assert offsets[0] == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
        assert offsets[1:] == [["sg", "queue", "0", "4", "6"], ["sg", "queue", "1", "0", "0"]]
        members = _tool(bs, "--describe", "--group", "sg", "--members")
        assert members[1][:2] == ["sg", "m1"] and members[1][-1] == "queue:0,1"
        assert _tool(bs, "--describe", "--group", "sg", "--state")[1][3:] == ["Stable", "1"]
        refused = " ".join(" ".join(r) for r in _tool(bs, "--delete", "--group", "sg"))
        assert "GroupNotEmptyException" in refused, refused
        c.heartbeat("sg", "m1", -1)
        deleted = _tool(bs, "--delete", "--group", "sg")
        assert deleted == [["Deletion", "of", "requested", "share", "groups", "('sg')", "was",
                            "successful."]]  # fmt: skip
        assert _tool(bs, "--list") == []
        c.close()
    with LogManager([tmp_path]) as manager:
        logs = [lg for tp, lg in manager.logs().items() if tp.topic == SHARE_GROUP_STATE_TOPIC]
        assert load_share_state(logs) == {}  # the state tombstoned with the group


def test_implicit_acknowledgement_accepts_each_poll_s_records(tmp_path: Path) -> None:
    with serve(tmp_path, overrides=STEADY) as server:
        assert server.manager is not None
        (log,) = server.manager.create_topic("queue", 1)
        bs = server.bootstrap_servers
        _earliest(bs, "sg")
        _produce(log, [f"v{i}" for i in range(200)])
        member = ShareMember(bs, "sg", "queue", "implicit")
        topic_id = server.manager.topic_id("queue")
        shares = server._share_partitions
        assert shares is not None

        def start_offset() -> int:
            found = shares.offsets(("sg", str(topic_id), 0))
            return -1 if found is None else found[0]

        try:
            wait_for(lambda: len(member.deliveries()) >= 200, 90, "every record")
            # the poll after the last records accepts them: the start offset passes them all
            wait_for(lambda: start_offset() == 200, 30, "the last poll's acceptance")
            got = member.deliveries()
            assert [v for _, _, v, _ in got] == [f"v{i}" for i in range(200)]
            assert {c for _, c, _, _ in got} == {1}
        finally:
            _stop([member])


def test_no_confirmed_acknowledgement_is_undone_by_a_kill_9_of_the_server(tmp_path: Path) -> None:
    """Kafka's KafkaShareConsumer commits its acknowledgements; ``kafkalog serve`` is killed
    (-9) while records are in flight and restarted, the consumer staying: every record is
    accepted in the end, and no record whose acknowledgement the broker confirmed before the
    kill is ever delivered again."""
    from confluent_kafka import Producer

    from kafka_oracle import free_port
    from server_helpers import start_serve_process

    port = free_port()
    bs = f"127.0.0.1:{port}"
    proc = start_serve_process(tmp_path, port, FAST)
    member = None

    def produce(values: range) -> None:
        producer = Producer({"bootstrap.servers": bs, "linger.ms": 5})
        for i in values:
            producer.produce("queue", f"v{i}".encode())
        assert producer.flush(60) == 0

    try:
        produce(range(1500))
        _earliest(bs, "sg")
        member = ShareMember(bs, "sg", "queue", "explicit")
        wait_for(lambda: len(member.committed()) == 1500, 120, "the first part confirmed")
        produce(range(1500, 3000))
        proc.kill()  # while the consumer takes and settles the second part
        proc.wait(10)
        before = list(member.lines)
        proc = start_serve_process(tmp_path, port, FAST)
        produce(range(3000, 3500))  # fetched after the restart, from the state it found
        wait_for(lambda: len(member.committed()) == 3500, 180, "every record confirmed")
        after = member.lines[len(before) :]
        confirmed_before = member.committed(before)
        assert len(confirmed_before) >= 1500
        again = {o for o, _, _, _ in member.deliveries(after)} & confirmed_before
        assert not again, sorted(again)[:20]
        assert {v for _, _, v, a in member.deliveries() if a == "accept"} == {
            f"v{i}" for i in range(3500)
        }
    finally:
        if member is not None:
            _stop([member])
        proc.kill()
        proc.wait(10)


def test_kafka_share_groups_resets_and_deletes_offsets(tmp_path: Path) -> None:
    from test_server_share_protocol import ShareClient, _acquired

    with serve(tmp_path, overrides=FAST) as server:
        assert server.manager is not None
        logs = server.manager.create_topic("queue", 2)
        bs = server.bootstrap_servers
        _produce(logs[0], [f"v{i}" for i in range(10)])
        topic_id = server.manager.topic_id("queue")
        assert topic_id is not None
        # a group that does not exist yet is created at the offsets (here the log start,
        # although share.auto.offset.reset is latest)
        reset = _tool(bs, "--reset-offsets", "--group", "rg", "--topic", "queue",
                      "--to-earliest", "--execute")  # fmt: skip
        assert sorted(reset[1:]) == [["rg", "queue", "0", "0"], ["rg", "queue", "1", "0"]]
        offsets = _tool(bs, "--describe", "--group", "rg")
        assert offsets[1:] == [["rg", "queue", "0", "0", "10"], ["rg", "queue", "1", "0", "0"]]
        c = ShareClient(int(bs.rsplit(":", 1)[1]))
        c.heartbeat("rg", "m1", 0, ("queue",))
        assert _acquired(c.fetch("rg", "m1", 0, topic_id, [0], max_records=3)) == [(0, 2, 1)]
        with pytest.raises(AssertionError, match=r"Share group 'rg' is not empty\."):
            _tool(bs, "--reset-offsets", "--group", "rg", "--topic", "queue", "--to-latest",
                  "--execute")  # fmt: skip
        c.heartbeat("rg", "m1", -1)  # what it held goes back
        latest = _tool(bs, "--reset-offsets", "--group", "rg", "--topic", "queue:0",
                       "--to-latest", "--execute")  # fmt: skip
        assert latest[1:] == [["rg", "queue", "0", "10"]]
        assert _tool(bs, "--describe", "--group", "rg")[1] == ["rg", "queue", "0", "10", "0"]
        _produce(logs[0], ["w0", "w1"])
        c.heartbeat("rg", "m1", 0, ("queue",))
        assert _acquired(c.fetch("rg", "m1", 0, topic_id, [0])) == [(10, 11, 1)]
        c.heartbeat("rg", "m1", -1)
        assert _tool(bs, "--delete-offsets", "--group", "rg", "--topic", "queue", "--topic",
                     "nope") == [["TOPIC", "STATUS"],
                                 ["nope", "Error:", "This", "server", "does", "not", "host",
                                  "this", "topic-partition."], ["queue", "Successful"]]  # fmt: skip
        assert _tool(bs, "--describe", "--group", "rg") == [
            ["Share", "group", "'rg'", "has", "no", "offset", "information."]
        ]
        c.close()
    with LogManager([tmp_path]) as manager:
        logs_ = [lg for tp, lg in manager.logs().items() if tp.topic == SHARE_GROUP_STATE_TOPIC]
        assert load_share_state(logs_) == {}

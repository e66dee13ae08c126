"""``kafkalog serve`` under Kafka's own Java client and perf tools: a consumer-group program
(interop/GroupConsumer.java) whose members rebalance, commit and resume after a restart, and
``kafka-producer-perf-test`` / ``kafka-consumer-perf-test`` with acks=all."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kafka_oracle import JVM_FLAGS, KAFKA_VERSIONS, ROOT, TOOL_LOG, classpath
from kafkalog import LogManager, Record
from kafkalog.server import serve
from kafkalog.server.fetch_sessions import FetchSessionCache

pytestmark = [pytest.mark.one_codec, pytest.mark.timeout(300)]

FAST_GROUPS = {"group.initial.rebalance.delay.ms": "0"}
LATEST = KAFKA_VERSIONS[-1]


class Member:
    """One GroupConsumer process; its output lines are collected as they come."""

    def __init__(
        self, bootstrap: str, group: str, topic: str, count: int, protocol: str = "classic"
    ) -> None:
        program = str(ROOT / "interop" / "GroupConsumer.java")
        cmd = ["java", *JVM_FLAGS, *TOOL_LOG, "-cp", classpath(LATEST), program,
               bootstrap, group, topic, str(count), protocol]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def records(self) -> set[tuple[int, int, str, str]]:
        out = set()
        for line in list(self.lines):
            if line and not line.startswith(("assigned", "revoked", "closing")):
                partition, offset, key, value = line.split()
                out.add((int(partition), int(offset), key, value))
        return out

    def assignments(self) -> list[int]:
        return [int(line.split()[1]) for line in list(self.lines) if line.startswith("assigned")]

    def revocations(self) -> list[int]:
        return [int(line.split()[1]) for line in list(self.lines) if line.startswith("revoked")]

    def kill(self) -> None:
        """kill -9: no leave, no commit; the coordinator must notice on its own."""
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> str:
        self.proc.terminate()
        try:
            _, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        self._reader.join(5)
        return err


def wait_for(condition: object, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int | None]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    try:
        return [consumer.committed(TopicPartition(topic, p)) for p in range(partitions)]
    finally:
        consumer.close()


def test_a_java_consumer_group_rebalances_commits_and_resumes_after_a_restart(
    tmp_path: Path,
) -> None:
    """One member takes all four partitions and the first 40 records; a second joins and each
    gets two partitions (Kafka's range assignor); the next 40 records split along that
    assignment; every commit lands; after a restart a new member starts where they stopped."""

    def append_wave(logs: list[Any], wave: int) -> None:
        for i in range(40):
            logs[i % 4].append([Record(f"w{wave}-{i}".encode(), key=f"k{i}".encode())])

    with serve(tmp_path, overrides=FAST_GROUPS) as server:
        bs = server.bootstrap_servers
        assert server.manager is not None
        logs = server.manager.create_topic("jgc", 4)
        append_wave(logs, 1)
        first = Member(bs, "jgc-group", "jgc", 80)
        wait_for(lambda: len(first.records()) == 40, 90, "the first wave")
        assert first.assignments() == [4]
        wait_for(lambda: _committed(bs, "jgc-group", "jgc", 4) == [10] * 4, 60, "the commits")
        second = Member(bs, "jgc-group", "jgc", 80)
        wait_for(lambda: first.assignments()[-1:] == [2] and second.assignments() == [2], 60,
              "the rebalance")  # fmt: skip
        append_wave(logs, 2)
        members = (first, second)
        wait_for(lambda: sum(len(m.records()) for m in members) == 80, 90, "the second wave")
        waves = [{(p, o, v) for p, o, _, v in m.records() if v.startswith("w2")} for m in members]
        assert all(len(w) == 20 for w in waves)  # two partitions of ten records each
        owned = [{p for p, _, _ in w} for w in waves]
        assert len(owned[0] | owned[1]) == 4 and not owned[0] & owned[1]
        assert all(o == 10 + i // 4 and p == i % 4 for w in waves for p, o, v in w
                   for i in [int(v.split("-")[1])])  # fmt: skip
        wait_for(lambda: _committed(bs, "jgc-group", "jgc", 4) == [20] * 4, 60, "the commits")
        for m in members:
            m.stop()
    with serve(tmp_path, overrides=FAST_GROUPS) as server:  # committed offsets survive
        bs = server.bootstrap_servers
        assert server.manager is not None
        for p in range(4):
            server.manager.get_log("jgc", p).append([Record(b"late%d" % p, key=b"late")])
        third = Member(bs, "jgc-group", "jgc", 4)
        assert third.proc.wait(90) == 0, third.stop()
        assert sorted(third.records()) == [(p, 20, "late", f"late{p}") for p in range(4)]


@pytest.mark.parametrize("version", KAFKA_VERSIONS)
def test_kafkas_producer_and_consumer_perf_tests(
    tmp_path: Path, version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def tool(main: str, *args: str) -> str:
        cmd = ["java", *JVM_FLAGS, *TOOL_LOG, "-cp", classpath(version), main, *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
        assert proc.returncode == 0, f"{main}: {proc.stdout[-2000:]}{proc.stderr[-3000:]}"
        return proc.stdout

    incremental: list[int] = []  # each answer to an incremental fetch, by session
    answer = FetchSessionCache.incremental

    def spy(cache: FetchSessionCache, session: Any, response: Any) -> Any:
        incremental.append(session.id)
        return answer(cache, session, response)

    monkeypatch.setattr(FetchSessionCache, "incremental", spy)
    n = 20_000
    with serve(tmp_path) as server:
        bs = server.bootstrap_servers
        produced = tool(
            "org.apache.kafka.tools.ProducerPerformance", "--topic", "perf",
            "--num-records", str(n), "--record-size", "100", "--throughput", "-1",
            "--producer-props", f"bootstrap.servers={bs}", "acks=all", "compression.type=lz4",
        )  # fmt: skip
        assert f"{n} records sent" in produced.splitlines()[-1]
        consumed = tool(
            "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bs,
            "--topic", "perf", "--messages", str(n), "--timeout", "60000",
        )  # fmt: skip
        header, row = consumed.strip().splitlines()[-2:]
        fields = dict(zip([h.strip() for h in header.split(",")], row.split(","), strict=False))
        assert int(fields["data.consumed.in.nMsg"].strip()) == n
        assert incremental, "the Java consumer fetched through no session (KIP-227)"
    with LogManager([tmp_path]) as manager:
        log = manager.get_log("perf", 0)
        assert log.log_end_offset == n
        assert sum(1 for _ in log.read_records(0, 1 << 30)) == n

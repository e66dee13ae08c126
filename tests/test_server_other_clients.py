"""``kafkalog serve`` against clients in other languages: kcat (C, librdkafka) and KafkaJS
(JavaScript, its own protocol code). Each scenario checks what the client saw and what
kafkalog's files hold afterwards."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from interop_clients import kafkajs, kcat
from kafkalog import LogManager
from kafkalog.server import serve

pytestmark = [pytest.mark.one_codec, pytest.mark.timeout(300)]


def _records(log_dir: Path, topic: str, partition: int = 0) -> list[tuple[bytes | None, bytes]]:
    with LogManager([log_dir]) as manager:
        log = manager.get_log(topic, partition)
        return [(r.key, r.value or b"") for r in log.read_records(0, 1 << 24)]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_produces_lists_and_consumes(tmp_path: Path, codec: str) -> None:
    binary, env = kcat()

    def run(*args: str, stdin: str | None = None) -> str:
        proc = subprocess.run(
            [binary, "-b", bs, *args], input=stdin, capture_output=True, text=True,
            timeout=60, env=env, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, f"kcat {args}: {proc.stderr[-2000:]}"
        return proc.stdout

    lines = [f"k{i}:value {i} {codec}" for i in range(25)]
    with serve(tmp_path) as server:
        bs = server.bootstrap_servers
        run("-P", "-t", "kc", "-K:", "-z", codec, "-H", "origin=kcat", stdin="\n".join(lines))
        listed = run("-L", "-t", "kc")
        assert 'topic "kc" with 1 partitions' in listed
        consumed = run("-C", "-t", "kc", "-o", "beginning", "-e", "-f", "%o %k=%s %h\n")
        assert consumed.splitlines() == [
            f"{i} k{i}=value {i} {codec} origin=kcat" for i in range(25)
        ]
        tail = run("-C", "-t", "kc", "-o", "-3", "-e", "-f", "%o\n")
        assert tail.split() == ["22", "23", "24"]
    assert _records(tmp_path, "kc") == [
        (f"k{i}".encode(), f"value {i} {codec}".encode()) for i in range(25)
    ]


KAFKAJS_SCENARIO = r"""
const { Kafka, CompressionTypes, logLevel } = require('kafkajs');
const kafka = new Kafka({ clientId: 'kjs', brokers: [process.argv[2]], logLevel: logLevel.ERROR });
(async () => {
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic: 'kjs', numPartitions: 2 }], waitForLeaders: true });
  const topics = await admin.listTopics();
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const messages = [];
  for (let i = 0; i < 30; i++) {
    messages.push({ key: 'k' + i, value: 'v' + i, partition: i % 2, headers: { n: String(i) } });
  }
  await producer.send({ topic: 'kjs', compression: CompressionTypes.GZIP, acks: -1, messages });
  await producer.disconnect();
  const consumer = kafka.consumer({ groupId: 'kjs-group', sessionTimeout: 10000 });
  await consumer.connect();
  await consumer.subscribe({ topic: 'kjs', fromBeginning: true });
  const seen = [];
  await new Promise((resolve) => {
    consumer.run({
      eachMessage: async ({ partition, message }) => {
        seen.push([partition, Number(message.offset), message.key.toString(),
                   message.value.toString(), message.headers.n.toString()]);
        if (seen.length === 30) resolve();
      },
    });
  });
  await consumer.commitOffsets([{ topic: 'kjs', partition: 0, offset: '15' },
                                { topic: 'kjs', partition: 1, offset: '15' }]);
  await consumer.disconnect();
  const offsets = await admin.fetchOffsets({ groupId: 'kjs-group', topics: ['kjs'] });
  await admin.disconnect();
  console.log(JSON.stringify({ topics, seen, offsets }));
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
"""


def test_kafkajs_admin_idempotent_producer_and_consumer_group(tmp_path: Path) -> None:
    modules = kafkajs()
    script = tmp_path / "scenario.js"
    script.write_text(KAFKAJS_SCENARIO)
    with serve(tmp_path / "data", overrides={"group.initial.rebalance.delay.ms": "0"}) as server:
        proc = subprocess.run(
            ["node", str(script), server.bootstrap_servers], capture_output=True, text=True,
            timeout=120, env={"NODE_PATH": str(modules), "PATH": "/usr/bin:/bin"}, check=False,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "kjs" in result["topics"]
    seen = sorted(result["seen"], key=lambda row: (row[0], row[1]))
    assert seen == [[i % 2, i // 2, f"k{i}", f"v{i}", str(i)] for i in sorted(
        range(30), key=lambda i: (i % 2, i // 2))]  # fmt: skip
    (committed,) = result["offsets"]
    assert sorted((p["partition"], p["offset"]) for p in committed["partitions"]) == [
        (0, "15"),
        (1, "15"),
    ]
    for partition in (0, 1):
        assert _records(tmp_path / "data", "kjs", partition) == [
            (f"k{i}".encode(), f"v{i}".encode()) for i in range(partition, 30, 2)
        ]

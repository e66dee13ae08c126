"""Reading never writes: every command that only reads, and the Spark source, run over a real
Kafka broker's directory (stopped cleanly, and killed with a transaction open) leave every byte
and every file name as the broker left them; the broker then starts on it with no partition
taken for uncleanly shut down. A writer that hands the directory back (a LogManager opened
and closed on it) keeps the broker epoch of the clean-shutdown marker, so the same holds.

Kafka's controller generates one record per partition the broker leads when a broker
registers after an unclean shutdown (ClusterControlManager: "Generated N record(s) to clean
up previous incarnations"); a clean hand-back generates none.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("confluent_kafka")

from click.testing import CliRunner
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kafka_oracle import KAFKA_VERSIONS, KafkaBroker
from kafkalog import LogManager
from kafkalog.cli.main import cli

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.one_codec, pytest.mark.timeout(600)]

GENERATED = re.compile(r"Generated (\d+) record\(s\) to clean up previous incarnations")


def tree_hash(root: Path) -> dict[str, str]:
    """Every file under ``root`` (hidden ones too) by path: the hash of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _write(broker: KafkaBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = [
        NewTopic("plain", 2, 1),
        NewTopic("compacted", 1, 1, config={"cleanup.policy": "compact"}),
        NewTopic("txn", 1, 1),
    ]
    for future in admin.create_topics(topics).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(300):
        producer.produce("plain", b"v%d" % i, key=b"k%d" % (i % 7))
        producer.produce("compacted", b"c%d" % i, key=b"k%d" % (i % 5))
    producer.flush(30)
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "open-txn"})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(5):
        txn.produce("txn", b"open-%d" % i)
    txn.flush(30)  # written, never committed: a reader must not abort it


def _registration(broker: KafkaBroker, seen: int) -> int:
    """The number of clean-up records the controller generated at this start."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = GENERATED.findall(broker.output.read_bytes()[seen:].decode(errors="replace"))
        if found:
            return int(found[-1])
        time.sleep(0.2)
    raise AssertionError(f"no broker registration seen:\n{broker.tail()}")


READING = [
    ["get-offsets"],
    ["get-offsets", "--time", "earliest"],
    ["get-offsets", "--time", "max-timestamp"],
    ["get-offsets", "--time", "0"],
    ["consume", "--topic", "plain", "--from-beginning", "--timeout-ms", "100"],
    ["consume", "--topic", "txn", "--from-beginning", "--timeout-ms", "100",
     "--isolation-level", "read_committed"],
    ["topics", "--list"],
    ["topics", "--describe"],
    ["configs", "--entity-name", "compacted", "--describe", "--all"],
    ["configs", "--entity-type", "brokers", "--entity-default", "--describe"],
    ["log-dirs", "--describe"],
    ["verify"],
]  # fmt: skip


def run_reading_commands(data: Path) -> list[str]:
    """Each of READING over ``data``; their outputs. Each must succeed."""
    runner = CliRunner()
    outputs = []
    for args in READING:
        result = runner.invoke(cli, [args[0], "--log-dirs", str(data), *args[1:]])
        assert result.exit_code == 0, (args, result.output)
        outputs.append(result.output)
    return outputs


def _read_everything(data: Path, spark: Any | None) -> list[str]:
    outputs = run_reading_commands(data)
    runner = CliRunner()
    for log in sorted(data.rglob("*.log")):
        result = runner.invoke(cli, ["dump-log", "--files", str(log), "--print-data-log"])
        assert result.exit_code == 0, (log, result.output)
    if spark is not None:
        df = spark.read.format("kafkalog").option("path", str(data)).option("subscribe", "plain")
        assert df.load().count() == 300
    return outputs


@pytest.mark.parametrize("version", KAFKA_VERSIONS)
def test_reading_a_brokers_directory_changes_nothing(
    version: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    spark = request.getfixturevalue("spark") if version == KAFKA_VERSIONS[-1] else None
    broker = KafkaBroker(version, tmp_path / "broker", {"auto.create.topics.enable": "false"})
    with broker:
        _write(broker)
        broker.kill()  # a crash, with the transaction open
    killed = tmp_path / "killed"
    shutil.copytree(broker.root, killed, symlinks=True)
    broker.start()  # recovers the crash; the transaction stays open
    broker.stop()
    data = broker.log_dir
    for root in (killed / "data", data):
        before = tree_hash(root.parent)
        outputs = _read_everything(root, spark)
        assert tree_hash(root.parent) == before, f"a reading command changed {root}"
    assert "plain:0:" in outputs[0]
    # the broker finds its directory as it left it: nothing to clean up after a clean stop
    seen = broker.output.stat().st_size
    broker.start()
    assert _registration(broker, seen) == 0
    broker.stop()
    # a writer that hands the directory back keeps the broker epoch Kafka registers with
    with LogManager(data):
        pass
    seen = broker.output.stat().st_size
    broker.start()
    assert _registration(broker, seen) == 0
    broker.stop()

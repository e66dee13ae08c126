"""The reading commands take no lock and write nothing: they run beside a LogManager that holds
the directory (as beside a running ``kafkalog serve``), and a directory they read afterwards is
byte for byte what it was, hidden files and file names included."""

from __future__ import annotations

from pathlib import Path

from kafkalog import LogManager, Record
from kafkalog.log.producer_batches import ProducerFields
from test_kafka_oracle_readonly import run_reading_commands, tree_hash


def _fill(manager: LogManager) -> None:
    for p, log in enumerate(manager.create_topic("plain", 2)):
        log.append([Record(b"v%d" % i, key=b"k", timestamp=1000 + i) for i in range(5 + p)])
    manager.create_topic("compacted", 1, {"cleanup.policy": "compact"})[0].append(
        [Record(b"c", key=b"k")]
    )
    txn = manager.create_topic("txn", 1)[0]
    txn.append([Record(b"open")], producer=ProducerFields(7, 0, 0, is_transactional=True))


def test_a_writer_hands_back_the_broker_epoch_it_found(tmp_path: Path) -> None:
    LogManager(tmp_path).close()
    (tmp_path / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":27}')
    with LogManager(tmp_path) as manager:
        assert not (tmp_path / ".kafka_cleanshutdown").exists()  # a crash now is unclean
        manager.create_topic("t", 1)
    assert (tmp_path / ".kafka_cleanshutdown").read_text() == '{"version":0,"brokerEpoch":27}'


def test_reading_commands_run_beside_a_writer(tmp_path: Path) -> None:
    with LogManager(tmp_path) as manager:
        _fill(manager)
        outputs = run_reading_commands(tmp_path)
    assert outputs[0].splitlines()[:2] == ["compacted:0:1", "plain:0:5"]
    assert "plain:1:5" in outputs[2]  # max-timestamp: the last record's, 1005


def test_reading_commands_write_nothing(tmp_path: Path) -> None:
    with LogManager(tmp_path) as manager:
        _fill(manager)
    # as a Kafka broker leaves it: its epoch, which a rewrite would lose
    (tmp_path / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":27}')
    before = tree_hash(tmp_path)
    run_reading_commands(tmp_path)
    assert tree_hash(tmp_path) == before

"""``kafkalog serve`` scenarios a Kafka user meets: a consumer whose position fell below the
log start resets (OFFSET_OUT_OF_RANGE), messages at and past ``message.max.bytes``, a compacted
topic read back after the cleaner ran, and committed offsets read with ``kafkalog dump-log
--offsets-decoder``. Each is checked through the clients and through kafkalog's files."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kafkalog import LogManager
from kafkalog.cli.main import cli
from kafkalog.coordinator.offsets_store import partition_for
from kafkalog.server import serve

pytestmark = [pytest.mark.one_codec, pytest.mark.timeout(300)]

FAST_GROUPS = {"group.initial.rebalance.delay.ms": "0"}


def _produce(
    bootstrap: str, topic: str, rows: list[tuple[bytes | None, bytes | None]], **config: object
) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **config)
    for key, value in rows:
        producer.send(topic, key=key, value=value)
    producer.flush()
    producer.close()


def _consume_all(bootstrap: str, topic: str, n: int, **config: object) -> list[tuple[int, bytes]]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, consumer_timeout_ms=5000, **config)
    out = []
    for message in consumer:
        out.append((message.offset, message.value))
        if len(out) == n:
            break
    consumer.close()
    return out


@pytest.mark.parametrize(("reset", "expected"), [("earliest", 5), ("latest", 10)])
def test_a_position_below_the_log_start_resets_as_auto_offset_reset_says(
    tmp_path: Path, reset: str, expected: int
) -> None:
    """kafka-python commits offset 2, the records before 5 are deleted, and the group's next
    fetch gets OFFSET_OUT_OF_RANGE: it resets to the log start or the log end."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    with serve(tmp_path, overrides=FAST_GROUPS) as server:
        bs = server.bootstrap_servers
        assert server.manager is not None
        _produce(bs, "oor", [(None, b"%d" % i) for i in range(10)])
        tp = TopicPartition("oor", 0)
        committer = KafkaConsumer(bootstrap_servers=bs, group_id="g")
        committer.commit({tp: OffsetAndMetadata(2, "", -1)})
        committer.close()
        server.manager.get_log("oor").maybe_increment_log_start_offset(5)
        consumer = KafkaConsumer(bootstrap_servers=bs, group_id="g", auto_offset_reset=reset)
        consumer.assign([tp])
        got = []
        for _ in range(20):
            got += [m.offset for ms in consumer.poll(250).values() for m in ms]
            if consumer.position(tp) != 2 and (got or reset == "latest"):
                break
        position = consumer.position(tp)
        consumer.close()
    if reset == "earliest":
        assert got[0] == 5 and position == 10
    else:
        assert got == [] and position == expected


def test_librdkafka_reports_the_reset_with_auto_offset_reset_error(tmp_path: Path) -> None:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    with serve(tmp_path) as server:
        bs = server.bootstrap_servers
        assert server.manager is not None
        _produce(bs, "oor", [(None, b"%d" % i) for i in range(10)])
        server.manager.get_log("oor").maybe_increment_log_start_offset(5)
        consumer = Consumer(
            {"bootstrap.servers": bs, "group.id": "e", "auto.offset.reset": "error"}
        )
        consumer.assign([TopicPartition("oor", 0, 2)])
        message = consumer.poll(15)
        consumer.close()
    assert message is not None and message.error() is not None
    assert message.error().code() == KafkaError._AUTO_OFFSET_RESET


def test_messages_at_and_past_message_max_bytes(tmp_path: Path) -> None:
    """The broker's ``message.max.bytes`` counts the whole batch: a record just under it is
    stored and fetched (KIP-74: a first batch larger than the fetch size is sent whole); one
    past it gets MESSAGE_TOO_LARGE, as does one past a topic's own ``max.message.bytes``."""
    from kafka import KafkaProducer
    from kafka.errors import MessageSizeTooLargeError

    limit = 300_000
    with serve(tmp_path, overrides={"message.max.bytes": str(limit)}) as server:
        bs = server.bootstrap_servers
        assert server.manager is not None
        server.manager.create_topic("small", 1, {"max.message.bytes": "10000"})

        def send(topic: str, value: bytes) -> None:
            # a fresh producer each time: an idempotent producer stops after a fatal error
            producer = KafkaProducer(bootstrap_servers=bs, acks="all", max_request_size=4 << 20)
            try:
                producer.send(topic, value).get(30)
            finally:
                producer.close()

        fits = b"x" * (limit - 1000)
        send("big", fits)
        with pytest.raises(MessageSizeTooLargeError, match=r"larger than max\.message\.bytes"):
            send("big", b"y" * (limit + 1))
        with pytest.raises(MessageSizeTooLargeError):
            send("small", b"z" * 20_000)
        send("small", b"z" * 9_000)
        got = _consume_all(
            bs, "big", 1, auto_offset_reset="earliest", max_partition_fetch_bytes=1024
        )
        assert got == [(0, fits)]
    with LogManager([tmp_path]) as manager:
        assert manager.get_log("big").log_end_offset == 1
        assert manager.get_log("small").log_end_offset == 1


def test_a_compacted_topic_keeps_the_latest_value_of_each_key(tmp_path: Path) -> None:
    """Producers overwrite and delete keys of a ``cleanup.policy=compact`` topic; after the
    cleaner ran, a consumer from the beginning reads the latest value of each live key at its
    original offset, and ``kafkalog verify`` finds the cleaned files sound."""
    with serve(tmp_path) as server:
        bs = server.bootstrap_servers
        assert server.manager is not None
        server.manager.create_topic(
            "table",
            1,
            {"cleanup.policy": "compact", "internal.segment.bytes": "2048",
             "delete.retention.ms": "0", "min.cleanable.dirty.ratio": "0.01"},
        )  # fmt: skip
        rows: list[tuple[bytes | None, bytes | None]] = []
        for i in range(400):
            rows.append((b"k%d" % (i % 10), b"value %05d" % i * 3))
        rows += [(b"k3", None), (b"k7", None)]  # tombstones
        rows += [(b"pad", b"p%05d" % i * 4) for i in range(80)]  # roll past the tombstones
        # batches below segment.bytes: a larger one is RECORD_LIST_TOO_LARGE, as in Kafka
        _produce(bs, "table", rows, batch_size=512)
        log = server.manager.get_log("table")
        assert log.number_of_segments > 3, log
        assert server.manager.run_cleaner()
        # the first round gave the tombstones their delete horizon (KIP-534, now + 0 ms); the
        # next round, started by new dirty data, removes them
        more = [(b"more", b"m%05d" % i * 4) for i in range(80)]
        _produce(bs, "table", more, batch_size=512)
        rows += more
        assert server.manager.run_cleaner()
        active_base = log.active_segment.base_offset
        got = _consume_all(bs, "table", len(rows), auto_offset_reset="earliest")
    assert active_base > 402  # the tombstones are in cleaned segments
    # below the active segment (the part the cleaner may touch): exactly the latest record of
    # each key there, unless that is a tombstone
    latest: dict[bytes | None, int] = {}
    for offset, (key, _) in enumerate(rows[:active_base]):
        latest[key] = offset
    cleaned = [offset for offset, _ in got if offset < active_base]
    assert cleaned == sorted(o for o in latest.values() if rows[o][1] is not None)
    assert dict(got) == {o: rows[o][1] for o, _ in got}  # each at its original offset
    assert [o for o, _ in got if o >= active_base] == list(range(active_base, len(rows)))
    result = CliRunner().invoke(cli, ["verify", "--log-dirs", str(tmp_path)])
    assert result.exit_code == 0, result.output


def test_kafkalog_dump_log_decodes_the_offsets_the_server_committed(tmp_path: Path) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    with serve(tmp_path, overrides=FAST_GROUPS) as server:
        bs = server.bootstrap_servers
        _produce(bs, "d", [(None, b"x")] * 3)
        consumer = KafkaConsumer(bootstrap_servers=bs, group_id="dump-group")
        consumer.commit({TopicPartition("d", 0): OffsetAndMetadata(3, "meta", -1)})
        consumer.close()
    with LogManager([tmp_path]) as manager:
        partition = partition_for("dump-group", manager.topics()["__consumer_offsets"])
    segment = tmp_path / f"__consumer_offsets-{partition}" / "00000000000000000000.log"
    result = CliRunner().invoke(cli, ["dump-log", "--files", str(segment), "--offsets-decoder"])
    assert result.exit_code == 0, result.output
    assert '"group":"dump-group","topic":"d","partition":0' in result.output
    assert '"offset":3,"leaderEpoch":-1,"metadata":"meta"' in result.output

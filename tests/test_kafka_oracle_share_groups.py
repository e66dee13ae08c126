"""A share group goes on across Apache Kafka 4.3.1 and ``kafkalog serve``: each side loads the
group the other stored in ``__consumer_offsets`` (members, epochs, assignments) and the
share-partition state the other wrote in ``__share_group_state``: records accepted or
rejected on one broker are never delivered on the other, a released one comes back with its
delivery count. Both sides are driven by the same raw ShareGroupHeartbeat, ShareFetch and
ShareAcknowledge requests, so what differs can only be the broker."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from kafka_oracle import KAFKA_VERSIONS, KafkaBroker, java
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.wire import make
from kafkalog.server import serve
from server_helpers import request_module
from test_server_share_protocol import ACCEPT, REJECT, RELEASE, ShareClient, _acquired

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.one_codec, pytest.mark.timeout(400)]

RETRY = {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
         ErrorCode.coordinator_load_in_progress}  # fmt: skip


@pytest.fixture
def broker(tmp_path: Path) -> KafkaBroker:
    if "4.3.1" not in KAFKA_VERSIONS:
        pytest.skip("Kafka 4.3.1 is not pinned in interop/kafka-versions.txt")
    return KafkaBroker("4.3.1", tmp_path / "broker", {"log.retention.ms": "-1"})


def _topic_id(log_dir: Path) -> str:
    """The topic ID Kafka wrote beside the partition (partition.metadata)."""
    deadline = time.monotonic() + 30
    path = log_dir / "sq-0" / "partition.metadata"
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    fields = dict(line.split(": ", 1) for line in path.read_text().splitlines() if ": " in line)
    return fields["topic_id"].strip()


def _port(bootstrap: str) -> int:
    return int(bootstrap.rsplit(":", 1)[1])


def _earliest(bootstrap: str, group: str) -> None:
    java("4.3.1", "kafka.admin.ConfigCommand", "--bootstrap-server", bootstrap, "--alter",
         "--entity-type", "groups", "--entity-name", group,
         "--add-config", "share.auto.offset.reset=earliest")  # fmt: skip


def _produce(bootstrap: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for v in values:
        producer.produce("sq", v.encode())
        producer.flush(30)  # one batch each: offsets are records


def _heartbeat(c: ShareClient, group: str, member: str, epoch: int, **kw: Any) -> Any:
    """A heartbeat, after FindCoordinator, while the broker loads its coordinator topics."""
    deadline = time.monotonic() + 60
    while True:
        mod = request_module(ApiKey.FIND_COORDINATOR, 4)
        body = make(mod, "FindCoordinatorRequest", key_type=0, coordinator_keys=(group,))
        c.call(ApiKey.FIND_COORDINATOR, 4, body)
        r = c.heartbeat(group, member, epoch, **kw)
        if r.error_code not in RETRY or time.monotonic() > deadline:
            assert r.error_code == ErrorCode.none, r
            return r
        time.sleep(0.5)


def _acquire(
    c: ShareClient, group: str, member: str, tid: str, want: int, seconds: float = 60
) -> tuple[dict[int, int], int]:
    """Offset -> delivery count of what a new share session acquires, fetching until ``want``
    records came (a broker initializes a share-partition after the assignment, on its own
    time); and the session's next epoch."""
    got: dict[int, int] = {}
    epoch = 0
    deadline = time.monotonic() + seconds
    while len(got) < want and time.monotonic() < deadline:
        r = c.fetch(group, member, epoch, tid, [0], max_wait_ms=500)
        assert r.error_code == ErrorCode.none, r
        epoch += 1
        for first, last, count in _acquired(r):
            got.update(dict.fromkeys(range(first, last + 1), count))
    return got, epoch


def _settle(c: ShareClient, group: str, member: str, tid: str, base: int, epoch: int) -> None:
    """On the session that took them: the first five accepted, the sixth released, the
    seventh rejected; the last three held (the connection's end gives them back)."""
    batches = [(base, base + 4, [ACCEPT]), (base + 5, base + 5, [RELEASE]),
               (base + 6, base + 6, [REJECT])]  # fmt: skip
    ack = c.acknowledge(group, member, epoch, tid, 0, batches)
    assert ack.error_code == ErrorCode.none, ack
    assert [p.error_code for t in ack.responses for p in t.partitions] == [ErrorCode.none]


def _state(c: ShareClient, group: str) -> tuple[Any, ...]:
    mod = request_module(ApiKey.SHARE_GROUP_DESCRIBE, 1)
    body = make(mod, "ShareGroupDescribeRequest", group_ids=(group,),
                include_authorized_operations=False)  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        (d,) = c.call(ApiKey.SHARE_GROUP_DESCRIBE, 1, body).groups
        if d.error_code not in RETRY or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    members = sorted(
        (m.member_id, m.member_epoch, tuple(m.subscribed_topic_names),
         tuple((t.topic_name, tuple(sorted(t.partitions))) for t in m.assignment.topic_partitions))
        for m in d.members
    )  # fmt: skip
    return (d.error_code, d.group_state, d.group_epoch, d.assignment_epoch, members)


def _first_phase(bootstrap: str, group: str, tid: str, base: int) -> tuple[Any, ...]:
    """Member m1 takes ten records from ``base`` and settles seven; the group's state."""
    c = ShareClient(_port(bootstrap))
    _heartbeat(c, group, "m1", 0, topics=("sq",))
    taken, epoch = _acquire(c, group, "m1", tid, 10)
    assert taken == dict.fromkeys(range(base, base + 10), 1)
    _settle(c, group, "m1", tid, base, epoch)
    state = _state(c, group)
    c.close()
    return state


def _resume(bootstrap: str, group: str, tid: str, base: int, stored: tuple[Any, ...]) -> None:
    """The other broker finds the group as stored, and its share-partition: the released record
    and the held ones come again, each on its second delivery; a settled one never."""
    c = ShareClient(_port(bootstrap))
    assert _state(c, group) == stored
    ((member, epoch, *_),) = stored[4]
    _heartbeat(c, group, member, epoch)
    again, _ = _acquire(c, group, member, tid, 4)
    assert again == {base + 5: 2, base + 7: 2, base + 8: 2, base + 9: 2}
    c.close()


def test_a_share_group_goes_on_across_kafka_and_kafkalog_serve(broker: KafkaBroker) -> None:
    with broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic("sq", 1, 1)]).values():
            future.result(60)
        topic_id = _topic_id(broker.log_dir)
        _produce(broker.bootstrap, [f"k{i}" for i in range(10)])
        _earliest(broker.bootstrap, "on-kafka")
        on_kafka = _first_phase(broker.bootstrap, "on-kafka", topic_id, 0)
    # Kafka assigns a partition once its share state is initialized, at an epoch of its own
    assert on_kafka[1] == "Stable" and on_kafka[2] >= 1, on_kafka
    with serve(broker.log_dir, overrides={"auto.create.topics.enable": "false"}) as server:
        assert server.manager is not None
        tid = server.manager.topic_id("sq")
        assert tid is not None
        _resume(server.bootstrap_servers, "on-kafka", tid, 0, on_kafka)
        _produce(server.bootstrap_servers, [f"s{i}" for i in range(10)])
        _earliest(server.bootstrap_servers, "on-kafkalog")
        server.manager.alter_group_configs("on-kafkalog", {"share.auto.offset.reset": "latest"})
        # latest: a share-partition initialized now starts at the end; the next ten are its
        c = ShareClient(_port(server.bootstrap_servers))
        _heartbeat(c, "on-kafkalog", "m1", 0, topics=("sq",))
        assert _acquire(c, "on-kafkalog", "m1", tid, 1, seconds=3)[0] == {}
        c.close()
        _produce(server.bootstrap_servers, [f"t{i}" for i in range(10)])
        on_kafkalog = _first_phase(server.bootstrap_servers, "on-kafkalog", tid, 20)
    with broker:
        _resume(broker.bootstrap, "on-kafkalog", topic_id, 20, on_kafkalog)

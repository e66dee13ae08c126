"""Where a Fetch is tried: a small one on the event loop, a large one on a handler thread.

Both paths must behave alike: an answer at once when data is there, a long poll parked until
an append wakes it, and an empty answer when its wait runs out. Each case runs on both paths,
and checks which thread did the tries (a spy on the purgatory's handle_fetch).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkalog import MemoryRecords, Record
from kafkalog.server import purgatory, serve
from server_helpers import batch, decode_response, fetch_body, frame, produce_body, read_frame

PARTITIONS = 40  # the large frame's partition count: past FETCH_ON_THE_LOOP_BYTES


@pytest.fixture
def tries(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of the thread of each fetch try."""
    seen: list[str] = []
    real = purgatory.handle_fetch

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(purgatory, "handle_fetch", spy)
    return seen


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Any]:
    with serve(tmp_path) as running:
        assert running.manager is not None
        running.manager.create_topic("t", PARTITIONS)
        yield running


def _fetch_frame(
    large: bool,
    max_wait_ms: int,
    offset: int = 0,
    parts: range | tuple[int, ...] = (),
    min_bytes: int = 1,
) -> bytes:
    parts = parts or (range(PARTITIONS) if large else (0,))
    body = fetch_body(
        12, "t", 0, offset, max_wait_ms=max_wait_ms, partitions=parts, min_bytes=min_bytes
    )
    data = frame(1, 12, body)
    assert (len(data) > purgatory.FETCH_ON_THE_LOOP_BYTES) is large
    return data


def _records(answer: Any) -> dict[int, int]:
    """Partition -> number of records in the answer's partition 0.. slices."""
    got: dict[int, int] = {}
    for topic in answer.responses:
        for part in topic.partitions:
            assert part.error_code == 0
            if part.records:
                got[part.partition_index] = len(list(MemoryRecords(part.records).records()))
    return got


def _connect(server: Any) -> socket.socket:
    port = int(server.bootstrap_servers.rsplit(":", 1)[1])
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _append(server: Any, value: bytes, partition: int = 0) -> None:
    """A Produce on a connection of its own (the purgatory is woken by produced appends)."""
    with _connect(server) as sock:
        sock.sendall(frame(0, 9, produce_body(9, "t", partition, batch([Record(value)]))))
        answer = decode_response(0, 9, read_frame(sock), header_v1=True)
    assert answer.responses[0].partition_responses[0].error_code == 0


@pytest.mark.parametrize("large", [False, True], ids=["small-on-the-loop", "large-on-a-worker"])
def test_data_there_is_answered_at_once(server: Any, tries: list[str], large: bool) -> None:
    _append(server, b"there")
    with _connect(server) as sock:
        sock.sendall(_fetch_frame(large, max_wait_ms=5000))
        started = time.monotonic()
        answer = decode_response(1, 12, read_frame(sock), header_v1=True)
    assert time.monotonic() - started < 2
    assert _records(answer) == {0: 1}
    assert len(tries) == 1
    assert tries[0].startswith("kafkalog-io-") if large else tries == ["kafkalog-serve"]


@pytest.mark.parametrize("large", [False, True], ids=["small-on-the-loop", "large-on-a-worker"])
def test_a_parked_poll_is_woken_by_an_append(server: Any, tries: list[str], large: bool) -> None:
    with _connect(server) as sock:
        sock.sendall(_fetch_frame(large, max_wait_ms=20_000))
        deadline = time.monotonic() + 10
        while server.parked_fetches == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.parked_fetches == 1
        started = time.monotonic()
        _append(server, b"later")
        answer = decode_response(1, 12, read_frame(sock), header_v1=True)
    assert time.monotonic() - started < 5  # the append woke it, not its 20 s
    assert _records(answer) == {0: 1}
    assert len(tries) >= 2
    if large:
        assert all(name.startswith("kafkalog-io-") for name in tries)
    else:
        assert set(tries) == {"kafkalog-serve"}


@pytest.mark.parametrize("large", [False, True], ids=["small-on-the-loop", "large-on-a-worker"])
def test_a_poll_with_nothing_ends_empty_at_its_wait(
    server: Any, tries: list[str], large: bool
) -> None:
    with _connect(server) as sock:
        started = time.monotonic()
        sock.sendall(_fetch_frame(large, max_wait_ms=300))
        answer = decode_response(1, 12, read_frame(sock), header_v1=True)
    waited = time.monotonic() - started
    assert 0.25 <= waited < 5
    assert _records(answer) == {}
    assert len(tries) >= 2  # the first try, then the final one when the wait ran out
    on_loop = {name == "kafkalog-serve" for name in tries}
    assert on_loop == {not large}


@pytest.mark.parametrize("large", [False, True], ids=["small-on-the-loop", "large-on-a-worker"])
def test_an_append_to_another_partition_wakes_no_parked_fetch(
    server: Any, tries: list[str], large: bool
) -> None:
    """A fetch parked on partition 1 (or on 1..39) is not tried again after appends to
    partition 0; the first append to one of its own wakes it with that record."""
    watched = range(1, PARTITIONS) if large else (1,)
    with _connect(server) as sock:
        sock.sendall(_fetch_frame(large, max_wait_ms=20_000, parts=watched))
        deadline = time.monotonic() + 10
        while server.parked_fetches == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.parked_fetches == 1
        for i in range(5):
            _append(server, b"elsewhere %d" % i, partition=0)
        time.sleep(0.2)  # a wake would have had the fetch tried again by now
        assert len(tries) == 1 and server.parked_fetches == 1
        started = time.monotonic()
        _append(server, b"here", partition=watched[-1])
        answer = decode_response(1, 12, read_frame(sock), header_v1=True)
    assert time.monotonic() - started < 5
    assert _records(answer) == {watched[-1]: 1}
    assert len(tries) == 2
    assert server.watched_partitions == 0  # the answered fetch watches nothing any more


@pytest.mark.parametrize("large", [False, True], ids=["small-on-the-loop", "large-on-a-worker"])
def test_a_woken_fetch_sizes_only_the_partition_appended_to(
    server: Any, tries: list[str], large: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parked for more bytes than two appends bring: each append wakes it, and it sizes only
    the partition appended to, reading nothing whole; the third append makes ``min_bytes``,
    and only then are all its partitions read again, to answer."""
    sized: list[tuple[str, int]] = []
    sizing_threads: set[str] = set()
    real = purgatory.available_bytes

    def spy(ctx: Any, topic: str, part: Any, isolation: Any) -> int | None:
        sizing_threads.add(threading.current_thread().name)
        sized.append((topic, part.partition))
        return real(ctx, topic, part, isolation)

    monkeypatch.setattr(purgatory, "available_bytes", spy)
    target = 5 if large else 0
    one = len(batch([Record(b"append 0")]))
    with _connect(server) as sock:
        sock.sendall(_fetch_frame(large, max_wait_ms=20_000, min_bytes=2 * one + 1))
        deadline = time.monotonic() + 10
        while server.parked_fetches == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.parked_fetches == 1
        for i in (1, 2):
            _append(server, b"append %d" % (i - 1), partition=target)
            while len(sized) < i and time.monotonic() < deadline:
                time.sleep(0.01)
            assert sized == [("t", target)] * i
            assert len(tries) == 1  # not read again whole
        _append(server, b"append 2", partition=target)
        answer = decode_response(1, 12, read_frame(sock), header_v1=True)
    assert _records(answer) == {target: 3}
    assert len(tries) == 2
    # sized where the fetch is tried: a large fetch's work stays off the event loop
    assert {n.startswith("kafkalog-io-") for n in sizing_threads} == {large}


@pytest.mark.parametrize("large", [False, True], ids=["on the loop", "on a handler thread"])
def test_a_parked_fetch_answers_at_once_when_its_topic_is_deleted(server: Any, large: bool) -> None:
    """Kafka completes the delayed fetches of a partition that stops
    (ReplicaManager.completeDelayedOperationsWhenNotPartitionLeader): a long poll parked on a
    topic that is deleted answers UNKNOWN_TOPIC_OR_PARTITION then, not at its max wait."""
    from confluent_kafka.admin import AdminClient

    with _connect(server) as sock:
        sock.sendall(_fetch_frame(large, max_wait_ms=20_000, offset=0))
        time.sleep(0.3)  # parked
        admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
        started = time.monotonic()
        admin.delete_topics(["t"])["t"].result(timeout=10)
        answer = decode_response(1, 12, read_frame(sock), header_v1=True)
        waited = time.monotonic() - started
    codes = {p.error_code for t in answer.responses for p in t.partitions}
    assert codes == {3}  # UNKNOWN_TOPIC_OR_PARTITION
    assert waited < 5, f"answered {waited:.1f} s after the deletion"

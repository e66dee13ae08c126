"""Fetch sessions (KIP-227) through ``kafkalog serve``'s socket, as a Java consumer uses them.

A full fetch at epoch 0 opens a session; incremental fetches at epochs 1, 2, ... name only what
changed and are answered with only the partitions that have something new; a wrong epoch or
an unknown session is refused with Kafka's error codes; epoch -1 closes the session; the cache
keeps at most ``max.incremental.fetch.session.cache.slots`` sessions.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafkalog import Record
from kafkalog.server import serve
from kafkalog.server.fetch_sessions import FetchSessionCache
from server_helpers import batch, decode_response, fetch_body, frame, produce_body, read_frame

pytestmark = [pytest.mark.one_codec, pytest.mark.timeout(120)]

PARTITIONS = 4


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Any]:
    with serve(tmp_path, overrides={"max.incremental.fetch.session.cache.slots": "2"}) as running:
        assert running.manager is not None
        running.manager.create_topic("t", PARTITIONS)
        yield running


def _connect(server: Any) -> socket.socket:
    port = int(server.bootstrap_servers.rsplit(":", 1)[1])
    return socket.create_connection(("127.0.0.1", port), timeout=30)


def _fetch(sock: socket.socket, **kwargs: Any) -> tuple[int, int, dict[int, tuple[int, int]]]:
    """(error code, session id, {partition: (high watermark, record bytes)})."""
    offset = kwargs.pop("offset", 0)
    sock.sendall(frame(1, 12, fetch_body(12, "t", 0, offset, **kwargs)))
    answer = decode_response(1, 12, read_frame(sock), header_v1=True)
    parts = {
        p.partition_index: (p.high_watermark, len(p.records or b""))
        for t in answer.responses
        for p in t.partitions
    }
    return answer.error_code, answer.session_id, parts


def _produce(sock: socket.socket, partition: int) -> None:
    sock.sendall(frame(0, 9, produce_body(9, "t", partition, batch([Record(b"v")]))))
    answer = decode_response(0, 9, read_frame(sock), header_v1=True)
    assert answer.responses[0].partition_responses[0].error_code == 0


def test_a_session_answers_only_what_changed(server: Any) -> None:
    every = range(PARTITIONS)
    with _connect(server) as sock:
        _produce(sock, 1)
        code, session, parts = _fetch(sock, partitions=every, session_epoch=0)
        assert code == 0 and session != 0
        assert set(parts) == set(every) and parts[1][1] > 0  # a full fetch: every partition
        # nothing changed, nothing named (the client's position on 1 is still 0: it re-reads)
        code, again, parts = _fetch(sock, session_id=session, session_epoch=1)
        assert (code, again) == (0, session) and set(parts) == {1}
        # the client moved on past partition 1's record: it names partition 1 alone
        code, _, parts = _fetch(sock, partitions=[1], offset=1, session_id=session, session_epoch=2)
        assert code == 0 and parts == {}
        _produce(sock, 3)  # a new record on 3: its high watermark and records
        code, _, parts = _fetch(sock, session_id=session, session_epoch=3)
        assert code == 0 and set(parts) == {3} and parts[3][0] == 1 and parts[3][1] > 0


def test_wrong_epoch_unknown_session_and_closing(server: Any) -> None:
    with _connect(server) as sock:
        _, session, _ = _fetch(sock, partitions=[0], session_epoch=0)
        code, sid, parts = _fetch(sock, session_id=session, session_epoch=5)
        assert code == ErrorCode.invalid_fetch_session_epoch and sid == 0 and parts == {}
        code, sid, _ = _fetch(sock, session_id=session + 1, session_epoch=1)
        assert code == ErrorCode.fetch_session_id_not_found and sid == 0
        code, sid, parts = _fetch(sock, session_id=session, session_epoch=1)  # still there
        assert (code, sid) == (0, session)
        code, sid, parts = _fetch(sock, partitions=[0], session_id=session, session_epoch=-1)
        assert (code, sid) == (0, 0) and set(parts) == {0}  # closed: a sessionless answer
        code, _, _ = _fetch(sock, session_id=session, session_epoch=2)
        assert code == ErrorCode.fetch_session_id_not_found


def test_forgotten_partitions_leave_and_named_ones_join(server: Any) -> None:
    with _connect(server) as sock:
        _, session, _ = _fetch(sock, partitions=[0, 1], session_epoch=0)
        code, _, parts = _fetch(
            sock, partitions=[2], session_id=session, session_epoch=1, forgotten=[0]
        )
        assert code == 0 and set(parts) == {2}  # new to the session: its first answer
        for p in (0, 1, 2):
            _produce(sock, p)
        code, _, parts = _fetch(sock, session_id=session, session_epoch=2)
        assert code == 0 and set(parts) == {1, 2}  # 0 was forgotten


def test_the_cache_keeps_its_slots_and_then_answers_sessionless(server: Any) -> None:
    with _connect(server) as sock:
        ids = [_fetch(sock, partitions=[0], session_epoch=0)[1] for _ in range(2)]
        assert all(ids) and len(set(ids)) == 2
        # full, no session idle two minutes, none smaller: a third gets no session
        assert _fetch(sock, partitions=[0], session_epoch=0)[1] == 0
        # a larger one takes the place of a smaller
        bigger = _fetch(sock, partitions=[0, 1], session_epoch=0)[1]
        assert bigger != 0
        gone = [i for i in ids if _fetch(sock, session_id=i, session_epoch=1)[0] != 0]
        assert len(gone) == 1


def test_a_session_unused_for_two_minutes_gives_way() -> None:
    now = [0.0]
    cache = FetchSessionCache(1, clock=lambda: now[0])
    assert cache._room_for(1)
    cache._touch(_session(7))
    assert not cache._room_for(1)
    now[0] = 121.0
    assert cache._room_for(1) and len(cache) == 0


def _session(session_id: int) -> Any:
    from kafkalog.server.fetch_sessions import FetchSession

    return FetchSession(session_id, {("t", 0): None})  # type: ignore[dict-item]


def test_two_fetches_at_one_epoch_at_once_continue_the_session_once() -> None:
    """A session's epoch is checked and moved on in one step (Kafka's FetchManager.newContext
    under the cache's lock): of eight fetches sent at once at the same epoch, from eight
    threads, one continues the session and seven are told INVALID_FETCH_SESSION_EPOCH."""
    from kafkalog.protocol.wire import Request
    from kafkalog.server.fetch_sessions import FetchSession, _CachedPartition

    cache = FetchSessionCache(10)
    spec = fetch_body(12, "t", 0, 0).topics[0].partitions[0]
    cache._touch(FetchSession(7, {("t", 0): _CachedPartition(spec)}))
    body = fetch_body(12, "t", 0, 0, session_id=7, session_epoch=1, partitions=[])
    start = threading.Barrier(8)
    contexts: list[Any] = []

    def fetch(n: int) -> None:
        start.wait()
        contexts.append(cache.begin(Request(1, 12, n, "c", body)))

    threads = [threading.Thread(target=fetch, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = [c._error for c in contexts]
    assert errors.count(None) == 1
    assert errors.count(ErrorCode.invalid_fetch_session_epoch) == 7

"""One connection's requests, whichever way each is answered -- at once in the loop iteration
that read it (a Produce appended on the loop) or by the connection's answering task (the rest):
in order, one at a time, never ahead of an earlier request still being answered, with a few
frames read ahead at most, and nothing held once the client is gone."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest

from kafkalog import LogManager, Record
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.server import serve
from server_helpers import (
    api_versions_request,
    batch,
    decode_response,
    fetch_body,
    frame,
    metadata_request,
    produce_body,
    read_frame,
)

pytestmark = pytest.mark.one_codec

PRODUCE_V, FETCH_V, METADATA_V = 9, 12, 12


def _port(server: Any) -> int:
    return int(server.bootstrap_servers.rsplit(":", 1)[1])


def _correlation(data: bytes) -> int:
    return int.from_bytes(data[4:8], "big", signed=True)


def _produce(topic: str, value: bytes, correlation: int, acks: int = 1) -> bytes:
    body = produce_body(PRODUCE_V, topic, 0, batch([Record(value)]), acks=acks)
    return frame(ApiKey.PRODUCE, PRODUCE_V, body, correlation)


def _base_offset(data: bytes) -> int:
    answer = decode_response(ApiKey.PRODUCE, PRODUCE_V, data, header_v1=True)
    part = answer.responses[0].partition_responses[0]
    assert part.error_code == 0
    return int(part.base_offset)


def _wait_idle(server: Any) -> None:
    deadline = time.monotonic() + 10
    while server.queued_requests and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.queued_requests == 0


def test_a_produce_behind_a_long_poll_waits_for_its_answer(tmp_path: Path) -> None:
    """A long poll, then two Produce requests and a Metadata, in one send: the poll is answered
    first and empty (the produce behind it had not run), then each in turn. Answering a
    Produce at once must not jump a request of the same connection still being answered."""
    with LogManager(tmp_path) as manager:
        manager.create_topic("t", 1)
    with serve(tmp_path) as server:
        poll = fetch_body(FETCH_V, "t", 0, 0, min_bytes=1, max_wait_ms=400)
        burst = b"".join(
            [
                frame(ApiKey.FETCH, FETCH_V, poll, 1),
                _produce("t", b"a", 2),
                frame(ApiKey.METADATA, METADATA_V, metadata_request(METADATA_V, ["t"]), 3),
                _produce("t", b"b", 4),
            ]
        )
        with socket.create_connection(("127.0.0.1", _port(server)), timeout=10) as sock:
            started = time.monotonic()
            sock.sendall(burst)
            answers = [read_frame(sock) for _ in range(4)]
            waited = time.monotonic() - started
        assert [_correlation(a) for a in answers] == [1, 2, 3, 4]
        fetched = decode_response(ApiKey.FETCH, FETCH_V, answers[0], header_v1=True)
        assert not fetched.responses[0].partitions[0].records
        assert waited >= 0.35  # the poll waited its max_wait: nothing was appended behind it
        assert [_base_offset(answers[1]), _base_offset(answers[3])] == [0, 1]
        _wait_idle(server)


def test_hundreds_of_pipelined_produces_in_order_a_few_frames_held(tmp_path: Path) -> None:
    """300 Produce frames in one send, and one more sent a byte at a time: every answer in
    order with consecutive offsets; the server holds a few frames of the connection at most."""
    with LogManager(tmp_path) as manager:
        manager.create_topic("t", 1)
    with serve(tmp_path) as server:
        frames = [_produce("t", b"v%d" % i, i) for i in range(300)]
        with socket.create_connection(("127.0.0.1", _port(server)), timeout=10) as sock:
            sock.sendall(b"".join(frames))
            peak = server.queued_requests
            answers = []
            for _ in frames:
                answers.append(read_frame(sock))
                peak = max(peak, server.queued_requests)
            last = _produce("t", b"last", 300)
            for i in range(len(last)):
                sock.sendall(last[i : i + 1])
            answers.append(read_frame(sock))
        assert peak <= 3
        assert [_correlation(a) for a in answers] == list(range(301))
        assert [_base_offset(a) for a in answers] == list(range(301))
        _wait_idle(server)
        assert server.manager is not None
        log = server.manager.get_log("t")
        assert log.log_end_offset == 301


def test_a_client_gone_mid_burst_leaves_a_whole_prefix_and_no_held_slot(tmp_path: Path) -> None:
    """200 Produce frames, then the client closes at once: what was appended is a prefix of
    them in order, the server holds nothing of that connection and serves the next client."""
    with LogManager(tmp_path) as manager:
        manager.create_topic("t", 1)
    with serve(tmp_path) as server:
        port = _port(server)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"".join(_produce("t", b"%d" % i, i) for i in range(200)))
        assert server.manager is not None
        log = server.manager.get_log("t")
        seen, still_since = -1, time.monotonic()
        while time.monotonic() - still_since < 0.5:  # the server saw the close and stopped
            if log.log_end_offset != seen:
                seen, still_since = log.log_end_offset, time.monotonic()
            time.sleep(0.02)
        _wait_idle(server)
        values = [r.value for r in log.read_records(0)]
        assert values == [b"%d" % i for i in range(len(values))]
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(_produce("t", b"next", 7))
            assert _base_offset(read_frame(sock)) == len(values)


def test_an_acks_zero_produce_is_answered_by_nothing_and_the_next_request_is(
    tmp_path: Path,
) -> None:
    with LogManager(tmp_path) as manager:
        manager.create_topic("t", 1)
    with serve(tmp_path) as server:
        with socket.create_connection(("127.0.0.1", _port(server)), timeout=10) as sock:
            sock.sendall(_produce("t", b"quiet", 1, acks=0) + _produce("t", b"loud", 2))
            answer = read_frame(sock)
        assert _correlation(answer) == 2
        assert _base_offset(answer) == 1


def test_a_burst_of_tiny_produces_does_not_hold_the_loop(tmp_path: Path) -> None:
    """3,000 acks=0 Produce frames in one send on one connection, then an ApiVersions on
    another: the loop answers a few of the burst at a time and turns to the other client,
    which is answered while the burst is still being appended."""
    with LogManager(tmp_path) as manager:
        manager.create_topic("t", 1)
    with serve(tmp_path) as server:
        assert server.manager is not None
        log = server.manager.get_log("t")
        port = _port(server)
        burst = b"".join(_produce("t", b"", i, acks=0) for i in range(3_000))
        versions = frame(ApiKey.API_VERSIONS, 3, api_versions_request(3), 9)
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as busy,
            socket.create_connection(("127.0.0.1", port), timeout=10) as other,
        ):
            other.sendall(versions)  # connected and served once before the burst
            read_frame(other)
            busy.sendall(burst)
            other.sendall(versions)
            read_frame(other)
            appended_by_then = log.log_end_offset
            deadline = time.monotonic() + 20
            while log.log_end_offset < 3_000 and time.monotonic() < deadline:
                time.sleep(0.02)
        assert log.log_end_offset == 3_000
        assert appended_by_then < 3_000


def test_the_answers_to_frames_read_together_go_out_in_one_send(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four Produce frames that arrive in one read are answered in that read's turn and their
    answers written with one send, not four; then a frame the server refuses: the answers
    before it still reach the client before the connection closes."""
    import asyncio.selector_events

    writes: list[int] = []
    write = asyncio.selector_events._SelectorSocketTransport.write

    def counted(self: Any, data: Any) -> None:
        writes.append(len(data))
        write(self, data)

    monkeypatch.setattr(asyncio.selector_events._SelectorSocketTransport, "write", counted)
    with LogManager(tmp_path) as manager:
        manager.create_topic("t", 1)
    with (
        serve(tmp_path) as server,
        socket.create_connection(("127.0.0.1", _port(server)), timeout=10) as sock,
    ):
        sock.sendall(b"".join(_produce("t", b"v%d" % i, i) for i in range(4)))
        answers = [read_frame(sock) for _ in range(4)]
        assert [_correlation(a) for a in answers] == [0, 1, 2, 3]
        assert len(writes) == 1 and writes[0] == sum(len(a) for a in answers)
        cut = _produce("t", b"c", 6)[:-20]  # a Produce that does not parse
        refused = (len(cut) - 4).to_bytes(4, "big") + cut[4:]
        sock.sendall(_produce("t", b"a", 4) + _produce("t", b"b", 5) + refused)
        assert [_correlation(read_frame(sock)) for _ in range(2)] == [4, 5]
        assert read_frame(sock) == b""  # then closed


def test_a_fetch_larger_than_the_socket_takes_is_sent_whole_once_the_client_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fetch's file bytes go out with one sendfile when the socket has room, and what does
    not fit waits for the client to read: here 6 MiB to a client whose receive buffer is 64
    KiB and who reads only after a pause. The frame arrives whole and in order, the request
    behind it is answered after it, and both ways of sending were taken."""
    from kafkalog.server.connection import Connection

    value = bytes(range(256)) * 400  # 100 KiB
    with LogManager(tmp_path) as manager:
        log = manager.create_topic("t", 1)[0]
        for _ in range(60):
            log.append([Record(value)])
        expected = log.read(0, 8 << 20).records
        assert expected is not None
        on_disk = expected.read()
    sent_at_once: list[tuple[int, int]] = []
    original = Connection._send_file_now

    def spy(self: Connection, transport: Any, part: Any) -> int:
        sent = original(self, transport, part)
        sent_at_once.append((sent, part.size))
        return sent

    monkeypatch.setattr(Connection, "_send_file_now", spy)
    with serve(tmp_path) as server:
        body = fetch_body(FETCH_V, "t", 0, 0, max_bytes=8 << 20)
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
            sock.settimeout(10)
            sock.connect(("127.0.0.1", _port(server)))
            sock.sendall(frame(ApiKey.FETCH, FETCH_V, body, 1) + _produce("t", b"after", 2))
            time.sleep(0.3)  # the socket fills; the rest must wait for room
            answers = [read_frame(sock) for _ in range(2)]
        assert [_correlation(a) for a in answers] == [1, 2]
        fetched = decode_response(ApiKey.FETCH, FETCH_V, answers[0], header_v1=True)
        assert fetched.responses[0].partitions[0].records == on_disk
        assert _base_offset(answers[1]) == 60
        _wait_idle(server)
    ((sent, size),) = sent_at_once
    assert size == len(on_disk) and 0 < sent < size

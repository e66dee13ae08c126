"""``kafkalog serve`` shared with hostile or careless clients, over real sockets: nobody starved,
memory bounded before authentication, idle and surplus connections closed as Kafka closes them.

- Long polls park in the fetch purgatory and hold no ``queued.max.requests`` slot: hundreds of
  them leave a new client's ApiVersions answered at once (it waited for the polls to end).
- Before SASL authentication a frame is at most ``sasl.server.max.receive.size`` (512 KiB,
  CVE-2022-34917); after it, ``socket.request.max.bytes``.
- ``connections.max.idle.ms`` closes a connection that moves no bytes, a half-sent frame's too;
  ``max.connections.per.ip`` and ``max.connections`` close the surplus at once;
  ``connection.failed.authentication.delay.ms`` holds a failed login's close back.
"""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest

from kafkalog.protocol.wire import make
from kafkalog.server import serve
from server_helpers import (
    api_versions_request,
    decode_response,
    fetch_body,
    frame,
    read_frame,
    request_module,
)
from test_server_security import _sasl_overrides

pytestmark = [pytest.mark.one_codec, pytest.mark.timeout(300)]


def _port(server: serve.KafkaServer) -> int:
    return int(server.bootstrap_servers.rsplit(":", 1)[1])


def _api_versions_wait(port: int) -> float:
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(frame(18, 0, api_versions_request(0), 9))
        data = read_frame(sock)
    assert decode_response(18, 0, data, header_v1=False).error_code == 0
    return time.monotonic() - started


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_six_hundred_long_polls_starve_nobody(tmp_path: Path) -> None:
    """More waiting fetches than ``queued.max.requests`` (500): each used to hold a slot until
    its wait ended, so a new client waited the whole 15 s."""
    with serve(tmp_path) as server:
        assert server.manager is not None
        server.manager.create_topic("t", 1)
        port = _port(server)
        poll = frame(1, 12, fetch_body(12, "t", 0, 0, min_bytes=10**6, max_wait_ms=15_000), 1)
        polls = []
        try:
            for _ in range(600):
                sock = socket.create_connection(("127.0.0.1", port), timeout=30)
                sock.sendall(poll)
                polls.append(sock)
            deadline = time.monotonic() + 10
            while server.parked_fetches < 600 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert server.parked_fetches == 600
            worst = max(_api_versions_wait(port) for _ in range(20))
            print(f"worst ApiVersions wait beside 600 parked long polls: {worst * 1000:.1f} ms")
            assert worst < 1.0
            assert server.queued_requests == 0
        finally:
            for sock in polls:
                sock.close()


def test_pipelined_long_polls_from_many_connections_starve_nobody(tmp_path: Path) -> None:
    """One client, 170 connections, three pipelined 60 s polls each (510 frames > 500)."""
    with serve(tmp_path) as server:
        assert server.manager is not None
        server.manager.create_topic("t", 1)
        port = _port(server)
        poll = frame(1, 12, fetch_body(12, "t", 0, 0, min_bytes=10**6, max_wait_ms=60_000), 1)
        socks = []
        try:
            for _ in range(170):
                sock = socket.create_connection(("127.0.0.1", port), timeout=30)
                sock.sendall(poll * 3)
                socks.append(sock)
            time.sleep(1)
            assert _api_versions_wait(port) < 1.0
        finally:
            for sock in socks:
                sock.close()


def test_a_large_frame_before_authentication_is_refused_at_its_header(tmp_path: Path) -> None:
    with serve(tmp_path, overrides=_sasl_overrides("SASL_PLAINTEXT")) as server:
        port = _port(server)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(struct.pack(">i", 64 << 20) + b"\0" * 1000)  # a 64 MiB frame begins
            assert _closed_within(sock, 5)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(struct.pack(">i", 512 * 1024 + 1))
            assert _closed_within(sock, 5)
        # the cap is Kafka's default and a setting
        assert server.settings.sasl_max_receive_size == 512 * 1024
        assert _api_versions_wait(port) < 1.0


def test_an_idle_connection_and_a_half_sent_frame_are_closed(tmp_path: Path) -> None:
    with serve(tmp_path, overrides={"connections.max.idle.ms": "500"}) as server:
        port = _port(server)
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as idle,
            socket.create_connection(("127.0.0.1", port), timeout=10) as half,
        ):
            half.sendall(struct.pack(">i", 1000) + b"\0" * 10)
            started = time.monotonic()
            assert _closed_within(idle, 5)
            assert _closed_within(half, 5)
            assert 0.4 <= time.monotonic() - started < 3
        # a connection that keeps talking stays
        with socket.create_connection(("127.0.0.1", port), timeout=10) as busy:
            for _ in range(4):
                busy.sendall(frame(18, 0, api_versions_request(0), 9))
                assert read_frame(busy)
                time.sleep(0.3)


def test_connections_over_the_limits_are_closed_at_once(tmp_path: Path) -> None:
    with serve(tmp_path, overrides={"max.connections.per.ip": "5"}) as server:
        port = _port(server)
        kept = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(5)]
        try:
            time.sleep(0.2)
            with socket.create_connection(("127.0.0.1", port), timeout=10) as extra:
                assert _closed_within(extra, 5)
            for sock in kept:  # the five are served
                sock.sendall(frame(18, 0, api_versions_request(0), 9))
                assert read_frame(sock)
        finally:
            for sock in kept:
                sock.close()
        time.sleep(0.2)
        assert _api_versions_wait(port) < 1.0  # their slots are free again
    overrides = {"max.connections.per.ip.overrides": "127.0.0.1:2", "max.connections": "3"}
    with serve(tmp_path, overrides=overrides) as server:
        port = _port(server)
        kept = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
        try:
            time.sleep(0.2)
            with socket.create_connection(("127.0.0.1", port), timeout=10) as extra:
                assert _closed_within(extra, 5)
        finally:
            for sock in kept:
                sock.close()


def test_a_failed_login_is_closed_after_the_delay(tmp_path: Path) -> None:
    overrides = _sasl_overrides("SASL_PLAINTEXT") | {
        "connection.failed.authentication.delay.ms": "700"
    }
    with serve(tmp_path, overrides=overrides) as server:
        port = _port(server)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            hs = make(request_module(17, 1), "SaslHandshakeRequest", mechanism="PLAIN")
            sock.sendall(frame(17, 1, hs, 1))
            assert read_frame(sock)
            auth = make(
                request_module(36, 2),
                "SaslAuthenticateRequest",
                auth_bytes=b"\0alice\0wrong-password",
            )
            sock.sendall(frame(36, 2, auth, 2))
            started = time.monotonic()
            answer = decode_response(36, 2, read_frame(sock), header_v1=True)
            assert answer.error_code == 58  # SASL_AUTHENTICATION_FAILED
            assert _closed_within(sock, 5)
            assert time.monotonic() - started >= 0.6


def test_a_long_poll_of_days_ends_with_its_idle_connection(tmp_path: Path) -> None:
    """Kafka caps no fetch wait, but its idle-connection expiry closes a connection that moves
    no bytes for ``connections.max.idle.ms``, a parked fetch's too: a 24-day poll holds
    nothing for longer than that."""
    with serve(tmp_path, overrides={"connections.max.idle.ms": "600"}) as server:
        assert server.manager is not None
        server.manager.create_topic("t", 1)
        port = _port(server)
        days = fetch_body(12, "t", 0, 0, min_bytes=10**6, max_wait_ms=2**31 - 1)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(frame(1, 12, days, 1))
            started = time.monotonic()
            assert _closed_within(sock, 10)
            assert time.monotonic() - started < 5
        time.sleep(0.2)
        assert server.parked_fetches == 0

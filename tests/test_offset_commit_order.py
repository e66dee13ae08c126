"""Offset commits are kept in order per ``__consumer_offsets`` partition, not broker-wide: a
commit whose append is slow holds up the groups that share its partition (their records must
follow its record) and no other group."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kafkalog.coordinator.group_coordinator import GroupCoordinator
from kafkalog.coordinator.offsets_store import partition_for
from kafkalog.server import serve
from server_helpers import decode_response, frame, offset_commit_body, read_frame

pytestmark = pytest.mark.one_codec

OFFSETS_PARTITIONS = 50  # offsets.topic.num.partitions' default


def _groups() -> tuple[str, str, str]:
    """A group, another on the same ``__consumer_offsets`` partition, one on another."""
    names = [f"group-{i}" for i in range(500)]
    slow = names[0]
    home = partition_for(slow, OFFSETS_PARTITIONS)
    neighbour = next(n for n in names[1:] if partition_for(n, OFFSETS_PARTITIONS) == home)
    elsewhere = next(n for n in names[1:] if partition_for(n, OFFSETS_PARTITIONS) != home)
    return slow, neighbour, elsewhere


def _commit(group_id: str, offset: int) -> bytes:
    return frame(8, 8, offset_commit_body(group_id, offset))


def _answer(sock: socket.socket) -> int:
    answer = decode_response(8, 8, read_frame(sock), header_v1=True)
    code: int = answer.topics[0].partitions[0].error_code
    return code


def _answered_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except TimeoutError:
        return False
    finally:
        sock.settimeout(10)


def test_a_slow_commit_holds_up_only_the_groups_on_its_partition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow, neighbour, elsewhere = _groups()
    release = threading.Event()
    real = GroupCoordinator.append_offsets

    def append_offsets(self: GroupCoordinator, group_id: str, rows: Any) -> int:
        if group_id == slow:
            release.wait(20)  # a disk that takes its time, on a handler thread
        return real(self, group_id, rows)

    monkeypatch.setattr(GroupCoordinator, "append_offsets", append_offsets)
    with serve(tmp_path) as server:
        assert server.manager is not None
        server.manager.create_topic("t", 1)
        port = int(server.bootstrap_servers.rsplit(":", 1)[1])
        conns = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(3)]
        try:
            held, behind, free = conns
            held.sendall(_commit(slow, 1))
            time.sleep(0.3)  # its append has started and waits
            behind.sendall(_commit(neighbour, 2))
            started = time.monotonic()
            free.sendall(_commit(elsewhere, 3))
            assert _answer(free) == 0
            assert time.monotonic() - started < 5
            assert not _answered_within(behind, 0.5)  # its record must follow the slow one's
            release.set()
            assert _answer(held) == 0
            assert _answer(behind) == 0
        finally:
            release.set()
            for conn in conns:
                conn.close()

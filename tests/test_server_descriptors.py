"""How many descriptors ``kafkalog serve`` holds: one per segment, as a Kafka broker.

A broker with more partitions than half its open file limit restarts (after a clean stop and
after a kill -9) and serves every partition; one whose segments cannot fit in the limit says
so, naming the limit. Each runs the real command in a process of its own, its limit set low.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafka_oracle import free_port
from kafkalog import LogManager, Record
from kafkalog.manager.server_config import ServerConfig
from server_helpers import (
    batch,
    decode_response,
    fetch_body,
    frame,
    produce_body,
    read_frame,
    start_serve_process,
)

pytestmark = [pytest.mark.one_codec, pytest.mark.timeout(300)]

LIMIT = 256  # the process's soft and hard limit on open files
PARTITIONS = 130  # more than half of it: two descriptors a partition would not fit


def _fill(log_dir: Path, partitions: int) -> None:
    manager = LogManager.from_server_config(
        ServerConfig.from_properties({"log.dirs": str(log_dir)})
    )
    with manager:
        manager.create_topic("wide", partitions)
        for p in range(partitions):
            manager.get_log("wide", p).append([Record(b"first %d" % p)])


def _end_offsets(port: int, partitions: int) -> dict[int, int]:
    """Each partition's high watermark and that its records came back, from one Fetch of all."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        body = fetch_body(12, "wide", 0, 0, max_bytes=1 << 16, partitions=range(partitions))
        sock.sendall(frame(1, 12, body))
        answer = decode_response(1, 12, read_frame(sock), header_v1=True)
    (topic,) = answer.responses
    out = {}
    for p in topic.partitions:
        assert p.error_code == 0 and p.records, p
        out[p.partition_index] = p.high_watermark
    return out


def _produce_to_each(port: int, partitions: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        for p in range(partitions):
            sock.sendall(frame(0, 9, produce_body(9, "wide", p, batch([Record(b"more")]))))
            answer = decode_response(0, 9, read_frame(sock), header_v1=True)
            assert answer.responses[0].partition_responses[0].error_code == 0


def _descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_serve_restarts_and_serves_more_partitions_than_half_its_open_file_limit(
    tmp_path: Path,
) -> None:
    _fill(tmp_path, PARTITIONS)
    port = free_port()
    proc = start_serve_process(tmp_path, port, open_files=LIMIT)
    try:
        assert _end_offsets(port, PARTITIONS) == dict.fromkeys(range(PARTITIONS), 1)
        _produce_to_each(port, PARTITIONS)
        assert _end_offsets(port, PARTITIONS) == dict.fromkeys(range(PARTITIONS), 2)
        assert _descriptors(proc.pid) < LIMIT
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        proc = start_serve_process(tmp_path, port, open_files=LIMIT)
        assert _end_offsets(port, PARTITIONS) == dict.fromkeys(range(PARTITIONS), 2)
        proc.kill()  # kill -9: the next start recovers every partition
        proc.wait(60)
        proc = start_serve_process(tmp_path, port, open_files=LIMIT)
        assert _end_offsets(port, PARTITIONS) == dict.fromkeys(range(PARTITIONS), 2)
    finally:
        proc.kill()
        proc.wait(60)


def test_serve_names_the_open_file_limit_it_cannot_start_under(tmp_path: Path) -> None:
    _fill(tmp_path, PARTITIONS)

    port = free_port()
    done = subprocess.run(
        ["sh", "-c", 'ulimit -n 64 && exec "$0" "$@"', sys.executable, "-m", "kafkalog",
         "serve", "--log-dirs", str(tmp_path),
         "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "this process may open 64 files at most, 'ulimit -n'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_serve_raises_its_soft_open_file_limit_to_the_hard_one(tmp_path: Path) -> None:
    """As the JVM does for a Kafka broker: a soft limit far below what the partitions need, a
    hard one above, and the broker starts and serves them all."""
    _fill(tmp_path, PARTITIONS)
    port = free_port()
    command = [sys.executable, "-m", "kafkalog", "serve", "--log-dirs", str(tmp_path),
               "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}"]  # fmt: skip
    proc = subprocess.Popen(
        ["sh", "-c", f'ulimit -Sn 64 && ulimit -Hn {LIMIT * 4} && exec "$0" "$@"', *command],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        seen = [proc.stdout.readline() for _ in range(3)]
        assert any(f"raised the open file limit from 64 to {LIMIT * 4}" in s for s in seen), seen
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                assert _end_offsets(port, PARTITIONS) == dict.fromkeys(range(PARTITIONS), 1)
                break
            except OSError:
                time.sleep(0.2)
        else:
            raise AssertionError("kafkalog serve did not answer")
    finally:
        proc.kill()
        proc.wait(60)


def test_a_fetch_copies_a_bounded_amount_and_sends_the_rest_from_the_files(
    tmp_path: Path,
) -> None:
    """Small records are copied into the answer, but no more than COPY_BUDGET_BYTES of them:
    a Fetch of many partitions with a large max_bytes holds slices of the files past it, not
    their bytes in memory. Every partition's records come back either way."""
    from kafkalog.protocol.fetch_frame import OpenSlice
    from kafkalog.server.fetch import COPY_AT_MOST_BYTES, COPY_BUDGET_BYTES, handle_fetch
    from server_helpers import as_request, broker_over

    partitions = 2 * COPY_BUDGET_BYTES // (COPY_AT_MOST_BYTES // 2)
    broker, manager = broker_over(tmp_path)
    with manager:
        manager.create_topic("t", partitions)
        for p in range(partitions):
            manager.get_log("t", p).append([Record(bytes(COPY_AT_MOST_BYTES // 2))])
        body = fetch_body(12, "t", 0, 0, max_bytes=1 << 30, partitions=range(partitions))
        result = handle_fetch(broker.context, as_request(1, 12, body))
        try:
            (topic,) = result.response.topics
            copies = [p.records for p in topic.partitions if isinstance(p.records, bytes)]
            slices = [p.records for p in topic.partitions if isinstance(p.records, OpenSlice)]
            assert len(copies) + len(slices) == partitions and copies and slices
            assert sum(map(len, copies)) <= COPY_BUDGET_BYTES
        finally:
            result.close()
